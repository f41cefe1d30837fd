//! `rediss://` (feature `tls`) against a real `redis-server --tls-port`, with a CA, a server
//! certificate and a client certificate made here (`testkit::Pki`): acquire, wait and renew over TLS,
//! mutual TLS, and a server whose CA is not trusted.

use std::time::{Duration, Instant};

use distlock::{Config, Error};
use testkit::{LoneSentinel, Pki, RedisSentinel, RedisServer};

/// A configuration that trusts `pki`'s CA.
fn config(pki: &Pki, server: &RedisServer) -> Config {
    Config::new(server.url())
        .tls_root_certificates(pki.ca_pem.as_bytes())
        .connect_timeout(Duration::from_secs(2))
}

#[tokio::test]
async fn acquire_wait_and_renew_over_tls() {
    let pki = Pki::new("basic");
    let server = RedisServer::start_tls(pki.files(false));
    assert!(server.url().starts_with("rediss://"));
    let a = config(&pki, &server).connect().await.expect("TLS connect");
    let b = config(&pki, &server).connect().await.expect("TLS connect");

    // Renewal over TLS: a 300 ms lease held for 4 ttls.
    let renewed = a
        .lock("tls:renewed")
        .ttl(Duration::from_millis(300))
        .renew(true)
        .acquire()
        .await
        .expect("acquire over TLS");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    renewed.ensure_held().expect("renewed over TLS");
    let busy = b.lock("tls:renewed").acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    renewed.release().await.expect("release over TLS");

    // Waiting over TLS: the release message (pub/sub on the TLS subscriber connection) wakes
    // the waiter long before the holder's 30 s lease would.
    let waited = testkit::wait_for_release(&a, b, "tls:wait").await;
    assert!(
        waited < Duration::from_secs(3),
        "woken by the release, not the ttl: {waited:?}"
    );
}

#[tokio::test]
async fn mutual_tls_presents_the_client_certificate() {
    let pki = Pki::new("mtls");
    let server = RedisServer::start_tls(pki.files(true));
    let refused = config(&pki, &server).connect().await.unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Connect { .. } | Error::ConnectTimeout { .. }
        ),
        "{refused}"
    );
    let client = config(&pki, &server)
        .tls_client_certificate(
            pki.client_cert_pem.as_bytes(),
            pki.client_key_pem.as_bytes(),
        )
        .connect()
        .await
        .expect("mutual TLS connect");
    client
        .lock("mtls")
        .run(async {})
        .await
        .expect("lock over mutual TLS");
    let shown = format!("{:?}", client.config());
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

#[tokio::test]
async fn a_server_signed_by_an_untrusted_ca_is_refused_at_connect() {
    let pki = Pki::new("untrusted");
    let other = Pki::new("other");
    let server = RedisServer::start_tls(pki.files(false));
    let refused = config(&other, &server).connect().await.unwrap_err();
    assert!(
        matches!(refused, Error::Connect { .. }),
        "the certificate check fails the connect: {refused}"
    );
    // The system's trust store does not know the test CA either.
    let refused = Config::new(server.url()).connect().await.unwrap_err();
    assert!(matches!(refused, Error::Connect { .. }), "{refused}");
}

#[tokio::test]
async fn sentinel_over_tls() {
    // A TLS-only master and a TLS-only sentinel (which reaches the master over TLS too): the
    // client asks the sentinel over `rediss://` and reaches the master it names over TLS, with
    // the same trusted CA; locks and their release messages work there.
    let pki = Pki::new("sentinel");
    let master = RedisServer::start_tls(pki.files(false));
    let sentinel = LoneSentinel::start(&master, Some(&pki.files(false)));
    assert!(sentinel.url().starts_with("rediss://"));
    let config = || {
        Config::sentinel([sentinel.url()], RedisSentinel::SERVICE)
            .tls_root_certificates(pki.ca_pem.as_bytes())
            .connect_timeout(Duration::from_secs(2))
    };
    let (a, b) = (
        config().connect().await.expect("TLS through the sentinel"),
        config().connect().await.expect("TLS through the sentinel"),
    );
    let held = a
        .lock("tls:sentinel")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire on the master over TLS");
    assert!(b
        .lock("tls:sentinel")
        .acquire()
        .await
        .unwrap_err()
        .is_busy());
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = b
            .lock("tls:sentinel")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .expect("the waiter gets the lock");
        let waited = started.elapsed();
        guard.release().await.unwrap();
        waited
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let waited = waiter.await.unwrap();
    assert!(
        waited < Duration::from_secs(3),
        "woken by the release over TLS, not the ttl: {waited:?}"
    );

    // Without the CA the sentinel's certificate is not trusted: a typed connect error.
    let untrusted = Config::sentinel([sentinel.url()], RedisSentinel::SERVICE)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(untrusted, Error::Connect { .. }), "{untrusted}");
}
