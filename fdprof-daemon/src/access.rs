//! Who may read what the daemon serves. Its endpoints hold other processes' stacks, paths,
//! names and figures, which `record` writes 0600; loopback is reachable by every local user and,
//! through DNS rebinding, by any web page a local user opens. So every request must name one of
//! this daemon's host names (else 421, whatever else it carries), and every endpoint but
//! `/healthz` needs the daemon's token (else 401): `Authorization: Bearer TOKEN`, `?token=TOKEN`
//! (for tools that cannot send a header: `go tool pprof`), or the cookie a `?token=` answer sets
//! (HttpOnly, SameSite=Strict: a browser keeps it, a script cannot read it, another site cannot
//! send it).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::files::{self, Access};
use super::server::Peer;

/// The shortest token accepted from a file (bytes): 128 bits as hex.
const TOKEN_MIN: usize = 32;
const TOKEN_MAX: usize = 4096;
/// Bytes of randomness in a generated token (hex-encoded: 64 characters).
const TOKEN_RANDOM: usize = 32;
/// Where a generated token goes when systemd gives no `RUNTIME_DIRECTORY`.
pub const TOKEN_DIR: &str = "/run/fdprof";

/// The endpoint anyone may ask: it says only that the daemon runs.
const OPEN_PATHS: [&str; 1] = ["/healthz"];
/// Password checks at once: more are answered 429 at once.
const PASSWORD_CHECKS: usize = 2;
/// The longest Basic credentials read (bcrypt reads 72 bytes of a password).
const BASIC_MAX: usize = 1024;

/// The daemon's credential.
#[derive(Clone)]
pub(crate) struct Token(String);

impl Token {
    /// Reads `--token-file`: a regular file owned by root or by the daemon's uid, that only its
    /// owner writes and that only its owner, or the daemon's group, can read
    /// ([`files::permitted`]).
    pub(crate) fn read(path: &Path) -> Result<Token, String> {
        let text = files::read_text(path, Access::OwnerOnly, TOKEN_MAX as u64)?;
        let token = text.trim();
        if token.len() < TOKEN_MIN {
            return Err(format!(
                "holds {} bytes, fewer than {TOKEN_MIN}: e.g. `openssl rand -hex 32`",
                token.len()
            ));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic() && b != b';') {
            return Err("holds a space, a control character, ';' or a non-ASCII byte".into());
        }
        Ok(Token(token.to_string()))
    }

    /// A new random token (the kernel's `getrandom`).
    pub(crate) fn generate() -> Result<Token, String> {
        let mut bytes = [0u8; TOKEN_RANDOM];
        // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer it is given.
        let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
        if got != bytes.len() as isize {
            return Err(format!(
                "cannot get random bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// Writes it to a file of its own, mode 0600, in a directory only its owner (root or the
    /// daemon's uid) can change: `dir` (created 0700 when missing), named by the address served ([`file_name`]), so that
    /// daemons on one port at two addresses each keep their own. Returns the file's path.
    pub(crate) fn save(&self, dir: &Path, listen: SocketAddr) -> Result<PathBuf, String> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
        let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        if !meta.is_dir() || (meta.uid() != 0 && meta.uid() != euid) || meta.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is not a directory owned by root or the daemon's uid {euid} that only its \
                 owner can write",
                dir.display()
            ));
        }
        let path = dir.join(file_name(listen));
        fdprof_profiler::output::Output::File(path.clone())
            .write(format!("{}\n", self.0).as_bytes())
            .map_err(|e| format!("{e:#}"))?;
        Ok(path)
    }

    /// Removes the file [`Token::save`] wrote, if it still holds this token.
    pub(crate) fn remove_saved(&self, path: &Path) {
        let ours = std::fs::read_to_string(path).is_ok_and(|t| self.matches(t.trim()));
        if ours {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Whether `given` is the token, in time that does not depend on where they differ.
    fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
    }
}

/// What the access check knows: the token, and the host names a request may name.
pub(crate) struct Policy {
    token: Token,
    /// `--web-config-file`: its users, and whether its client certificates are credentials.
    web: Option<Arc<crate::web_config::Live>>,
    /// Password checks running at once, at most [`PASSWORD_CHECKS`]: each costs tens of ms of CPU.
    checks: tokio::sync::Semaphore,
    hosts: BTreeSet<String>,
    /// The cookie's name: one per port, as browsers share cookies between a host's ports.
    cookie: String,
    secure: bool,
}

impl Policy {
    /// `listen` is the address bound (its real port); `extra` the `--allow-host` names.
    pub(crate) fn new(
        token: Token,
        listen: SocketAddr,
        extra: &[String],
        tls: bool,
        web: Option<Arc<crate::web_config::Live>>,
    ) -> Policy {
        let mut hosts: BTreeSet<String> = ["localhost", "127.0.0.1", "[::1]"]
            .into_iter()
            .map(String::from)
            .collect();
        hosts.insert(host_of(listen.ip()));
        if listen.ip().is_unspecified() || !listen.ip().is_loopback() {
            // Served beyond loopback (--allow-remote): the host's own names and addresses.
            hosts.extend(own_names());
        }
        hosts.extend(extra.iter().map(|h| h.to_ascii_lowercase()));
        Policy {
            token,
            web,
            checks: tokio::sync::Semaphore::new(PASSWORD_CHECKS),
            hosts,
            cookie: format!("fdprof_token_{}", listen.port()),
            secure: tls,
        }
    }

    /// The Host header's name (its port stripped), if it is one of ours.
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        // `name:port`, `[v6]:port`, or either without the port.
        let name = match host.rsplit_once(':') {
            Some((name, port)) if !name.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                if name.starts_with('[') || !name.contains(':') {
                    name
                } else {
                    host.as_str() // a bare IPv6 address: its colons are not a port
                }
            }
            _ => host.as_str(),
        };
        self.hosts.contains(name)
    }

    /// The token a request carries, and whether it came as `?token=` (then the answer sets the
    /// cookie).
    fn credential<'r>(&self, request: &'r Request) -> Option<(Cow<'r, str>, bool)> {
        let headers = request.headers();
        // The scheme's name is case-insensitive (RFC 9110).
        if let Some((_, bearer)) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        {
            return Some((Cow::Borrowed(bearer.trim()), false));
        }
        if let Some(token) = request
            .uri()
            .query()
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|pair| pair.strip_prefix("token="))
        {
            return Some((percent_decoded(token), true));
        }
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| {
                c.trim()
                    .strip_prefix(self.cookie.as_str())?
                    .strip_prefix('=')
            })
            .map(|t| (Cow::Borrowed(t), false))
    }

    /// A request's path and query as the log shows them: the value of every query parameter
    /// named `token` (in any case, its name percent-encoded or not, after `&` or `;`) and the
    /// token itself wherever else it appears are replaced by `…`.
    pub(crate) fn shown(&self, uri: &Uri) -> String {
        let mut shown = uri.path().to_string();
        if let Some(query) = uri.query() {
            shown.push('?');
            for piece in query.split_inclusive(['&', ';']) {
                let (pair, separator) = match piece.strip_suffix(['&', ';']) {
                    Some(pair) => (pair, &piece[pair.len()..]),
                    None => (piece, ""),
                };
                match pair.split_once('=') {
                    Some((name, _)) if is_token_name(name) => {
                        shown.push_str(name);
                        shown.push_str("=…");
                    }
                    _ => shown.push_str(pair),
                }
                shown.push_str(separator);
            }
        }
        shown.replace(self.token.0.as_str(), "…")
    }

    /// The web config's headers for every answer.
    pub(crate) fn web_headers(&self) -> Vec<(header::HeaderName, HeaderValue)> {
        self.web
            .as_ref()
            .map(|w| w.current().headers.clone())
            .unwrap_or_default()
    }

    fn set_cookie(&self) -> Option<HeaderValue> {
        let secure = if self.secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict{secure}",
            self.cookie, self.token.0
        ))
        .ok()
    }
}

/// Refuses a request for another host (421) or without the token (401), before any handler.
pub(crate) async fn check(
    State(policy): State<Arc<Policy>>,
    request: Request,
    next: Next,
) -> Response {
    if !policy.host_allowed(request.headers()) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "this daemon answers only to its own host names (see --allow-host)\n",
        )
            .into_response();
    }
    if OPEN_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let web = policy.web.as_ref().map(|w| w.current());
    // A client certificate the handshake verified, where the web config verifies them.
    let peer = request
        .extensions()
        .get::<Peer>()
        .copied()
        .unwrap_or_default();
    if peer.verified_certificate && web.as_ref().is_some_and(|w| w.verifies_clients()) {
        return next.run(request).await;
    }
    if let Some(web) = web.filter(|w| w.users.is_set())
        && let Some((user, password)) = basic(request.headers())
    {
        let Ok(_permit) = policy.checks.try_acquire() else {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                "too many password checks at once: try again\n",
            )
                .into_response();
        };
        let passed = tokio::task::spawn_blocking(move || web.users.check(&user, &password))
            .await
            .unwrap_or(false);
        return match passed {
            true => next.run(request).await,
            false => unauthorized(&policy),
        };
    }
    let (authorized, from_query) = match policy.credential(&request) {
        Some((given, from_query)) => (policy.token.matches(&given), from_query),
        None => (false, false),
    };
    if !authorized {
        return unauthorized(&policy);
    }
    let mut response = next.run(request).await;
    if from_query && let Some(cookie) = policy.set_cookie() {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// 401, naming the credentials the daemon takes.
fn unauthorized(policy: &Policy) -> Response {
    let users = policy
        .web
        .as_ref()
        .is_some_and(|w| w.current().users.is_set());
    let challenge = match users {
        true => "Bearer, Basic realm=\"fdprof\"",
        false => "Bearer",
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        "a token is needed: Authorization: Bearer TOKEN, or ?token=TOKEN (fdprof daemon logs \
         where its token is); or a user of the web config's basic_auth_users, or a client \
         certificate it verifies\n",
    )
        .into_response()
}

/// `Authorization: Basic` credentials, user and password, when well formed and not too long.
fn basic(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") || encoded.len() > BASIC_MAX {
        return None;
    }
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let (user, password) = String::from_utf8(decoded)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_string(), p.to_string()))?;
    Some((user, password))
}

/// Whether a query parameter's name is `token` once percent-decoded, in any case.
fn is_token_name(name: &str) -> bool {
    percent_decoded(name).trim().eq_ignore_ascii_case("token")
}

/// A query value with its `%XX` escapes decoded (a token typed into a URL may have them); one
/// that is not valid UTF-8 once decoded stays as it was, and matches no token.
fn percent_decoded(value: &str) -> Cow<'_, str> {
    if !value.contains('%') {
        return Cow::Borrowed(value);
    }
    let (bytes, mut out, mut i) = (value.as_bytes(), Vec::with_capacity(value.len()), 0);
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_or(Cow::Borrowed(value), Cow::Owned)
}

/// The name of the token file of a daemon serving `listen`: `daemon-127.0.0.1-9464.token`; an
/// IPv6 address has its `:` written `_` and its scope as `_s` and the number
/// (`daemon-__1-9464.token`, `daemon-fe80__1_s2-9464.token`), so any address gives a name of
/// letters, digits, `.`, `_` and `-` alone, and two addresses never the same name.
pub(crate) fn file_name(listen: SocketAddr) -> String {
    let host = match listen {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => {
            let mut host = a.ip().to_string().replace(':', "_");
            if a.scope_id() != 0 {
                host.push_str(&format!("_s{}", a.scope_id()));
            }
            host
        }
    };
    format!("daemon-{host}-{}.token", listen.port())
}

fn host_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// The host's name and the addresses of its interfaces.
fn own_names() -> Vec<String> {
    let mut names = Vec::new();
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes, NUL-terminated when it fits.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if let Ok(name) = std::str::from_utf8(&buf[..end]) {
            names.push(name.to_ascii_lowercase());
        }
    }
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates the list, read here and freed once by freeifaddrs.
    unsafe {
        if libc::getifaddrs(&mut list) == 0 {
            let mut at = list;
            while let Some(entry) = at.as_ref() {
                if let Some(sa) = entry.ifa_addr.as_ref() {
                    match i32::from(sa.sa_family) {
                        libc::AF_INET => {
                            let sin = &*(entry.ifa_addr as *const libc::sockaddr_in);
                            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                            names.push(host_of(ip.into()));
                        }
                        libc::AF_INET6 => {
                            let sin6 = &*(entry.ifa_addr as *const libc::sockaddr_in6);
                            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                            names.push(host_of(ip.into()));
                        }
                        _ => {}
                    }
                }
                at = entry.ifa_next;
            }
            libc::freeifaddrs(list);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(listen: &str) -> Policy {
        Policy::new(
            Token("t".repeat(TOKEN_MIN)),
            listen.parse().unwrap(),
            &["metrics.example".to_string()],
            false,
            None,
        )
    }

    fn host(h: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::HOST, h.parse().unwrap());
        m
    }

    #[test]
    fn only_our_host_names_pass() {
        let p = policy("127.0.0.1:9464");
        for ok in [
            "127.0.0.1:9464",
            "localhost:9464",
            "LOCALHOST",
            "[::1]:9464",
            "metrics.example:80",
        ] {
            assert!(p.host_allowed(&host(ok)), "{ok}");
        }
        for bad in [
            "attacker.example:9464",
            "127.0.0.2:9464",
            "",
            "localhost.:9464",
        ] {
            assert!(!p.host_allowed(&host(bad)), "{bad}");
        }
        assert!(!p.host_allowed(&HeaderMap::new()), "no Host at all");
    }

    #[test]
    fn the_log_never_shows_a_token() {
        let p = policy("127.0.0.1:9464");
        let secret = "t".repeat(TOKEN_MIN);
        for (uri, want) in [
            ("/metrics?token=abc&x=1", "/metrics?token=…&x=1"),
            ("/metrics?TOKEN=abc", "/metrics?TOKEN=…"),
            ("/m?tok%65n=abc", "/m?tok%65n=…"),
            ("/m?a=1;token=abc;b=2", "/m?a=1;token=…;b=2"),
            ("/m?a=1&%54oKeN=abc", "/m?a=1&%54oKeN=…"),
            ("/m?x=tokens", "/m?x=tokens"),
        ] {
            assert_eq!(p.shown(&uri.parse().unwrap()), want, "{uri}");
        }
        let anywhere = format!("/captures/{secret}?seconds={secret}");
        assert_eq!(p.shown(&anywhere.parse().unwrap()), "/captures/…?seconds=…");
    }

    #[test]
    fn token_files_are_named_by_address() {
        let name = |a: &str| file_name(a.parse().unwrap());
        assert_eq!(name("127.0.0.1:9464"), "daemon-127.0.0.1-9464.token");
        assert_eq!(name("127.0.0.2:9464"), "daemon-127.0.0.2-9464.token");
        assert_eq!(name("[::1]:9464"), "daemon-__1-9464.token");
        assert_eq!(name("[fe80::1%2]:80"), "daemon-fe80__1_s2-80.token");
        assert_eq!(
            name("[::ffff:127.0.0.1]:1"),
            "daemon-__ffff_127.0.0.1-1.token"
        );
        for a in ["0.0.0.0:1", "[::]:65535", "[fe80::aa:bb%4294967295]:9"] {
            let n = name(a);
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
                "{n}"
            );
        }
    }

    #[test]
    fn query_tokens_are_percent_decoded() {
        assert_eq!(percent_decoded("ab%2B%2fc"), "ab+/c");
        assert_eq!(percent_decoded("plain"), "plain");
        assert_eq!(percent_decoded("bad%zz%"), "bad%zz%");
    }

    #[test]
    fn tokens_compare_whole() {
        let t = Token("abcdef".into());
        assert!(t.matches("abcdef"));
        for other in ["abcdeF", "abcde", "abcdefg", ""] {
            assert!(!t.matches(other), "{other}");
        }
        let g = Token::generate().unwrap();
        assert_eq!(g.0.len(), 2 * TOKEN_RANDOM);
        assert_ne!(g.0, Token::generate().unwrap().0);
    }
}
