//! A RedLock quorum over TLS only (feature `tls`): three `redis-server --tls-port` masters that
//! ask for client certificates, a CA and certificates made here (rcgen);
//! `Config::redlock(["rediss://…", …])` with `tls_root_certificates` and
//! `tls_client_certificate`: acquire, wait, renew across several ttls, release and fencing
//! tokens, each on every master.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use distlock::{Client, Config, Error};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use redis::AsyncCommands;
use testkit::{RedisServer, ServerOptions, TlsFiles};

/// A throwaway PKI: a CA, a server certificate for 127.0.0.1 (served by every master) and a
/// client certificate, as PEM files in a temporary folder (removed on drop).
struct Pki {
    dir: PathBuf,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl Pki {
    fn new() -> Pki {
        let dir = std::env::temp_dir().join(format!("distlock-redlock-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "distlock redlock test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let leaf = |names: Vec<String>, cn: &str| {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(names).expect("params");
            params.distinguished_name.push(DnType::CommonName, cn);
            let cert = params.signed_by(&key, &ca).expect("signed certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            "distlock redlock master",
        );
        let (client_cert_pem, client_key_pem) = leaf(Vec::new(), "distlock redlock client");
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("write");
        write("ca.crt", &ca.pem());
        write("server.crt", &server_cert);
        write("server.key", &server_key);
        Pki {
            ca_pem: ca.pem(),
            client_cert_pem,
            client_key_pem,
            dir,
        }
    }

    /// A TLS-only master that refuses clients without a certificate of this CA.
    fn master(&self) -> RedisServer {
        RedisServer::start_with(ServerOptions {
            tls: Some(TlsFiles {
                cert: self.dir.join("server.crt"),
                key: self.dir.join("server.key"),
                ca: self.dir.join("ca.crt"),
                auth_clients: true,
            }),
            ..Default::default()
        })
    }

    /// A quorum over `masters` that trusts this CA and presents the client certificate.
    fn config(&self, masters: &[RedisServer]) -> Config {
        Config::redlock(masters.iter().map(RedisServer::url))
            .tls_root_certificates(self.ca_pem.as_bytes())
            .tls_client_certificate(
                self.client_cert_pem.as_bytes(),
                self.client_key_pem.as_bytes(),
            )
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
    }

    /// A plain redis-rs connection to `master` over TLS, for assertions.
    async fn conn(&self, master: &RedisServer) -> redis::aio::MultiplexedConnection {
        let certificates = redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client_cert_pem.as_bytes().to_vec(),
                client_key: self.client_key_pem.as_bytes().to_vec(),
            }),
            root_cert: Some(self.ca_pem.as_bytes().to_vec()),
        };
        redis::Client::build_with_tls(master.url(), certificates)
            .expect("TLS client")
            .get_multiplexed_async_connection()
            .await
            .expect("TLS connection to a master")
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How many masters hold lock `name` (for anyone).
async fn holding(pki: &Pki, masters: &[RedisServer], name: &str) -> usize {
    let mut n = 0;
    for master in masters {
        let value: Option<String> = pki
            .conn(master)
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
    let pki = Pki::new();
    let masters: Vec<RedisServer> = (0..3).map(|_| pki.master()).collect();
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
    let a: Client = pki.config(&masters).connect().await.expect("TLS quorum");
    let b: Client = pki.config(&masters).connect().await.expect("TLS quorum");

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
    let held = a
        .lock("tls:wait")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = b
            .lock("tls:wait")
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
        "taken after the release, not the ttl: {waited:?}"
    );
    assert_eq!(holding(&pki, &masters, "tls:wait").await, 0);
}
