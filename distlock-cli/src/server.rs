//! The connection to Redis (one server, the master Sentinel names, or a Redis Cluster found
//! from any of its nodes), and what its errors mean to an operator: one line each, never the
//! password.

use std::future::Future;
use std::time::Duration;

use distlock::redis::{self, AsyncConnectionConfig, ErrorKind, RedisError, RedisResult, Value};
use distlock::Config;

use crate::cluster::{self, Connection, Mode, Node};
use crate::failure::{Exit, Failure};

/// Where the locks are: the configuration the command runs with.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The node to reach (`--url`, or the master Sentinel named), or the seed nodes of a Redis
    /// Cluster (`--cluster`), tried in turn.
    pub(crate) urls: Vec<String>,
    /// `--cluster`: the nodes are a Redis Cluster's (a `--url` that reaches a cluster node is
    /// found to be one by its `HELLO`).
    pub(crate) cluster: bool,
    pub(crate) prefix: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

impl Target {
    /// Checks the settings exactly as a distlock client would ([`Config::validate`]).
    pub(crate) fn validate(&self) -> Result<(), Failure> {
        self.config()
            .validate()
            .map_err(|e| Failure::usage(e.to_string()))
    }

    fn config(&self) -> Config {
        let config = match self.cluster {
            true => Config::cluster(self.urls.clone()),
            false => Config::new(self.urls.first().cloned().unwrap_or_default()),
        };
        config
            .key_prefix(self.prefix.clone())
            .connect_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout)
    }

    /// The URL as it may be shown: the password replaced by `***` (a cluster's seed nodes, each
    /// so, separated by commas).
    pub(crate) fn shown_url(&self) -> String {
        let shown: Vec<String> = self.urls.iter().map(|url| shown(url)).collect();
        shown.join(",")
    }
}

/// Where the sentinels are, and which master to ask them for.
#[derive(Debug, Clone)]
pub(crate) struct Sentinels {
    pub(crate) urls: Vec<String>,
    pub(crate) service: String,
    /// The master's user name (empty: the default user) and password.
    pub(crate) master_auth: Option<(String, String)>,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

impl Sentinels {
    /// The URL of the master the first answering sentinel names
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`), with the master's credentials and the sentinels'
    /// scheme (`rediss://` sentinels, a TLS master).
    pub(crate) async fn master_url(&self) -> Result<String, Failure> {
        let config = Config::sentinel(self.urls.clone(), self.service.clone());
        config
            .validate()
            .map_err(|e| Failure::usage(e.to_string()))?;
        let settings = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let within = self.connect_timeout + self.response_timeout;
        let mut last = String::from("no sentinel answered");
        for url in &self.urls {
            let shown = Config::new(url.clone()).redacted_url();
            let client = redis::Client::open(url.as_str()).map_err(|e| {
                let detail = e.detail().unwrap_or(e.category()).replace(url, "…");
                Failure::usage(format!("`{shown}` is not a valid Sentinel URL: {detail}"))
            })?;
            let ask = async {
                let mut conn = client
                    .get_multiplexed_async_connection_with_config(&settings)
                    .await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.service)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            match tokio::time::timeout(within, ask).await {
                Ok(Ok(Some((host, port)))) => {
                    let scheme = if url.to_ascii_lowercase().starts_with("rediss://") {
                        "rediss"
                    } else {
                        "redis"
                    };
                    let auth = match &self.master_auth {
                        Some((user, password)) => {
                            format!("{}:{}@", encode(user), encode(password))
                        }
                        None => String::new(),
                    };
                    return Ok(format!("{scheme}://{auth}{host}:{port}/"));
                }
                Ok(Ok(None)) => {
                    last = format!("{shown} does not know the service `{}`", self.service)
                }
                Ok(Err(error)) => {
                    let detail = error.detail().unwrap_or(error.category()).replace(url, "…");
                    last = format!("{shown}: {detail}");
                }
                Err(_) => {
                    last = format!("{shown}: no answer within {}", seconds(within));
                }
            }
        }
        Err(Failure::failed(format!(
            "no sentinel named the master of `{}`: {last}",
            self.service
        )))
    }
}

/// `url` with its password replaced by `***`.
fn shown(url: &str) -> String {
    Config::new(url.to_owned()).redacted_url()
}

/// Percent-encodes every byte but the unreserved ones (a user name or password in a URL).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Turns Redis errors into operator messages.
#[derive(Debug, Clone)]
pub(crate) struct Explain {
    shown: String,
    timeout: Duration,
}

/// A connection to the server of a [`Target`], or to the Redis Cluster its node belongs to.
pub(crate) struct Server {
    /// Reads each key where it lives (on a cluster, on the master of its slot).
    pub(crate) conn: Connection,
    /// The node reached (`watch` subscribes to release notifications there, on one server).
    pub(crate) client: redis::Client,
    pub(crate) explain: Explain,
    /// One server that is a replica: what it shows may lag its master, and it takes no writes.
    pub(crate) replica: bool,
}

impl Server {
    /// Connects to the first of the target's nodes that answers (a missing password shows
    /// here), asks it what it is (`HELLO`) and, a node of a Redis Cluster, connects to the
    /// whole cluster through it.
    pub(crate) async fn connect(target: &Target) -> Result<Server, Failure> {
        let mut failure = Failure::usage("no Redis URL");
        for url in &target.urls {
            match Self::connect_to(target, url).await {
                Ok(server) => return Ok(server),
                Err(usage) if usage.exit == Exit::Usage => return Err(usage),
                Err(failed) => failure = failed,
            }
        }
        Err(failure)
    }

    async fn connect_to(target: &Target, url: &str) -> Result<Server, Failure> {
        let explain = Explain {
            shown: shown(url),
            timeout: target.response_timeout,
        };
        let client = redis::Client::open(url).map_err(|e| {
            let detail = e.detail().unwrap_or(e.category()).replace(url, "…");
            Failure::usage(format!(
                "`{}` is not a valid Redis URL: {detail}",
                explain.shown
            ))
        })?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(target.connect_timeout))
            .set_response_timeout(Some(target.response_timeout));
        let within = target.connect_timeout + target.response_timeout;
        let no_answer = || {
            Failure::failed(format!(
                "cannot connect to Redis at {}: no answer within {} (--connect-timeout, DISTLOCK_CONNECT_TIMEOUT)",
                explain.shown,
                seconds(target.connect_timeout)
            ))
        };
        let mut conn = match tokio::time::timeout(
            within,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) if !error.is_timeout() => return Err(explain.error(&error)),
            Ok(Err(_)) | Err(_) => return Err(no_answer()),
        };
        explain
            .call(redis::cmd("PING").exec_async(&mut conn))
            .await?;
        let hello = cluster::hello(&mut conn).await;
        let conn = match (hello.map(|h| h.mode), target.cluster) {
            (Some(Mode::Sentinel), _) => {
                return Err(Failure::usage(format!(
                    "`{}` is a Redis Sentinel, not a Redis server: pass it with --sentinel (and --sentinel-service), and distlock reads the master it names",
                    explain.shown
                )))
            }
            (Some(Mode::Standalone), true) => {
                return Err(Failure::usage(format!(
                    "`{}` is not a Redis Cluster node (it runs standalone): pass it with --url",
                    explain.shown
                )))
            }
            (Some(Mode::Cluster), _) | (None, true) => {
                // The node reached first, then the other seeds.
                let seeds: Vec<String> = std::iter::once(url.to_owned())
                    .chain(target.urls.iter().filter(|u| *u != url).cloned())
                    .collect();
                let connect = cluster::connect(
                    &seeds,
                    target.connect_timeout,
                    target.response_timeout,
                );
                match tokio::time::timeout(within, connect).await {
                    Ok(Ok(conn)) => Connection::Cluster(conn),
                    Ok(Err(error)) if !error.is_timeout() => return Err(explain.error(&error)),
                    Ok(Err(_)) | Err(_) => return Err(no_answer()),
                }
            }
            _ => Connection::Server(conn),
        };
        Ok(Server {
            replica: hello.is_some_and(|h| h.replica) && !conn.is_cluster(),
            conn,
            client,
            explain,
        })
    }
}

impl Explain {
    /// The URL (or node) its messages name, the password hidden.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    /// The same explanations, of what `node` (a cluster's master) answered.
    pub(crate) fn for_node(&self, node: &Node) -> Explain {
        Explain {
            shown: node.to_string(),
            timeout: self.timeout,
        }
    }

    /// Runs Redis calls, explaining their failure. Each command is bounded by the connection's
    /// response timeout, so a scan of many pages is not cut short as a whole.
    pub(crate) async fn call<T>(
        &self,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, Failure> {
        call.await.map_err(|error| self.error(&error))
    }

    fn timed_out(&self) -> Failure {
        Failure::failed(format!(
            "Redis at {} did not answer within {} (--timeout, DISTLOCK_RESPONSE_TIMEOUT)",
            self.shown,
            seconds(self.timeout)
        ))
    }

    /// What `error` means, in one line.
    pub(crate) fn error(&self, error: &RedisError) -> Failure {
        let url = &self.shown;
        let detail = error.detail().unwrap_or("").trim();
        let code = error.code().unwrap_or("");
        if code == "NOAUTH" {
            return Failure::failed(format!(
                "Redis at {url} requires a password: put it in the URL (redis://:PASSWORD@host:port/) in --url or DISTLOCK_URL"
            ));
        }
        if code == "WRONGPASS"
            || error.kind() == ErrorKind::AuthenticationFailed
            || detail.contains("WRONGPASS")
        {
            return Failure::failed(format!(
                "Redis at {url} refused the user name or password in the URL (WRONGPASS)"
            ));
        }
        // A refusal of the command itself, or of one a script runs (Redis 7.0, then 7.2).
        if code == "NOPERM"
            || code == "ERR"
                && (detail.starts_with("The user executing the script can't")
                    || detail.starts_with("ACL failure in script"))
        {
            // Without the script's hash and line it ends with.
            let detail = match detail.rfind(" script: ") {
                Some(at) if detail[at..].contains(", on @") => &detail[..at],
                _ => detail,
            };
            return Failure::failed(format!(
                "Redis at {url} does not permit this for the URL's user: {detail} (docs/cli.md: the permissions each command needs)"
            ));
        }
        if code == "MOVED" || code == "ASK" {
            return Failure::failed(format!(
                "Redis at {url} answered with a redirect ({code} {detail}): another node serves that slot (the Cluster's slots moved while it was read: run the command again)"
            ));
        }
        if code == "CLUSTERDOWN" || code == "TRYAGAIN" {
            return Failure::failed(format!(
                "the Redis Cluster at {url} cannot serve this now ({code} {detail}): run the command again once it is healthy"
            ));
        }
        if error.is_timeout() {
            return self.timed_out();
        }
        if error.is_connection_refusal() {
            return Failure::failed(format!(
                "cannot connect to Redis at {url}: connection refused (is the server running, on that port?)"
            ));
        }
        if error.is_io_error() || error.is_connection_dropped() {
            let io = std::error::Error::source(error)
                .map(|s| s.to_string())
                .unwrap_or_else(|| first_line(&error.to_string()));
            return Failure::failed(format!("cannot talk to Redis at {url}: {io}"));
        }
        let what = if detail.is_empty() {
            error.category().to_owned()
        } else {
            format!("{}: {}", error.category(), first_line(detail))
        };
        Failure::failed(format!("Redis at {url} answered with an error: {what}"))
    }
}

/// The first refusal (`NOPERM`: the user may not run the command or touch its key) among the
/// replies of a pipeline whose error replies stay in place, as an error: a lock read refused
/// never shows the lock as free or as something else.
pub(crate) fn refused(replies: &[Value]) -> RedisResult<()> {
    match replies.iter().find_map(|reply| match reply {
        Value::ServerError(e) if e.code() == "NOPERM" => Some(e.clone()),
        _ => None,
    }) {
        Some(refusal) => Err(refusal.into()),
        None => Ok(()),
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_owned()
}

/// `2s`, `1.5s`.
pub(crate) fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::{encode, Explain};
    use distlock::redis;
    use std::time::Duration;

    #[test]
    fn a_refusal_is_one_line_in_redis_words() {
        let explain = Explain {
            shown: "redis://cli:***@127.0.0.1:6379/".to_owned(),
            timeout: Duration::from_secs(2),
        };
        let refusals = [
            ("NOPERM", "this user has no permissions to run the 'scan' command", "this user has no permissions to run the 'scan' command"),
            ("ERR", "The user executing the script can't run this command or subcommand script: 0f3a, on @user_script:9.", "The user executing the script can't run this command or subcommand"),
            ("ERR", "ACL failure in script: User cli has no permissions to run the 'zrem' command script: 0f3a, on @user_script:7.", "ACL failure in script: User cli has no permissions to run the 'zrem' command"),
        ];
        for (code, detail, said) in refusals {
            let error = redis::make_extension_error(code.to_owned(), Some(detail.to_owned()));
            let message = explain.error(&error).message;
            assert_eq!(
                message,
                format!("Redis at redis://cli:***@127.0.0.1:6379/ does not permit this for the URL's user: {said} (docs/cli.md: the permissions each command needs)")
            );
        }
    }

    #[test]
    fn credentials_are_percent_encoded() {
        assert_eq!(encode("app"), "app");
        assert_eq!(encode("p@ss/w:rd#1"), "p%40ss%2Fw%3Ard%231");
        let url = format!(
            "redis://{}:{}@127.0.0.1:6379/",
            encode("a b"),
            encode("p@ss")
        );
        let info = distlock::redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
        assert_eq!(info.redis_settings().username(), Some("a b"));
        assert_eq!(info.redis_settings().password(), Some("p@ss"));
    }
}
