//! TLS to PostgreSQL with rustls, for the SQL connections (a [`MakeTlsConnect`] for
//! tokio-postgres) and the replication stream (a [`pgwire_replication::TlsConfig`]), from
//! the same libpq-style settings.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, unverified; plaintext otherwise.
    Prefer,
    /// TLS, unverified (verified as `verify-ca` when a root certificate is given, as libpq).
    Require,
    /// TLS, the chain verified against the root certificates; any host name.
    VerifyCa,
    /// TLS, the chain and the host name verified.
    VerifyFull,
}

impl SslMode {
    /// Parses libpq's spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// libpq's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// The TLS settings of a database URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// The mode in effect (after defaults and libpq's `require` + root certificate rule).
    pub mode: SslMode,
    /// Whether the URL named no mode, so [`Tls::mode`] is this project's default.
    pub defaulted: bool,
    /// `sslrootcert`: trusted CA certificates (PEM); Mozilla's roots when unset.
    pub root_cert: Option<PathBuf>,
    /// `sslcert`: the client's certificate chain (PEM), for servers that ask for one.
    pub client_cert: Option<PathBuf>,
    /// `sslkey`: the client's private key (PEM).
    pub client_key: Option<PathBuf>,
}

impl Tls {
    /// The tokio-postgres mode: whether to ask for TLS, and whether to fall back.
    pub fn driver_mode(&self) -> tokio_postgres::config::SslMode {
        match self.mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }

    /// The connector of SQL connections.
    pub fn connector(&self) -> Result<RustlsConnect, TlsError> {
        if self.mode == SslMode::Disable {
            return Ok(RustlsConnect { config: None });
        }
        Ok(RustlsConnect {
            config: Some(Arc::new(self.client_config()?)),
        })
    }

    /// The same settings for the replication stream.
    pub fn replication(&self) -> pgwire_replication::TlsConfig {
        use pgwire_replication::config::SslMode as Mode;
        pgwire_replication::TlsConfig {
            mode: match self.mode {
                SslMode::Disable => Mode::Disable,
                SslMode::Prefer => Mode::Prefer,
                SslMode::Require => Mode::Require,
                SslMode::VerifyCa => Mode::VerifyCa,
                SslMode::VerifyFull => Mode::VerifyFull,
            },
            ca_pem_path: self.root_cert.clone(),
            sni_hostname: None,
            client_cert_pem_path: self.client_cert.clone(),
            client_key_pem_path: self.client_key.clone(),
        }
    }

    fn client_config(&self) -> Result<ClientConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|error| TlsError::new("TLS versions", error))?;
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match self.mode {
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let roots = self.roots()?;
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|error| TlsError::new("sslrootcert", error))?;
                if self.mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(AnyName(webpki))
                }
            }
            _ => Arc::new(Unverified(algorithms)),
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(certificates(cert)?, private_key(key)?)
                .map_err(|error| TlsError::new("sslcert/sslkey", error)),
            (None, None) => Ok(builder.with_no_client_auth()),
            _ => Err(TlsError::new(
                "sslcert/sslkey",
                "a client certificate needs both sslcert and sslkey",
            )),
        }
    }

    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        match &self.root_cert {
            Some(path) => {
                let (added, _) = roots.add_parsable_certificates(certificates(path)?);
                if added == 0 {
                    return Err(TlsError::new(
                        "sslrootcert",
                        format!("no CA certificate in {}", path.display()),
                    ));
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        Ok(roots)
    }
}

/// TLS settings that cannot work: a file that does not read, a key that does not fit.
#[derive(Debug, thiserror::Error)]
#[error("PostgreSQL TLS setting {setting}: {message}")]
pub struct TlsError {
    setting: &'static str,
    message: String,
}

impl TlsError {
    fn new(setting: &'static str, message: impl std::fmt::Display) -> Self {
        Self {
            setting,
            message: message.to_string(),
        }
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |error: &dyn std::fmt::Display| {
        TlsError::new("certificate file", format!("{}: {error}", path.display()))
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| read(&error))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| read(&error))?;
    if certificates.is_empty() {
        return Err(read(&"no PEM certificate in it"));
    }
    Ok(certificates)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    // The key's bytes never reach a message: only the path and the parser's complaint.
    PrivateKeyDer::from_pem_file(path)
        .map_err(|error| TlsError::new("sslkey", format!("{}: {error}", path.display())))
}

/// `verify-ca`: the chain must lead to a trusted root; the name is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
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
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
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

/// `prefer` and `require`: encrypted, but any certificate is accepted (libpq's meaning).
/// The handshake's signatures are still checked against the certificate presented.
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// tokio-postgres' TLS over rustls (what the `tokio-postgres-rustls` crate does, in the
/// few lines this project needs). Without a configuration it only ever says plaintext.
#[derive(Clone)]
pub struct RustlsConnect {
    config: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for RustlsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RustlsConnect")
            .field("tls", &self.config.is_some())
            .finish()
    }
}

impl MakeTlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnector;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsConnector> {
        // tokio-postgres asks for a connector whatever the mode: a failure here would fail
        // plaintext connections too, so everything is checked when TLS is really used.
        Ok(RustlsConnector {
            config: self.config.clone(),
            domain: domain.to_owned(),
        })
    }
}

/// One connection's TLS handshake.
#[derive(Debug)]
pub struct RustlsConnector {
    config: Option<Arc<ClientConfig>>,
    domain: String,
}

impl TlsConnect<Socket> for RustlsConnector {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let config = self.config.ok_or_else(|| {
                io::Error::other("TLS was asked for with sslmode=disable (a bug in the caller)")
            })?;
            let name = ServerName::try_from(self.domain.clone()).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{:?} is not a host name TLS can verify", self.domain),
                )
            })?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await?;
            Ok(RustlsStream(Box::new(stream)))
        })
    }
}

/// An encrypted connection to PostgreSQL.
#[derive(Debug)]
pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM channel binding (tls-server-end-point) is not offered: with verify-full the
        // certificate check already rules out a man in the middle.
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_libpq_spells_them() {
        for mode in ["disable", "prefer", "require", "verify-ca", "verify-full"] {
            assert_eq!(SslMode::parse(mode).unwrap().as_str(), mode);
        }
        assert_eq!(SslMode::parse("allow"), None);
        assert_eq!(SslMode::parse("VERIFY-FULL"), None);
    }

    #[test]
    fn a_missing_root_certificate_names_the_setting_and_the_file() {
        let tls = Tls {
            mode: SslMode::VerifyFull,
            defaulted: false,
            root_cert: Some("/nonexistent/root.crt".into()),
            client_cert: None,
            client_key: None,
        };
        let error = tls.connector().unwrap_err().to_string();
        assert!(error.contains("/nonexistent/root.crt"), "{error}");
        let half = Tls {
            mode: SslMode::Require,
            root_cert: None,
            client_cert: Some("/x.crt".into()),
            ..tls
        };
        assert!(half.connector().unwrap_err().to_string().contains("sslkey"));
    }
}
