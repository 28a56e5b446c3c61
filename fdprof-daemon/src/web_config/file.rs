//! The file `--web-config-file` names: Prometheus exporter-toolkit's web configuration (YAML),
//! its keys and their meaning, read into checked settings. Paths are relative to the file's
//! directory, as the toolkit reads them. Errors are one line naming the key, never quoting a
//! value (a hash or a path may be a secret's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The largest web config file read.
pub(super) const FILE_MAX: u64 = 64 * 1024;
/// Users `basic_auth_users` may name, and headers `http_server_config.headers`.
const USERS_MAX: usize = 256;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsServerConfig>,
    http_server_config: Option<HttpServerConfig>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerConfig {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    // Inline certificates and keys: refused with a line that says so.
    cert: Option<serde::de::IgnoredAny>,
    key: Option<serde::de::IgnoredAny>,
    client_ca: Option<serde::de::IgnoredAny>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpServerConfig {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// `client_auth_type`: what the server asks of a client's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `NoClientCert` (the default): none asked.
    None,
    /// `VerifyClientCertIfGiven`: one given must verify against `client_ca_file`.
    VerifyIfGiven,
    /// `RequireAndVerifyClientCert`: one must be given, and verify.
    RequireAndVerify,
}

/// A TLS version, as the toolkit names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// The TLS settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_auth: ClientAuth,
    pub client_ca_file: Option<PathBuf>,
    /// DNS names and IP addresses a client certificate must hold one of; empty: any.
    pub client_allowed_sans: Vec<String>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
    /// TLS 1.2 suites, by the toolkit's (Go's) names; empty: rustls's defaults.
    pub cipher_suites: Vec<String>,
    /// Key exchange groups by the toolkit's names; empty: rustls's defaults.
    pub curve_preferences: Vec<String>,
}

/// A whole web config, checked (files are read later, by what uses them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    pub tls: Option<Tls>,
    /// Headers added to every answer.
    pub headers: Vec<(String, String)>,
    /// User name and bcrypt hash.
    pub basic_auth_users: Vec<(String, String)>,
}

/// The headers the toolkit lets a web config set (the answers' own are fdprof's).
const HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// Parses `text`, the file at `path`.
pub fn parse(text: &str, path: &Path) -> Result<Settings, String> {
    let file: File = serde_saphyr::from_str(text).map_err(|e| {
        // The parser's message names the key and the line, not the value.
        format!("not a web config: {}", first_line(&e.to_string()))
    })?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let tls = file.tls_server_config.map(|t| tls(t, dir)).transpose()?;
    let mut headers = Vec::new();
    if let Some(http) = file.http_server_config {
        if http.http2 == Some(true) {
            // The toolkit's default; fdprof serves HTTP/1.1, which every scraper speaks.
        }
        for (name, value) in http.headers.unwrap_or_default() {
            let Some(known) = HEADERS.iter().find(|h| h.eq_ignore_ascii_case(&name)) else {
                return Err(format!(
                    "http_server_config.headers: {} may not be set (only {})",
                    fdprof_recording::escape::name(&name),
                    HEADERS.join(", ")
                ));
            };
            if hyper::header::HeaderValue::from_str(&value).is_err() {
                return Err(format!(
                    "http_server_config.headers.{known}: not a header value"
                ));
            }
            headers.push((known.to_string(), value));
        }
    }
    let users = file.basic_auth_users.unwrap_or_default();
    if users.len() > USERS_MAX {
        return Err(format!("basic_auth_users: more than {USERS_MAX} users"));
    }
    let mut basic_auth_users = Vec::new();
    for (user, hash) in users {
        if user.is_empty() || user.contains(':') || user.chars().any(char::is_control) {
            return Err(
                "basic_auth_users: a user name is not empty, has no ':' and no control character"
                    .into(),
            );
        }
        if !is_bcrypt(&hash) {
            return Err(format!(
                "basic_auth_users.{}: not a bcrypt hash ($2a$, $2b$ or $2y$; made with `htpasswd -nBC 10 USER`)",
                fdprof_recording::escape::name(&user)
            ));
        }
        basic_auth_users.push((user, hash));
    }
    Ok(Settings {
        tls,
        headers,
        basic_auth_users,
    })
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

/// A bcrypt hash's shape: `$2?$NN$` and 53 characters of salt and hash.
fn is_bcrypt(hash: &str) -> bool {
    let b = hash.as_bytes();
    hash.len() == 60
        && matches!(&hash[..4], "$2a$" | "$2b$" | "$2y$")
        && b[4].is_ascii_digit()
        && b[5].is_ascii_digit()
        && b[6] == b'$'
}

fn tls(t: TlsServerConfig, dir: &Path) -> Result<Tls, String> {
    if t.cert.is_some() || t.key.is_some() || t.client_ca.is_some() {
        return Err("tls_server_config: inline cert, key and client_ca are not read: give cert_file, key_file and client_ca_file".into());
    }
    let at = |p: PathBuf| if p.is_absolute() { p } else { dir.join(p) };
    let (Some(cert), Some(key)) = (t.cert_file, t.key_file) else {
        return Err("tls_server_config: needs both cert_file and key_file".into());
    };
    let client_auth = match t.client_auth_type.as_deref() {
        None | Some("NoClientCert") => ClientAuth::None,
        Some("VerifyClientCertIfGiven") => ClientAuth::VerifyIfGiven,
        Some("RequireAndVerifyClientCert") => ClientAuth::RequireAndVerify,
        Some("RequestClientCert" | "RequireAnyClientCert") => {
            return Err("tls_server_config.client_auth_type: a certificate that is not verified proves nothing: use VerifyClientCertIfGiven or RequireAndVerifyClientCert".into());
        }
        Some(_) => {
            return Err("tls_server_config.client_auth_type: not one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert".into());
        }
    };
    let client_ca_file = t.client_ca_file.map(at);
    if client_auth != ClientAuth::None && client_ca_file.is_none() {
        return Err("tls_server_config: client_auth_type verifies client certificates, so it needs client_ca_file".into());
    }
    if client_auth == ClientAuth::None && client_ca_file.is_some() {
        return Err("tls_server_config: client_ca_file is given but client_auth_type asks for no client certificate".into());
    }
    let client_allowed_sans = t.client_allowed_sans.unwrap_or_default();
    if !client_allowed_sans.is_empty() && client_auth == ClientAuth::None {
        return Err("tls_server_config: client_allowed_sans needs client certificates verified (client_auth_type)".into());
    }
    for san in &client_allowed_sans {
        if rustls::pki_types::ServerName::try_from(san.as_str()).is_err() {
            return Err(format!(
                "tls_server_config.client_allowed_sans: {} is not a DNS name or an IP address (the SANs matched)",
                fdprof_recording::escape::name(san)
            ));
        }
    }
    let version = |key: &str, v: Option<String>, default| match v.as_deref() {
        None => Ok(default),
        // Older versions are below what fdprof serves: TLS 1.2 is the least it offers.
        Some("TLS10" | "TLS11" | "TLS12") => Ok(TlsVersion::Tls12),
        Some("TLS13") => Ok(TlsVersion::Tls13),
        Some(_) => Err(format!(
            "tls_server_config.{key}: not one of TLS10, TLS11, TLS12, TLS13"
        )),
    };
    let min_version = version("min_version", t.min_version, TlsVersion::Tls12)?;
    let max_version = version("max_version", t.max_version, TlsVersion::Tls13)?;
    if min_version > max_version {
        return Err("tls_server_config: min_version is above max_version".into());
    }
    // The server's order is always preferred (rustls's), as the toolkit's default.
    let _ = t.prefer_server_cipher_suites;
    Ok(Tls {
        cert_file: at(cert),
        key_file: at(key),
        client_auth,
        client_ca_file,
        client_allowed_sans,
        min_version,
        max_version,
        cipher_suites: t.cipher_suites.unwrap_or_default(),
        curve_preferences: t.curve_preferences.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG";

    fn parse_text(text: &str) -> Result<Settings, String> {
        parse(text, Path::new("/etc/fdprof/web.yml"))
    }

    #[test]
    fn the_toolkits_example_is_read_with_paths_beside_the_file() {
        let s = parse_text(&format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: /keys/server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
             client_allowed_sans: [prometheus.monitoring.svc]\n  min_version: TLS13\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  alice: {HASH}\n"
        ))
        .unwrap();
        let tls = s.tls.unwrap();
        assert_eq!(tls.cert_file, Path::new("/etc/fdprof/server.crt"));
        assert_eq!(tls.key_file, Path::new("/keys/server.key"));
        assert_eq!(tls.client_auth, ClientAuth::RequireAndVerify);
        assert_eq!(
            tls.client_ca_file.as_deref(),
            Some(Path::new("/etc/fdprof/ca.crt"))
        );
        assert_eq!(tls.min_version, TlsVersion::Tls13);
        assert_eq!(
            s.headers,
            [("X-Frame-Options".to_string(), "deny".to_string())]
        );
        assert_eq!(
            s.basic_auth_users,
            [("alice".to_string(), HASH.to_string())]
        );
        assert_eq!(
            parse_text("").unwrap(),
            Settings::default(),
            "an empty file asks nothing"
        );
    }

    #[test]
    fn what_it_cannot_honour_is_one_line_naming_the_key_and_no_value() {
        let err = |text: &str| parse_text(text).unwrap_err();
        let e = err(
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
        );
        assert!(e.starts_with("tls_server_config.client_auth_type:"), "{e}");
        let e = err(
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
        );
        assert!(e.contains("needs client_ca_file"), "{e}");
        let e = err("basic_auth_users:\n  alice: secret-password\n");
        assert!(
            e.starts_with("basic_auth_users.alice: not a bcrypt hash") && !e.contains("secret"),
            "{e}"
        );
        let e = err("http_server_config:\n  headers:\n    Set-Cookie: x\n");
        assert!(e.contains("Set-Cookie may not be set"), "{e}");
        let e = err("tls_config:\n  cert_file: a\n");
        assert!(e.starts_with("not a web config:"), "{e}");
        assert_eq!(e.lines().count(), 1);
    }
}
