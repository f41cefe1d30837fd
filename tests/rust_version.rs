//! The declared `rust-version` (the workspace's, which every published crate inherits) is at
//! least the `rust-version` of every locked dependency a user's build compiles (normal and
//! build dependencies of the published crates, from `cargo metadata --locked`, for the host
//! platform: offline, cargo knows only the packages a build here downloaded), so the claim
//! cannot drift when a dependency raises its own.

use std::process::Command;

/// The published crates.
const PUBLISHED: [&str; 4] = [
    "distlock",
    "distlock-core",
    "distlock-macros",
    "distlock-cli",
];

/// `1.89.0` / `1.89` → (1, 89, 0).
fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

/// The host's target triple (`rustc -vV`).
fn host() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output = Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("run rustc -vV");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned()
}

#[test]
fn declared_rust_version_covers_every_locked_dependency() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let package = |id: &str| packages.iter().find(|p| p["id"] == id).unwrap();
    let nodes = metadata["resolve"]["nodes"].as_array().unwrap();
    let node = |id: &str| nodes.iter().find(|n| n["id"] == id).unwrap();

    let roots: Vec<&serde_json::Value> = packages
        .iter()
        .filter(|p| p["source"].is_null() && PUBLISHED.contains(&p["name"].as_str().unwrap()))
        .collect();
    assert_eq!(roots.len(), PUBLISHED.len(), "every published crate found");
    let declared = roots[0]["rust_version"]
        .as_str()
        .expect("rust-version declared");
    for root in &roots {
        assert_eq!(
            root["rust_version"], declared,
            "{} inherits it",
            root["name"]
        );
    }

    // The closure over normal and build dependencies.
    let mut seen: Vec<String> = Vec::new();
    let mut stack: Vec<String> = roots
        .iter()
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .collect();
    while let Some(id) = stack.pop() {
        if seen.contains(&id) {
            continue;
        }
        for dep in node(&id)["deps"].as_array().unwrap() {
            let used = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            if used {
                stack.push(dep["pkg"].as_str().unwrap().to_owned());
            }
        }
        seen.push(id);
    }
    let too_new: Vec<String> = seen
        .iter()
        .map(|id| package(id))
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            (version(needs) > version(declared))
                .then(|| {
                    let (name, at) = (p["name"].as_str()?, p["version"].as_str()?);
                    Some(format!("{name} {at} needs {needs}"))
                })
                .flatten()
        })
        .collect();
    assert!(
        too_new.is_empty(),
        "rust-version {declared} is below what locked dependencies need: {too_new:?}"
    );
    assert!(
        seen.len() > 20,
        "the dependency closure was walked: {}",
        seen.len()
    );
}
