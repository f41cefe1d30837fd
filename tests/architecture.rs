//! `ARCHITECTURE.md` stays true: every path it names in backticks exists in the repository
//! (as written, or as the tail of a real path: a table row names a file relative to its
//! folder), every type it names is defined (a `struct`, `enum`, `trait`, `type`, `const`,
//! `static` or an enum's variant), and every folder of `distlock-core/src` has its line.
//!
//! Issue 43: the map had drifted (it named an `acquire.rs` that no longer existed) and nothing
//! noticed.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Folders never read: build output, version control, installed tools.
const SKIPPED: &[&str] = &["target", ".git", "node_modules"];

/// The file extensions that make a backticked word a path.
const EXTENSIONS: &[&str] = &[
    ".rs", ".md", ".sh", ".toml", ".yml", ".yaml", ".json", ".c", ".sql", ".stderr",
];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file and folder below `dir`, relative to `root`, `/`-separated.
fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, bool)>) {
    for entry in fs::read_dir(dir).expect("read folder") {
        let path = entry.expect("folder entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if path.is_dir() {
            if !SKIPPED.contains(&name.as_str()) {
                out.push((relative, true));
                walk(root, &path, out);
            }
        } else {
            out.push((relative, false));
        }
    }
}

/// Every tail of every path (`a/b/c.rs`: `a/b/c.rs`, `b/c.rs`, `c.rs`) and every folder's
/// tails: what a backticked path may be written as.
fn tails(paths: &[(String, bool)]) -> HashSet<String> {
    let mut out = HashSet::new();
    for (path, _) in paths {
        let parts: Vec<&str> = path.split('/').collect();
        for start in 0..parts.len() {
            out.insert(parts[start..].join("/"));
        }
    }
    out
}

/// The words the document puts in backticks.
fn backticked(doc: &str) -> Vec<&str> {
    doc.split('`').skip(1).step_by(2).collect()
}

/// `word` as a path to look up, if it is one: it has a `/` or a file extension, and none of
/// the characters of a pattern, a generic, a call or a URL.
fn as_path(word: &str) -> Option<&str> {
    let word = word.split("::").next()?;
    let word = word.trim_end_matches('/');
    let word = word.split(':').next()?;
    let pathy = word.contains('/') || EXTENSIONS.iter().any(|e| word.ends_with(e));
    let pattern = word.chars().any(|c| "*<>{}()@ ,=\"'$|".contains(c))
        || word.starts_with('/')
        || word.starts_with('.')
        || word.contains("//");
    (pathy && !pattern && !word.is_empty()).then_some(word)
}

/// `word` as a type (or constant) name to look up, if it is one: `Name`, `path::Name` or
/// `Name::item`.
fn as_type(word: &str) -> Option<&str> {
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    let parts: Vec<&str> = word.split("::").collect();
    if !parts.iter().all(|p| ident(p)) {
        return None;
    }
    let at = parts
        .iter()
        .position(|p| p.starts_with(|c: char| c.is_ascii_uppercase()))?;
    // Lower-case module names before it; at most one item after it.
    let before_ok = parts[..at]
        .iter()
        .all(|p| p.starts_with(|c: char| c.is_ascii_lowercase() || c == '_'));
    let name = parts[at];
    // All capitals: a Redis command, a signal, an environment variable.
    let shouted = !name.chars().any(|c| c.is_ascii_lowercase());
    let foreign = STD_AND_DEPENDENCIES.contains(&name);
    (before_ok && parts.len() - at <= 2 && !shouted && !foreign).then_some(name)
}

/// Names the map uses that the standard library, a dependency or another project defines
/// (ShedLock's `LockAssert`), or an alert of `ops/` (`DistlockLocksLost`).
const STD_AND_DEPENDENCIES: &[&str] = &[
    "Send",
    "Sync",
    "Debug",
    "Option",
    "Result",
    "Box",
    "Arc",
    "Mutex",
    "Vec",
    "String",
    "Duration",
    "Instant",
    "HashMap",
    "Drop",
    "Future",
    "Pin",
    "Some",
    "None",
    "Ok",
    "Err",
    "LockAssert",
    "DistlockLocksLost",
];

/// The names the Rust sources define: items after a defining keyword, and enum variants (a
/// line that starts with the name followed by `(`, `{`, `,` or ` =`).
fn defined_names(sources: &[String]) -> HashSet<String> {
    const KEYWORDS: &[&str] = &[
        "struct ", "enum ", "trait ", "type ", "const ", "static ", "union ",
    ];
    let mut out = HashSet::new();
    let name_of = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for text in sources {
        for line in text.lines() {
            let trimmed = line.trim_start();
            for keyword in KEYWORDS {
                for (at, _) in trimmed.match_indices(keyword) {
                    let boundary = at == 0
                        || !trimmed[..at]
                            .ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
                    if boundary {
                        out.insert(name_of(&trimmed[at + keyword.len()..]));
                    }
                }
            }
            let name = name_of(trimmed);
            let rest = &trimmed[name.len()..];
            if name.starts_with(|c: char| c.is_ascii_uppercase())
                && (rest.starts_with(['(', '{', ','])
                    || rest.starts_with(" {")
                    || rest.starts_with(" ="))
            {
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn every_path_and_type_the_map_names_exists() {
    let root = workspace();
    let doc = prose(&map());
    let mut paths = Vec::new();
    walk(&root, &root, &mut paths);
    let known = tails(&paths);
    let sources: Vec<String> = paths
        .iter()
        .filter(|(p, dir)| !dir && p.ends_with(".rs"))
        .map(|(p, _)| fs::read_to_string(root.join(p)).expect("read source"))
        .collect();
    let defined = defined_names(&sources);
    let mut missing = Vec::new();
    for word in backticked(&doc) {
        if let Some(path) = as_path(word) {
            let found = [
                path.to_owned(),
                format!("{path}.rs"),
                format!("{path}/mod.rs"),
            ]
            .iter()
            .any(|p| known.contains(p));
            if !found {
                missing.push(format!("path `{word}`"));
            }
        } else if let Some(name) = as_type(word) {
            if !defined.contains(name) {
                missing.push(format!("type `{word}`"));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what the repository does not have (rename or remove them): {missing:#?}"
    );
}

#[test]
fn every_folder_of_the_runtime_has_its_line() {
    let doc = prose(&map());
    let paths = runtime_paths();
    let words = backticked(&doc);
    let missing: Vec<&String> = paths
        .iter()
        .filter(|(_, dir)| *dir)
        .map(|(p, _)| p)
        .filter(|folder| {
            !words.iter().any(|w| {
                w.split_whitespace().any(|w| {
                    w.trim_end_matches('/') == folder.as_str()
                        || w.starts_with(&format!("{folder}/"))
                })
            }) && !doc.contains(&format!(" {folder}/"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "folders of distlock-core/src that ARCHITECTURE.md does not describe: {missing:?}"
    );
}

#[test]
fn the_checks_catch_a_name_that_is_gone() {
    assert_eq!(as_path("acquire.rs"), Some("acquire.rs"));
    assert_eq!(as_path("lock/kind/"), Some("lock/kind"));
    assert_eq!(as_path("wire/calls.rs::AcquireCall"), Some("wire/calls.rs"));
    assert_eq!(as_path("GET /metrics"), None);
    assert_eq!(as_path("/metrics"), None);
    assert_eq!(as_path("*.rs"), None);
    assert_eq!(as_type("LockBuilder"), Some("LockBuilder"));
    assert_eq!(as_type("lease::Lease::end_belief"), Some("Lease"));
    assert_eq!(as_type("lease::renewal_interval"), None);
    let paths = vec![("distlock-core/src/lock/builder.rs".to_owned(), false)];
    let known = tails(&paths);
    assert!(known.contains("lock/builder.rs") && known.contains("builder.rs"));
    assert!(!known.contains("acquire.rs"));
    let defined = defined_names(&["pub struct LockBuilder {\n    Expired,\n}".to_owned()]);
    assert!(defined.contains("LockBuilder") && defined.contains("Expired"));
    assert!(!defined.contains("AcquireBuilder"));
}

/// The document without its fenced code blocks (their backticks would pair with prose).
fn prose(doc: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// ARCHITECTURE.md as written.
fn map() -> String {
    fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// Every file and folder of the runtime (`distlock-core/src`), relative to it.
fn runtime_paths() -> Vec<(String, bool)> {
    let src = workspace().join("distlock-core/src");
    let mut paths = Vec::new();
    walk(&src, &src, &mut paths);
    paths
}

/// The longest line of prose the map may have: a reader's diff and terminal show it whole.
const LINE: usize = 100;

#[test]
fn the_map_reads_in_short_lines() {
    let doc = map();
    let long: Vec<(usize, usize)> = prose(&doc)
        .lines()
        .enumerate()
        .map(|(n, line)| (n + 1, line.chars().count()))
        .filter(|&(_, len)| len > LINE)
        .collect();
    assert!(
        long.is_empty(),
        "ARCHITECTURE.md lines over {LINE} characters (line of the prose, length): {long:?}"
    );
}

#[test]
fn every_module_of_the_runtime_is_named() {
    let doc = prose(&map());
    // The last segment of every path-like word in backticks: `lock/hold`, `hold.rs`, `hold`.
    let named: HashSet<&str> = backticked(&doc)
        .into_iter()
        .flat_map(|w| w.split(|c: char| !(c.is_ascii_alphanumeric() || "_./".contains(c))))
        .filter_map(|w| w.trim_end_matches('/').rsplit('/').next())
        .map(|w| w.trim_end_matches(".rs"))
        .collect();
    let paths = runtime_paths();
    let unnamed: Vec<&String> = paths
        .iter()
        .filter(|(p, dir)| !dir && p.ends_with(".rs"))
        .map(|(p, _)| p)
        .filter(|p| {
            let stem = p.rsplit('/').next().unwrap().trim_end_matches(".rs");
            !["mod", "lib", "tests"].contains(&stem) && !named.contains(stem)
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "modules of distlock-core/src that ARCHITECTURE.md never names: {unnamed:?}"
    );
}

/// The numbered layers list: each item names top-level modules and, in parentheses, what they
/// hold; every such lower-case name must be a file or folder inside one of the item's modules.
#[test]
fn the_layers_name_what_each_module_holds() {
    let doc = prose(&map());
    let layers = doc
        .split("Layers, bottom up")
        .nth(1)
        .expect("ARCHITECTURE.md has its layers list");
    // The numbered items, each with its continuation lines.
    let mut items: Vec<String> = Vec::new();
    for line in layers.lines().skip_while(|l| !l.starts_with("1. ")) {
        if line.trim().is_empty() {
            break;
        }
        let numbered = line
            .split_once(". ")
            .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        match (numbered, items.last_mut()) {
            (false, Some(item)) => {
                item.push(' ');
                item.push_str(line.trim());
            }
            _ => items.push(line.to_owned()),
        }
    }
    assert!(items.len() >= 8, "layers found: {items:?}");
    let paths = runtime_paths();
    let top = |p: &str| {
        p.split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned()
    };
    let tops: HashSet<String> = paths.iter().map(|(p, _)| top(p)).collect();
    let simple = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    let mut wrong = Vec::new();
    for item in &items {
        let words: Vec<&str> = backticked(item).into_iter().filter(|w| simple(w)).collect();
        let modules: Vec<&str> = words
            .iter()
            .copied()
            .filter(|w| tops.contains(*w))
            .collect();
        for word in words.iter().filter(|w| !tops.contains(**w)) {
            let inside = paths.iter().any(|(p, _)| {
                modules.contains(&top(p).as_str())
                    && p.rsplit('/').next().unwrap().trim_end_matches(".rs") == *word
            });
            if !inside {
                wrong.push(format!("`{word}` in layer {modules:?}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's layers name modules their folders do not have: {wrong:?}"
    );
}

/// The most source files a folder of the runtime holds besides its `mod.rs` (the map says "at
/// most a dozen files stand in any folder").
const FILES_PER_FOLDER: usize = 12;

#[test]
fn no_folder_of_the_runtime_holds_more_than_a_dozen_files() {
    assert!(
        map().contains("At most a dozen files stand in any folder"),
        "the map states the rule this test keeps"
    );
    let mut folders: std::collections::BTreeMap<String, usize> = Default::default();
    for (path, dir) in runtime_paths() {
        let (folder, file) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
        if !dir && file.ends_with(".rs") && file != "mod.rs" {
            *folders.entry(folder.to_owned()).or_default() += 1;
        }
    }
    let crowded: Vec<_> = folders
        .into_iter()
        .filter(|&(_, files)| files > FILES_PER_FOLDER)
        .collect();
    assert!(
        crowded.is_empty(),
        "folders of distlock-core/src with more than {FILES_PER_FOLDER} files (split them by concept): {crowded:?}"
    );
}
