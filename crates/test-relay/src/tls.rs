//! TLS in front of the relay (`RelayConfig::tls`): a throw-away certificate authority and a
//! server certificate it signs for `localhost` and 127.0.0.1, made with `rcgen` when the relay
//! starts, served with `rustls` on the ring provider. A client trusts the relay by trusting the
//! CA ([`crate::TestRelay::ca_certificate_pem`]), as it would trust a public relay's issuer.

use std::net::Ipv4Addr;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

/// Why the relay's TLS identity could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen failed to make a key or a certificate.
    #[error("making the test certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the certificate or the key.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The acceptor the listener wraps connections in, and the CA that signed its certificate.
pub(crate) struct Identity {
    pub acceptor: TlsAcceptor,
    pub ca_pem: String,
}

impl Identity {
    /// A fresh CA and server certificate.
    pub(crate) fn generate() -> Result<Identity, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "buzz-test-relay test CA");
        let ca = ca_params.self_signed(&ca_key)?;
        let server_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["localhost".to_owned()])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(Ipv4Addr::LOCALHOST.into()));
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
        let server = params.signed_by(&server_key, &issuer)?;
        let chain = vec![
            CertificateDer::from(server.der().to_vec()),
            CertificateDer::from(ca.der().to_vec()),
        ];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
        Ok(Identity {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            ca_pem: ca.pem(),
        })
    }
}
