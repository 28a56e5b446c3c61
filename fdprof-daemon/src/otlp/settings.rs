//! Where and how the daemon pushes: the `--otlp-*` options, each over its OTel SDK environment
//! variable (`OTEL_EXPORTER_OTLP_PROFILES_*`, then `OTEL_EXPORTER_OTLP_*`), as the SDKs read
//! them. Every error is one line naming the option or the variable, never quoting a header's
//! value (it may be a key).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper::Uri;
use hyper::header::{HeaderName, HeaderValue};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::files::{self, Access};

/// The path a profiles request is posted to over HTTP, below a base endpoint.
pub const PROFILES_PATH: &str = "/v1development/profiles";
/// The gRPC method a profiles request calls.
pub const GRPC_PATH: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";
/// A request's default deadline, as the SDKs' (`OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s).
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Requests kept while the receiver is away (`--otlp-queue`'s default): 5 minutes of intervals
/// at the default 1 s.
pub const QUEUE: usize = 300;
/// The system's root certificates, for an https endpoint without `--otlp-ca-file`.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The largest certificate or key file read.
const PEM_MAX: u64 = 1 << 20;
/// Headers sent at most, and the largest value.
const HEADERS_MAX: usize = 32;
const HEADER_VALUE_MAX: usize = 4096;

/// `--otlp-protocol`, as `OTEL_EXPORTER_OTLP_PROTOCOL` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    Grpc,
    #[value(name = "http/protobuf")]
    HttpProtobuf,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// What the command line gives; each option unset falls back on its variable.
#[derive(Debug, Clone, Default)]
pub struct PushArgs {
    pub endpoint: Option<String>,
    pub protocol: Option<Protocol>,
    /// `KEY=VALUE` each.
    pub headers: Vec<String>,
    pub timeout: Option<Duration>,
    pub queue: Option<usize>,
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// The push, resolved and checked at start.
#[derive(Clone)]
pub struct Push {
    /// The whole request URI: the gRPC method, or the HTTP path.
    pub uri: Uri,
    pub protocol: Protocol,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub timeout: Duration,
    pub queue: usize,
    /// For an `https` endpoint: the roots, and the client certificate if one is given.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Push {
    // Headers are left out: they may hold a key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Push")
            .field("uri", &self.uri)
            .field("protocol", &self.protocol)
            .field("headers", &self.headers.len())
            .field("timeout", &self.timeout)
            .field("queue", &self.queue)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// How an endpoint's path is read (the SDKs' rule).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Given {
    /// `--otlp-endpoint`: a bare `host:port` gets the profiles path, a path is kept.
    Option,
    /// `OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT`: used as it is.
    Signal,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: a base, the profiles path appended.
    Base,
}

/// The OTel SDKs' variables of one name: the profiles signal's first, then the general one.
struct Vars<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Vars<'_> {
    /// The variable set (not empty) and its value.
    fn get(&self, name: &str) -> Option<(String, String)> {
        [
            format!("OTEL_EXPORTER_OTLP_PROFILES_{name}"),
            format!("OTEL_EXPORTER_OTLP_{name}"),
        ]
        .into_iter()
        .find_map(|k| {
            (self.0)(&k)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (k, v))
        })
    }

    /// A file's option, else its variable.
    fn file(&self, option: &Option<PathBuf>, name: &str) -> Option<PathBuf> {
        option
            .clone()
            .or_else(|| self.get(name).map(|(_, v)| PathBuf::from(v)))
    }
}

/// The push the options and the environment (`env`) ask for, if any.
pub fn resolve(
    args: &PushArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Push>, String> {
    let vars = Vars(env);
    let (endpoint, given, what) = match &args.endpoint {
        Some(e) => (e.clone(), Given::Option, "--otlp-endpoint".to_string()),
        None => match vars.get("ENDPOINT") {
            Some((k, v)) if k.contains("PROFILES") => (v, Given::Signal, k),
            Some((k, v)) => (v, Given::Base, k),
            None => return Ok(None),
        },
    };
    let protocol = protocol(args, &vars)?;
    let uri =
        request_uri(endpoint.trim(), given, protocol).map_err(|why| format!("{what}: {why}"))?;
    let headers = match args.headers.is_empty() {
        false => headers(args.headers.iter().map(String::as_str), false)
            .map_err(|why| format!("--otlp-header: {why}"))?,
        true => match vars.get("HEADERS") {
            Some((k, v)) => headers(v.split(','), true).map_err(|why| format!("{k}: {why}"))?,
            None => Vec::new(),
        },
    };
    let queue = args.queue.unwrap_or(QUEUE);
    if queue == 0 {
        return Err("--otlp-queue: must be at least 1".into());
    }
    let tls = tls(args, &vars, &uri, protocol).map_err(|why| format!("{what}: {why}"))?;
    Ok(Some(Push {
        uri,
        protocol,
        headers,
        timeout: timeout(args, &vars)?,
        queue,
        tls,
    }))
}

fn protocol(args: &PushArgs, vars: &Vars) -> Result<Protocol, String> {
    let Some(p) = args.protocol else {
        return match vars.get("PROTOCOL") {
            None => Ok(Protocol::Grpc),
            Some((_, v)) if v.trim() == "grpc" => Ok(Protocol::Grpc),
            Some((_, v)) if v.trim() == "http/protobuf" => Ok(Protocol::HttpProtobuf),
            Some((k, v)) if v.trim() == "http/json" => Err(format!(
                "{k}: http/json is not supported: use grpc or http/protobuf"
            )),
            Some((k, _)) => Err(format!("{k}: not a protocol: use grpc or http/protobuf")),
        };
    };
    Ok(p)
}

fn timeout(args: &PushArgs, vars: &Vars) -> Result<Duration, String> {
    let timeout = match (args.timeout, vars.get("TIMEOUT")) {
        (Some(t), _) => t,
        (None, Some((k, v))) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
            .ok_or_else(|| format!("{k}: not a positive number of milliseconds"))?,
        (None, None) => TIMEOUT,
    };
    match timeout.is_zero() {
        true => Err("--otlp-timeout: must be more than 0".into()),
        false => Ok(timeout),
    }
}

/// TLS for an https endpoint; certificates given for an http one are refused.
fn tls(
    args: &PushArgs,
    vars: &Vars,
    uri: &Uri,
    protocol: Protocol,
) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    let ca = vars.file(&args.ca_file, "CERTIFICATE");
    let cert = vars.file(&args.client_cert, "CLIENT_CERTIFICATE");
    let client = match (cert, vars.file(&args.client_key, "CLIENT_KEY")) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            return Err(
                "a client certificate needs its key, and a key its certificate \
                        (--otlp-client-cert, --otlp-client-key)"
                    .into(),
            );
        }
    };
    match uri.scheme_str() {
        Some("https") => client_config(ca.as_deref(), client.as_ref(), protocol).map(Some),
        _ if ca.is_some() || client.is_some() => {
            Err("certificates are given, so the endpoint must be https://".into())
        }
        _ => Ok(None),
    }
}

/// The URI a request goes to.
fn request_uri(endpoint: &str, given: Given, protocol: Protocol) -> Result<Uri, String> {
    let uri: Uri = endpoint
        .parse()
        .map_err(|_| "not a URL: give http://HOST:PORT or https://HOST:PORT".to_string())?;
    let scheme = match uri.scheme_str() {
        Some(s @ ("http" | "https")) => s,
        _ => return Err("only http:// and https:// endpoints are supported".into()),
    };
    let Some(authority) = uri.authority() else {
        return Err("no host in the URL".into());
    };
    if authority.as_str().contains('@') {
        return Err("a URL with user info is not supported: give credentials as a header".into());
    }
    let given_path = uri.path();
    let path = match (protocol, given) {
        // gRPC calls its method on the host; an endpoint's path has no meaning there.
        (Protocol::Grpc, _) => GRPC_PATH.to_string(),
        (Protocol::HttpProtobuf, Given::Signal) => given_path.to_string(),
        (Protocol::HttpProtobuf, Given::Option) if given_path != "/" => given_path.to_string(),
        (Protocol::HttpProtobuf, _) => {
            format!("{}{PROFILES_PATH}", given_path.trim_end_matches('/'))
        }
    };
    format!("{scheme}://{authority}{path}")
        .parse()
        .map_err(|_| "not a URL".to_string())
}

/// `KEY=VALUE` pairs; from a variable (`encoded`), values are percent-decoded as the SDKs do.
fn headers<'a>(
    pairs: impl Iterator<Item = &'a str>,
    encoded: bool,
) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut out = Vec::new();
    for pair in pairs.filter(|p| !p.trim().is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err("a header is KEY=VALUE".into());
        };
        let key = key.trim();
        let name = HeaderName::from_bytes(key.as_bytes())
            .map_err(|_| format!("not a header name: {}", fdprof_recording::escape::name(key)))?;
        if matches!(
            name.as_str(),
            "content-type" | "content-length" | "te" | "host" | "transfer-encoding"
        ) || name.as_str().starts_with("grpc-")
        {
            return Err(format!("header {name} is the protocol's own"));
        }
        let value = value.trim();
        let value = match encoded {
            true => percent_decode(value)
                .ok_or_else(|| format!("header {name}: bad percent-encoding"))?,
            false => value.to_string(),
        };
        if value.len() > HEADER_VALUE_MAX {
            return Err(format!("header {name}: over {HEADER_VALUE_MAX} bytes"));
        }
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| format!("header {name}: a value of visible ASCII only"))?;
        value.set_sensitive(true);
        out.push((name, value));
        if out.len() > HEADERS_MAX {
            return Err(format!("more than {HEADERS_MAX} headers"));
        }
    }
    Ok(out)
}

/// `%XX` escapes decoded (header values, `grpc-message`); `None` if that is not UTF-8 or an
/// escape is cut short.
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// TLS to the receiver: `ca` (or the system's roots), and a client certificate if given. The
/// key follows the token's rule (private), the certificates the config's.
fn client_config(
    ca: Option<&Path>,
    client: Option<&(PathBuf, PathBuf)>,
    protocol: Protocol,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let read = |path: &Path, access| {
        files::read_text(path, access, PEM_MAX)
            .map_err(|e| format!("bad OTLP TLS file {}: {e}", path.display()))
    };
    let certs = |path: &Path, pem: &str| -> Result<Vec<CertificateDer<'static>>, String> {
        let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("bad OTLP TLS certificate {}: {e}", path.display()))?;
        match certs.is_empty() {
            true => Err(format!(
                "bad OTLP TLS certificate {}: no CERTIFICATE block",
                path.display()
            )),
            false => Ok(certs),
        }
    };
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in certs(path, &read(path, Access::ReadableByAll)?)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("bad OTLP TLS certificate {}: {e}", path.display()))?;
            }
        }
        None => {
            let pem = std::fs::read_to_string(CA_BUNDLE).map_err(|e| {
                format!("an https endpoint needs root certificates: {CA_BUNDLE}: {e}")
            })?;
            let found = CertificateDer::pem_slice_iter(pem.as_bytes()).filter_map(Result::ok);
            if roots.add_parsable_certificates(found).0 == 0 {
                return Err(format!(
                    "an https endpoint needs root certificates: none in {CA_BUNDLE}"
                ));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certs(cert, &read(cert, Access::ReadableByAll)?)?;
            let key_der = PrivateKeyDer::from_pem_slice(read(key, Access::OwnerOnly)?.as_bytes())
                .map_err(|e| format!("bad OTLP TLS key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| format!("OTLP client certificate {}: {e}", cert.display()))?
        }
    };
    config.alpn_protocols = match protocol {
        Protocol::Grpc => vec![b"h2".to_vec()],
        Protocol::HttpProtobuf => vec![b"http/1.1".to_vec()],
    };
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve_with(args: &PushArgs, vars: &[(&str, &str)]) -> Result<Option<Push>, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(args, &|k| vars.get(k).cloned())
    }

    fn uri(args: &PushArgs, vars: &[(&str, &str)]) -> String {
        resolve_with(args, vars).unwrap().unwrap().uri.to_string()
    }

    #[test]
    fn endpoints_are_read_as_the_sdks_read_them() {
        let none = PushArgs::default();
        assert!(resolve_with(&none, &[]).unwrap().is_none(), "nothing asked");
        let grpc = "http://127.0.0.1:4317/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";
        assert_eq!(
            uri(
                &none,
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")]
            ),
            grpc
        );
        let http = [("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")];
        let base = [
            http[0],
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318/otlp/"),
        ];
        assert_eq!(
            uri(&none, &base),
            "http://h:4318/otlp/v1development/profiles"
        );
        let signal = [
            base[0],
            base[1],
            (
                "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
                "http://h:4318/custom",
            ),
        ];
        assert_eq!(
            uri(&none, &signal),
            "http://h:4318/custom",
            "the signal's own, as it is"
        );
        let option = PushArgs {
            endpoint: Some("http://h:4318".into()),
            ..Default::default()
        };
        assert_eq!(
            uri(&option, &signal),
            "http://h:4318/v1development/profiles",
            "the option first"
        );
        let p = resolve_with(&option, &signal).unwrap().unwrap();
        assert_eq!(
            (p.protocol, p.timeout, p.queue),
            (Protocol::HttpProtobuf, TIMEOUT, QUEUE)
        );
    }

    #[test]
    fn bad_settings_are_one_line_naming_where_they_came_from() {
        let none = PushArgs::default();
        let err = |vars: &[(&str, &str)]| resolve_with(&none, vars).unwrap_err();
        let e = err(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "h:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ]);
        assert!(
            e.starts_with("OTEL_EXPORTER_OTLP_PROTOCOL: http/json is not supported"),
            "{e}"
        );
        let e = err(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://h")]);
        assert!(
            e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT: only http:// and https://"),
            "{e}"
        );
        let e = err(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:1"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
        ]);
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_TIMEOUT:"), "{e}");
        let e = err(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:1"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer secret\u{1b}",
            ),
        ]);
        assert!(
            !e.contains("secret") && e.starts_with("OTEL_EXPORTER_OTLP_HEADERS:"),
            "{e}"
        );
        let e = err(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:1"),
            (
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                "/etc/ssl/certs/ca-certificates.crt",
            ),
        ]);
        assert!(e.contains("must be https://"), "{e}");
    }

    #[test]
    fn headers_from_a_variable_are_percent_decoded_and_kept_sensitive() {
        let p = resolve_with(
            &PushArgs::default(),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:1"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "x-scope-orgid=tenant%201, authorization=Basic%20YTpi",
                ),
            ],
        )
        .unwrap()
        .unwrap();
        let got: Vec<(&str, &str)> = p
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("x-scope-orgid", "tenant 1"),
                ("authorization", "Basic YTpi")
            ]
        );
        assert!(p.headers.iter().all(|(_, v)| v.is_sensitive()));
        assert!(!format!("{p:?}").contains("YTpi"), "not in the debug form");
    }
}
