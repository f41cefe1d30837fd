//! A RedLock quorum over TLS only (feature `tls`): three `redis-server --tls-port` masters that
//! ask for client certificates, a CA and certificates made here (`testkit::Pki`);
//! `Config::redlock(["rediss://…", …])` with `tls_root_certificates` and
//! `tls_client_certificate`: acquire, wait, renew across several ttls, release and fencing
//! tokens, each on every master.

use std::time::Duration;

use distlock::{Client, Config, Error};
use redis::AsyncCommands;
use testkit::{Pki, RedisServer};

/// A quorum over `masters` that trusts `pki`'s CA and presents its client certificate.
fn config(pki: &Pki, masters: &[RedisServer]) -> Config {
    Config::redlock(masters.iter().map(RedisServer::url))
        .tls_root_certificates(pki.ca_pem.as_bytes())
        .tls_client_certificate(
            pki.client_cert_pem.as_bytes(),
            pki.client_key_pem.as_bytes(),
        )
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
}

/// A plain redis-rs connection to `master` over TLS, for assertions.
async fn conn(pki: &Pki, master: &RedisServer) -> redis::aio::MultiplexedConnection {
    let certificates = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: pki.client_cert_pem.as_bytes().to_vec(),
            client_key: pki.client_key_pem.as_bytes().to_vec(),
        }),
        root_cert: Some(pki.ca_pem.as_bytes().to_vec()),
    };
    redis::Client::build_with_tls(master.url(), certificates)
        .expect("TLS client")
        .get_multiplexed_async_connection()
        .await
        .expect("TLS connection to a master")
}

/// How many masters hold lock `name` (for anyone).
async fn holding(pki: &Pki, masters: &[RedisServer], name: &str) -> usize {
    let mut n = 0;
    for master in masters {
        let value: Option<String> = conn(pki, master)
            .await
            .get(format!("distlock:{{{name}}}"))
            .await
            .unwrap();
        n += usize::from(value.is_some());
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_wait_renew_release_and_fence_over_tls_masters() {
    let pki = Pki::new("redlock");
    let masters: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_tls(pki.files(true)))
        .collect();
    assert!(masters.iter().all(|m| m.url().starts_with("rediss://")));
    // Without the client certificate, every master refuses the handshake: no lock.
    let outsider = Config::redlock(masters.iter().map(RedisServer::url))
        .tls_root_certificates(pki.ca_pem.as_bytes())
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await;
    // No master answers a client without a certificate: the connect fails, as it does
    // against one server, and no master grants anything.
    assert!(
        matches!(
            outsider,
            Err(Error::Connect { .. } | Error::ConnectTimeout { .. })
        ),
        "a client without a certificate connected: {:?}",
        outsider.err()
    );
    assert_eq!(holding(&pki, &masters, "tls:renewed").await, 0);
    let a: Client = config(&pki, &masters).connect().await.expect("TLS quorum");
    let b: Client = config(&pki, &masters).connect().await.expect("TLS quorum");

    // Renewal by majority over TLS: a 300 ms lease held for 4 ttls, on every master.
    let renewed = a
        .lock("tls:renewed")
        .ttl(Duration::from_millis(300))
        .renew(true)
        .fenced(true)
        .acquire()
        .await
        .expect("acquire over TLS masters");
    let first_token = renewed.token().expect("a fenced lock has a token");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    renewed.ensure_held().expect("renewed over TLS masters");
    assert_eq!(holding(&pki, &masters, "tls:renewed").await, 3);
    let busy = b.lock("tls:renewed").acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    renewed.release().await.expect("release over TLS masters");
    assert_eq!(holding(&pki, &masters, "tls:renewed").await, 0);

    // Fencing over TLS: the next holder's token is larger.
    let next = b.lock("tls:renewed").fenced(true).acquire().await.unwrap();
    let next_token = next.token().expect("a fenced lock has a token");
    assert!(next_token > first_token, "{next_token} after {first_token}");
    next.release().await.unwrap();

    // Waiting over TLS: the waiter gets the lock soon after the release, long before the
    // holder's 30 s lease would have run out.
    let waited = testkit::wait_for_release(&a, b, "tls:wait").await;
    assert!(
        waited < Duration::from_secs(3),
        "taken after the release, not the ttl: {waited:?}"
    );
    assert_eq!(holding(&pki, &masters, "tls:wait").await, 0);
}
