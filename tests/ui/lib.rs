//! Nothing: the package holds the UI test (`ui.rs`) and its cases.
