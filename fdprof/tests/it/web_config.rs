//! `daemon --web-config-file` for real, with certificates made by `openssl`: client
//! certificates required and verified (none, another CA's, or one whose names are not allowed
//! are refused at the handshake; a verified one needs no token), Debian's Prometheus scraping
//! with its `tls_config` client certificate, a certificate rotated on disk served without a
//! restart, a broken new file keeping the old config, bcrypt basic auth, and `/healthz` on
//! `--health-listen` for probes without a certificate.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::daemon::{Daemon, poll};
use crate::common::prometheus::{Prometheus, free_loopback_addr, http_get, sample_values};
use crate::common::*;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A certificate and its key (0600), as files.
struct Issued {
    cert: PathBuf,
    key: PathBuf,
}

fn openssl(args: &[&str]) {
    let out = run(Command::new("openssl").args(args));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A CA named `name`, in `dir`.
fn ca(dir: &Path, name: &str) -> Issued {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        &format!("/CN={name}"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout",
        path(&key),
        "-out",
        path(&cert),
    ]);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    Issued { cert, key }
}

/// A certificate `name` signed by `ca`, for `san` (`DNS:…`/`IP:…`) and `usage`
/// (`serverAuth`/`clientAuth`).
fn issue(ca: &Issued, dir: &Path, name: &str, san: &str, usage: &str) -> Issued {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let (csr, ext) = (
        dir.join(format!("{name}.csr")),
        dir.join(format!("{name}.ext")),
    );
    std::fs::write(
        &ext,
        format!("basicConstraints=CA:FALSE\nsubjectAltName={san}\nextendedKeyUsage={usage}\n"),
    )
    .unwrap();
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        &format!("/CN={name}"),
        "-keyout",
        path(&key),
        "-out",
        path(&csr),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        path(&csr),
        "-CA",
        path(&ca.cert),
        "-CAkey",
        path(&ca.key),
        "-set_serial",
        &format!("{}", std::process::id() as u64 * 1000 + name.len() as u64),
        "-days",
        "1",
        "-extfile",
        path(&ext),
        "-out",
        path(&cert),
    ]);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    Issued { cert, key }
}

/// Writes the web config `text` (0600) at `at`, by a rename so a watcher never reads half.
fn write_config(at: &Path, text: &str) {
    let part = at.with_extension("part");
    std::fs::write(&part, text).unwrap();
    std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&part, at).unwrap();
}

/// curl to the daemon over https trusting `ca`, with a client certificate or none: the HTTP
/// status, or `000` when no HTTP answer came (a refused handshake), and curl's stderr.
fn curl(
    addr: std::net::SocketAddr,
    ca: &Issued,
    client: Option<&Issued>,
    extra: &[&str],
) -> (String, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "-v",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-m",
        "10",
    ])
    .args(["--cacert", path(&ca.cert)]);
    if let Some(c) = client {
        cmd.args(["--cert", path(&c.cert), "--key", path(&c.key)]);
    }
    let out = run(cmd
        .args(extra)
        .arg(format!("https://127.0.0.1:{}/metrics", addr.port())));
    (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// The PKI of a test: a CA with a server certificate for 127.0.0.1 and a client certificate
/// for `scraper.test`, and another CA with its own client.
struct Pki {
    dir: PathBuf,
    ca: Issued,
    server: Issued,
    client: Issued,
    stranger: Issued,
    unnamed: Issued,
}

fn pki(name: &str) -> Pki {
    let dir = tmp(name);
    let _ = std::fs::remove_dir_all(&dir);
    let ca_ = ca(&dir, "fdprof-test-ca");
    let server = issue(
        &ca_,
        &dir,
        "server",
        "IP:127.0.0.1,DNS:localhost",
        "serverAuth",
    );
    let client = issue(&ca_, &dir, "client", "DNS:scraper.test", "clientAuth");
    let unnamed = issue(&ca_, &dir, "unnamed", "DNS:intruder.test", "clientAuth");
    let other = ca(&dir, "other-ca");
    let stranger = issue(&other, &dir, "stranger", "DNS:scraper.test", "clientAuth");
    Pki {
        dir,
        ca: ca_,
        server,
        client,
        stranger,
        unnamed,
    }
}

fn mtls_config(pki: &Pki) -> String {
    format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n  \
         client_allowed_sans: [scraper.test]\n\
         http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
        path(&pki.server.cert),
        path(&pki.server.key),
        path(&pki.ca.cert)
    )
}

/// A daemon under `--web-config-file config`, `/healthz` on a port of its own, once healthy.
fn start(config: &Path, comm: &str) -> (Daemon, std::net::SocketAddr) {
    let (addr, health) = (free_loopback_addr(), free_loopback_addr());
    let daemon = Daemon::spawn(
        &addr.to_string(),
        addr,
        &[
            "--comm",
            comm,
            "--web-config-file",
            path(config),
            "--health-listen",
            &health.to_string(),
        ],
    );
    let healthy = poll(TIMEOUT, || match http_get(health, "/healthz") {
        Ok((200, _)) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert!(healthy.is_ok(), "{healthy:?}\n{}", daemon.log());
    (daemon, addr)
}

#[test]
fn client_certificates_are_verified_at_the_handshake_and_one_that_is_needs_no_token() {
    require_root();
    let _guard = kernel_lock();
    let pki = pki("web-mtls");
    let config = pki.dir.join("web.yml");
    write_config(&config, &mtls_config(&pki));
    let (mut daemon, addr) = start(&config, "fdpd-mtls");
    // No certificate, another CA's, or one whose names are not allowed: no HTTP answer at all.
    for (client, what) in [
        (None, "none"),
        (Some(&pki.stranger), "another CA's"),
        (Some(&pki.unnamed), "a name not allowed"),
    ] {
        let (code, err) = curl(addr, &pki.ca, client, &[]);
        assert_eq!(code, "000", "{what}: {err}");
    }
    let (code, err) = curl(addr, &pki.ca, Some(&pki.client), &[]);
    assert_eq!(
        code,
        "200",
        "a verified certificate, no token: {err}\n{}",
        daemon.log()
    );
    assert!(
        err.to_ascii_lowercase().contains("x-frame-options: deny"),
        "{err}"
    );
    // The token still works beside it.
    let (code, _) = curl(
        addr,
        &pki.ca,
        Some(&pki.client),
        &["-H", &crate::common::daemon::authorization()],
    );
    assert_eq!(code, "200");
    assert!(daemon.stop().success());
}

#[test]
fn prometheus_scrapes_with_its_client_certificate_and_a_rotated_one_is_served_without_a_restart() {
    require_root();
    let _guard = kernel_lock();
    let pki = pki("web-rotate");
    let config = pki.dir.join("web.yml");
    write_config(&config, &mtls_config(&pki));
    let (mut daemon, addr) = start(&config, "fdpd-rotate");
    let job = format!(
        "  - job_name: fdprof\n    scheme: https\n    tls_config:\n      ca_file: {}\n      \
         cert_file: {}\n      key_file: {}\n    static_configs:\n      - targets: [\"127.0.0.1:{}\"]\n",
        path(&pki.ca.cert),
        path(&pki.client.cert),
        path(&pki.client.key),
        addr.port()
    );
    let prometheus = Prometheus::start_with_job(&job);
    let up = prometheus.wait_for("up{job=\"fdprof\"}", TIMEOUT, |r| sample_values(r) == [1.0]);
    assert_eq!(sample_values(&up), [1.0], "{}", prometheus.log());
    // A new server certificate, written over the old one's files.
    let next = pki.dir.join("next");
    std::fs::create_dir_all(&next).unwrap();
    let rotated = issue(&pki.ca, &next, "rotated", "IP:127.0.0.1", "serverAuth");
    std::fs::copy(&rotated.key, &pki.server.key).unwrap();
    std::fs::copy(&rotated.cert, &pki.server.cert).unwrap();
    let served = poll(TIMEOUT, || {
        let (code, err) = curl(addr, &pki.ca, Some(&pki.client), &[]);
        (code == "200" && err.contains("CN=rotated"))
            .then_some(())
            .ok_or(err)
    });
    assert!(served.is_ok(), "{served:?}\n{}", daemon.log());
    daemon.wait_line("INFO", "web config reloaded");
    // A broken new file keeps what is served, said once.
    write_config(&config, "tls_server_config: [\n");
    daemon.wait_line(
        "ERROR",
        "web config not reloaded, the one being served stays",
    );
    let (code, _) = curl(addr, &pki.ca, Some(&pki.client), &[]);
    assert_eq!(code, "200");
    let scraped = prometheus.wait_for("up{job=\"fdprof\"}", TIMEOUT, |r| sample_values(r) == [1.0]);
    assert_eq!(sample_values(&scraped), [1.0]);
    assert!(daemon.stop().success());
}

#[test]
fn basic_auth_users_pass_with_their_password_alone() {
    require_root();
    let _guard = kernel_lock();
    let dir = tmp("web-basic");
    std::fs::create_dir_all(&dir).unwrap();
    let hash = bcrypt::hash("correct horse", 10).unwrap();
    let config = dir.join("web.yml");
    write_config(&config, &format!("basic_auth_users:\n  alice: {hash}\n"));
    let (mut daemon, addr) = start(&config, "fdpd-basic");
    let get = |user: &str| {
        let out = run(Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-u", user])
            .arg(format!("http://127.0.0.1:{}/metrics", addr.port())));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(get("alice:correct horse"), "200");
    assert_eq!(get("alice:correct horse"), "200", "remembered");
    assert_eq!(get("alice:wrong"), "401");
    assert_eq!(get("bob:correct horse"), "401");
    assert!(daemon.stop().success());
}

#[test]
fn a_web_config_it_cannot_honour_is_one_line_and_nothing_is_loaded() {
    require_root();
    let pki = pki("web-bad");
    let cases = [
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
            "client_auth_type",
        ),
        ("tls_config: {}\n", "not a web config"),
        ("basic_auth_users:\n  alice: plain\n", "not a bcrypt hash"),
    ];
    for (text, says) in cases {
        let config = pki.dir.join("bad.yml");
        write_config(&config, text);
        let addr = free_loopback_addr();
        let mut daemon = Daemon::spawn(
            &addr.to_string(),
            addr,
            &["--comm", "fdpd-none", "--web-config-file", path(&config)],
        );
        let status = daemon.wait_exit();
        let log = daemon.log();
        assert_eq!(status.code(), Some(2), "{log}");
        assert_eq!(log.trim().lines().count(), 1, "{log}");
        assert!(log.contains(says), "{log}");
    }
    // A key others can read.
    std::fs::set_permissions(&pki.server.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = pki.dir.join("web.yml");
    write_config(&config, &mtls_config(&pki));
    let addr = free_loopback_addr();
    let mut daemon = Daemon::spawn(
        &addr.to_string(),
        addr,
        &["--comm", "fdpd-none", "--web-config-file", path(&config)],
    );
    assert_eq!(daemon.wait_exit().code(), Some(2));
    assert!(daemon.log().contains("bad TLS file"), "{}", daemon.log());
}
