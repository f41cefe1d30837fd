//! The command line: subcommands, flags and the `DISTLOCK_*` variables behind them.

use std::time::Duration;

use clap::{Parser, Subcommand};

const AFTER_HELP: &str = "\
Lock names are the names passed to `lock(..)`, or rendered from a `#[distributed_lock]` key
template (`order:42`), not Redis keys. PATTERN is a Redis glob over names: `*`, `?`, `[abc]`.

A Redis Cluster: pass any of its nodes, as --url or --cluster (several: the first that
answers). distlock asks the node what it is (HELLO), finds the masters (CLUSTER SLOTS) and
reads each lock, the subscribers of its release channel (sharded pub/sub, PUBSUB SHARDNUMSUB)
and its owner's identity record on the master of their slot; list and watch scan every
master and say how many they read (a master that cannot be read is named, and list exits 1).
A redirect or an unreachable node is never shown as a key that is not a lock. A forced
release runs on the lock's master and wakes its waiters with SPUBLISH. A replica given as
--url is read, and said to be one; release --force needs the master (or --sentinel).

Environment: DISTLOCK_URL, DISTLOCK_CLUSTER_NODES, DISTLOCK_SENTINELS, DISTLOCK_SENTINEL_SERVICE,
DISTLOCK_KEY_PREFIX, DISTLOCK_RESPONSE_TIMEOUT and DISTLOCK_CONNECT_TIMEOUT stand in for the flags (the variables
`distlock::Config::from_env` reads); behind Sentinel, DISTLOCK_SENTINEL_MASTER_USERNAME and
DISTLOCK_SENTINEL_MASTER_PASSWORD are the master's credentials. A RedLock quorum
(DISTLOCK_REDLOCK_MASTERS) is read one master at a time: --url names one of its masters, which
holds every client's identity record and the locks it granted; a forced release there deletes
that master's copy only (the lock stays held while a majority has it). The password in a URL is never printed.

Exit status: 0 done; 1 failed (Redis unreachable or refusing, a key that is not a lock, not
confirmed); 2 bad arguments or configuration; 3 no such lock.";

/// Inspect and release distlock's locks in Redis: who holds what, for how long, who waits.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    /// Redis URL, `redis://[:password@]host[:port][/db]`
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true, global = true)]
    pub(crate) url: Option<String>,

    /// Nodes of a Redis Cluster (repeat the flag or separate with commas): any of them; the
    /// masters are found from the first that answers (a cluster node given as --url is found
    /// to be one too)
    #[arg(
        long = "cluster",
        env = "DISTLOCK_CLUSTER_NODES",
        value_delimiter = ',',
        hide_env_values = true,
        global = true,
        conflicts_with_all = ["url", "sentinels"]
    )]
    pub(crate) cluster_nodes: Vec<String>,

    /// Sentinel URLs (repeat the flag or separate with commas): the master of
    /// --sentinel-service, found through Redis Sentinel, instead of --url
    #[arg(
        long = "sentinel",
        env = "DISTLOCK_SENTINELS",
        value_delimiter = ',',
        hide_env_values = true,
        global = true,
        conflicts_with = "url"
    )]
    pub(crate) sentinels: Vec<String>,

    /// The master's name at the sentinels (with --sentinel)
    #[arg(
        long,
        env = "DISTLOCK_SENTINEL_SERVICE",
        hide_env_values = true,
        global = true
    )]
    pub(crate) sentinel_service: Option<String>,

    /// Key prefix of the locks (the clients' `Config::key_prefix`)
    #[arg(
        long,
        env = "DISTLOCK_KEY_PREFIX",
        hide_env_values = true,
        default_value = "distlock",
        global = true
    )]
    pub(crate) prefix: String,

    /// Longest wait for one Redis reply
    #[arg(long, env = "DISTLOCK_RESPONSE_TIMEOUT", hide_env_values = true, default_value = "2s", value_parser = duration, global = true)]
    pub(crate) timeout: Duration,

    /// Longest wait for the connection
    #[arg(long, env = "DISTLOCK_CONNECT_TIMEOUT", hide_env_values = true, default_value = "5s", value_parser = duration, global = true)]
    pub(crate) connect_timeout: Duration,

    /// Print JSON instead of a table (`watch`: one JSON object per line)
    #[arg(long, global = true)]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List the held locks whose names match PATTERN (default: all)
    List {
        /// A Redis glob over lock names, e.g. `order:*`
        pattern: Option<String>,
    },
    /// Show one lock in full: owner, process, ttl, fencing token, waiting clients
    Show {
        /// The lock's name, e.g. `order:42`
        name: String,
    },
    /// Delete a lock and wake its waiters; its holder is no longer protected
    Release {
        /// The lock's name, e.g. `order:42`
        name: String,
        /// Required: releasing a lock someone holds breaks their mutual exclusion
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation
        #[arg(long, short)]
        yes: bool,
    },
    /// A live table of the locks matching PATTERN, refreshed until Ctrl-C
    Watch {
        /// A Redis glob over lock names, e.g. `order:*`
        pattern: Option<String>,
        /// Time between refreshes
        #[arg(long, default_value = "1s", value_parser = duration)]
        interval: Duration,
    },
}

/// A duration as distlock reads them everywhere (`"500ms"`, `"2s"`, `"1m30s"`).
fn duration(text: &str) -> Result<Duration, String> {
    distlock::parse_duration(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_come_anywhere() {
        let cli = Cli::try_parse_from([
            "distlock",
            "list",
            "order:*",
            "--url",
            "redis://h/",
            "--timeout",
            "500ms",
        ])
        .unwrap();
        assert_eq!(cli.url.as_deref(), Some("redis://h/"));
        assert_eq!(cli.timeout, Duration::from_millis(500));
        assert!(matches!(cli.command, Command::List { pattern: Some(p) } if p == "order:*"));
        assert!(Cli::try_parse_from(["distlock", "list", "--timeout", "5"]).is_err());
    }
}
