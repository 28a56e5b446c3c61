//! A web config's `tls_server_config` as a rustls server: its certificate and key, its
//! versions, suites and groups, and the client certificates it verifies against
//! `client_ca_file`, held to `client_allowed_sans` during the handshake (as the toolkit does), so
//! a client that fails them never sends a request.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::file::{ClientAuth, Tls, TlsVersion};
use crate::files::{self, Access};

/// The largest certificate or key file read.
const PEM_MAX: u64 = 1 << 20;

/// The server `t` describes, its files read now. One line naming the file or the key.
pub(super) fn server_config(t: &Tls) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(provider(t)?);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (t.min_version..=t.max_version).contains(v))
    .map(|(_, v)| v)
    .collect();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let builder = match t.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => builder.with_client_cert_verifier(verifier(t, auth, provider)?),
    };
    let chain = certificates(&t.cert_file)?;
    let key_pem = read(&t.key_file, Access::OwnerOnly)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("bad TLS key {}: {e}", t.key_file.display()))?;
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "TLS certificate {} and key {}: {e}",
            t.cert_file.display(),
            t.key_file.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read(path: &Path, access: Access) -> Result<String, String> {
    files::read_text(path, access, PEM_MAX)
        .map_err(|e| format!("bad TLS file {}: {e}", path.display()))
}

/// The certificates of a PEM file that no one but its owner may change.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(path, Access::ReadableByAll)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad TLS certificate {}: {e}", path.display()))?;
    match certs.is_empty() {
        true => Err(format!(
            "bad TLS certificate {}: no CERTIFICATE block",
            path.display()
        )),
        false => Ok(certs),
    }
}

/// ring's suites and groups, narrowed to `cipher_suites` (TLS 1.2's; TLS 1.3's are always on,
/// as in the toolkit) and `curve_preferences`, in their order.
fn provider(t: &Tls) -> Result<CryptoProvider, String> {
    let mut provider = ring::default_provider();
    if !t.cipher_suites.is_empty() {
        let mut suites: Vec<rustls::SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied()
            .collect();
        for name in &t.cipher_suites {
            // Go names ChaCha20's suites without their hash.
            let full = match name.ends_with("_POLY1305") {
                true => format!("{name}_SHA256"),
                false => name.clone(),
            };
            let suite = provider
                .cipher_suites
                .iter()
                .find(|s| s.tls13().is_none() && format!("{:?}", s.suite()) == full)
                .ok_or_else(|| {
                    format!(
                        "tls_server_config.cipher_suites: {} is not a TLS 1.2 suite fdprof offers \
                         (ECDHE with AES-GCM or ChaCha20-Poly1305)",
                        fdprof_recording::escape::name(name)
                    )
                })?;
            suites.push(*suite);
        }
        provider.cipher_suites = suites;
    }
    if !t.curve_preferences.is_empty() {
        let mut groups = Vec::new();
        for name in &t.curve_preferences {
            let group = match name.as_str() {
                "X25519" => ring::kx_group::X25519,
                "CurveP256" => ring::kx_group::SECP256R1,
                "CurveP384" => ring::kx_group::SECP384R1,
                _ => {
                    return Err(format!(
                        "tls_server_config.curve_preferences: {} is not one of X25519, CurveP256, CurveP384",
                        fdprof_recording::escape::name(name)
                    ));
                }
            };
            groups.push(group);
        }
        provider.kx_groups = groups;
    }
    Ok(provider)
}

/// Client certificates verified against `client_ca_file` (required or not), then held to
/// `client_allowed_sans`.
fn verifier(
    t: &Tls,
    auth: ClientAuth,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let ca = t.client_ca_file.as_deref().expect("checked with the file");
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca)? {
        roots
            .add(cert)
            .map_err(|e| format!("bad TLS certificate {}: {e}", ca.display()))?;
    }
    let mut builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    if auth == ClientAuth::VerifyIfGiven {
        builder = builder.allow_unauthenticated();
    }
    let inner = builder
        .build()
        .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))?;
    if t.client_allowed_sans.is_empty() {
        return Ok(inner);
    }
    let sans = t
        .client_allowed_sans
        .iter()
        .filter_map(|s| ServerName::try_from(s.clone()).ok())
        .collect();
    Ok(Arc::new(AllowedSans { inner, sans }))
}

/// A verifier that also wants one of `sans` among a client certificate's names.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    sans: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        match self
            .sans
            .iter()
            .any(|name| cert.verify_is_valid_for_subject_name(name).is_ok())
        {
            true => Ok(verified),
            false => Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
