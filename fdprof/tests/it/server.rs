//! `record --trace` of a server nobody here wrote, under its own load client: Debian's nginx
//! (one process, one thread: `master_process off`) on a loopback port, driven by apache2-utils'
//! `ab`, which opens a new connection per request. Each request is an `accept4` and an `openat`
//! of the page; the trace must replay under mainline with no mismatch and nothing ambiguous.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

const REQUESTS: u64 = 2000;

/// nginx in the foreground, one process, everything it writes under `dir`.
struct Nginx {
    child: Child,
    addr: SocketAddr,
}

impl Nginx {
    fn start(dir: &Path) -> Nginx {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port");
        std::fs::create_dir_all(dir.join("www")).unwrap();
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::write(dir.join("www/index.html"), "fdprof\n").unwrap();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log;\nevents {{ worker_connections 256; }}\nhttp {{\n\
             access_log {d}/access.log;\nclient_body_temp_path {d}/tmp;\nproxy_temp_path {d}/tmp;\n\
             fastcgi_temp_path {d}/tmp;\nuwsgi_temp_path {d}/tmp;\nscgi_temp_path {d}/tmp;\n\
             server {{ listen {addr}; root {d}/www; }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdin(Stdio::null())
            .spawn()
            .expect("nginx (Debian's nginx package, installed by `cargo xtask bootstrap`)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx { child, addr }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: the pid is our own child's, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        let _ = self.child.wait();
    }
}

/// The number after `label` in `ab`'s summary.
fn ab_figure(out: &str, label: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in ab's output:\n{out}"))
}

#[test]
fn nginx_under_ab_replays_without_a_mismatch() {
    require_root();
    let _k = kernel_lock();
    let nginx = Nginx::start(&tmp("nginx"));
    let data = tmp("nginx.data");
    let pid = nginx.child.id().to_string();
    let mut rec = start_record(&["--trace", "-p", &pid, "-o", data.to_str().unwrap()]);
    let ab = run(Command::new("ab")
        .args(["-q", "-n", &REQUESTS.to_string(), "-c", "4"])
        .arg(format!("http://{}/index.html", nginx.addr)));
    let ab_out = String::from_utf8_lossy(&ab.stdout).into_owned();
    assert!(ab.status.success(), "ab failed: {ab:?}");
    assert_eq!(ab_figure(&ab_out, "Complete requests:"), REQUESTS);
    assert_eq!(ab_figure(&ab_out, "Failed requests:"), 0);
    // SAFETY: the pid is our own child's.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    assert!(rec.wait().unwrap().success(), "record failed");
    drop(nginx);

    let out = run(fdprof()
        .args(["replay", "--model", "mainline", "--json"])
        .arg(&data));
    assert!(out.status.success(), "replay failed: {out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &report["models"][0];
    eprintln!(
        "nginx under ab -n {REQUESTS}: {} events, {} allocations, notes {}",
        m["events"], m["allocations"], report["source"]["notes"]
    );
    // Every request accepted a connection and opened the page: at least two allocations.
    assert!(m["allocations"].as_u64().unwrap() >= 2 * REQUESTS, "{m}");
    assert_eq!(m["model_mismatch"], 0, "{m}");
    assert_eq!(m["ambiguous"], 0, "one thread: {m}");
    assert_eq!(m["rejected"], 0, "{m}");
    assert_eq!(m["implicit_tables"], 0, "{m}");
    assert_no_programs_left();
}
