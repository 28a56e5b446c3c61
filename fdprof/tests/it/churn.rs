//! The kernel's per-process and per-cgroup maps through churn, on the real kernel: under
//! `daemon -a`, 10,000 short processes (started as nobody) leave at most a few hundred entries
//! in every per-process map once they are gone, no map is ever full, and a new process is
//! counted exactly, and no thread slot is left to a thread that ended; under `daemon --cgroup`, a process in the last of 5,000 sub-cgroups is
//! counted exactly, and once they are all removed a new cgroup's process is too, with no error
//! logged; under `daemon -a`, 100,000 forked processes drop no lock wait for want of a
//! contention site. Each map is read with bpftool, by the ids of the maps the daemon holds open.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::daemon::{Daemon, fdprof_as, poll};
use crate::common::*;
use serde_json::Value;

/// Short processes of the churn.
const CHURN: u32 = 10_000;
/// What "a few hundred" entries is: processes alive on this machine (~100) have rows, each in
/// a handful of (process, syscall) rows.
const FEW_HUNDRED: u64 = 600;
/// How long the churn may take at most.
const CHURN_BOUND: Duration = Duration::from_secs(300);
const TIMEOUT: Duration = Duration::from_secs(30);

/// A map the daemon holds: its id, name, type, entries now and size.
#[derive(Debug)]
struct MapUse {
    id: u64,
    name: String,
    kind: String,
    entries: u64,
    max: u64,
}

/// The processes `SITE_INDEX` (map `id`) holds contention sites of (`SiteKey::tgid`, after
/// the 16-byte lock identity and the two stack ids); 0, sites not kept per process, left out.
fn site_processes(id: u64) -> std::collections::BTreeSet<u32> {
    bpftool(&["map", "dump", "id", &id.to_string()])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let key: Vec<u8> = e["key"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| {
                    u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
                })
                .collect();
            u32::from_le_bytes(key[24..28].try_into().unwrap())
        })
        .filter(|&tgid| tgid != 0)
        .collect()
}

/// The threads holding a slot of `THREAD_ROWS` (map `id`): (tid, tgid), the value's first two
/// words; free slots (tid 0) left out.
fn held_thread_slots(id: u64) -> Vec<(u32, u32)> {
    bpftool(&["map", "dump", "id", &id.to_string()])
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let word = |k: usize| -> u32 {
                let b: Vec<u8> = e["value"].as_array().unwrap()[4 * k..4 * k + 4]
                    .iter()
                    .map(|b| {
                        u8::from_str_radix(b.as_str().unwrap().trim_start_matches("0x"), 16)
                            .unwrap()
                    })
                    .collect();
                u32::from_le_bytes(b.try_into().unwrap())
            };
            let (tid, tgid) = (word(0), word(1));
            (tid != 0).then_some((tid, tgid))
        })
        .collect()
}

/// Every BPF map process `pid` holds open (`/proc/PID/fdinfo`'s `map_id`), as bpftool shows
/// and dumps it.
fn maps_of(pid: u32) -> Vec<MapUse> {
    let mut ids: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("map_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let show = bpftool(&["map", "show", "id", &id.to_string()]);
            let kind = show["type"].as_str().unwrap().to_string();
            let entries = match kind.contains("hash") {
                true => bpftool(&["map", "dump", "id", &id.to_string()])
                    .as_array()
                    .unwrap()
                    .len() as u64,
                false => 0,
            };
            MapUse {
                id,
                name: show["name"].as_str().unwrap().to_string(),
                kind,
                entries,
                max: show["max_entries"].as_u64().unwrap(),
            }
        })
        .collect()
}

fn bpftool(args: &[&str]) -> Value {
    let out = run(Command::new("bpftool").arg("--json").args(args));
    assert!(
        out.status.success(),
        "bpftool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `n` short processes, one after the other (at most two alive at once: the shell and one
/// `true`), run by nobody (uid 65534); how long they took.
fn churn(n: u32) -> Duration {
    use std::os::unix::process::CommandExt;
    let began = Instant::now();
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "i=0; while [ $i -lt {n} ]; do /bin/true; i=$((i+1)); done"
        ))
        .uid(65534)
        .gid(65534)
        .current_dir("/")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let status = poll(CHURN_BOUND, || shell.try_wait().unwrap().ok_or(()));
    if status.is_err() {
        let _ = shell.kill();
        let _ = shell.wait();
        panic!("{n} short processes took over {CHURN_BOUND:?}");
    }
    assert!(status.unwrap().success());
    began.elapsed()
}

/// `fdprof_events_dropped_total` of `probe`/`reason`.
fn dropped(daemon: &Daemon, probe: &str, reason: &str) -> Option<f64> {
    daemon.metric(&format!(
        "fdprof_events_dropped_total{{probe=\"{probe}\",reason=\"{reason}\"}}"
    ))
}

/// Runs `socket-close --ops k` as `comm` and waits until the daemon's `/report.json` has its
/// pid among `processes[]` with exactly `k` sockets (the generator's own count).
fn counted_exactly(daemon: &Daemon, comm: &str, k: u64) {
    let w = start_workload_with(
        fdprof_as(comm),
        &["socket-close", "-t", "1", "--ops", &k.to_string()],
    );
    let pid = w.pid;
    w.go();
    let expected = w.finish()["expected"].clone();
    assert_eq!(expected["syscalls"]["socket"], k);
    let got = sockets_reach(daemon, pid, k);
    if let Err(last) = got {
        panic!(
            "pid {pid} ({comm}) has {last:?} sockets in processes[], not {k}\n{}",
            daemon.log()
        );
    }
}

#[test]
fn system_wide_daemon_frees_the_rows_of_exited_processes() {
    require_root();
    let _kernel = kernel_lock();
    let began = Instant::now();
    let daemon = Daemon::start(&["--tier", "full", "-a", "--interval", "1s"]);
    daemon.wait_line("INFO", "profiling every process");
    let took = churn(CHURN);
    // At rest: two sweeps and an interval after the last exit.
    std::thread::sleep(Duration::from_secs(3));
    let maps = maps_of(daemon.pid());
    for m in &maps {
        eprintln!(
            "after {CHURN} processes ({took:?}): {} ({}) {}/{}",
            m.name, m.kind, m.entries, m.max
        );
    }
    let hashes: Vec<&MapUse> = maps.iter().filter(|m| m.kind.contains("hash")).collect();
    for name in ["PROCESS_SYSCALL", "PROCESS_COMMS", "PROCESS_SCANS", "ENDED"] {
        assert!(
            hashes.iter().any(|m| m.name == name),
            "no map {name} among {maps:?}"
        );
    }
    // A thread's slot is freed when it ends: every slot held is a thread still running (one
    // that ended between the dump and the look is looked at again in a second dump).
    let slots = maps.iter().find(|m| m.name == "THREAD_ROWS").unwrap().id;
    let gone = |held: Vec<(u32, u32)>| -> Vec<(u32, u32)> {
        held.into_iter()
            .filter(|(tid, tgid)| !Path::new(&format!("/proc/{tgid}/task/{tid}")).exists())
            .collect()
    };
    let first = gone(held_thread_slots(slots));
    let again = held_thread_slots(slots);
    let left: Vec<&(u32, u32)> = first.iter().filter(|t| again.contains(t)).collect();
    assert!(
        left.is_empty(),
        "THREAD_ROWS slots held by threads that ended: {left:?}"
    );
    // Contention sites are per (lock, stacks, process): a process alive may hold many. Those
    // of the processes that had ended are gone two sweeps later.
    let sites = hashes.iter().find(|m| m.name == "SITE_INDEX").unwrap().id;
    let ended: Vec<u32> = site_processes(sites)
        .into_iter()
        .filter(|t| !Path::new(&format!("/proc/{t}")).exists())
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let left = site_processes(sites);
    let kept: Vec<&u32> = ended.iter().filter(|t| left.contains(t)).collect();
    assert!(kept.is_empty(), "sites of ended processes {kept:?} kept");
    for m in hashes.iter().filter(|m| !m.name.starts_with("SITE_")) {
        assert!(
            m.entries <= FEW_HUNDRED,
            "{} holds {} of {} entries after {CHURN} processes",
            m.name,
            m.entries,
            m.max
        );
    }
    // No per-process map was ever full, and nothing is dropped at rest.
    let reasons = [
        "map_full",
        "process_syscalls_full",
        "process_comms_full",
        "process_scans_full",
        "exited_full",
    ];
    let at_rest: Vec<Option<f64>> = reasons
        .iter()
        .map(|r| dropped(&daemon, "processes", r))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    for (reason, before) in reasons.iter().zip(at_rest) {
        assert_eq!(before, Some(0.0), "processes/{reason}");
        assert_eq!(dropped(&daemon, "processes", reason), Some(0.0));
    }
    counted_exactly(&daemon, "fdpd-churn-new", 3000);
    eprintln!("system-wide churn test: {:?}", began.elapsed());
    drop(daemon);
    assert_no_programs_left();
}

/// A parent cgroup of the v2 hierarchy made for one test, with numbered children; every one
/// removed when dropped, even when the test fails.
struct CgroupTree {
    parent: PathBuf,
}

impl CgroupTree {
    fn new(name: &str) -> CgroupTree {
        let v2 = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.join("cgroup.subtree_control").exists())
            .expect("a cgroup v2 hierarchy");
        let parent = v2.join(format!("fdprof-test-{name}-{}", std::process::id()));
        std::fs::create_dir(&parent).unwrap_or_else(|e| panic!("cannot make {parent:?}: {e}"));
        CgroupTree { parent }
    }

    fn child(&self, name: &str) -> PathBuf {
        self.parent.join(name)
    }

    fn make(&self, name: &str) -> PathBuf {
        let dir = self.child(name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot make {dir:?}: {e}"));
        dir
    }

    /// Removes every child but `keep` (waiting for their processes to go).
    fn clear(&self, keep: Option<&Path>) {
        for e in std::fs::read_dir(&self.parent).unwrap().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) && Some(e.path().as_path()) != keep {
                remove_cgroup(&e.path());
            }
        }
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        if self.parent.exists() {
            self.clear(None);
            remove_cgroup(&self.parent);
        }
    }
}

fn remove_cgroup(dir: &Path) {
    let began = Instant::now();
    while std::fs::remove_dir(dir).is_err() && began.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Moves a waiting workload into `cgroup`, runs it and checks the daemon counted its `k`
/// sockets exactly.
fn cgroup_process_counted(daemon: &Daemon, cgroup: &Path, k: u64) {
    let w = start_workload(&["socket-close", "-t", "1", "--ops", &k.to_string()]);
    std::fs::write(cgroup.join("cgroup.procs"), w.pid.to_string()).unwrap();
    let pid = w.pid;
    w.go();
    assert_eq!(w.finish()["expected"]["syscalls"]["socket"], k);
    let got = sockets_reach(daemon, pid, k);
    if let Err(last) = got {
        panic!(
            "pid {pid} in {cgroup:?} has {last:?} sockets, not {k}\n{}",
            daemon.log()
        );
    }
}

#[test]
fn thousands_of_sub_cgroups_are_followed_and_freed() {
    require_root();
    let _kernel = kernel_lock();
    let began = Instant::now();
    let n = 5000;
    let tree = CgroupTree::new("churn");
    for i in 0..n {
        tree.make(&format!("c{i}"));
    }
    let made = began.elapsed();
    let parent = tree.parent.to_str().unwrap().to_string();
    let daemon = Daemon::start(&["--tier", "full", "--cgroup", &parent, "--interval", "1s"]);
    // Once an interval has read them: none past the bound.
    let in_bound = poll(TIMEOUT, || {
        let d = dropped(&daemon, "targets", "cgroup_bound");
        (d == Some(0.0)).then_some(()).ok_or(d)
    });
    assert!(in_bound.is_ok(), "{in_bound:?}\n{}", daemon.log());
    // Wait for a pass to have read them all: the last one's process joins at its move.
    std::thread::sleep(Duration::from_secs(2));
    cgroup_process_counted(&daemon, &tree.child(&format!("c{}", n - 1)), 1500);
    let followed = began.elapsed();

    // A new cgroup made while the others stand, then the others removed: their entries go
    // and the new one's process is counted (before, the stale entries filled the map and every
    // pass failed to add the new one, logging E2BIG, long after the cgroups were gone).
    let fresh = tree.make("fresh");
    std::thread::sleep(Duration::from_secs(2));
    tree.clear(Some(&fresh));
    std::thread::sleep(Duration::from_secs(3));
    cgroup_process_counted(&daemon, &fresh, 1200);
    let errors = daemon.lines("ERROR", "");
    assert!(errors.is_empty(), "errors logged: {errors:#?}");
    let maps: BTreeMap<String, u64> = maps_of(daemon.pid())
        .into_iter()
        .map(|m| (m.name, m.entries))
        .collect();
    eprintln!(
        "{n} sub-cgroups: made in {made:?}, followed in {followed:?}, all in {:?}; \
         TARGET_CGROUPS holds {:?} after their removal",
        began.elapsed(),
        maps.get("TARGET_CGROUPS")
    );
    assert!(
        maps.get("TARGET_CGROUPS").is_some_and(|&e| e <= 8),
        "{maps:?}"
    );
    drop(daemon);
    assert_no_programs_left();
}

/// Polls `/report.json` until `pid` has `k` sockets in `processes[]`; else the last count seen.
/// Before the first interval has ended (a first pass over thousands of cgroups can take a few
/// seconds) it answers 503, and is asked again.
fn sockets_reach(daemon: &Daemon, pid: u32, k: u64) -> Result<(), Option<u64>> {
    poll(TIMEOUT, || {
        let (code, body) = daemon.get("/report.json");
        if code == 503 && body.contains("no interval has ended yet") {
            return Err(None);
        }
        assert_eq!(code, 200, "{body}");
        let report: Value = serde_json::from_str(&body).unwrap();
        let sockets = sockets_by_pid(&report).get(&pid).copied();
        (sockets == Some(k)).then_some(()).ok_or(sockets)
    })
}

/// Short processes of the site churn: the 2048-entry site map once dropped 8 to 48 waits
/// (`contention`/`map_full`) at 100,000 of them on the 2-vCPU VM.
const SITE_CHURN: u64 = 100_000;

/// Samples `SITE_INDEX` (map `id`) every half second until stopped: the most entries seen,
/// and how many processes held sites that had ended by then.
struct SiteWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(usize, usize)>,
}

impl SiteWatch {
    fn start(id: u64) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut peak, mut ended) = (0, std::collections::BTreeSet::new());
            while !stopped.load(Ordering::Relaxed) {
                let entries = bpftool(&["map", "dump", "id", &id.to_string()]);
                peak = peak.max(entries.as_array().unwrap().len());
                let gone = site_processes(id)
                    .into_iter()
                    .filter(|t| !Path::new(&format!("/proc/{t}")).exists());
                ended.extend(gone);
                std::thread::sleep(Duration::from_millis(500));
            }
            (peak, ended.len())
        });
        SiteWatch { stop, thread }
    }

    fn finish(self) -> (usize, usize) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Under `-a`, 100,000 short processes (forked by `fdprof workload churn` as nobody): the
/// sites of those that end are freed fast enough that no wait is dropped for want of one (the
/// map holds the sites of every process alive too: its fill is only stated). The generator
/// cannot know the kernel's lock waits, so what is exact is what it knows (every process ran,
/// none failed) and the drops: a wait is lost to the site map only as `contention`/`map_full`.
#[test]
fn system_wide_churn_drops_no_wait_for_want_of_a_site() {
    require_root();
    let _kernel = kernel_lock();
    let daemon = Daemon::start(&["--tier", "full", "-a", "--interval", "1s"]);
    daemon.wait_line("INFO", "profiling every process");
    let index = maps_of(daemon.pid())
        .into_iter()
        .find(|m| m.name == "SITE_INDEX")
        .unwrap();
    let watch = SiteWatch::start(index.id);
    let out = run(fdprof_as("fdpd-sitechurn").args([
        "workload",
        "churn",
        "--spawn",
        &SITE_CHURN.to_string(),
        "--ops",
        "2",
        "--uid",
        "65534",
        "--json",
    ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(report["expected"]["processes"], SITE_CHURN);
    // Every exit swept, and the interval after it read.
    std::thread::sleep(Duration::from_secs(3));
    let (peak, ended) = watch.finish();
    let lost = dropped(&daemon, "contention", "map_full");
    eprintln!(
        "{SITE_CHURN} processes at {:.0}/s: SITE_INDEX at most {peak}/{}, sites of {ended} \
         ended processes seen, contention/map_full {lost:?}",
        report["processes_per_sec"].as_f64().unwrap(),
        index.max
    );
    // Not vacuous: the churned processes did wait on locks, at sites of their own.
    assert!(ended > 50, "sites of only {ended} ended processes seen");
    assert_eq!(lost, Some(0.0), "waits dropped for want of a site");
    assert_eq!(dropped(&daemon, "processes", "exited_full"), Some(0.0));
    drop(daemon);
    assert_no_programs_left();
}
