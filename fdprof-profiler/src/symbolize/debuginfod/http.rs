//! A small blocking HTTP/1.1 client for one `GET`, its body streamed into a writer.
//!
//! Every socket read and write is bounded by one deadline for the whole request (redirects and
//! the TLS handshake included), so a server that accepts and never answers costs at most the
//! fetch timeout. The status line and headers are bounded, and so is the body.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 4;
/// The status line and all headers together, at most.
const MAX_HEAD_BYTES: u64 = 64 * 1024;
const MAX_HEADERS: usize = 100;
/// One chunk-size line (with extensions) of a chunked body, at most.
const MAX_CHUNK_LINE: u64 = 1024;
/// The system's root certificates, read once for https.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// An http:// or https:// URL: host, port and path (no user info, query or fragment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub scheme: Scheme,
    /// A name or an IP address; an IPv6 address without its brackets.
    pub host: String,
    pub port: u16,
    /// Starts with `/`; a base URL's has no trailing `/` (except the root itself).
    pub path: String,
}

impl Url {
    /// Parses `http://host[:port][/path]` or `https://…`; anything else is an error naming it.
    pub fn parse(text: &str) -> anyhow::Result<Url> {
        Self::parse_inner(text, true)
    }

    /// A base URL (`base`) has no query or fragment and loses its trailing `/`; a redirect
    /// target keeps its path and query as sent.
    fn parse_inner(text: &str, base: bool) -> anyhow::Result<Url> {
        let bad = |why: &str| anyhow::anyhow!("bad debuginfod URL {text:?}: {why}");
        let (scheme, rest) = if let Some(rest) = text.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else if let Some(rest) = text.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else {
            return Err(bad("only http:// and https:// are supported"));
        };
        let rest = if base {
            rest
        } else {
            rest.split('#').next().unwrap_or("")
        };
        if rest.chars().any(|c| c.is_whitespace() || c.is_control())
            || (base && rest.contains(['?', '#']))
        {
            return Err(bad("queries, fragments and spaces are not supported"));
        }
        let (authority, path) = rest
            .find(['/', '?'])
            .map_or((rest, ""), |i| rest.split_at(i));
        if authority.contains('@') {
            return Err(bad("user info is not supported"));
        }
        let (host, port) = split_host_port(authority).ok_or_else(|| bad("bad host or port"))?;
        let port = port.unwrap_or(match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        });
        let path = if base {
            path.trim_end_matches('/')
        } else {
            path
        };
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        Ok(Url {
            scheme,
            host: host.to_string(),
            port,
            path,
        })
    }

    /// This URL with `suffix` (starting with `/`) appended to its path.
    pub(super) fn join(&self, suffix: &str) -> Url {
        let base = self.path.trim_end_matches('/');
        Url {
            path: format!("{base}{suffix}"),
            ..self.clone()
        }
    }

    /// A redirect's target: an absolute http(s) URL, or an absolute path on this server.
    pub(super) fn resolve(&self, location: &str) -> anyhow::Result<Url> {
        if location.starts_with('/') && !location.starts_with("//") {
            let path = location.split('#').next().unwrap_or("");
            if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bail!("bad redirect location {location:?}");
            }
            return Ok(Url {
                path: path.to_string(),
                ..self.clone()
            });
        }
        Self::parse_inner(location, false)
    }

    /// `host[:port]` for the Host header, the port omitted when it is the scheme's default.
    fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = match self.scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        let path = if self.path == "/" { "" } else { &self.path };
        write!(f, "{scheme}://{}{path}", self.authority())
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|&p| p != 0)?),
        None => None,
    };
    (!host.is_empty()).then_some((host, port))
}

/// Why a GET gave no body.
#[derive(Debug)]
pub(super) enum HttpError {
    /// 404: the server does not have it.
    NotFound,
    /// The body is (or claims to be) larger than the bound: aborted there.
    TooLarge(u64),
    /// Anything else, as a short message and a kind for "say it once" bookkeeping.
    Failed { kind: &'static str, detail: String },
}

impl HttpError {
    fn failed(kind: &'static str, detail: impl Into<String>) -> Self {
        HttpError::Failed {
            kind,
            detail: detail.into(),
        }
    }

    fn io(e: io::Error, timeout: Duration) -> Self {
        match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => HttpError::failed(
                "timeout",
                format!("timed out after {} s", timeout.as_secs_f64()),
            ),
            io::ErrorKind::ConnectionRefused => HttpError::failed("refused", "connection refused"),
            _ => HttpError::failed("io", e.to_string()),
        }
    }
}

/// Limits of one GET.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    /// The whole request, redirects included.
    pub(super) timeout: Duration,
    pub(super) connect_timeout: Duration,
    /// The body's size, at most.
    pub(super) max_body: u64,
    /// Trusted roots other than the system's (tests).
    pub(super) tls: Option<Arc<rustls::ClientConfig>>,
}

/// GETs `url`, following redirects, and streams a 200's body into `sink`. Returns its size.
pub(super) fn get(url: &Url, limits: &Limits, sink: &mut dyn Write) -> Result<u64, HttpError> {
    let deadline = Instant::now() + limits.timeout;
    let mut url = url.clone();
    for _ in 0..=MAX_REDIRECTS {
        let mut conn =
            connect(&url, deadline, limits).map_err(|e| HttpError::io(e, limits.timeout))?;
        send_request(&mut conn, &url).map_err(|e| HttpError::io(e, limits.timeout))?;
        let mut reader = BufReader::with_capacity(64 * 1024, conn);
        let head = read_head(&mut reader).map_err(|e| HttpError::io(e, limits.timeout))?;
        match head.status {
            200 => return read_body(&mut reader, &head, limits, sink),
            301 | 302 | 303 | 307 | 308 => {
                let location = head.location.as_deref().ok_or_else(|| {
                    HttpError::failed(
                        "protocol",
                        format!("HTTP {} without a Location", head.status),
                    )
                })?;
                url = url
                    .resolve(location)
                    .map_err(|e| HttpError::failed("redirect", e.to_string()))?;
            }
            404 => return Err(HttpError::NotFound),
            status => return Err(HttpError::failed("status", format!("HTTP {status}"))),
        }
    }
    Err(HttpError::failed(
        "redirect",
        format!("more than {MAX_REDIRECTS} redirects"),
    ))
}

/// The time left before `deadline`, or a timeout error when none is.
fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
    }
    Ok(left)
}

/// A TCP socket whose every read and write ends by the request's deadline (rustls reads and
/// writes through it too, so the handshake is bounded by the same deadline).
struct Sock {
    tcp: TcpStream,
    deadline: Instant,
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.tcp.set_read_timeout(Some(remaining(self.deadline)?))?;
        self.tcp.read(buf)
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tcp
            .set_write_timeout(Some(remaining(self.deadline)?))?;
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

enum Conn {
    Plain(Sock),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Sock>>),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// Connects to the first address of `url`'s host that answers. Name resolution itself is not
/// bounded by the deadline (std has no timeout for it); it runs on the fetch thread only.
fn connect(url: &Url, deadline: Instant, limits: &Limits) -> io::Result<Conn> {
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} resolves to no address", url.host),
    );
    let mut tcp = None;
    for addr in (url.host.as_str(), url.port).to_socket_addrs()? {
        let timeout = remaining(deadline)?.min(limits.connect_timeout);
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let sock = Sock {
        tcp: tcp.ok_or(last)?,
        deadline,
    };
    match url.scheme {
        Scheme::Http => Ok(Conn::Plain(sock)),
        Scheme::Https => {
            let config = match &limits.tls {
                Some(config) => Arc::clone(config),
                None => tls_config().map_err(io::Error::other)?,
            };
            let name = rustls::pki_types::ServerName::try_from(url.host.clone()).map_err(|e| {
                io::Error::other(format!("bad TLS server name {:?}: {e}", url.host))
            })?;
            let tls = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
            Ok(Conn::Tls(Box::new(rustls::StreamOwned::new(tls, sock))))
        }
    }
}

/// The TLS client configuration, built once: ring, the system's root certificates.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| build_tls_config(Path::new(CA_BUNDLE)).map_err(|e| format!("{e:#}")))
        .clone()
}

pub(super) fn build_tls_config(bundle: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_file_iter(bundle)
        .with_context(|| format!("https needs the CA bundle {}", bundle.display()))?
        .filter_map(Result::ok);
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        bail!(
            "https needs root certificates: none found in {}",
            bundle.display()
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn send_request(conn: &mut Conn, url: &Url) -> io::Result<()> {
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: fdprof/{}\r\nAccept: */*\r\n\
         Accept-Encoding: identity\r\nConnection: close\r\n\r\n",
        url.path,
        url.authority(),
        crate::VERSION,
    );
    conn.write_all(request.as_bytes())?;
    conn.flush()
}

/// What the body reader and the redirect logic need of a response's head.
#[derive(Debug, Default)]
struct Head {
    status: u16,
    content_length: Option<u64>,
    chunked: bool,
    location: Option<String>,
}

fn protocol(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads the status line and headers, within [`MAX_HEAD_BYTES`] and [`MAX_HEADERS`].
fn read_head(reader: &mut impl BufRead) -> io::Result<Head> {
    let mut budget = MAX_HEAD_BYTES;
    let status_line = read_line(reader, &mut budget)?;
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(protocol(format!(
            "bad status line {:?}",
            truncate(&status_line)
        )));
    }
    let mut head = Head {
        status: code
            .parse()
            .map_err(|_| protocol(format!("bad status {code:?}")))?,
        ..Head::default()
    };
    for _ in 0..=MAX_HEADERS {
        let line = read_line(reader, &mut budget)?;
        if line.is_empty() {
            return Ok(head);
        }
        let (name, value) = line
            .split_once(':')
            .filter(|(name, _)| !name.is_empty() && !name.starts_with([' ', '\t']))
            .ok_or_else(|| protocol(format!("bad header line {:?}", truncate(&line))))?;
        add_header(&mut head, &name.to_ascii_lowercase(), value.trim())?;
    }
    Err(protocol(format!("more than {MAX_HEADERS} headers")))
}

fn add_header(head: &mut Head, name: &str, value: &str) -> io::Result<()> {
    match name {
        "content-length" => {
            let n = value
                .parse()
                .map_err(|_| protocol(format!("bad Content-Length {value:?}")))?;
            if head.content_length.is_some_and(|old| old != n) {
                return Err(protocol("conflicting Content-Length headers"));
            }
            head.content_length = Some(n);
        }
        "transfer-encoding" => {
            for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                if !coding.eq_ignore_ascii_case("chunked") || head.chunked {
                    return Err(protocol(format!("unsupported Transfer-Encoding {value:?}")));
                }
                head.chunked = true;
            }
        }
        "location" => head.location = Some(value.to_string()),
        _ => {}
    }
    Ok(())
}

/// One line without its CRLF (or LF), charged to `budget`.
fn read_line(reader: &mut impl BufRead, budget: &mut u64) -> io::Result<String> {
    let mut buf = Vec::new();
    let n = reader.by_ref().take(*budget).read_until(b'\n', &mut buf)?;
    *budget -= n as u64;
    if buf.last() != Some(&b'\n') {
        return Err(match n {
            0 => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a full answer",
            ),
            _ if *budget == 0 => protocol("response head too long"),
            _ => io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-line"),
        });
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf).map_err(|_| protocol("response head is not UTF-8"))
}

fn truncate(s: &str) -> &str {
    let end = s.char_indices().nth(80).map_or(s.len(), |(i, _)| i);
    &s[..end]
}

/// Streams the body into `sink`: chunked, by Content-Length, or until the server closes.
fn read_body(
    reader: &mut impl BufRead,
    head: &Head,
    limits: &Limits,
    sink: &mut dyn Write,
) -> Result<u64, HttpError> {
    let io_err = |e| HttpError::io(e, limits.timeout);
    if head.chunked {
        return read_chunked(reader, limits, sink);
    }
    match head.content_length {
        Some(n) if n > limits.max_body => Err(HttpError::TooLarge(limits.max_body)),
        Some(n) => {
            let copied = copy_bounded(reader, n, sink).map_err(io_err)?;
            if copied < n {
                return Err(HttpError::failed(
                    "truncated",
                    format!("body ended after {copied} of {n} bytes"),
                ));
            }
            Ok(n)
        }
        None => {
            // One byte past the bound tells a body of exactly the bound from a larger one.
            let copied = copy_bounded(reader, limits.max_body + 1, sink).map_err(io_err)?;
            if copied > limits.max_body {
                return Err(HttpError::TooLarge(limits.max_body));
            }
            Ok(copied)
        }
    }
}

fn read_chunked(
    reader: &mut impl BufRead,
    limits: &Limits,
    sink: &mut dyn Write,
) -> Result<u64, HttpError> {
    let io_err = |e| HttpError::io(e, limits.timeout);
    let mut total = 0u64;
    loop {
        let mut budget = MAX_CHUNK_LINE;
        let line = read_line(reader, &mut budget).map_err(io_err)?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size, 16).map_err(|_| {
            HttpError::failed("protocol", format!("bad chunk size {:?}", truncate(&line)))
        })?;
        if size == 0 {
            // Trailers, up to the empty line that ends the message.
            let mut budget = MAX_HEAD_BYTES;
            while !read_line(reader, &mut budget).map_err(io_err)?.is_empty() {}
            return Ok(total);
        }
        if size > limits.max_body - total {
            return Err(HttpError::TooLarge(limits.max_body));
        }
        if copy_bounded(reader, size, sink).map_err(io_err)? < size {
            return Err(HttpError::failed("truncated", "chunked body ended early"));
        }
        total += size;
        let mut budget = 2;
        if !read_line(reader, &mut budget).map_err(io_err)?.is_empty() {
            return Err(HttpError::failed("protocol", "chunk not followed by CRLF"));
        }
    }
}

/// Copies at most `limit` bytes; fewer when the stream ends first.
fn copy_bounded(reader: &mut impl BufRead, limit: u64, sink: &mut dyn Write) -> io::Result<u64> {
    let mut copied = 0;
    while copied < limit {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let n = buf
            .len()
            .min(usize::try_from(limit - copied).unwrap_or(usize::MAX));
        sink.write_all(&buf[..n])?;
        reader.consume(n);
        copied += n as u64;
    }
    Ok(copied)
}
