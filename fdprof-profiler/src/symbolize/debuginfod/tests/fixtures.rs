//! Fixtures of the debuginfod tests: temporary directories, ELF files built under a chosen
//! build id (`cc`, `objcopy`), a real `debuginfod` server, and loopback listeners that answer as
//! told. Only loopback addresses are ever used.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use object::Object;

use crate::symbolize::debuginfod::http::{self, Limits};
use crate::symbolize::debuginfod::{Config, Debuginfod, Lookup, Url, cache};

/// A directory under /tmp, removed on drop.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new() -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "fdprof-dbgd-{}-{seq}-{}",
            std::process::id(),
            cache::hex(&random_bytes(6))
        );
        let path = std::env::temp_dir().join(name);
        fs::create_dir(&path).unwrap();
        TempDir(path)
    }

    pub(super) fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(super) fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0; n];
    fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    bytes
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds `{dir}/prog` (debug info stripped) and `{dir}/prog.debug` under `build_id`; returns
/// the debug file's path.
pub(super) fn build_elf(dir: &Path, build_id: &[u8]) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let src = dir.join("prog.c");
    fs::write(&src, "#include <stdio.h>\nint work(int x) { return x * 3 + 1; }\nint main(int c, char **v) { (void)v; printf(\"%d\\n\", work(c)); return 0; }\n").unwrap();
    let exe = dir.join("prog");
    let debug = dir.join("prog.debug");
    let id = format!("-Wl,--build-id=0x{}", cache::hex(build_id));
    run(Command::new("cc")
        .args(["-g", "-O2", &id, "-o"])
        .arg(&exe)
        .arg(&src));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&debug));
    run(Command::new("objcopy").arg("--strip-debug").arg(&exe));
    debug
}

pub(super) fn loopback(port: u16) -> Url {
    Url::parse(&format!("http://127.0.0.1:{port}")).unwrap()
}

pub(super) fn config(urls: Vec<Url>, cache_dir: PathBuf) -> Config {
    Config {
        cache_dir,
        fetch_timeout: Duration::from_secs(10),
        ..Config::new(urls)
    }
}

pub(super) fn wait(d: &Debuginfod) {
    assert!(
        d.wait_idle(Instant::now() + Duration::from_secs(60)),
        "fetches still running after 60 s"
    );
}

pub(super) fn ready(lookup: Lookup) -> fs::File {
    match lookup {
        Lookup::Ready(file) => file,
        other => panic!("expected Ready, got {other:?}"),
    }
}

/// The build id of an opened ELF file, read from its start.
pub(super) fn build_id_of(mut file: fs::File) -> Vec<u8> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).unwrap();
    object::File::parse(&*bytes)
        .unwrap()
        .build_id()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// A `debuginfod -F` over `scan_dir` on a free loopback port, killed (by its pid) on drop.
pub(super) struct Server {
    child: Child,
    pub(super) port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the server and waits until it has indexed `build_id`. Its environment is emptied so
/// that it never federates to an upstream server (`DEBUGINFOD_URLS`).
pub(super) fn start_debuginfod(tmp: &TempDir, scan_dir: &Path, build_id: &[u8]) -> Server {
    let port = free_port();
    let log = fs::File::create(tmp.join("debuginfod.log")).unwrap();
    let child = Command::new("debuginfod")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &tmp.0)
        .args([
            "-F",
            "-t",
            "0",
            "-g",
            "0",
            "-c",
            "1",
            "-p",
            &port.to_string(),
            "-d",
        ])
        .arg(tmp.join("db.sqlite"))
        .arg(scan_dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("debuginfod (Debian's package `debuginfod`) must be installed");
    let mut server = Server { child, port };
    let target = loopback(port).join(&format!("/buildid/{}/debuginfo", cache::hex(build_id)));
    let limits = Limits {
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        max_body: 1 << 20,
        tls: None,
    };
    let start = Instant::now();
    while http::get(&target, &limits, &mut io::sink()).is_err() {
        let log = || fs::read_to_string(tmp.join("debuginfod.log")).unwrap_or_default();
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!("debuginfod exited ({status}):\n{}", log());
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "debuginfod did not index in 60 s:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// A loopback listener answering each connection with `respond(request head, stream, stop)`,
/// one at a time; it stops when dropped (and after 60 s at most).
pub(super) struct Canned {
    pub(super) port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Canned {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub(super) fn canned(
    respond: impl Fn(&str, &mut TcpStream, &AtomicBool) + Send + 'static,
) -> Canned {
    listen(move |mut stream, stop| {
        let head = read_request(&mut stream);
        respond(&head, &mut stream, stop);
    })
}

/// A loopback listener handing each connection to `serve`, one at a time, until dropped (and
/// for 60 s at most).
fn listen(serve: impl Fn(TcpStream, &AtomicBool) + Send + 'static) -> Canned {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        let start = Instant::now();
        while !stopped.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(60) {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(5)))
                        .unwrap();
                    serve(stream, &stopped);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    Canned {
        port,
        stop,
        thread: Some(thread),
    }
}

fn read_request(stream: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

pub(super) fn answer(stream: &mut impl Write, head: &str, body: &[u8]) {
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

pub(super) fn ok_with_length(
    body: Vec<u8>,
) -> impl Fn(&str, &mut TcpStream, &AtomicBool) + Send + 'static {
    move |_, stream, _| {
        answer(
            stream,
            &format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()),
            &body,
        )
    }
}

pub(super) fn not_found() -> impl Fn(&str, &mut TcpStream, &AtomicBool) + Send + 'static {
    |_, stream, _| {
        answer(
            stream,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n",
            b"not found",
        )
    }
}

/// Writes `head` then zeros until the client goes away (64 MiB or 20 s at most).
pub(super) fn zeros_after(
    head: &'static str,
) -> impl Fn(&str, &mut TcpStream, &AtomicBool) + Send + 'static {
    move |_, stream, stop| {
        let start = Instant::now();
        let zeros = [0u8; 65536];
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        for _ in 0..1024 {
            let chunk: &[u8] = if head.contains("chunked") {
                b"10000\r\n"
            } else {
                b""
            };
            let ended = stream
                .write_all(chunk)
                .and_then(|()| stream.write_all(&zeros))
                .is_err();
            let crlf = head.contains("chunked") && stream.write_all(b"\r\n").is_err();
            if ended
                || crlf
                || stop.load(Ordering::Relaxed)
                || start.elapsed() > Duration::from_secs(20)
            {
                return;
            }
        }
    }
}

/// A loopback https server answering every request with `body` under a self-signed certificate
/// for 127.0.0.1 (made by `openssl`), and a client configuration that trusts it alone.
pub(super) fn tls_canned(tmp: &TempDir, body: Vec<u8>) -> (Canned, Arc<rustls::ClientConfig>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (cert, key) = (tmp.join("cert.pem"), tmp.join("key.pem"));
    run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth"]));
    let chain: Vec<_> = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let server = Arc::new(server);
    let canned = listen(move |tcp, _| {
        let conn = rustls::ServerConnection::new(Arc::clone(&server)).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        read_request(&mut tls);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        answer(&mut tls, &head, &body);
        tls.conn.send_close_notify();
        let _ = tls.flush();
    });
    let client = http::build_tls_config(&cert).unwrap();
    (canned, client)
}
