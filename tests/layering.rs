//! The workspace's module graph has no circle and no import that runs back up to the crate
//! root, in every crate and harness (benches and the reliability suite included); inside every
//! folder module the same holds among its files and subfolders (a folder's `mod.rs` is its
//! door, not one of its rooms); and ARCHITECTURE.md names every module of the runtime and the
//! macro crate.
//!
//! The graph is read from the source text: a module depends on module `m` where its code (not
//! its comments) says `crate::m` (a macro's `$crate::` does not count: it is resolved in the
//! crate that uses the macro). Each file below `src/` (or a harness folder) is a module; the
//! files of a folder module (`scenarios/*.rs`, `model/*.rs`) count as that module. A `crate::x`
//! where `x` is not a module names an item of the crate root (`lib.rs`/`main.rs`), which sits
//! above every module: that is an upward import.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The crates and harnesses whose module graphs are checked: (root folder, root file).
const ROOTS: &[(&str, &str)] = &[
    ("distlock-core/src", "lib.rs"),
    ("distlock-macros/src", "lib.rs"),
    ("distlock/src", "lib.rs"),
    ("distlock-cli/src", "main.rs"),
    ("benches/locks", "main.rs"),
    ("tests/reliability", "main.rs"),
    ("tests/support", "lib.rs"),
];

type Graph = BTreeMap<String, BTreeSet<String>>;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file below `dir`, with the top-level module it belongs to.
fn module_files(dir: &Path, root_file: &str) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).expect("read source folder") {
        let path = entry.expect("dir entry").path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            for (_, file) in module_files(&path, "") {
                out.push((name.clone(), file));
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let module = if path.file_name().unwrap() == root_file {
                String::new() // the crate root
            } else {
                name
            };
            out.push((module, path));
        }
    }
    out
}

/// The identifiers `x` of every `crate::x` in the code of `text` (comments skipped).
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "crate::".len()..];
            // `distlock_core::` and the like are other crates, not `crate::`; a macro's
            // `$crate::` is resolved where the macro is used (it names the public API).
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if ident.is_empty() {
                // `use crate::{a, b::c}`: every name in the braces.
                if let Some(group) = rest.strip_prefix('{') {
                    let end = group.find('}').unwrap_or(group.len());
                    for part in group[..end].split(',') {
                        let name: String = part
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !name.is_empty() {
                            found.insert(name);
                        }
                    }
                }
            } else {
                found.insert(ident);
            }
        }
    }
    found
}

/// The module graph of one crate, and the upward imports (module → root item) found.
fn graph(dir: &str, root_file: &str) -> (Graph, Vec<String>) {
    let files = module_files(&workspace().join(dir), root_file);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|(m, _)| m.clone())
        .filter(|m| !m.is_empty())
        .collect();
    let mut graph = Graph::new();
    let mut upward = Vec::new();
    for (module, file) in &files {
        let text = fs::read_to_string(file).expect("read source");
        let edges = graph.entry(module.clone()).or_default();
        for target in crate_paths(&text) {
            if module.is_empty() || target == *module {
                continue;
            }
            if modules.contains(&target) {
                edges.insert(target);
            } else {
                upward.push(format!(
                    "{}: `crate::{target}` reaches up to the crate root",
                    file.strip_prefix(workspace()).unwrap_or(file).display()
                ));
            }
        }
    }
    graph.remove("");
    (graph, upward)
}

/// Every circle in `graph` (one per strongly connected component with more than one module).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    // Reachability is enough at this size: a and b are in one circle if each reaches the other.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(m) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for m in graph.keys() {
        if done.contains(m) || !reaches[m].contains(m) {
            continue;
        }
        let component: Vec<String> = graph
            .keys()
            .filter(|o| reaches[m].contains(*o) && reaches[*o].contains(m))
            .cloned()
            .collect();
        done.extend(component.iter().cloned());
        out.push(component);
    }
    out
}

#[test]
fn module_graphs_have_no_circles_and_no_upward_imports() {
    let mut problems = Vec::new();
    for (dir, root) in ROOTS {
        let (graph, upward) = graph(dir, root);
        problems.extend(upward);
        for circle in circles(&graph) {
            problems.push(format!("{dir}: modules import each other: {circle:?}"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The module path of the folder `dir` below a crate's source root (`lock::kind`).
fn module_path(root: &Path, dir: &Path) -> String {
    let rel = dir.strip_prefix(root).expect("below the root");
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("::")
}

/// The names that `text`'s code takes from the module `path` (`crate::lock::x` and
/// `crate::lock::{x, y::z}` give `x` and `y`); `sibling_super`: the file sits directly in that
/// module's folder, so its `super::x` names a sibling too.
fn names_under(text: &str, path: &str, sibling_super: bool) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    let mut prefixes = vec![format!("crate::{path}::")];
    if sibling_super {
        prefixes.push("super::".to_owned());
    }
    for line in text.lines() {
        let code = line.find("//").map_or(line, |at| &line[..at]);
        for prefix in &prefixes {
            let mut rest = code;
            while let Some(at) = rest.find(prefix.as_str()) {
                let before = rest[..at].chars().next_back();
                rest = &rest[at + prefix.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                    continue;
                }
                match rest.strip_prefix('{') {
                    Some(group) => {
                        // Top-level parts of the braces only: `{a, b::{c, d}}` gives a and b.
                        let (mut depth, mut part) = (0, String::new());
                        for c in group.chars() {
                            match c {
                                '{' => depth += 1,
                                '}' if depth == 0 => break,
                                '}' => depth -= 1,
                                ',' if depth == 0 => {
                                    found.insert(ident(&part));
                                    part.clear();
                                    continue;
                                }
                                _ => {}
                            }
                            if depth == 0 {
                                part.push(c);
                            }
                        }
                        found.insert(ident(&part));
                    }
                    None => {
                        found.insert(ident(rest));
                    }
                }
            }
        }
    }
    found.remove("");
    found
}

/// The graph among the rooms of every folder module below `dir` (its files but `mod.rs`, and
/// its subfolders, each with every file below it), keyed by the folder's module path.
fn folder_graphs(root: &Path, dir: &Path, out: &mut BTreeMap<String, Graph>) {
    let mut rooms: Vec<(String, Vec<PathBuf>, bool)> = Vec::new();
    for entry in fs::read_dir(dir).expect("read source folder") {
        let path = entry.expect("dir entry").path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let files = module_files(&path, "")
                .into_iter()
                .map(|(_, f)| f)
                .collect();
            rooms.push((name, files, false));
            folder_graphs(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" {
            rooms.push((name, vec![path], true));
        }
    }
    if dir == root {
        return; // the crate's top level: `module_graphs_have_no_circles_and_no_upward_imports`
    }
    let path = module_path(root, dir);
    let names: BTreeSet<String> = rooms.iter().map(|(n, _, _)| n.clone()).collect();
    let mut graph = Graph::new();
    for (room, files, direct) in &rooms {
        let edges = graph.entry(room.clone()).or_default();
        for file in files {
            let text = fs::read_to_string(file).expect("read source");
            for name in names_under(&text, &path, *direct) {
                if names.contains(&name) && name != *room {
                    edges.insert(name);
                }
            }
        }
    }
    out.insert(path, graph);
}

#[test]
fn inside_every_folder_the_files_have_no_circles() {
    let mut problems = Vec::new();
    for (dir, _) in ROOTS {
        let root = workspace().join(dir);
        let mut graphs = BTreeMap::new();
        folder_graphs(&root, &root, &mut graphs);
        for (folder, graph) in graphs {
            for circle in circles(&graph) {
                problems.push(format!(
                    "{dir}/{folder}: files import each other: {circle:?}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_folder_checker_reads_paths_braces_and_super() {
    let text = "use crate::lock::{guard::LockGuard, kind::{set, Kind}};\nuse crate::lock::hold::Hold;\nuse super::queue; // crate::lock::comment\nuse crate::client::x;";
    let names: Vec<String> = names_under(text, "lock", true).into_iter().collect();
    assert_eq!(names, ["guard", "hold", "kind", "queue"]);
    let names: Vec<String> = names_under(text, "lock::kind", false).into_iter().collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn the_checker_sees_circles_and_upward_imports() {
    let graph: Graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(circles(&graph), vec![vec!["a", "b", "c"]]);
    let paths = crate_paths(
        "use crate::{x, y::Z};\nlet v = crate::w::f(); // crate::comment\nuse distlock_core::q;\n$crate::m::f();",
    );
    assert_eq!(
        paths.into_iter().collect::<Vec<_>>(),
        vec!["w".to_owned(), "x".to_owned(), "y".to_owned()]
    );
}

#[test]
fn architecture_md_names_every_module() {
    let map = fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut missing = Vec::new();
    for dir in ["distlock-core/src", "distlock-macros/src"] {
        let (graph, _) = graph(dir, "lib.rs");
        for module in graph.keys() {
            if !map.contains(&format!("`{module}`")) {
                missing.push(format!("{dir}: `{module}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md does not name these modules: {missing:?}"
    );
}
