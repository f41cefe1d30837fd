//! `Config` from configuration files (feature `serde`): TOML and JSON through serde, with human
//! durations, validated exactly like the builder.

use std::time::Duration;

use distlock::Config;

#[derive(serde::Deserialize)]
struct AppConfig {
    locks: Config,
}

#[test]
fn a_toml_file() {
    let app: AppConfig = toml::from_str(
        r#"
        [locks]
        url = "redis://:hunter2@10.0.0.1:6380/2"
        key_prefix = "payments-lock"
        default_ttl = "10s"
        connect_timeout = "1.5s"
        response_timeout = "500ms"
        fence_retention = "1h"
        renew_batch_size = 64
        max_hold = "1m30s"
        require_noeviction = true
        "#,
    )
    .unwrap();
    let built = Config::new("redis://:hunter2@10.0.0.1:6380/2")
        .key_prefix("payments-lock")
        .default_ttl(Duration::from_secs(10))
        .connect_timeout(Duration::from_millis(1500))
        .response_timeout(Duration::from_millis(500))
        .fence_retention(Duration::from_secs(3600))
        .renew_batch_size(64)
        .max_hold(Duration::from_secs(90))
        .require_noeviction(true);
    assert_eq!(format!("{:?}", app.locks), format!("{built:?}"));
}

#[test]
fn a_sentinel_deployment_in_toml() {
    let app: AppConfig = toml::from_str(
        r#"
        [locks]
        sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"]
        sentinel_service = "locks"
        sentinel_master_username = "app"
        sentinel_master_password = "hunter2"
        min_replicas = 1
        replica_timeout = "200ms"
        server_check = "100ms"

        [locks.sentinel_address_map]
        "10.0.0.5:6379" = "127.0.0.1:16379"
        "#,
    )
    .unwrap();
    let built = Config::sentinel(
        [
            "redis://10.0.0.1:26379",
            "redis://10.0.0.2:26379",
            "redis://10.0.0.3:26379",
        ],
        "locks",
    )
    .sentinel_master_auth("app", "hunter2")
    .min_replicas(1)
    .replica_timeout(Duration::from_millis(200))
    .server_check(Some(Duration::from_millis(100)))
    .sentinel_address_map([("10.0.0.5:6379", "127.0.0.1:16379")]);
    let shown = format!("{:?}", app.locks);
    assert_eq!(shown, format!("{built:?}"));
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn a_cluster_in_json() {
    let config: Config = serde_json::from_str(
        r#"{"cluster_nodes": ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"], "min_replicas": 1, "server_check": "off"}"#,
    )
    .unwrap();
    let built = Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
        .min_replicas(1)
        .server_check(None);
    assert_eq!(format!("{config:?}"), format!("{built:?}"));
}

#[test]
fn a_redlock_quorum_in_toml_and_json() {
    let masters = [
        "redis://:hunter2@10.0.0.1:6379/",
        "redis://:hunter3@10.0.0.2:6379/",
        "redis://:hunter4@10.0.0.3:6379/",
    ];
    let built = Config::redlock(masters).default_ttl(Duration::from_secs(10));
    let app: AppConfig = toml::from_str(
        r#"
        [locks]
        redlock_masters = [
            "redis://:hunter2@10.0.0.1:6379/",
            "redis://:hunter3@10.0.0.2:6379/",
            "redis://:hunter4@10.0.0.3:6379/",
        ]
        default_ttl = "10s"
        "#,
    )
    .unwrap();
    let shown = format!("{:?}", app.locks);
    assert_eq!(shown, format!("{built:?}"));
    assert!(shown.contains("redlock_masters"), "{shown}");
    assert!(!shown.contains("hunter"), "{shown}");
    let config: Config = serde_json::from_str(&format!(
        r#"{{"redlock_masters": {}, "default_ttl": "10s"}}"#,
        serde_json::to_string(&masters).unwrap()
    ))
    .unwrap();
    assert_eq!(format!("{config:?}"), format!("{built:?}"));
}

#[test]
fn a_redlock_quorum_is_refused_next_to_a_cluster_or_sentinel() {
    let masters = "redlock_masters = [\"redis://:hunter2@a/\", \"redis://:hunter2@b/\"]";
    let cases = [
        (
            format!("{masters}\ncluster_nodes = [\"redis://:hunter2@h:7000\"]"),
            "the field `redlock_masters` is set together with the field `cluster_nodes`: a RedLock quorum takes independent masters",
        ),
        (
            format!("{masters}\nsentinels = [\"redis://h:26379\"]\nsentinel_service = \"locks\""),
            "the field `redlock_masters` is set together with the field `sentinels`",
        ),
        (
            format!("{masters}\nurl = \"redis://h/\""),
            "the field `redlock_masters` is set together with the field `url`",
        ),
        (
            format!("{masters}\nmin_replicas = 1"),
            "the field `min_replicas` is set, but it does not apply to the field `redlock_masters`",
        ),
        ("redlock_masters = []".to_owned(), "at least one master"),
        (
            "redlock_masters = [\"redis://a/\", \"redis://a/\"]".to_owned(),
            "names the same master twice",
        ),
    ];
    for (text, expected) in cases {
        let err = toml::from_str::<Config>(&text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}\n=> {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

#[test]
fn one_place_for_redis() {
    let cases = [
        (
            "url = \"redis://h/\"\ncluster_nodes = [\"redis://h:7000\"]",
            "give only one of the field `url`, the field `cluster_nodes` and the field `sentinels`",
        ),
        (
            "sentinels = [\"redis://h:26379\"]",
            "the field `sentinel_service` is missing",
        ),
        (
            "url = \"redis://h/\"\nsentinel_service = \"locks\"",
            "the field `sentinel_service` is set, but the field `sentinels` is not",
        ),
        (
            "sentinels = []\nsentinel_service = \"locks\"",
            "at least one sentinel",
        ),
        ("url = \"redis://h/\"\nreplica_timeout = \"0s\"", "`0s`"),
    ];
    for (text, expected) in cases {
        let err = toml::from_str::<Config>(text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}\n=> {err}");
    }
}

#[test]
fn only_the_url_is_required() {
    let config: Config = serde_json::from_str(r#"{"url": "redis://127.0.0.1/"}"#).unwrap();
    assert_eq!(
        format!("{config:?}"),
        format!("{:?}", Config::new("redis://127.0.0.1/"))
    );
    let err = serde_json::from_str::<Config>("{}")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the field `url` is missing: the Redis URL is required (or the field `cluster_nodes`, or the field `sentinels` with the field `sentinel_service`, or the field `redlock_masters`)"),
        "{err}"
    );
}

#[test]
fn mistakes_are_named() {
    let cases = [
        ("default_ttl = 10", "expected a duration with its unit"),
        ("default_ttl = \"10\"", "`10`: not a duration"),
        ("response_timeout = \"250us\"", "millisecond"),
        ("ttl = \"10s\"", "unknown field `ttl`"),
        (
            "key_prefix = \"a{b}\"",
            "key prefix `a{b}` must be 1 to 128 bytes",
        ),
        ("default_ttl = \"50ms\"", "default_ttl"),
        (
            "renew_batch_size = 0",
            "renew_batch_size must be at least 1",
        ),
    ];
    for (line, expected) in cases {
        let text = format!("url = \"redis://h/\"\n{line}");
        let err = toml::from_str::<Config>(&text).unwrap_err().to_string();
        assert!(err.contains(expected), "{text}\n=> {err}");
    }
}

#[test]
fn validation_is_the_builders() {
    let from_file = toml::from_str::<Config>("url = \"redis://h/\"\ndefault_ttl = \"31d\"")
        .unwrap_err()
        .to_string();
    let from_builder = Config::new("redis://h/")
        .default_ttl(Duration::from_secs(31 * 86_400))
        .validate()
        .unwrap_err()
        .to_string();
    assert!(from_file.contains(&from_builder), "{from_file}");
}
