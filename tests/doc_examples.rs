//! Every `compile_fail` example of the `distlock` crate docs is also a trybuild case
//! (`tests/ui/docs/NN.rs`, run by the `distlock-ui` package's `tests/ui/ui.rs`), so the error
//! it shows is pinned by a `.stderr` file, not merely "some error". This test keeps those
//! files equal to the examples: change an example and it fails until
//! `DOC_EXAMPLES=overwrite cargo test --test doc_examples` writes them again (then
//! `TRYBUILD=overwrite cargo test -p distlock-ui --test ui` pins the new errors; read them).

use std::path::PathBuf;

/// The `compile_fail` blocks of `distlock/src/lib.rs`, hidden lines shown, each a program.
fn examples() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("distlock/src/lib.rs")).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in source.lines() {
        let Some(doc) = line.trim_start().strip_prefix("//!") else {
            continue;
        };
        let doc = doc.strip_prefix(' ').unwrap_or(doc);
        match (&mut current, doc.trim_start().starts_with("```")) {
            (None, true) if doc.trim_start().starts_with("```compile_fail") => {
                current = Some(Vec::new())
            }
            (Some(_), true) => blocks.push(current.take().unwrap().join("\n") + "\n"),
            (Some(block), false) => {
                // A hidden line (`# code`) is part of the program; `#[attr]` is not hidden.
                let shown = match doc.strip_prefix("# ") {
                    Some(hidden) => hidden,
                    None if doc == "#" => "",
                    None => doc,
                };
                block.push(shown.to_owned());
            }
            _ => {}
        }
    }
    blocks
}

fn case_path(n: usize) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/ui/docs/{n:02}.rs"))
}

const HEADER: &str = "// A `compile_fail` example of the distlock crate docs (distlock/src/lib.rs), kept equal to\n// it by tests/doc_examples.rs; its error is pinned by the .stderr next to it.\n";

#[test]
fn every_compile_fail_example_is_a_pinned_ui_case() {
    let examples = examples();
    assert!(examples.len() >= 7, "found {} examples", examples.len());
    let overwrite = std::env::var("DOC_EXAMPLES").is_ok_and(|v| v == "overwrite");
    for (n, example) in examples.iter().enumerate() {
        let path = case_path(n + 1);
        let expected = format!("{HEADER}{example}");
        if overwrite {
            std::fs::write(&path, &expected).unwrap();
            continue;
        }
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            written,
            expected,
            "{} differs from example {} of the crate docs: run DOC_EXAMPLES=overwrite cargo test --test doc_examples",
            path.display(),
            n + 1
        );
        let stderr = path.with_extension("stderr");
        assert!(stderr.exists(), "{} is not pinned yet", stderr.display());
    }
    // No case left over from an example that is gone.
    let extra = case_path(examples.len() + 1);
    assert!(
        !extra.exists(),
        "{} has no example any more",
        extra.display()
    );
}
