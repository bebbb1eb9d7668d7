//! TLS for the relay (`wss://`, `https://`): rustls on the ring provider, trusting the system's
//! certificate authorities (`rustls-native-certs`, which also reads `SSL_CERT_FILE` and
//! `SSL_CERT_DIR`, so an operator can name a private CA).

use std::sync::{Arc, OnceLock};

use rustls::RootCertStore;

/// Why no TLS client could be set up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsError {
    /// Not one certificate authority could be loaded.
    #[error(
        "no certificate authority could be loaded (SSL_CERT_FILE, SSL_CERT_DIR or the system's store): {0}"
    )]
    NoRoots(String),
    /// rustls refused the configuration.
    #[error("configuring TLS: {0}")]
    Config(String),
}

/// The client configuration, made once per process.
pub fn client_config() -> Result<Arc<rustls::ClientConfig>, TlsError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, TlsError>> = OnceLock::new();
    CONFIG.get_or_init(make_client_config).clone()
}

fn make_client_config() -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        let errors: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
        return Err(TlsError::NoRoots(if errors.is_empty() {
            "none found".into()
        } else {
            errors.join("; ")
        }));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| TlsError::Config(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}
