//! `redis-cli` for topology work done outside a runtime (cluster creation, Sentinel questions).

use std::process::{Command, Stdio};

pub(crate) fn redis_cli() -> String {
    std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_owned())
}

/// `redis-cli` arguments for a TLS-only server whose certificate `ca` signed (none without).
pub(crate) fn tls_cli_args(ca: Option<&std::path::Path>) -> Vec<String> {
    match ca {
        Some(ca) => vec![
            "--tls".to_owned(),
            "--cacert".to_owned(),
            ca.display().to_string(),
        ],
        None => Vec::new(),
    }
}

/// One `redis-cli` command against the server on `port`; its output.
pub(crate) fn cli(port: u16, args: &[&str]) -> String {
    cli_with(None, port, args)
}

/// One `redis-cli` command against the node on `port` (over TLS when `ca` is given); its output.
pub(crate) fn cli_with(ca: Option<&std::path::Path>, port: u16, args: &[&str]) -> String {
    let output = Command::new(redis_cli())
        .args(tls_cli_args(ca))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&output.stdout).into_owned()
}
