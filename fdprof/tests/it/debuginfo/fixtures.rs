//! The stripped programs the debug-file tests profile, built as distributions ship them (the
//! symbols split off into a debug file, the binary stripped), each under a build id of its
//! own; a real `debuginfod` over their debug files; and a listener that never answers.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::prometheus::free_loopback_addr;
use crate::common::{cc, run};

/// The chain as a named stack lists it, innermost first.
pub const CHAIN: [&str; 11] = [
    "leaf", "chain_10", "chain_09", "chain_08", "chain_07", "chain_06", "chain_05", "chain_04",
    "chain_03", "chain_02", "chain_01",
];

/// A program split as a distribution splits it.
pub struct Split {
    /// The stripped binary (no `.symtab`, no debug sections).
    pub stripped: PathBuf,
    /// Its symbols and DWARF (`objcopy --only-keep-debug`).
    pub debug: PathBuf,
    /// Lowercase hex.
    pub build_id: String,
}

fn tool(cmd: &mut Command) {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// 20 random bytes in hex: a build id no other test binary (nor any cache) has.
fn random_build_id() -> String {
    let mut bytes = [0u8; 20];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut bytes,
    )
    .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `chain.c` built `-O2 -g` with frame pointers (so the walk itself is whole) in `dir`, its
/// debug part split off to `NAME.debug` and the binary stripped as `NAME`; with `link`, the
/// binary names its debug file by `.gnu_debuglink`.
pub fn split(dir: &Path, name: &str, link: bool) -> Split {
    std::fs::create_dir_all(dir).unwrap();
    let build_id = random_build_id();
    let full = dir.join(format!("{name}.full"));
    let id_flag = format!("-Wl,--build-id=0x{build_id}");
    cc(
        "chain.c",
        &full,
        &["-g", "-fno-omit-frame-pointer", "-pthread", &id_flag],
    );
    let debug = dir.join(format!("{name}.debug"));
    let stripped = dir.join(name);
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&full)
            .arg(&debug),
    );
    tool(
        Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&stripped)
            .arg(&full),
    );
    if link {
        // The link records the name and CRC of the file as it is now, from its folder.
        tool(
            Command::new("objcopy")
                .current_dir(dir)
                .arg(format!("--add-gnu-debuglink={name}.debug"))
                .arg(name),
        );
    }
    std::fs::remove_file(&full).unwrap();
    Split {
        stripped,
        debug,
        build_id,
    }
}

/// MiniDebugInfo as Fedora makes it: the function symbols of `debug`, xz-compressed into the
/// stripped binary's `.gnu_debugdata`.
pub fn add_minidebuginfo(split: &Split) {
    let dir = split.stripped.parent().unwrap();
    let symbols = run(Command::new("nm")
        .args(["--format=posix", "--defined-only"])
        .arg(&split.debug));
    let keep: String = String::from_utf8_lossy(&symbols.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (name, kind) = (f.next()?, f.next()?);
            matches!(kind, "T" | "t").then(|| format!("{name}\n"))
        })
        .collect();
    let keep_file = dir.join("keep-symbols");
    std::fs::write(&keep_file, keep).unwrap();
    let mini = dir.join("mini");
    tool(
        Command::new("objcopy")
            .args(["-S", "--remove-section", ".comment"])
            .arg(format!("--keep-symbols={}", keep_file.display()))
            .arg(&split.debug)
            .arg(&mini),
    );
    tool(Command::new("xz").arg("-f").arg(&mini));
    tool(
        Command::new("objcopy")
            .arg(format!(
                "--add-section=.gnu_debugdata={}.xz",
                mini.display()
            ))
            .arg(&split.stripped),
    );
}

/// The share of `file_lock` waits (by count) whose user stack names the whole chain, of all
/// of a recording's `file_lock` waits; and how many there were.
pub fn named_share(rec: &Value) -> (f64, u64) {
    let (mut all, mut named) = (0u64, 0u64);
    for site in rec["contention"].as_array().unwrap() {
        if site["lock"] != "file_lock" {
            continue;
        }
        let n = site["count"].as_u64().unwrap();
        let names: Vec<&str> = site["user_stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["function"].as_str().unwrap())
            .collect();
        all += n;
        if names.windows(CHAIN.len()).any(|w| w == CHAIN) {
            named += n;
        }
    }
    assert!(all > 0, "no file_lock waits recorded");
    (named as f64 / all as f64, all)
}

/// The user frames of `rec`'s `file_lock` waits in the binary `module`.
pub fn frames_in<'a>(rec: &'a Value, module: &str) -> Vec<&'a Value> {
    rec["contention"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["lock"] == "file_lock")
        .flat_map(|s| s["user_stack"].as_array().unwrap())
        .filter(|f| f["module"] == module)
        .collect()
}

/// Elfutils' `debuginfod -F` over `dir` on a free port (it listens on every address; only its
/// loopback one is used), its environment emptied so that it never asks an upstream server;
/// killed by its PID when dropped.
pub struct Debuginfod {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Debuginfod {
    /// Started, and waited for until it serves `build_id`'s debug file.
    pub fn start(dir: &Path, build_id: &str) -> Debuginfod {
        let addr = free_loopback_addr();
        let log = dir.with_extension("debuginfod.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new("debuginfod")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir)
            .args(["-F", "-t", "0", "-g", "0", "-c", "1", "-p"])
            .arg(addr.port().to_string())
            .arg("-d")
            .arg(dir.with_extension("sqlite"))
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("cannot run debuginfod (`cargo xtask bootstrap` installs it)");
        let mut server = Debuginfod { child, addr, log };
        let path = format!("/buildid/{build_id}/debuginfo");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("debuginfod exited ({status}):\n{}", server.log());
            }
            if crate::common::prometheus::http_get(addr, &path).is_ok_and(|(code, _)| code == 200) {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "debuginfod did not index {dir:?} in 60 s:\n{}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback listener that accepts every connection and never answers (nor closes it) until
/// dropped.
pub struct Silent {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Silent {
    pub fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                if let Ok((stream, _)) = listener.accept() {
                    held.push(stream);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Silent { addr, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
