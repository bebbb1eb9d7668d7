//! How a PostgreSQL URL is read, and TLS with libpq's meanings.
//!
//! The `tokio-postgres` URL parser knows `sslmode=disable|prefer|require` only, and rejects
//! `verify-ca`, `verify-full` and `sslrootcert`, which are exactly what operators copy from their
//! provider's console. So the store takes `sslmode` and `sslrootcert` out of the URL's query
//! itself, hands the rest to `tokio-postgres`, and does the TLS through rustls (no system
//! OpenSSL) with a certificate check chosen the way libpq chooses it:
//!
//! | `sslmode` | TLS | certificate check |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | if the server offers it, else plaintext | none |
//! | `require` | always | none; with `sslrootcert`, the chain (as libpq does) |
//! | `verify-ca` | always | the chain, against `sslrootcert` or the system roots |
//! | `verify-full` | always | the chain and the host name |
//!
//! `sslrootcert=PATH` names a PEM file of trusted certificates, `sslrootcert=system` (or no
//! `sslrootcert`) the system's roots. Over a unix socket TLS is never used, whatever `sslmode`
//! says, as libpq does. `sslmode=allow` and client certificates (`sslcert`, `sslkey`) are not
//! supported and refused with an error that says so. Only the URL form
//! (`postgres://`/`postgresql://`) is accepted.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::Config;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::StoreError;

/// `sslmode` as libpq defines it (without `allow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it, unverified; plaintext otherwise.
    Prefer,
    /// TLS only, unverified (verified against `sslrootcert` when one is given).
    Require,
    /// TLS only, the certificate chain verified.
    VerifyCa,
    /// TLS only, the chain and the host name verified.
    VerifyFull,
}

/// Where trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootSource {
    /// The system's certificate store.
    System,
    /// A PEM file.
    File(PathBuf),
}

/// A parsed store URL: the `tokio-postgres` configuration and the TLS policy.
pub(crate) struct Target {
    pub(crate) config: Config,
    pub(crate) mode: TlsMode,
    pub(crate) roots: RootSource,
    /// Given explicitly (it turns `require` into a chain check, as in libpq).
    pub(crate) rootcert_given: bool,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("mode", &self.mode)
            .field("roots", &self.roots)
            .finish_non_exhaustive()
    }
}

fn config_error(reason: impl Into<String>) -> StoreError {
    StoreError::Config {
        reason: reason.into(),
    }
}

/// Parses a `postgres://` or `postgresql://` URL (see the module docs). Errors never repeat the
/// URL, which may hold a password.
pub(crate) fn parse_url(url: &str) -> Result<Target, StoreError> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let mut mode = TlsMode::Prefer;
    let mut roots = RootSource::System;
    let mut rootcert_given = false;
    let mut kept = Vec::new();
    for segment in query.split('&').filter(|s| !s.is_empty()) {
        let (raw_key, raw_value) = segment.split_once('=').unwrap_or((segment, ""));
        let key = decode(raw_key)?;
        let value = decode(raw_value)?;
        match key.as_str() {
            "sslmode" => mode = parse_mode(&value)?,
            "sslrootcert" => {
                rootcert_given = true;
                roots = if value == "system" {
                    RootSource::System
                } else {
                    RootSource::File(PathBuf::from(value))
                };
            }
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir" => {
                return Err(config_error(format!(
                    "the PostgreSQL URL sets {key}: client certificates and revocation lists are not supported"
                )));
            }
            _ => kept.push(segment),
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let mut config: Config = rest
        .parse()
        .map_err(|e| config_error(format!("unparsable PostgreSQL URL: {e}")))?;
    let hosts = config.get_hosts();
    let unix = hosts.iter().filter(|h| matches!(h, Host::Unix(_))).count();
    let all_unix = !hosts.is_empty() && unix == hosts.len();
    if unix > 0 && !all_unix && mode != TlsMode::Disable && mode != TlsMode::Prefer {
        return Err(config_error(
            "the PostgreSQL URL mixes unix sockets and TCP hosts with a TLS-requiring sslmode; TLS is never used over a unix socket",
        ));
    }
    config.ssl_mode(match mode {
        _ if all_unix => SslMode::Disable,
        TlsMode::Disable => SslMode::Disable,
        TlsMode::Prefer => SslMode::Prefer,
        TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
    });
    Ok(Target {
        config,
        mode,
        roots,
        rootcert_given,
    })
}

fn decode(raw: &str) -> Result<String, StoreError> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| config_error("the PostgreSQL URL has a query parameter that is not UTF-8"))
}

fn parse_mode(value: &str) -> Result<TlsMode, StoreError> {
    Ok(match value {
        "disable" => TlsMode::Disable,
        "prefer" => TlsMode::Prefer,
        "require" => TlsMode::Require,
        "verify-ca" => TlsMode::VerifyCa,
        "verify-full" => TlsMode::VerifyFull,
        "allow" => {
            return Err(config_error(
                "sslmode=allow is not supported; use prefer (TLS when the server offers it) or disable",
            ));
        }
        other => {
            return Err(config_error(format!(
                "unknown sslmode {other:?} (disable, prefer, require, verify-ca, verify-full)"
            )));
        }
    })
}

/// The check a TLS connection makes of the server's certificate.
enum Check {
    /// None (`prefer`, `require`): encryption without authentication, as libpq.
    Nothing,
    /// The chain against these roots, any host name.
    Chain(Arc<RootCertStore>),
    /// The chain and the host name.
    Full(Arc<RootCertStore>),
}

/// The rustls connector for `target`'s policy. Roots are loaded here, so a missing or empty
/// `sslrootcert` file is an error at open.
pub(crate) fn connector(target: &Target) -> Result<MakeRustlsConnect, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let check = match target.mode {
        TlsMode::Disable | TlsMode::Prefer => Check::Nothing,
        TlsMode::Require if !target.rootcert_given => Check::Nothing,
        TlsMode::Require | TlsMode::VerifyCa => Check::Chain(Arc::new(load_roots(&target.roots)?)),
        TlsMode::VerifyFull => Check::Full(Arc::new(load_roots(&target.roots)?)),
    };
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error(format!("TLS setup: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(NoCheck(provider)),
        Check::Chain(roots) => Arc::new(ChainOnly(webpki(roots, provider)?)),
        Check::Full(roots) => webpki(roots, provider)?,
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn webpki(
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, StoreError> {
    WebPkiServerVerifier::builder_with_provider(roots, provider)
        .build()
        .map_err(|e| config_error(format!("TLS setup: {e}")))
}

/// Trusted roots from a PEM file or the system store.
fn load_roots(source: &RootSource) -> Result<RootCertStore, StoreError> {
    let mut roots = RootCertStore::empty();
    match source {
        RootSource::File(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| config_error(format!("sslrootcert {}: {e}", path.display())))?;
            let (added, _ignored) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(config_error(format!(
                    "sslrootcert {}: no usable certificate in the file",
                    path.display()
                )));
            }
        }
        RootSource::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(config_error(
                    "no system root certificates were found; name the server's CA with sslrootcert=PATH",
                ));
            }
        }
    }
    Ok(roots)
}

/// No certificate check (libpq's `prefer` and `require`): the handshake signatures are still
/// verified, so the session is encrypted to whoever holds the presented key.
#[derive(Debug)]
struct NoCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain check without the host name (`verify-ca`). The WebPKI verifier checks the chain
/// before the name, so a name error means the chain passed.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssl(url: &str) -> SslMode {
        parse_url(url).unwrap().config.get_ssl_mode()
    }

    #[test]
    fn libpq_modes_map_onto_the_client_and_the_check() {
        let t = parse_url(
            "postgresql://u:pw@db.example:5432/buzz?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(t.mode, TlsMode::VerifyFull);
        assert_eq!(t.roots, RootSource::File(PathBuf::from("/etc/ca.pem")));
        assert_eq!(t.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(t.config.get_dbname(), Some("buzz"));
        assert_eq!(ssl("postgres://db/x"), SslMode::Prefer, "libpq's default");
        assert_eq!(ssl("postgres://db/x?sslmode=require"), SslMode::Require);
        assert_eq!(ssl("postgres://db/x?sslmode=disable"), SslMode::Disable);
        assert_eq!(
            parse_url("postgres://db/x?sslmode=verify-ca&sslrootcert=system")
                .unwrap()
                .roots,
            RootSource::System
        );
        // Other parameters pass through untouched, percent-encoding included.
        let t = parse_url("postgres://db/x?options=-csearch_path%3Dbuzz&sslmode=require").unwrap();
        assert_eq!(t.config.get_options(), Some("-csearch_path=buzz"));
    }

    #[test]
    fn unix_sockets_never_use_tls() {
        assert_eq!(
            ssl("postgresql://postgres@/postgres?host=/run/pg&sslmode=verify-full"),
            SslMode::Disable
        );
        assert!(parse_url("postgresql://u@db,%2Frun%2Fpg/x?sslmode=require").is_err());
    }

    #[test]
    fn unsupported_settings_are_refused_without_echoing_the_url() {
        for (url, says) in [
            ("postgres://u:hunter2@db/x?sslmode=allow", "allow"),
            (
                "postgres://u:hunter2@db/x?sslmode=strict",
                "unknown sslmode",
            ),
            (
                "postgres://u:hunter2@db/x?sslcert=/c.pem",
                "client certificates",
            ),
            ("postgres://u:hunter2@db/x?port=notaport", "unparsable"),
        ] {
            let err = parse_url(url).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(says), "{url}: {text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
    }

    #[test]
    fn a_missing_or_empty_root_file_is_an_error_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, b"").unwrap();
        for path in [dir.path().join("missing.pem"), empty] {
            let url = format!(
                "postgres://db/x?sslmode=verify-full&sslrootcert={}",
                path.display()
            );
            let Err(err) = connector(&parse_url(&url).unwrap()) else {
                panic!("{} was accepted", path.display());
            };
            assert!(err.to_string().contains("sslrootcert"), "{err}");
        }
    }
}
