//! A throwaway PKI for the TLS tests: a CA, a server certificate for `127.0.0.1` and
//! `localhost` (every TLS server of a test serves it, and cluster nodes present it to their
//! peers) and a client certificate, made with rcgen and written as PEM files to a temporary
//! folder that is removed on drop.

use std::path::PathBuf;

use crate::server::TlsFiles;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// A CA with one server and one client certificate, as PEM (see the module docs).
pub struct Pki {
    dir: PathBuf,
    /// The CA certificate, to trust (`Config::tls_root_certificates`).
    pub ca_pem: String,
    /// The client certificate, for servers that ask for one (mutual TLS).
    pub client_cert_pem: String,
    /// The client certificate's private key.
    pub client_key_pem: String,
}

impl Pki {
    /// A new PKI; `tag` keeps the folders of one test process's PKIs apart.
    pub fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("distlock-pki-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("distlock test CA ({tag})"));
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
            "distlock test server",
        );
        let (client_cert_pem, client_key_pem) = leaf(Vec::new(), "distlock test client");
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

    /// The server side's files; `auth_clients`: ask clients for a certificate of this CA.
    pub fn files(&self, auth_clients: bool) -> TlsFiles {
        TlsFiles {
            cert: self.dir.join("server.crt"),
            key: self.dir.join("server.key"),
            ca: self.dir.join("ca.crt"),
            auth_clients,
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
