//! The least-privilege ACL lines the `distlock` crate docs give ("Least privilege"), read from
//! the docs themselves, so that a test runs under exactly the user they document; applied to
//! a server or a sentinel, and what Redis's `ACL LOG` says a user was refused.

use std::path::PathBuf;

/// The password the documented lines are given in tests (their `>PASSWORD`).
pub const ACL_PASSWORD: &str = "least-privilege";

/// One documented line: the comment above it (what it is for) and the `ACL SETUSER` command.
#[derive(Debug, Clone)]
pub struct AclLine {
    /// The comment line above it, without its `# `.
    pub label: String,
    /// The command, as documented (`ACL SETUSER <user> ...`, with `>PASSWORD`).
    pub command: String,
}

impl AclLine {
    /// The user the line sets up.
    pub fn user(&self) -> &str {
        self.command
            .split_whitespace()
            .nth(2)
            .expect("ACL SETUSER <user> ...")
    }

    /// The command's arguments, its `>PASSWORD` given [`ACL_PASSWORD`].
    pub fn args(&self) -> Vec<String> {
        self.command
            .split_whitespace()
            .map(|word| match word {
                ">PASSWORD" => format!(">{ACL_PASSWORD}"),
                other => other.to_owned(),
            })
            .collect()
    }

    /// Runs the line on the server (or sentinel) behind `conn`.
    pub async fn apply(&self, conn: &mut redis::aio::MultiplexedConnection) {
        let args = self.args();
        let () = redis::cmd(&args[0])
            .arg(&args[1..])
            .query_async(conn)
            .await
            .unwrap_or_else(|e| panic!("`{}` refused: {e}", self.command));
    }
}

/// Every `ACL SETUSER` line of the `distlock` crate docs' "Least privilege" section, in order.
pub fn documented_acl() -> Vec<AclLine> {
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../distlock/src/lib.rs");
    let text = std::fs::read_to_string(&docs).expect("read the distlock crate docs");
    let section = text
        .split("//! ## Least privilege")
        .nth(1)
        .expect("a \"Least privilege\" section in the distlock crate docs");
    let section = section.split("\n//! ## ").next().unwrap_or(section);
    let mut lines = Vec::new();
    let mut label = None;
    for line in section.lines() {
        let line = line.trim_start_matches("//!").trim();
        if let Some(comment) = line.strip_prefix("# ") {
            label = Some(comment.to_owned());
        } else if line.starts_with("ACL SETUSER ") {
            let label = label.take().expect("a comment above each ACL line");
            lines.push(AclLine {
                label,
                command: line.to_owned(),
            });
        }
    }
    assert!(!lines.is_empty(), "no ACL lines in \"Least privilege\"");
    lines
}

/// The documented line whose comment starts with `label`.
pub fn acl_line(label: &str) -> AclLine {
    documented_acl()
        .into_iter()
        .find(|line| line.label.starts_with(label))
        .unwrap_or_else(|| panic!("no documented ACL line for `{label}`"))
}

/// What `ACL LOG` says `user` was refused: each entry's `reason` (`command`, `key`, `channel`)
/// and `object` (the command, key or channel), oldest first.
pub async fn acl_refusals(
    conn: &mut redis::aio::MultiplexedConnection,
    user: &str,
) -> Vec<(String, String)> {
    let entries: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .arg(1000)
        .query_async(conn)
        .await
        .expect("ACL LOG");
    let mut out = Vec::new();
    for entry in entries.into_iter().rev() {
        let fields: std::collections::HashMap<String, redis::Value> =
            redis::from_redis_value(entry).expect("an ACL LOG entry");
        let text = |name: &str| -> String {
            fields
                .get(name)
                .and_then(|v| redis::from_redis_value(v.clone()).ok())
                .unwrap_or_default()
        };
        if text("username") == user {
            out.push((text("reason"), text("object")));
        }
    }
    out
}
