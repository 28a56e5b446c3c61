//! Who may read `fdprof daemon`'s endpoints, tried as other local users and web pages would:
//! curl run as uid 65534 (`setpriv`), a Host header of another name, tokens from files others
//! could read, TLS with a certificate made by `openssl`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::daemon::{Daemon, authorization, poll, token};
use crate::common::prometheus::{free_loopback_addr, http_get_with};
use crate::common::*;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Every endpoint that holds stacks, paths or per-process figures.
const PROTECTED: [&str; 5] = [
    "/",
    "/metrics",
    "/report.json",
    "/flamegraph.svg?op=all&lock=all",
    "/api/v1/stream",
];

/// `curl ARGS` as uid 65534 (nobody), who can read no root-only file: the status code it got
/// (`000` when there was no HTTP answer). A stream is cut after 2 s, its code kept; anything
/// else has 30 s (a debug build draws a system-wide flamegraph under load).
fn curl_as_nobody(args: &[&str]) -> String {
    let stream = args.iter().any(|a| a.contains("/api/v1/stream"));
    let out = run(Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .args([
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-m",
            if stream { "2" } else { "30" },
        ])
        .args(args));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn protected_endpoints_answer_other_users_only_with_the_token() {
    require_root();
    let _guard = kernel_lock();
    let daemon = Daemon::start(&["--tier", "full", "-a", "--interval", "300ms"]);
    // A contended load, so that the window has waiting stacks to draw (a flamegraph of none is
    // a 404), and an interval ended with them.
    let load = start_workload(&["opensock", "-t", "2", "-n", "4000", "-d", "60s"]);
    load.go();
    let drawn = poll(TIMEOUT, || {
        let (code, _) = daemon.get("/flamegraph.svg?op=all&lock=all");
        (code == 200).then_some(()).ok_or(code)
    });
    assert!(drawn.is_ok(), "no flamegraph: {drawn:?}\n{}", daemon.log());
    let auth = authorization();
    for path in PROTECTED {
        let url = format!("http://{}{path}", daemon.addr);
        assert_eq!(curl_as_nobody(&[&url]), "401", "{path} without a token");
        assert_eq!(
            curl_as_nobody(&[
                "-H",
                "Authorization: Bearer 0123456789abcdef0123456789abcdef",
                &url
            ]),
            "401",
            "{path} with a wrong token"
        );
        assert_eq!(curl_as_nobody(&["-H", &auth, &url]), "200", "{path}");
        // A page another site serves, resolved to 127.0.0.1 (DNS rebinding), names its own host.
        let rebound = format!("Host: attacker.example:{}", daemon.addr.port());
        assert_eq!(
            curl_as_nobody(&["-H", &auth, "-H", &rebound, &url]),
            "421",
            "{path} for another host"
        );
    }
    let healthz = format!("http://{}/healthz", daemon.addr);
    assert_eq!(curl_as_nobody(&[&healthz]), "200");
    // A refusal says how to get in, and nothing of what is behind it.
    let (code, body) = daemon.get_anonymous("/report.json");
    assert_eq!(code, 401);
    assert!(body.starts_with("a token is needed"), "{body}");
    // ?token= (for tools that send no header) sets a cookie a browser keeps; the cookie alone
    // then works.
    let (code, head, _) = http_get_with(daemon.addr, &format!("/metrics?token={}", token()), &[])
        .expect("GET /metrics?token=");
    assert_eq!(code, 200);
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("no cookie set: {head}"));
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap();
    let (code, _, _) = http_get_with(daemon.addr, "/report.json", &[&format!("Cookie: {pair}")])
        .expect("GET with the cookie");
    assert_eq!(code, 200);
    load.end();
}

#[test]
fn a_token_made_at_start_is_roots_alone_and_goes_with_the_daemon() {
    require_root();
    let _guard = kernel_lock();
    let run_dir = tmp("run");
    let _ = std::fs::remove_dir_all(&run_dir);
    let addr = free_loopback_addr();
    let mut daemon = Daemon::spawn_env(
        &addr.to_string(),
        addr,
        &["--comm", "fdpd-gen"],
        &[("RUNTIME_DIRECTORY", run_dir.to_str().unwrap())],
    );
    daemon.wait_healthy();
    let file = run_dir.join(format!("daemon-127.0.0.1-{}.token", addr.port()));
    let line = daemon.wait_line("INFO", "requests need the token in");
    assert!(line.contains(file.to_str().unwrap()), "{line}");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    assert_eq!(std::fs::metadata(&run_dir).unwrap().mode() & 0o777, 0o700);
    let made = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert_eq!(made.len(), 64, "{made}");
    let url = format!("http://{addr}/metrics");
    assert_eq!(curl_as_nobody(&[&url]), "401");
    let bearer = format!("Authorization: Bearer {made}");
    assert_eq!(curl_as_nobody(&["-H", &bearer, &url]), "200");
    let status = daemon.stop();
    assert!(status.success(), "{status}\n{}", daemon.log());
    assert!(!file.exists(), "the token file outlived the daemon");
}

#[test]
fn token_files_others_could_read_are_refused_in_one_line() {
    require_root();
    let _guard = kernel_lock();
    let write = |name: &str, text: &str, mode: u32| {
        let path = tmp(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    };
    let long = "a".repeat(64);
    let readable = write("readable.token", &long, 0o644);
    let short = write("short.token", "abc", 0o600);
    let foreign = write("foreign.token", &long, 0o600);
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    let missing = tmp("missing.token");
    for (file, why) in [
        (&readable, "readable by others (mode 0644): chmod 640 it"),
        (&short, "fewer than 32"),
        (&foreign, "owned by uid 65534, not root"),
        (&missing, "No such file"),
    ] {
        let addr = free_loopback_addr();
        let args = ["--comm", "fdpd-tok", "--token-file", file.to_str().unwrap()];
        let mut daemon = Daemon::spawn(&addr.to_string(), addr, &args);
        let status = daemon.wait_exit();
        let log = daemon.log();
        let line = one_line(&log);
        assert_eq!(status.code(), Some(2), "{log}");
        assert!(
            line.contains("bad --token-file") && line.contains(why),
            "{line}"
        );
    }
    assert_no_programs_left();
}

/// A self-signed certificate for 127.0.0.1 and its key (0600), made by openssl.
fn certificate(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    (cert, key)
}

#[test]
fn tls_serves_https_to_a_client_that_trusts_the_certificate_and_nothing_in_plain_text() {
    require_root();
    let _guard = kernel_lock();
    let (cert, key) = certificate(&tmp("tls"));
    let addr = free_loopback_addr();
    let args = [
        "--comm",
        "fdpd-tls",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
    ];
    let args: Vec<&str> = args.into_iter().chain([key.to_str().unwrap()]).collect();
    let mut daemon = Daemon::spawn(&addr.to_string(), addr, &args);
    let https = format!("https://127.0.0.1:{}/metrics", addr.port());
    let auth = authorization();
    let cacert = cert.to_str().unwrap();
    let served = poll(TIMEOUT, || {
        match curl_as_nobody(&["--cacert", cacert, "-H", &auth, &https]).as_str() {
            "200" => Ok(()),
            other => Err(other.to_string()),
        }
    });
    assert!(
        served.is_ok(),
        "no HTTPS answer: {served:?}\n{}",
        daemon.log()
    );
    assert_eq!(curl_as_nobody(&["--cacert", cacert, &https]), "401");
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = format!("http://127.0.0.1:{}/metrics", addr.port());
    assert_eq!(curl_as_nobody(&["-H", &auth, &plain]), "000");
    assert!(
        daemon.log().contains("listening on https://"),
        "{}",
        daemon.log()
    );
    assert!(daemon.stop().success());

    // A key others can read is refused, in one line.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let addr = free_loopback_addr();
    let mut daemon = Daemon::spawn(&addr.to_string(), addr, &args);
    let status = daemon.wait_exit();
    let log = daemon.log();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(one_line(&log).contains("bad TLS file"), "{log}");
}

#[test]
fn a_kernel_chosen_port_is_logged_and_names_are_escaped_once() {
    require_root();
    let _guard = kernel_lock();
    // `--listen 127.0.0.1:0`: the log names the port the kernel gave.
    let placeholder = free_loopback_addr();
    let mut daemon = Daemon::spawn(
        "127.0.0.1:0",
        placeholder,
        &["--tier", "full", "--comm", "fdpd-port0"],
    );
    let line = daemon.wait_line("INFO", "listening on http://127.0.0.1:");
    let port: u16 = line.rsplit(':').next().unwrap().trim().parse().unwrap();
    assert_ne!(port, 0, "{line}");
    daemon.addr = format!("127.0.0.1:{port}").parse().unwrap();
    daemon.wait_healthy();
    // A backslash in a name asked for is shown once, not doubled.
    let (code, body) = daemon.get("/report.json?target=a%5Cb");
    assert_eq!(code, 404, "{body}");
    assert!(body.starts_with("no target named \"a\\b\""), "{body}");
    assert!(daemon.stop().success());
}

/// GET `path` from `addr` with `token`: the status code.
fn status_with(addr: std::net::SocketAddr, path: &str, token: &str) -> u16 {
    let bearer = format!("Authorization: Bearer {token}");
    http_get_with(addr, path, &[&bearer]).map_or(0, |(code, _, _)| code)
}

#[test]
fn daemons_on_one_port_at_two_addresses_keep_their_own_token_files() {
    require_root();
    let _guard = kernel_lock();
    let run_dir = tmp("run-two");
    let _ = std::fs::remove_dir_all(&run_dir);
    let port = free_loopback_addr().port();
    let env = [("RUNTIME_DIRECTORY", run_dir.to_str().unwrap())];
    let start = |ip: &str| {
        let addr: std::net::SocketAddr = format!("{ip}:{port}").parse().unwrap();
        let mut d = Daemon::spawn_env(
            &addr.to_string(),
            addr,
            &["--tier", "full", "--comm", "fdpd-two"],
            &env,
        );
        d.wait_healthy();
        let file = run_dir.join(format!("daemon-{ip}-{port}.token"));
        let line = d.wait_line("INFO", "requests need the token in");
        assert!(line.contains(file.to_str().unwrap()), "{line}");
        let token = std::fs::read_to_string(&file).unwrap().trim().to_string();
        (d, file, token)
    };
    let (mut first, first_file, first_token) = start("127.0.0.1");
    let (mut second, second_file, second_token) = start("127.0.0.2");
    assert_ne!(first_token, second_token);
    // Each serves the token its own file holds, and not the other's.
    assert_eq!(status_with(first.addr, "/metrics", &first_token), 200);
    assert_eq!(status_with(second.addr, "/metrics", &second_token), 200);
    assert_eq!(status_with(first.addr, "/metrics", &second_token), 401);
    assert_eq!(status_with(second.addr, "/metrics", &first_token), 401);
    // Stopping one removes its file alone: the other's file still holds its working token.
    assert!(second.stop().success(), "{}", second.log());
    assert!(
        !second_file.exists(),
        "the second daemon's file outlived it"
    );
    let kept = std::fs::read_to_string(&first_file).expect("the first daemon's file is gone");
    assert_eq!(kept.trim(), first_token);
    assert_eq!(status_with(first.addr, "/metrics", &first_token), 200);
    assert!(first.stop().success(), "{}", first.log());
    assert!(!first_file.exists());
}

/// The head of the answer to `GET path` with `Host: host:PORT` and the header `auth` (if any).
fn raw_head(addr: std::net::SocketAddr, host: &str, path: &str, auth: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let auth = if auth.is_empty() {
        String::new()
    } else {
        format!("{auth}\r\n")
    };
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}:{}\r\n{auth}Connection: close\r\n\r\n",
        addr.port()
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    text.split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Makes fd syscalls under a comm holding ESC (set with prctl(PR_SET_NAME)) until killed.
const ESC_COMM_SCRIPT: &str = "
import ctypes, os, time
ctypes.CDLL(None).prctl(15, b'fdpd\\x1besc', 0, 0, 0)
end = time.time() + 60
while time.time() < end:
    os.close(os.open('/dev/null', os.O_RDONLY))
    time.sleep(0.001)
";

#[test]
fn the_log_hides_every_token_form_answers_send_no_referrer_and_metrics_escape_names() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd\x1besc";
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        comm,
        "-v",
        "--interval",
        "300ms",
    ]);
    let mut busy = Command::new("python3")
        .args(["-c", ESC_COMM_SCRIPT])
        .spawn()
        .unwrap();
    // -v: the token's value under any parameter name that decodes to `token`, in any place.
    for (path, shown) in [
        ("/metrics?TOKEN=Secret1Secret1Secret1", "TOKEN=…"),
        ("/metrics?tok%65n=Secret2Secret2Secret2", "tok%65n=…"),
        ("/metrics?a=1;token=Secret3Secret3Secret3", "a=1;token=…"),
    ] {
        assert_eq!(daemon.get_anonymous(path).0, 401, "{path}");
        daemon.wait_line("DEBUG", shown);
    }
    let (code, _) = daemon.get_anonymous(&format!("/report.json?x=1&token={}", token()));
    assert!(code == 200 || code == 503, "{code}");
    daemon.wait_line("DEBUG", "/report.json?x=1&token=…");
    let log = daemon.log();
    for secret in ["Secret1", "Secret2", "Secret3", token().as_str()] {
        assert!(!log.contains(secret), "{secret} logged:\n{log}");
    }
    // Every answer, whatever its status, keeps the page's URL (and a ?token=) to itself.
    let auth = authorization();
    for (host, path, auth, want) in [
        ("127.0.0.1", "/healthz", "", "200"),
        ("127.0.0.1", "/metrics", auth.as_str(), "200"),
        ("127.0.0.1", "/metrics", "", "401"),
        ("attacker.example", "/metrics", auth.as_str(), "421"),
        ("127.0.0.1", "/no-such-page", auth.as_str(), "404"),
    ] {
        let head = raw_head(daemon.addr, host, path, auth);
        assert!(
            head.starts_with(&format!("HTTP/1.1 {want}")),
            "{path}: {head}"
        );
        assert!(
            head.lines()
                .any(|l| l.eq_ignore_ascii_case("referrer-policy: no-referrer")),
            "{path}: {head}"
        );
    }
    // The comm's ESC reaches /metrics escaped, never raw.
    let escaped = "target=\"fdpd\\\\x1besc\"";
    let found = poll(TIMEOUT, || {
        let (_, body) = daemon.get("/metrics");
        body.contains(escaped).then_some(body).ok_or(())
    });
    let _ = busy.kill();
    let _ = busy.wait();
    let body = found.unwrap_or_else(|()| panic!("no {escaped} in /metrics\n{}", daemon.log()));
    assert!(!body.contains('\x1b'), "a raw ESC in /metrics");
}

/// As the DaemonSet runs it behind its headless Service (`--listen 0.0.0.0:PORT --allow-remote
/// --allow-host fdprof.fdprof.svc …`), reached here over loopback with the Host a scraper sends:
/// the Service's names and the pod's own addresses and name are served, with the token only;
/// any other name is refused (421), whatever it starts with.
#[test]
fn behind_a_service_the_host_check_takes_its_names_and_the_pods_own_addresses() {
    require_root();
    let _guard = kernel_lock();
    let port = free_loopback_addr().port();
    let every = format!("0.0.0.0:{port}");
    let reach: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut daemon = Daemon::spawn(
        &every,
        reach,
        &[
            "--comm",
            "fdpd-service",
            "--allow-remote",
            "--allow-host",
            "fdprof.fdprof.svc",
            "--allow-host",
            "fdprof.fdprof.svc.cluster.local",
        ],
    );
    daemon.wait_healthy();
    let auth = authorization();
    let status = |host: &str, auth: &str| -> String {
        let head = raw_head(reach, host, "/metrics", auth);
        head.split(' ').nth(1).unwrap_or_default().to_string()
    };
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let own_address = run(Command::new("hostname").arg("-I"));
    let own_address = String::from_utf8_lossy(&own_address.stdout)
        .split_whitespace()
        .find(|a| a.parse::<std::net::Ipv4Addr>().is_ok())
        .map(String::from);
    let served: Vec<String> = [
        "fdprof.fdprof.svc",
        "fdprof.fdprof.svc.cluster.local",
        "FDPROF.fdprof.SVC",
        hostname.trim(),
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(own_address)
    .collect();
    for host in &served {
        assert_eq!(status(host, &auth), "200", "Host {host} with the token");
        assert_eq!(status(host, ""), "401", "Host {host} without the token");
    }
    for host in [
        "fdprof.fdprof.svc.attacker.example",
        "attacker.example",
        "fdprof.other.svc",
    ] {
        assert_eq!(status(host, &auth), "421", "Host {host}");
    }
    assert!(daemon.stop().success(), "{}", daemon.log());
    assert_no_programs_left();
}
