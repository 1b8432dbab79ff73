//! TLS for the HTTP door: the certificate chain and key read (as regular, capped files)
//! into a rustls acceptor with ring.

use std::path::PathBuf;
use std::sync::Arc;

use super::TlsFiles;
use crate::frontends::mcp::McpServeError;

pub(super) fn tls_acceptor(files: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, McpServeError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |path: &PathBuf, what: &'static str| {
        crate::sys::safe_open::read_capped(path, 1024 * 1024).map_err(|e| McpServeError::Tls {
            reason: format!("could not read the {what} {}: {e}", path.display()),
        })
    };
    let cert_pem = read(&files.cert, "certificate")?;
    let key_pem = read(&files.key, "private key")?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| McpServeError::Tls {
            reason: format!(
                "{} holds no readable PEM certificate: {e}",
                files.cert.display()
            ),
        })?;
    if certs.is_empty() {
        return Err(McpServeError::Tls {
            reason: format!(
                "{} holds no certificate (expected -----BEGIN CERTIFICATE-----)",
                files.cert.display()
            ),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| McpServeError::Tls {
        reason: format!(
            "{} holds no readable PEM private key: {e}",
            files.key.display()
        ),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| McpServeError::Tls {
            reason: format!(
                "the certificate {} and key {} do not make a TLS configuration: {e}",
                files.cert.display(),
                files.key.display()
            ),
        })?;
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
