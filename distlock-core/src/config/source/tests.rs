//! The settings read from the environment and from files, and their errors.

use std::ffi::OsString;

use super::env::{from_vars, parse_flag};
use super::*;

fn env(vars: &[(&str, &str)]) -> Result<Config, Error> {
    from_vars(
        vars.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    )
}

fn reason(result: Result<Config, Error>) -> String {
    match result {
        Err(Error::InvalidConfig { reason }) => reason,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn the_server_check_is_a_period_or_off() {
    let url = ("DISTLOCK_URL", "redis://127.0.0.1:6379/");
    let default = env(&[url]).unwrap();
    assert_eq!(default.server_check, Some(Duration::from_millis(250)));
    let every = env(&[url, ("DISTLOCK_SERVER_CHECK", "100ms")]).unwrap();
    assert_eq!(every.server_check, Some(Duration::from_millis(100)));
    let off = env(&[url, ("DISTLOCK_SERVER_CHECK", "off")]).unwrap();
    assert_eq!(off.server_check, None);
    let short = reason(env(&[url, ("DISTLOCK_SERVER_CHECK", "5ms")]));
    assert!(short.contains("at least 10 ms"), "{short}");
    let bad = reason(env(&[url, ("DISTLOCK_SERVER_CHECK", "often")]));
    assert!(
        bad.contains("DISTLOCK_SERVER_CHECK=`often`") && bad.contains("`off`"),
        "{bad}"
    );
}

#[test]
fn every_variable_sets_its_builder_method() {
    let config = env(&[
        ("DISTLOCK_URL", "redis://:pw@127.0.0.1:6380/1"),
        ("DISTLOCK_KEY_PREFIX", "payments-lock"),
        ("DISTLOCK_DEFAULT_TTL", "10s"),
        ("DISTLOCK_CONNECT_TIMEOUT", "1.5s"),
        ("DISTLOCK_RESPONSE_TIMEOUT", "500ms"),
        ("DISTLOCK_FENCE_RETENTION", "1h"),
        ("DISTLOCK_RENEW_BATCH_SIZE", "64"),
        ("DISTLOCK_MAX_HOLD", "1m30s"),
        ("DISTLOCK_REQUIRE_NOEVICTION", "yes"),
        ("PATH", "/usr/bin"),
        ("DISTLOCK_SERVICE_HOST", "10.0.0.1"),
    ])
    .unwrap();
    assert_eq!(config.url, "redis://:pw@127.0.0.1:6380/1");
    assert_eq!(config.key_prefix, "payments-lock");
    assert_eq!(config.default_ttl, Duration::from_secs(10));
    assert_eq!(config.connect_timeout, Duration::from_millis(1500));
    assert_eq!(config.response_timeout, Duration::from_millis(500));
    assert_eq!(config.fence_retention, Duration::from_secs(3600));
    assert_eq!(config.renew_batch, 64);
    assert_eq!(config.max_hold, Some(Duration::from_secs(90)));
    assert!(config.require_noeviction);
}

#[test]
fn deployments_and_replica_acknowledgement() {
    let cluster = env(&[
        (
            "DISTLOCK_CLUSTER_NODES",
            "redis://10.0.0.1:7000, redis://10.0.0.2:7000,",
        ),
        ("DISTLOCK_MIN_REPLICAS", "1"),
        ("DISTLOCK_REPLICA_TIMEOUT", "200ms"),
    ])
    .unwrap();
    let built = Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(200));
    assert_eq!(format!("{cluster:?}"), format!("{built:?}"));

    let sentinel = env(&[
        (
            "DISTLOCK_SENTINELS",
            "redis://10.0.0.1:26379,redis://10.0.0.2:26379",
        ),
        ("DISTLOCK_SENTINEL_SERVICE", "locks"),
        ("DISTLOCK_SENTINEL_MASTER_PASSWORD", "hunter2"),
    ])
    .unwrap();
    assert_eq!(
        sentinel.sentinels,
        ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"]
    );
    assert_eq!(sentinel.sentinel_service, "locks");
    assert_eq!(
        sentinel.sentinel_master_auth,
        Some((String::new(), "hunter2".to_owned()))
    );
    assert!(!format!("{sentinel:?}").contains("hunter2"));
    let with_user = env(&[
        ("DISTLOCK_SENTINELS", "redis://10.0.0.1:26379"),
        ("DISTLOCK_SENTINEL_SERVICE", "locks"),
        ("DISTLOCK_SENTINEL_MASTER_USERNAME", "app"),
        ("DISTLOCK_SENTINEL_MASTER_PASSWORD", "pw"),
    ])
    .unwrap();
    assert_eq!(
        with_user.sentinel_master_auth,
        Some(("app".to_owned(), "pw".to_owned()))
    );
}

#[test]
fn a_sentinel_address_map() {
    let sentinels = ("DISTLOCK_SENTINELS", "redis://10.0.0.1:26379");
    let service = ("DISTLOCK_SENTINEL_SERVICE", "locks");
    let mapped = env(&[
        sentinels,
        service,
        (
            "DISTLOCK_SENTINEL_ADDRESS_MAP",
            "10.0.0.5:6379=127.0.0.1:16379, 10.0.0.6:6379 = 127.0.0.1:16380",
        ),
    ])
    .unwrap();
    assert_eq!(
        mapped.sentinel_address_map,
        [
            ("10.0.0.5:6379".to_owned(), "127.0.0.1:16379".to_owned()),
            ("10.0.0.6:6379".to_owned(), "127.0.0.1:16380".to_owned())
        ]
    );
    let not_a_pair = reason(env(&[
        sentinels,
        service,
        ("DISTLOCK_SENTINEL_ADDRESS_MAP", "10.0.0.5:6379"),
    ]));
    assert!(
        not_a_pair.contains("is not `host:port=host:port`"),
        "{not_a_pair}"
    );
    let twice = reason(env(&[
        sentinels,
        service,
        ("DISTLOCK_SENTINEL_ADDRESS_MAP", "h:1=a:1,h:1=b:1"),
    ]));
    assert!(twice.contains("`h:1` is mapped twice"), "{twice}");
    let bad = reason(env(&[
        sentinels,
        service,
        ("DISTLOCK_SENTINEL_ADDRESS_MAP", "h:1=nowhere"),
    ]));
    assert!(bad.contains("`nowhere` is not a `host:port`"), "{bad}");
    let elsewhere = reason(env(&[
        ("DISTLOCK_URL", "redis://127.0.0.1/"),
        ("DISTLOCK_SENTINEL_ADDRESS_MAP", "h:1=a:1"),
    ]));
    assert!(
        elsewhere.contains("DISTLOCK_SENTINEL_ADDRESS_MAP is set, but DISTLOCK_SENTINELS is not"),
        "{elsewhere}"
    );
}

#[test]
fn one_place_for_redis() {
    let url = ("DISTLOCK_URL", "redis://127.0.0.1/");
    let nodes = ("DISTLOCK_CLUSTER_NODES", "redis://127.0.0.1:7000");
    let sentinels = ("DISTLOCK_SENTINELS", "redis://127.0.0.1:26379");
    let service = ("DISTLOCK_SENTINEL_SERVICE", "locks");
    let message = reason(env(&[url, nodes]));
    assert!(message.contains("only one of DISTLOCK_URL"), "{message}");
    let message = reason(env(&[nodes, sentinels, service]));
    assert!(message.contains("only one of"), "{message}");
    let message = reason(env(&[sentinels]));
    assert!(
        message.starts_with("DISTLOCK_SENTINEL_SERVICE is missing"),
        "{message}"
    );
    let message = reason(env(&[url, service]));
    assert!(
        message.contains("DISTLOCK_SENTINEL_SERVICE is set, but DISTLOCK_SENTINELS is not"),
        "{message}"
    );
    let message = reason(env(&[
        sentinels,
        service,
        ("DISTLOCK_SENTINEL_MASTER_USERNAME", "app"),
    ]));
    assert!(message.contains("DISTLOCK_SENTINEL_MASTER_PASSWORD is not"));
    let message = reason(env(&[("DISTLOCK_SENTINELS", " , "), service]));
    assert!(message.contains("at least one sentinel"), "{message}");
    let message = reason(env(&[url, ("DISTLOCK_MIN_REPLICAS", "one")]));
    assert!(
        message.contains("expected a number of replicas"),
        "{message}"
    );
    let message = reason(env(&[url, ("DISTLOCK_MIN_REPLICAS", "5000")]));
    assert!(
        message.contains("min_replicas must be at most"),
        "{message}"
    );
    let message = reason(env(&[url, ("DISTLOCK_REPLICA_TIMEOUT", "0s")]));
    assert!(
        message.starts_with("DISTLOCK_REPLICA_TIMEOUT=`0s`"),
        "{message}"
    );
}

#[test]
fn a_redlock_quorum() {
    let masters = [
        "redis://:pw-a@10.0.0.1:6379/",
        "redis://10.0.0.2:6379/",
        "redis://:pw-c@10.0.0.3:6380/",
    ];
    let config = env(&[
        (
            "DISTLOCK_REDLOCK_MASTERS",
            &format!(" {}, {} ,{},", masters[0], masters[1], masters[2]),
        ),
        ("DISTLOCK_RESPONSE_TIMEOUT", "300ms"),
    ])
    .unwrap();
    assert_eq!(config.redlock_masters, masters);
    let built = Config::redlock(masters).response_timeout(Duration::from_millis(300));
    let shown = format!("{config:?}");
    assert_eq!(shown, format!("{built:?}"));
    assert!(
        !shown.contains("pw-a") && !shown.contains("pw-c"),
        "{shown}"
    );
    assert!(shown.contains("redis://:***@10.0.0.1:6379/"), "{shown}");
}

#[test]
fn a_redlock_quorum_is_refused_next_to_another_deployment() {
    let masters = (
        "DISTLOCK_REDLOCK_MASTERS",
        "redis://:pw-a@10.0.0.1/,redis://:pw-b@10.0.0.2/",
    );
    for (other, value) in [
        ("DISTLOCK_CLUSTER_NODES", "redis://:pw-n@10.0.0.9:7000"),
        ("DISTLOCK_SENTINELS", "redis://:pw-n@10.0.0.9:26379"),
        ("DISTLOCK_URL", "redis://:pw-n@10.0.0.9/"),
    ] {
        let message = reason(env(&[masters, (other, value)]));
        assert!(
            message.starts_with(&format!(
                "DISTLOCK_REDLOCK_MASTERS is set together with {other}: a RedLock quorum"
            )),
            "{message}"
        );
        assert!(!message.contains("pw-"), "{message}");
    }
    let message = reason(env(&[masters, ("DISTLOCK_MIN_REPLICAS", "1")]));
    assert!(
        message.starts_with(
            "DISTLOCK_MIN_REPLICAS is set, but it does not apply to DISTLOCK_REDLOCK_MASTERS"
        ),
        "{message}"
    );
    assert!(env(&[masters, ("DISTLOCK_MIN_REPLICAS", "0")]).is_ok());
    let message = reason(env(&[("DISTLOCK_REDLOCK_MASTERS", " , ")]));
    assert!(message.contains("at least one master"), "{message}");
    let message = reason(env(&[(
        "DISTLOCK_REDLOCK_MASTERS",
        "redis://10.0.0.1/,redis://10.0.0.1/",
    )]));
    assert!(message.contains("the same master twice"), "{message}");
}

#[test]
fn unset_variables_keep_the_defaults() {
    let config = env(&[("DISTLOCK_URL", "redis://127.0.0.1/")]).unwrap();
    let defaults = Config::new("redis://127.0.0.1/");
    assert_eq!(format!("{config:?}"), format!("{defaults:?}"));
}

#[test]
fn bad_values_name_their_variable() {
    let message = reason(env(&[]));
    assert!(
        message.contains("DISTLOCK_URL is missing: the Redis URL is required (or DISTLOCK_CLUSTER_NODES, or DISTLOCK_SENTINELS with DISTLOCK_SENTINEL_SERVICE, or DISTLOCK_REDLOCK_MASTERS)"),
        "{message}"
    );
    let url = ("DISTLOCK_URL", "redis://127.0.0.1/");
    let message = reason(env(&[url, ("DISTLOCK_DEFAULT_TTL", "10")]));
    assert!(
        message.starts_with("DISTLOCK_DEFAULT_TTL=`10`: not a duration"),
        "{message}"
    );
    let message = reason(env(&[url, ("DISTLOCK_RESPONSE_TIMEOUT", "250us")]));
    assert!(message.contains("millisecond"), "{message}");
    let message = reason(env(&[url, ("DISTLOCK_RENEW_BATCH_SIZE", "-1")]));
    assert!(message.contains("positive integer"), "{message}");
    let message = reason(env(&[url, ("DISTLOCK_REQUIRE_NOEVICTION", "maybe")]));
    assert!(message.contains("`true` or `false`"), "{message}");
}

#[test]
fn values_are_validated_like_the_builder() {
    let url = ("DISTLOCK_URL", "redis://127.0.0.1/");
    for (var, value, builder) in [
        (
            "DISTLOCK_KEY_PREFIX",
            "a{b}",
            Config::new(url.1).key_prefix("a{b}"),
        ),
        (
            "DISTLOCK_DEFAULT_TTL",
            "50ms",
            Config::new(url.1).default_ttl(Duration::from_millis(50)),
        ),
        (
            "DISTLOCK_DEFAULT_TTL",
            "31d",
            Config::new(url.1).default_ttl(Duration::from_secs(31 * 86_400)),
        ),
        (
            "DISTLOCK_FENCE_RETENTION",
            "31d",
            Config::new(url.1).fence_retention(Duration::from_secs(31 * 86_400)),
        ),
        (
            "DISTLOCK_RENEW_BATCH_SIZE",
            "0",
            Config::new(url.1).renew_batch_size(0),
        ),
    ] {
        let from_env = env(&[url, (var, value)]).unwrap_err().to_string();
        let from_builder = builder.validate().unwrap_err().to_string();
        assert_eq!(from_env, from_builder, "{var}={value}");
    }
}

#[test]
fn flags() {
    for (text, flag) in [
        ("TRUE", true),
        ("1", true),
        ("on", true),
        ("No", false),
        ("0", false),
    ] {
        assert_eq!(parse_flag(text), Some(flag), "{text}");
    }
    assert_eq!(parse_flag("2"), None);
}

#[cfg(unix)]
#[test]
fn a_variable_that_is_not_unicode_is_an_error() {
    use std::os::unix::ffi::OsStringExt;
    let vars = [
        (OsString::from("DISTLOCK_URL"), OsString::from("redis://h/")),
        (
            OsString::from("DISTLOCK_KEY_PREFIX"),
            OsString::from_vec(vec![0xff, 0xfe]),
        ),
    ];
    assert!(reason(from_vars(vars)).contains("DISTLOCK_KEY_PREFIX is not valid Unicode"));
}
