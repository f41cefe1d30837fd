//! The README's claims about the repository itself: its feature table lists every feature of
//! the `distlock` package (and the crate docs' table does too), its leader snippet is the code
//! `examples/leader.rs` compiles and runs (so it compiles as shown), and its note on the fenced
//! writes' redis-rs version names the version the workspace builds on, and its guarantees link
//! to sections the reliability report has.

use std::path::PathBuf;

use testkit::markdown_anchor;

fn read(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The features of a Cargo.toml: the keys of its `[features]` table.
fn features(manifest: &str) -> Vec<String> {
    manifest
        .split("\n[features]\n")
        .nth(1)
        .expect("a [features] table")
        .lines()
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.split_once(" = ["))
        .map(|(name, _)| name.trim().to_owned())
        .collect()
}

/// The first cells of the Markdown table whose header starts `| feature |`, in `text` (lines
/// optionally prefixed, as `//! ` in a crate's docs).
fn feature_rows(text: &str, prefix: &str) -> Vec<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(|line| line.strip_prefix(prefix).unwrap_or(line))
        .collect();
    let header = lines
        .iter()
        .position(|line| line.starts_with("| feature |"))
        .expect("a feature table");
    lines[header + 2..]
        .iter()
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cell = line.split('|').nth(1).unwrap().trim();
            cell.trim_matches('`').to_owned()
        })
        .collect()
}

#[test]
fn the_feature_tables_list_every_feature() {
    let mut declared = features(&read("distlock/Cargo.toml"));
    declared.sort();
    assert!(declared.len() >= 5, "{declared:?}");
    // The runtime's features are the facade's, one for one.
    let mut core = features(&read("distlock-core/Cargo.toml"));
    core.sort();
    assert_eq!(
        declared, core,
        "distlock and distlock-core declare different features"
    );
    for (file, prefix) in [("README.md", ""), ("distlock/src/lib.rs", "//! ")] {
        let mut rows = feature_rows(&read(file), prefix);
        rows.sort();
        assert_eq!(rows, declared, "{file}: the feature table");
    }
}

/// The lines between the markers in `examples/leader.rs`, unindented.
fn leader_snippet() -> String {
    let source = read("examples/leader.rs");
    let region = source
        .split("// README leader snippet: begin\n")
        .nth(1)
        .and_then(|rest| rest.split("// README leader snippet: end").next())
        .expect("the snippet's markers in examples/leader.rs");
    let lines: Vec<&str> = region
        .lines()
        .map(|line| line.strip_prefix("    ").unwrap_or(line))
        .filter(|line| !line.trim().is_empty())
        .collect();
    lines.join("\n") + "\n"
}

#[test]
fn the_readme_leader_snippet_is_the_compiled_one() {
    let snippet = leader_snippet();
    assert!(snippet.contains(".await??;"), "{snippet}");
    let readme = read("README.md");
    let block = format!("```rust\n{snippet}```\n");
    assert!(
        readme.contains(&block),
        "README.md does not show examples/leader.rs's snippet as it is; it should read:\n{block}"
    );
}

#[test]
fn the_fenced_writes_note_names_the_redis_the_workspace_builds_on() {
    let manifest = read("Cargo.toml");
    let redis = manifest
        .lines()
        .find(|line| line.starts_with("redis = { version = \""))
        .expect("the workspace's redis dependency");
    assert!(
        redis.starts_with("redis = { version = \"1."),
        "redis-rs is no longer 1.x: update the README and the fence docs ({redis})"
    );
    let readme = read("README.md");
    for said in [
        "**redis-rs 1.x**",
        "`distlock::redis::Client::open(url)?`",
        "E0277",
    ] {
        assert!(readme.contains(said), "README.md: no {said}");
    }
    let fence_docs = read("distlock-core/src/fence/redis/mod.rs");
    assert!(
        fence_docs.contains("redis-rs 1.x") && fence_docs.contains("`distlock::redis`"),
        "the FencedStore docs do not say which redis-rs it takes"
    );
}

#[test]
fn the_guarantees_link_to_sections_the_reliability_report_has() {
    let readme = read("README.md");
    let report = read("RELIABILITY.md");
    let anchors: Vec<String> = report
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|line| markdown_anchor(line.trim_start_matches('#')))
        .collect();
    let links: Vec<&str> = readme
        .split("(RELIABILITY.md#")
        .skip(1)
        .map(|rest| rest.split(')').next().unwrap())
        .collect();
    assert!(links.len() >= 5, "the guarantees link to the report");
    for link in links {
        assert!(
            anchors.iter().any(|a| a == link),
            "README links to RELIABILITY.md#{link}, a section it does not have: {anchors:?}"
        );
    }
    assert_eq!(
        markdown_anchor("Rows 18, `c2` and 19: failovers"),
        "rows-18-c2-and-19-failovers"
    );
}
