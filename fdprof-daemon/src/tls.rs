//! `--tls-cert` / `--tls-key`: the daemon serves HTTPS with rustls (ring), TLS 1.2 and 1.3.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use super::files::{self, Access};

/// The largest certificate chain or key file read.
const PEM_MAX: u64 = 1 << 20;

/// A TLS acceptor for the PEM certificate chain at `cert` and the key at `key`; a key must be
/// root's alone. The error is one line naming the file.
pub(crate) fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let read = |path: &Path, access| {
        files::read_text(path, access, PEM_MAX)
            .map_err(|e| format!("bad TLS file {}: {e}", path.display()))
    };
    let cert_pem = read(cert, Access::ReadableByAll)?;
    let key_pem = read(key, Access::OwnerOnly)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad TLS certificate {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "bad TLS certificate {}: no CERTIFICATE block",
            cert.display()
        ));
    }
    let key_der = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("bad TLS key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| {
            format!(
                "TLS certificate {} and key {}: {e}",
                cert.display(),
                key.display()
            )
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
