//! The lock-key template language: literal text with `<param.field>` placeholders.
//!
//! This stage only knows about text; `model.rs` checks the placeholders against the function.

use std::fmt;

/// A parsed key template: literal runs and placeholders, never two placeholders in a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyTemplate {
    pub(crate) segments: Vec<Segment>,
}

/// One piece of a key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Literal text, already unescaped (`<<` is stored as `<`). Never empty.
    Literal(String),
    /// A `<root.field...>` placeholder.
    Placeholder(Placeholder),
}

/// A placeholder: a parameter (or `self`) followed by zero or more field names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// The parameter name, `self` for the receiver (may be a raw identifier, `r#type`).
    pub(crate) root: String,
    /// Field accesses after the root: identifiers or tuple indices.
    pub(crate) fields: Vec<Field>,
}

/// A field access inside a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field {
    /// A named field (may be a raw identifier, `r#type`).
    Named(String),
    /// A tuple field, `<pair.0>`.
    Index(u32),
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}", self.root)?;
        for field in &self.fields {
            match field {
                Field::Named(name) => write!(f, ".{name}")?,
                Field::Index(index) => write!(f, ".{index}")?,
            }
        }
        f.write_str(">")
    }
}

/// Why a template could not be parsed. The `Display` text is the compiler error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TemplateError {
    /// `key = ""`.
    EmptyKey,
    /// `<>`.
    EmptyPlaceholder,
    /// A `<` with no `>` after it; holds the text after the `<`.
    Unclosed(String),
    /// `<a><b>`.
    Adjacent(Placeholder, Placeholder),
    /// `{` or `}` in the literal text, e.g. `{id}` written as in `format!`.
    Brace {
        /// The brace.
        brace: char,
        /// The name between the braces when the text reads `{name}`.
        name: Option<String>,
    },
    /// A placeholder whose text is not a `name.field` path.
    InvalidPlaceholder {
        /// The text between `<` and `>`.
        text: String,
        /// The offending part of it.
        segment: String,
    },
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::EmptyKey => f.write_str(
                "the lock key is empty: name the resource the lock protects, e.g. `key = \"order:<id>\"`",
            ),
            TemplateError::EmptyPlaceholder => f.write_str(
                "empty placeholder `<>` in the lock key: name a parameter, e.g. `<id>`, or write `<<` for a literal `<`",
            ),
            TemplateError::Unclosed(rest) => {
                let shown: String = rest.chars().take(24).collect();
                let ellipsis = if rest.chars().count() > 24 { "..." } else { "" };
                write!(
                    f,
                    "unclosed placeholder `<{shown}{ellipsis}` in the lock key: close it with `>`, or write `<<` for a literal `<`"
                )
            }
            TemplateError::Adjacent(first, second) => write!(
                f,
                "placeholders `{first}` and `{second}` are next to each other in the lock key, so different values could produce the same key: put a separator between them, e.g. `{first}:{second}`"
            ),
            TemplateError::Brace { name: Some(name), .. } => write!(
                f,
                "`{{{name}}}` in the lock key: placeholders are written `<{name}>`, not `{{{name}}}`; {BRACES}"
            ),
            TemplateError::Brace { brace, name: None } => write!(
                f,
                "`{brace}` in the lock key: {BRACES}; placeholders are written `<name>`, e.g. `key = \"order:<id>\"`"
            ),
            TemplateError::InvalidPlaceholder { text, segment } => {
                write!(f, "`<{text}>` is not a valid placeholder: ")?;
                if segment.is_empty() {
                    f.write_str("it has an empty name")?;
                } else if segment.chars().any(char::is_whitespace) {
                    write!(f, "`{segment}` contains whitespace")?;
                } else if is_keyword(segment) {
                    write!(f, "`{segment}` is a keyword (write `r#{segment}`)")?;
                } else {
                    write!(f, "`{segment}` is not an identifier")?;
                }
                f.write_str(
                    "; write `<param>`, `<param.field>` or `<self.field>`, or `<<` for a literal `<`",
                )
            }
        }
    }
}

/// Why braces are refused, for the messages.
const BRACES: &str = "a lock name cannot contain `{` or `}`: distlock wraps the whole name in a Redis Cluster hash tag itself, so that every key of one lock lands in one slot";

impl KeyTemplate {
    /// Parses `template`, the value of `key = "..."`.
    pub(crate) fn parse(template: &str) -> Result<KeyTemplate, TemplateError> {
        if template.is_empty() {
            return Err(TemplateError::EmptyKey);
        }
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut rest = template;
        while let Some(open) = rest.find('<') {
            check_braces(&rest[..open])?;
            literal.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            if let Some(tail) = after.strip_prefix('<') {
                literal.push('<');
                rest = tail;
                continue;
            }
            let Some(close) = after.find('>') else {
                return Err(TemplateError::Unclosed(after.to_owned()));
            };
            let placeholder = parse_placeholder(&after[..close])?;
            if !literal.is_empty() {
                segments.push(Segment::Literal(std::mem::take(&mut literal)));
            } else if let Some(Segment::Placeholder(previous)) = segments.last() {
                return Err(TemplateError::Adjacent(previous.clone(), placeholder));
            }
            segments.push(Segment::Placeholder(placeholder));
            rest = &after[close + 1..];
        }
        check_braces(rest)?;
        literal.push_str(rest);
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(KeyTemplate { segments })
    }
}

/// Refuses `{` and `}` in literal text: the runtime refuses them in lock names (they would move
/// the lock's keys to another hash slot), so such a key would fail on every call.
fn check_braces(text: &str) -> Result<(), TemplateError> {
    let Some(at) = text.find(['{', '}']) else {
        return Ok(());
    };
    // `{name}`, as in `format!`, gets the `<name>` form spelled out.
    let name = text[at..]
        .strip_prefix('{')
        .and_then(|after| after.split_once('}'))
        .map(|(name, _)| name)
        .filter(|name| parse_placeholder(name).is_ok())
        .map(str::to_owned);
    Err(TemplateError::Brace {
        brace: text[at..].chars().next().unwrap_or('{'),
        name,
    })
}

fn parse_placeholder(text: &str) -> Result<Placeholder, TemplateError> {
    if text.is_empty() {
        return Err(TemplateError::EmptyPlaceholder);
    }
    let invalid = |segment: &str| TemplateError::InvalidPlaceholder {
        text: text.to_owned(),
        segment: segment.to_owned(),
    };
    let mut parts = text.split('.');
    let root = parts.next().unwrap_or_default();
    // `self` is the one keyword allowed as a root; any other keyword cannot name a parameter.
    if root != "self" && !is_identifier(root) {
        return Err(invalid(root));
    }
    let fields = parts
        .map(|part| {
            if is_identifier(part) {
                Ok(Field::Named(part.to_owned()))
            } else {
                tuple_index(part)
                    .map(Field::Index)
                    .ok_or_else(|| invalid(part))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Placeholder {
        root: root.to_owned(),
        fields,
    })
}

/// A canonical tuple index (`0`, `12`; not `01` or `+1`).
fn tuple_index(text: &str) -> Option<u32> {
    let index: u32 = text.parse().ok()?;
    (index.to_string() == text).then_some(index)
}

/// An identifier that can be written in Rust source: `name`, `_name`, `r#type`; not `_` alone
/// and not a keyword.
pub(crate) fn is_identifier(text: &str) -> bool {
    let (raw, name) = match text.strip_prefix("r#") {
        Some(name) => (true, name),
        None => (false, text),
    };
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    if !(first == '_' || unicode_ident::is_xid_start(first)) || name == "_" {
        return false;
    }
    if !chars.all(unicode_ident::is_xid_continue) {
        return false;
    }
    if raw {
        // These cannot be raw identifiers.
        !matches!(name, "crate" | "self" | "super" | "Self")
    } else {
        !is_keyword(name)
    }
}

/// Strict and reserved keywords of Rust 2021 (plus `gen`, reserved in 2024).
fn is_keyword(text: &str) -> bool {
    matches!(
        text,
        "as" | "async"
            | "await"
            | "break"
            | "const"
            | "continue"
            | "crate"
            | "dyn"
            | "else"
            | "enum"
            | "extern"
            | "false"
            | "fn"
            | "for"
            | "if"
            | "impl"
            | "in"
            | "let"
            | "loop"
            | "match"
            | "mod"
            | "move"
            | "mut"
            | "pub"
            | "ref"
            | "return"
            | "self"
            | "Self"
            | "static"
            | "struct"
            | "super"
            | "trait"
            | "true"
            | "type"
            | "unsafe"
            | "use"
            | "where"
            | "while"
            | "abstract"
            | "become"
            | "box"
            | "do"
            | "final"
            | "gen"
            | "macro"
            | "override"
            | "priv"
            | "try"
            | "typeof"
            | "unsized"
            | "virtual"
            | "yield"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(text: &str) -> Segment {
        Segment::Literal(text.to_owned())
    }

    fn ph(root: &str, fields: &[&str]) -> Segment {
        Segment::Placeholder(Placeholder {
            root: root.to_owned(),
            fields: fields
                .iter()
                .map(|f| match tuple_index(f) {
                    Some(index) => Field::Index(index),
                    None => Field::Named((*f).to_owned()),
                })
                .collect(),
        })
    }

    fn parse(text: &str) -> Vec<Segment> {
        KeyTemplate::parse(text).unwrap().segments
    }

    fn error(text: &str) -> String {
        KeyTemplate::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn literal_only() {
        assert_eq!(parse("nightly-report"), vec![lit("nightly-report")]);
    }

    #[test]
    fn placeholders_and_literals() {
        assert_eq!(parse("order:<id>"), vec![lit("order:"), ph("id", &[])]);
        assert_eq!(
            parse("user:<self.tenant>:<req.user_id>"),
            vec![
                lit("user:"),
                ph("self", &["tenant"]),
                lit(":"),
                ph("req", &["user_id"])
            ]
        );
        assert_eq!(parse("<id>"), vec![ph("id", &[])]);
        assert_eq!(parse("<a.b.c>!"), vec![ph("a", &["b", "c"]), lit("!")]);
        assert_eq!(parse("<pair.0>-<pair.1>"), {
            vec![ph("pair", &["0"]), lit("-"), ph("pair", &["1"])]
        });
        assert_eq!(parse("<r#type>"), vec![ph("r#type", &[])]);
        assert_eq!(parse("k:<über>"), vec![lit("k:"), ph("über", &[])]);
    }

    #[test]
    fn escapes() {
        assert_eq!(parse("a<<b"), vec![lit("a<b")]);
        assert_eq!(parse("<<<id>"), vec![lit("<"), ph("id", &[])]);
        assert_eq!(parse("<id><<"), vec![ph("id", &[]), lit("<")]);
        assert_eq!(parse("a>b>>"), vec![lit("a>b>>")]);
        assert_eq!(parse("<id>>"), vec![ph("id", &[]), lit(">")]);
        assert_eq!(parse("<<>"), vec![lit("<>")]);
    }

    #[test]
    fn empty_key() {
        assert_eq!(KeyTemplate::parse(""), Err(TemplateError::EmptyKey));
    }

    #[test]
    fn empty_placeholder() {
        assert_eq!(
            KeyTemplate::parse("a:<>"),
            Err(TemplateError::EmptyPlaceholder)
        );
        assert!(error("<>").contains("write `<<` for a literal `<`"));
    }

    #[test]
    fn unclosed_placeholder() {
        assert_eq!(
            KeyTemplate::parse("order:<id"),
            Err(TemplateError::Unclosed("id".to_owned()))
        );
        assert_eq!(
            KeyTemplate::parse("a<"),
            Err(TemplateError::Unclosed(String::new()))
        );
        assert!(error("order:<id").starts_with("unclosed placeholder `<id`"));
        assert!(error("<abcdefghijklmnopqrstuvwxyz0123").contains("`<abcdefghijklmnopqrstuvwx...`"));
    }

    #[test]
    fn adjacent_placeholders() {
        assert!(matches!(
            KeyTemplate::parse("<a><b>"),
            Err(TemplateError::Adjacent(..))
        ));
        assert!(error("x<a.b><c>").contains("`<a.b>` and `<c>` are next to each other"));
        assert!(error("x<a.b><c>").contains("e.g. `<a.b>:<c>`"));
        // An escaped `<` counts as a separator.
        assert_eq!(
            parse("<a><<<b>"),
            vec![ph("a", &[]), lit("<"), ph("b", &[])]
        );
    }

    #[test]
    fn invalid_placeholders() {
        for (text, segment) in [
            ("<1d>", "1d"),
            ("<a-b>", "a-b"),
            ("<a.>", ""),
            ("<.a>", ""),
            ("<a..b>", ""),
            ("< id >", " id "),
            ("<_>", "_"),
            ("<a.01>", "01"),
            ("<0>", "0"),
            ("<type>", "type"),
            ("<a.self>", "self"),
            ("<a<b>", "a<b"),
            ("<r#self>", "r#self"),
        ] {
            match KeyTemplate::parse(text) {
                Err(TemplateError::InvalidPlaceholder { segment: s, .. }) => {
                    assert_eq!(s, segment, "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(error("< id >").contains("contains whitespace"));
        assert!(error("<a.type>").contains("`type` is a keyword (write `r#type`)"));
        assert!(error("<a-b>").contains("`a-b` is not an identifier"));
    }

    #[test]
    fn braces_are_refused_in_literal_text() {
        assert_eq!(
            KeyTemplate::parse("hash:{id}"),
            Err(TemplateError::Brace {
                brace: '{',
                name: Some("id".to_owned())
            })
        );
        assert!(error("hash:{id}").starts_with(
            "`{id}` in the lock key: placeholders are written `<id>`, not `{id}`; a lock name cannot contain `{` or `}`"
        ));
        assert!(error("t:{self.tenant}:<id>").contains("written `<self.tenant>`"));
        for (text, brace) in [
            ("{hash-tag}:<id>", '{'),
            ("<id>:}", '}'),
            ("a{", '{'),
            ("{}", '{'),
            ("{<id>}", '{'),
            ("<a>{", '{'),
        ] {
            assert_eq!(
                KeyTemplate::parse(text),
                Err(TemplateError::Brace { brace, name: None }),
                "{text}"
            );
        }
        assert!(error("a}b").starts_with("`}` in the lock key: a lock name cannot contain"));
        assert!(error("a}b")
            .ends_with("placeholders are written `<name>`, e.g. `key = \"order:<id>\"`"));
    }

    #[test]
    fn placeholder_display() {
        let Segment::Placeholder(p) = &parse("<a.b.0>")[0] else {
            panic!()
        };
        assert_eq!(p.to_string(), "<a.b.0>");
    }

    #[test]
    fn identifiers() {
        for ok in ["a", "_a", "a1", "r#type", "über", "snake_case"] {
            assert!(is_identifier(ok), "{ok}");
        }
        for bad in ["", "_", "1a", "a b", "fn", "r#", "r#crate", "a-b", "é-"] {
            assert!(!is_identifier(bad), "{bad}");
        }
    }
}
