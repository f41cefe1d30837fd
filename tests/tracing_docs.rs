//! The tracing table of `docs/observability.md` lists every event and span the runtime emits, at
//! its level and in its module (the last part of its target: a file's name, a folder's for its
//! `mod.rs`): read from the source, so the table cannot drift from the code.
//! Its OpenTelemetry section names every field of the acquire span, and no attribute it lacks.

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
        let module = format!("{level} `{}` |", event.module);
        let listed = section
            .lines()
            .any(|line| line.starts_with(&module) && line.contains(&shown));
        if !listed {
            missing.push(format!("{module} {}", event.message));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/observability.md's tracing table lacks these (level, module, message):\n{}",
        missing.join("\n")
    );
}

/// The field names of the first `tracing::debug_span!(` call in `source`.
fn span_fields(source: &str) -> Vec<String> {
    let call = "tracing::debug_span!(";
    let at = source.find(call).expect("a span in the source") + call.len();
    let mut depth = 1;
    let end = source[at..]
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            depth == 0
        })
        .map(|(i, _)| at + i)
        .unwrap();
    source[at..end]
        .split(',')
        .filter_map(|field| field.split_once('='))
        .map(|(name, _)| name.trim().to_owned())
        .collect()
}

/// The OpenTelemetry section of `docs/observability.md` names every field of the
/// `distlock.acquire` span (read from the source), and its table names no attribute the span
/// does not have.
#[test]
fn the_otel_convention_names_every_field_of_the_acquire_span() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = fs::read_to_string(root.join("distlock-core/src/lock/builder.rs")).unwrap();
    let fields = span_fields(&source);
    for convention in ["lock.name", "lock.kind", "lock.template", "lock.outcome"] {
        assert!(fields.iter().any(|f| f == convention), "{fields:?}");
    }
    let page = fs::read_to_string(root.join("docs/observability.md")).unwrap();
    let section = page
        .split("## OpenTelemetry: the span's attributes")
        .nth(1)
        .expect("docs/observability.md has the OpenTelemetry section");
    let section = section.split("\n## ").next().unwrap();
    for field in &fields {
        assert!(
            section.contains(&format!("`{field}`")),
            "the OpenTelemetry section does not name `{field}`"
        );
    }
    let documented: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|name| name.starts_with("lock.") || name.starts_with("otel."))
        .collect();
    assert!(documented.len() >= 5, "{documented:?}");
    for name in documented {
        assert!(
            fields.iter().any(|f| f == name),
            "the OpenTelemetry section documents `{name}`, which the span does not have: {fields:?}"
        );
    }
}
