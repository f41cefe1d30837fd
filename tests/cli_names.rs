//! Docs name only what exists (issue 49, item 5): every `distlock <subcommand>` that the
//! README, `docs/`, the published crates' rustdoc and the examples write, and every flag
//! written with it, is one the built `distlock` binary accepts, as its `--help` and
//! `<subcommand> --help` list them.
//!
//! A mention is an inline code span that reads `distlock …` (or `$ distlock …`), a line of a
//! code block that does, a `$ distlock …` prompt anywhere (an example prints one), and the
//! arguments after `cargo run -p distlock-cli --`. Its words are read as a shell would pass
//! them: flags before the subcommand (with the value of one that takes a value), the
//! subcommand, then its flags (`--force`, `[--yes]`, `[-y]`); a shell comment, a pipe or the
//! end of the span ends it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Phrases that read `distlock …` in a code span and are no command: log messages.
const NOT_COMMANDS: [&str; 1] = [
    // docs/observability.md: the message the runtime logs at connect.
    "distlock client connected",
];

/// The workspace root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `distlock` binary, built now (`cargo build -p distlock-cli`), as cargo reports it.
fn cli_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["build", "-p", "distlock-cli", "--bin", "distlock"])
        .args(["--message-format", "json-render-diagnostics"])
        .current_dir(root())
        .output()
        .expect("run cargo build -p distlock-cli");
    assert!(
        output.status.success(),
        "cargo build -p distlock-cli: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| message["target"]["name"] == "distlock")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the distlock executable")
}

/// What one `--help` lists: subcommands, and each flag (long and short) with whether it
/// takes a value.
#[derive(Debug, Default)]
struct Help {
    commands: Vec<String>,
    flags: BTreeMap<String, bool>,
}

impl Help {
    fn of(binary: &Path, args: &[&str]) -> Help {
        let output = Command::new(binary)
            .args(args)
            .arg("--help")
            .env_remove("DISTLOCK_URL")
            .output()
            .expect("run distlock --help");
        assert!(output.status.success(), "distlock {args:?} --help failed");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let mut help = Help::default();
        let mut section = "";
        for line in text.lines() {
            if !line.starts_with(' ') {
                section = line.trim_end_matches(':');
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            match section {
                "Commands" => help.commands.extend(words.first().map(|w| w.to_string())),
                "Options" => {
                    // `-y, --yes`, `--url <URL>`, `--json`: the flags up to the description.
                    let mut names = Vec::new();
                    let mut value = false;
                    for word in words {
                        let word = word.trim_end_matches(',');
                        if word.starts_with('-') {
                            names.push(word.to_owned());
                        } else if word.starts_with('<') || word.starts_with('[') {
                            value = true;
                        } else {
                            break;
                        }
                    }
                    for name in names {
                        help.flags.insert(name, value);
                    }
                }
                _ => {}
            }
        }
        assert!(
            !help.flags.is_empty(),
            "no options read from `distlock {args:?} --help`:\n{text}"
        );
        help
    }
}

/// One `distlock …` the docs write, and where.
#[derive(Debug)]
struct Mention {
    at: String,
    words: Vec<String>,
}

/// The files whose text names commands: the README, `docs/**/*.md`, the published crates'
/// sources (their doc comments) and the examples.
fn sources() -> Vec<(PathBuf, Kind)> {
    let mut files = vec![(root().join("README.md"), Kind::Markdown)];
    walk(&root().join("docs"), &mut files);
    walk(&root().join("examples"), &mut files);
    for krate in [
        "distlock",
        "distlock-core",
        "distlock-macros",
        "distlock-cli",
    ] {
        let mut rust = Vec::new();
        walk(&root().join(krate).join("src"), &mut rust);
        files.extend(
            rust.into_iter()
                .filter(|(_, kind)| *kind == Kind::Code)
                .map(|(path, _)| (path, Kind::Docs)),
        );
    }
    files
}

/// How a file's text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Markdown: every line.
    Markdown,
    /// A published crate's Rust: its doc comments.
    Docs,
    /// An example's Rust: its comments, and a `$ distlock` prompt it prints.
    Code,
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, Kind)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push((path, Kind::Markdown));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((path, Kind::Code));
        }
    }
}

/// The prose and code lines of a file, each with its line number: `(number, text, in a code
/// block)`.
fn lines_of(text: &str, kind: Kind) -> Vec<(usize, String, bool)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let content = match kind {
            Kind::Markdown => Some(line),
            Kind::Docs => trimmed
                .strip_prefix("//!")
                .or_else(|| trimmed.strip_prefix("///")),
            Kind::Code => trimmed
                .strip_prefix("//")
                .map(|c| c.trim_start_matches('/').trim_start_matches('!')),
        };
        let Some(content) = content else {
            // An example's code line: only a prompt it prints counts.
            if kind == Kind::Code {
                out.push((i + 1, line.to_owned(), false));
            }
            continue;
        };
        let content = content.strip_prefix(' ').unwrap_or(content);
        if content.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        out.push((i + 1, content.to_owned(), fenced));
    }
    out
}

/// Every mention in `file`.
fn mentions_in(path: &Path, kind: Kind) -> Vec<Mention> {
    let text = std::fs::read_to_string(path).unwrap();
    let shown = path
        .strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string();
    let mut found = Vec::new();
    let mut add = |line: usize, command: &str| {
        // `distlock = { git = … }`: a manifest's line, not a command.
        let full = format!("distlock {command}");
        if command.starts_with('=') || NOT_COMMANDS.iter().any(|not| full.starts_with(not)) {
            return;
        }
        let words = words_of(command);
        if !words.is_empty() {
            found.push(Mention {
                at: format!("{shown}:{line}"),
                words,
            });
        }
    };
    let lines = lines_of(&text, kind);
    for (number, line, fenced) in &lines {
        // A prompt anywhere (an example prints `$ distlock --url {url} list`).
        for (at, _) in line.match_indices("$ distlock ") {
            let rest = &line[at + "$ distlock ".len()..];
            add(*number, rest.split(['"', '`']).next().unwrap_or(rest));
        }
        if *fenced {
            let command = line.trim_start();
            if let Some(rest) = command.strip_prefix("distlock ") {
                add(*number, rest);
            }
            if let Some(rest) = after_cargo_run(command) {
                add(*number, rest);
            }
        }
    }
    // Code spans, in paragraphs of prose (a span may run across a line break).
    let mut paragraph: Vec<(usize, &str)> = Vec::new();
    let mut spans = |paragraph: &mut Vec<(usize, &str)>| {
        // Each line's offset in the paragraph joined with spaces.
        let mut joined = String::new();
        let mut starts = Vec::new();
        for (number, line) in paragraph.drain(..) {
            starts.push((joined.len(), number));
            joined.push_str(line);
            joined.push(' ');
        }
        let mut offset = 0;
        for (i, span) in joined.split('`').enumerate() {
            let at = offset;
            offset += span.len() + 1;
            if i % 2 == 0 {
                continue;
            }
            let line = starts
                .iter()
                .rev()
                .find(|(start, _)| *start <= at)
                .map_or(0, |(_, number)| *number);
            let span = span.trim();
            let span = span.strip_prefix("$ ").unwrap_or(span);
            if let Some(rest) = span.strip_prefix("distlock ") {
                add(line, rest);
            } else if let Some(rest) = after_cargo_run(span) {
                add(line, rest);
            }
        }
    };
    for (number, line, fenced) in &lines {
        if *fenced || line.trim().is_empty() {
            spans(&mut paragraph);
        } else {
            paragraph.push((*number, line));
        }
    }
    spans(&mut paragraph);
    found
}

/// The arguments after `cargo run … -p distlock-cli --`, if `command` is one.
fn after_cargo_run(command: &str) -> Option<&str> {
    if !command.starts_with("cargo run") {
        return None;
    }
    let (_, rest) = command.split_once("-p distlock-cli")?;
    // `cargo run -p distlock-cli --` with nothing after it names no command.
    Some(rest.split_once("-- ").map_or("", |(_, args)| args))
}

/// The words of a command, up to a shell comment, a pipe or a sentence's end; brackets of an
/// optional part taken off (`[--yes]` is `--yes`).
fn words_of(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    for word in command.split_whitespace() {
        if word.starts_with('#') || ["|", ";", "&&", ">", "<"].contains(&word) {
            break;
        }
        let word = word.trim_matches(['[', ']', '(', ')', ',', ';']);
        if !word.is_empty() {
            words.push(word.to_owned());
        }
    }
    words
}

/// The subcommand `mention` names, if any, and what is wrong with it: a subcommand or a flag
/// the CLI does not accept.
fn check(
    mention: &Mention,
    top: &Help,
    binary: &Path,
    subs: &mut BTreeMap<String, Help>,
) -> (Option<String>, Vec<String>) {
    let mut wrong = Vec::new();
    let mut words = mention.words.iter();
    let mut help = top;
    // Flags before the subcommand, then the subcommand.
    let mut command = None;
    while let Some(word) = words.next() {
        if let Some(flag) = flag_of(word) {
            match top.flags.get(flag) {
                None => wrong.push(format!("flag `{flag}`")),
                Some(true) if !word.contains('=') => {
                    words.next();
                }
                Some(_) => {}
            }
            continue;
        }
        let is_word = word.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && word.chars().all(|c| c.is_ascii_lowercase() || c == '-');
        if is_word {
            command = Some(word.clone());
        }
        break;
    }
    if let Some(command) = &command {
        if !top.commands.contains(command) {
            wrong.push(format!("subcommand `{command}`"));
            return (Some(command.clone()), wrong);
        }
        help = subs
            .entry(command.clone())
            .or_insert_with(|| Help::of(binary, &[command]));
    }
    for word in words {
        if let Some(flag) = flag_of(word) {
            if !help.flags.contains_key(flag) {
                wrong.push(format!("flag `{flag}`"));
            }
        }
    }
    (command, wrong)
}

/// The flag a word is (`--interval` of `--interval=1s`, `-y`), if it is one.
fn flag_of(word: &str) -> Option<&str> {
    let name = word.split('=').next().unwrap_or(word);
    let long = name.strip_prefix("--").is_some_and(|rest| {
        rest.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    let short = name.len() == 2
        && name.starts_with('-')
        && name.chars().nth(1).is_some_and(|c| c.is_ascii_alphabetic());
    (long || short).then_some(name)
}

#[test]
fn every_command_the_docs_name_is_one_the_cli_accepts() {
    let binary = cli_binary();
    let top = Help::of(&binary, &[]);
    assert!(
        top.commands.iter().any(|c| c == "list"),
        "no subcommands read from `distlock --help`: {top:?}"
    );
    let mut subs = BTreeMap::new();
    let mut mentions = Vec::new();
    for (path, kind) in sources() {
        mentions.extend(mentions_in(&path, kind));
    }
    let mut wrong = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for mention in &mentions {
        let (command, problems) = check(mention, &top, &binary, &mut subs);
        named.extend(command);
        for what in problems {
            wrong.push(format!(
                "{}: `distlock {}`: {what} is not accepted by the CLI",
                mention.at,
                mention.words.join(" ")
            ));
        }
    }
    // The docs do name commands (a reader that finds none checks nothing).
    for command in ["list", "show", "release", "watch"] {
        assert!(
            named.contains(command),
            "no mention of `distlock {command}` found: {mentions:#?}"
        );
    }
    assert!(
        wrong.is_empty(),
        "the docs name what the CLI does not accept ({} mentions read):\n{}",
        mentions.len(),
        wrong.join("\n")
    );
}

#[test]
fn a_subcommand_or_flag_the_cli_lacks_is_found() {
    let flags = |names: &[(&str, bool)]| {
        names
            .iter()
            .map(|(name, value)| (name.to_string(), *value))
            .collect()
    };
    let top = Help {
        commands: vec!["show".to_owned(), "release".to_owned()],
        flags: flags(&[("--url", true), ("--json", false)]),
    };
    let mut subs = BTreeMap::from([(
        "release".to_owned(),
        Help {
            commands: Vec::new(),
            flags: flags(&[("--url", true), ("--force", false), ("-y", false)]),
        },
    )]);
    let found = |text: &str, subs: &mut BTreeMap<String, Help>| {
        let mention = Mention {
            at: "here".to_owned(),
            words: words_of(text),
        };
        check(&mention, &top, Path::new("unused"), subs)
    };
    let (command, wrong) = found("inspect <name>", &mut subs);
    assert_eq!(command.as_deref(), Some("inspect"));
    assert_eq!(wrong, ["subcommand `inspect`"]);
    // The value of `--url` is not taken for the subcommand.
    let (command, wrong) = found("--url redis://h/ release NAME --force [-y]", &mut subs);
    assert_eq!((command.as_deref(), wrong.len()), (Some("release"), 0));
    let (_, wrong) = found(
        "release NAME --forse [--yes] # comment --nothing",
        &mut subs,
    );
    assert_eq!(wrong, ["flag `--forse`", "flag `--yes`"]);
    let (_, wrong) = found("--jsn release x", &mut subs);
    assert_eq!(wrong, ["flag `--jsn`"]);
}
