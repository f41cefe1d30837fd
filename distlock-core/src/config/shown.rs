//! What a configuration shows of itself, for logs and errors: its `Debug` and its URL, never a
//! password.

use std::fmt;

use crate::config::options::Config;
use crate::config::redact::redact_url;

impl Config {
    /// The URL with any password replaced by `***`, safe for logs and errors.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("url", &self.redacted_url());
        if !self.cluster_nodes.is_empty() {
            let nodes: Vec<String> = self.cluster_nodes.iter().map(|n| redact_url(n)).collect();
            d.field("cluster_nodes", &nodes);
        }
        if !self.redlock_masters.is_empty() {
            let masters: Vec<String> = self.redlock_masters.iter().map(|n| redact_url(n)).collect();
            d.field("redlock_masters", &masters);
        }
        if !self.sentinels.is_empty() {
            let sentinels: Vec<String> = self.sentinels.iter().map(|n| redact_url(n)).collect();
            d.field("sentinels", &sentinels)
                .field("sentinel_service", &self.sentinel_service)
                .field(
                    "sentinel_master_auth",
                    &self
                        .sentinel_master_auth
                        .as_ref()
                        .map(|(user, _)| format!("{user}:***")),
                );
            if !self.sentinel_address_map.is_empty() {
                d.field("sentinel_address_map", &self.sentinel_address_map);
            }
        }
        d.field("key_prefix", &self.key_prefix)
            .field("default_ttl", &self.default_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("fence_retention", &self.fence_retention)
            .field("renew_batch", &self.renew_batch)
            .field("server_check", &self.server_check)
            .field("max_hold", &self.max_hold)
            .field("require_noeviction", &self.require_noeviction)
            .field("min_replicas", &self.min_replicas)
            .field("replica_timeout", &self.replica_timeout);
        d.field(
            "tls_root_certificates",
            &self.tls_root_certificates.as_ref().map(|_| "<set>"),
        )
        .field(
            "tls_client_certificate",
            &self.tls_client_certificate.as_ref().map(|_| "<set>"),
        );
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let c = Config::new("redis://alice:hunter2@10.0.0.1:6380/2?protocol=resp3");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("redis://alice:***@10.0.0.1:6380/2"),
            "{shown}"
        );
        let only_pass = format!("{:?}", Config::new("redis://:s3cret@host/"));
        assert!(!only_pass.contains("s3cret") && only_pass.contains("redis://:***@host/"));
        let bare = format!("{:?}", Config::new("rediss://token@host"));
        assert!(!bare.contains("token"), "{bare}");
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
        // An `@` the parse did not read as user info: only the scheme is shown.
        assert_eq!(redact_url("redis://h/?x=a@b"), "redis://***@b");
    }

    #[test]
    fn debug_never_shows_sentinel_passwords() {
        let c = Config::sentinel(["redis://:sentinel-pw@10.0.0.1:26379"], "locks")
            .sentinel_master_auth("app", "master-pw");
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("sentinel-pw") && !shown.contains("master-pw"),
            "{shown}"
        );
        assert!(shown.contains("redis://:***@10.0.0.1:26379"), "{shown}");
        assert!(shown.contains("sentinel_service: \"locks\""), "{shown}");
        let misplaced = Config::new("redis://h/")
            .sentinel_master_auth("", "pw")
            .validate();
        assert!(misplaced
            .unwrap_err()
            .to_string()
            .contains("Config::sentinel` only"));
    }
}
