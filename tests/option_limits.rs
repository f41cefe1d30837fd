//! Every option with a limit is walked through all three ways of setting it — the builder
//! (`LockBuilder`), the client configuration (`Config`) and the attribute — and each refuses or
//! accepts exactly the same values: the limits are defined once (`distlock::MIN_TTL`,
//! `distlock::MAX_TTL`) and enforced identically.
//!
//! The attribute side: a literal is parsed by the same grammar as `parse_duration` and checked
//! against the same limits at compile time (the UI cases `ttl_too_short`, `ttl_too_long`,
//! `const_ttl_too_short` and the pass case `ttl_bounds` pin the messages); a `Duration`
//! constant goes through `__private::ttl_const`/`min_hold_const`, checked here directly.

use std::panic::catch_unwind;
use std::time::Duration;

use distlock::{Config, Error, MAX_TTL, MIN_TTL};
use testkit::RedisServer;

const MS: Duration = Duration::from_millis(1);

/// (as written in the attribute, the duration, accepted as a ttl?)
fn ttl_cases() -> Vec<(&'static str, Duration, bool)> {
    vec![
        ("99ms", MIN_TTL - MS, false),
        ("100ms", MIN_TTL, true),
        ("1.5s", Duration::from_millis(1500), true),
        ("720h", MAX_TTL, true),
        ("720h 1ms", MAX_TTL + MS, false),
    ]
}

fn is_invalid_config<T: std::fmt::Debug>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(Error::InvalidConfig { .. }))
}

#[tokio::test]
async fn ttl_limits_are_the_same_for_builder_config_and_attribute() {
    let server = RedisServer::start();
    let client = Config::new(server.url()).connect().await.unwrap();
    for (written, ttl, accepted) in ttl_cases() {
        // The attribute's grammar reads the literal as this duration...
        assert_eq!(distlock::parse_duration(written).unwrap(), ttl, "{written}");
        // ... and a constant is checked by the same limits.
        let as_const = catch_unwind(|| distlock::__private::ttl_const(ttl)).is_ok();
        assert_eq!(as_const, accepted, "ttl constant {ttl:?}");

        let built = client
            .lock(format!("limits:{written}"))
            .ttl(ttl)
            .acquire()
            .await;
        assert_eq!(built.is_ok(), accepted, "builder ttl {ttl:?}: {built:?}");
        if !accepted {
            assert!(is_invalid_config(&built), "{built:?}");
        }
        if let Ok(guard) = built {
            guard.release().await.unwrap();
        }

        let configured = Config::new(server.url()).default_ttl(ttl).validate();
        assert_eq!(configured.is_ok(), accepted, "default_ttl {ttl:?}");
    }
}

#[tokio::test]
async fn min_hold_and_fence_retention_share_the_upper_limit() {
    let server = RedisServer::start();
    let client = Config::new(server.url()).connect().await.unwrap();
    for (d, accepted) in [
        (MAX_TTL, true),
        (MAX_TTL + MS, false),
        (Duration::MAX, false),
    ] {
        let as_const = catch_unwind(|| distlock::__private::min_hold_const(d)).is_ok();
        assert_eq!(as_const, accepted, "min_hold constant {d:?}");
        let built = client.lock("limits:min_hold").min_hold(d).acquire().await;
        assert_eq!(built.is_ok(), accepted, "builder min_hold {d:?}: {built:?}");
        if let Ok(guard) = built {
            // Released early, it stays until the minimum: delete it for the next case.
            drop(guard);
            let mut conn = server.conn().await;
            let _: () = redis::cmd("DEL")
                .arg("distlock:{limits:min_hold}")
                .query_async(&mut conn)
                .await
                .unwrap();
        } else {
            assert!(is_invalid_config(&built), "{built:?}");
        }
        let retention = Config::new(server.url()).fence_retention(d).validate();
        assert_eq!(retention.is_ok(), accepted, "fence_retention {d:?}");
    }
}

#[tokio::test]
async fn wait_and_max_hold_accept_any_duration_and_max_means_forever() {
    let server = RedisServer::start();
    let client = Config::new(server.url()).connect().await.unwrap();
    for d in [MS, Duration::from_secs(3600), Duration::MAX] {
        assert_eq!(distlock::__private::wait_const(d), d);
        let guard = client
            .lock("limits:open")
            .wait(d)
            .max_hold(d)
            .renew(true)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("wait/max_hold {d:?}: {e}"));
        guard.release().await.unwrap();
        Config::new(server.url()).max_hold(d).validate().unwrap();
    }
}
