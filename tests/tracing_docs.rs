//! The tracing table of `docs/observability.md` lists every event and span the runtime emits, at
//! its level: read from the source, so the table cannot drift from the code. (The table's module column is not
//! checked, so moving an event between modules does not fail this test; keep it right by hand.)

use std::fs;
use std::path::PathBuf;

/// One `tracing::<level>!` or `tracing::<level>_span!` call in the runtime.
#[derive(Debug)]
struct Emitted {
    module: String,
    level: String,
    span: bool,
    message: String,
}

/// The string literals in `text` up to the parenthesis that closes the call opened before it.
fn literals_of_call(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 1;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            '"' => {
                let mut literal = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some(escaped) = chars.next() {
                                literal.push(escaped);
                            }
                        }
                        '"' => break,
                        c => literal.push(c),
                    }
                }
                out.push(literal);
            }
            _ => {}
        }
    }
    out
}

/// Every `.rs` file below `dir`, with its module's name (a folder's `mod.rs`: the folder's).
fn sources(dir: &std::path::Path, out: &mut Vec<(String, PathBuf)>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let module = match stem.as_str() {
            "mod" => dir.file_name().unwrap().to_string_lossy().into_owned(),
            _ => stem,
        };
        out.push((module, path));
    }
}

fn emitted() -> Vec<Emitted> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("distlock-core/src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut out = Vec::new();
    for (module, path) in files {
        let text = fs::read_to_string(&path).unwrap();
        for level in ["trace", "debug", "info", "warn", "error"] {
            for span in [false, true] {
                let call = if span {
                    format!("tracing::{level}_span!(")
                } else {
                    format!("tracing::{level}!(")
                };
                for (at, _) in text.match_indices(&call) {
                    let literals = literals_of_call(&text[at + call.len()..]);
                    // A span's name comes first; an event's message comes last.
                    let message = if span {
                        literals.first()
                    } else {
                        literals.last()
                    };
                    out.push(Emitted {
                        module: module.clone(),
                        level: level.to_owned(),
                        span,
                        message: message.cloned().unwrap_or_default(),
                    });
                }
            }
        }
    }
    out
}

#[test]
fn the_docs_list_every_event_at_its_level() {
    let page =
        fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/observability.md"))
            .unwrap();
    let section = page
        .split("## Tracing: what the runtime logs")
        .nth(1)
        .expect("docs/observability.md has the tracing section");
    let section = section.split("\n## ").next().unwrap();
    let events = emitted();
    assert!(events.len() >= 20, "{events:#?}");
    let mut missing = Vec::new();
    for event in &events {
        // Long messages are listed by their beginning.
        let shown: String = event.message.chars().take(40).collect();
        let level = if event.span {
            format!("| span `{}` |", event.level)
        } else {
            format!("| `{}` |", event.level)
        };
        let listed = section
            .lines()
            .any(|line| line.starts_with(&level) && line.contains(&shown));
        if !listed {
            missing.push(format!("{level} {} (in `{}`)", event.message, event.module));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/observability.md's tracing table lacks these (level, message):\n{}",
        missing.join("\n")
    );
}
