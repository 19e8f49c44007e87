//! Certificates a test makes for itself (rcgen): a private CA and a server certificate for
//! `localhost` and `127.0.0.1` signed by it, written as PEM files into a temp dir.

use std::path::PathBuf;

use leasehold::server::tls::TlsFiles;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
};
use tempfile::TempDir;

pub struct TestCerts {
    pub dir: TempDir,
}

impl TestCerts {
    /// A fresh CA (`ca.pem`) and a server certificate and key (`cert.pem`, `key.pem`).
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lh-certs")
            .tempdir()
            .expect("temp dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name = name("Leasehold test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("server params");
        // Not the CA's name: a certificate whose subject is its issuer reads as self-signed.
        params.distinguished_name = name("localhost");
        let cert = params.signed_by(&key, &ca).expect("server certificate");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write ca.pem");
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).expect("write cert.pem");
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).expect("write key.pem");
        Self { dir }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.dir.path().join("cert.pem"),
            key: self.dir.path().join("key.pem"),
        }
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}
