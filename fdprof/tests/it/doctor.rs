//! `fdprof doctor` against the real kernel: its claims are checked by independent means (raw
//! bpf(2) and perf_event_open(2) calls made here, and `bpftool`'s reading of the BTF).

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::common::*;
use serde_json::Value;

fn doctor_json() -> Value {
    let out = run(fdprof().args(["doctor", "--json"]));
    assert!(
        out.status.success(),
        "doctor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON")
}

/// BTF as `bpftool btf dump ... format raw` prints it: type id of each FUNC, and the members of
/// each named struct with their bit offsets.
struct BpftoolBtf {
    funcs: HashMap<String, u32>,
    structs: HashMap<String, HashMap<String, u32>>,
}

fn bpftool_btf() -> BpftoolBtf {
    let out = run(Command::new("bpftool").args([
        "btf",
        "dump",
        "file",
        "/sys/kernel/btf/vmlinux",
        "format",
        "raw",
    ]));
    assert!(out.status.success(), "bpftool btf dump failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut funcs = HashMap::new();
    let mut structs: HashMap<String, HashMap<String, u32>> = HashMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('[') {
            current = None;
            let (id, rest) = rest.split_once("] ").unwrap();
            let mut words = rest.split_whitespace();
            let kind = words.next().unwrap();
            let name = words.next().unwrap_or("").trim_matches('\'').to_string();
            match kind {
                "FUNC" => {
                    funcs.entry(name).or_insert(id.parse().unwrap());
                }
                "STRUCT" if !structs.contains_key(&name) => {
                    structs.insert(name.clone(), HashMap::new());
                    current = Some(name);
                }
                _ => {}
            }
        } else if let Some(name) = &current {
            // "\t'files' type_id=123 bits_offset=14592"
            let line = line.trim();
            let member = line.split('\'').nth(1).unwrap_or("").to_string();
            if let Some(bits) = line.split("bits_offset=").nth(1) {
                let bits: u32 = bits.split_whitespace().next().unwrap().parse().unwrap();
                structs.get_mut(name).unwrap().insert(member, bits);
            }
        }
    }
    BpftoolBtf { funcs, structs }
}

#[test]
fn offsets_match_bpftool() {
    require_root();
    let _guard = kernel_lock();
    let doctor = doctor_json();
    let btf = bpftool_btf();
    let fields = [
        ("task_struct", "files", "task_struct_files"),
        ("files_struct", "next_fd", "files_struct_next_fd"),
        ("files_struct", "fdt", "files_struct_fdt"),
        ("files_struct", "file_lock", "files_struct_file_lock"),
        ("fdtable", "max_fds", "fdtable_max_fds"),
        ("fdtable", "open_fds", "fdtable_open_fds"),
        ("fdtable", "full_fds_bits", "fdtable_full_fds_bits"),
        ("task_struct", "signal", "task_struct_signal"),
        ("signal_struct", "live", "signal_struct_live"),
    ];
    for (s, f, key) in fields {
        let bits = btf.structs[s][f];
        assert_eq!(
            doctor["offsets"][key].as_u64().unwrap(),
            u64::from(bits / 8),
            "{s}.{f}"
        );
    }
    assert_no_programs_left();
}

// --- independent attach attempts with raw syscalls ---

const BPF_PROG_LOAD: i64 = 5;
const BPF_RAW_TRACEPOINT_OPEN: i64 = 17;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_FENTRY: u32 = 24;
/// `r0 = 0; exit`
const RETURN_ZERO: [u8; 16] = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];

fn put32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn bpf(cmd: i64, attr: &mut [u8; 128]) -> Result<i32, i32> {
    // SAFETY: attr is a zero-padded bpf_attr of the size passed.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if rc < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(rc as i32)
    }
}

fn close(fd: i32) {
    // SAFETY: fd was returned to us by the kernel.
    unsafe { libc::close(fd) };
}

/// Loads a tiny program; Err(errno) on refusal.
fn prog_load(prog_type: u32, attach_type: u32, attach_btf_id: u32) -> Result<i32, i32> {
    let license = c"GPL";
    let mut attr = [0u8; 128];
    put32(&mut attr, 0, prog_type);
    put32(&mut attr, 4, 2);
    put64(&mut attr, 8, RETURN_ZERO.as_ptr() as u64);
    put64(&mut attr, 16, license.as_ptr() as u64);
    attr[48..56].copy_from_slice(b"fdprof_t");
    put32(&mut attr, 68, attach_type);
    put32(&mut attr, 108, attach_btf_id);
    bpf(BPF_PROG_LOAD, &mut attr)
}

/// fentry on `func` by hand: Ok if it loads and attaches.
fn raw_fentry(btf_id: u32) -> Result<(), i32> {
    let prog = prog_load(BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, btf_id)?;
    let mut attr = [0u8; 128];
    put32(&mut attr, 8, prog as u32);
    let link = bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr);
    close(prog);
    link.map(close)
}

/// A classic tracepoint by hand: perf_event_open + PERF_EVENT_IOC_SET_BPF.
fn raw_tracepoint(category: &str, name: &str) -> Result<(), i32> {
    let id: u64 =
        std::fs::read_to_string(format!("/sys/kernel/tracing/events/{category}/{name}/id"))
            .map_err(|_| libc::ENOENT)?
            .trim()
            .parse()
            .unwrap();
    let prog = prog_load(BPF_PROG_TYPE_TRACEPOINT, 0, 0)?;
    let mut attr = [0u8; 128];
    put32(&mut attr, 0, 2); // PERF_TYPE_TRACEPOINT
    put32(&mut attr, 4, 64); // PERF_ATTR_SIZE_VER0
    put64(&mut attr, 8, id);
    put64(&mut attr, 16, 1); // sample_period
    // SAFETY: attr is a valid perf_event_attr of the declared size.
    let fd =
        unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), -1, 0, -1, 0u64) } as i32;
    if fd < 0 {
        close(prog);
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    const PERF_EVENT_IOC_SET_BPF: u64 = 0x4004_2408;
    // SAFETY: fd is a perf event, prog a BPF program fd.
    let rc = unsafe { libc::ioctl(fd, PERF_EVENT_IOC_SET_BPF as _, prog) };
    let err = std::io::Error::last_os_error().raw_os_error().unwrap();
    close(fd);
    close(prog);
    if rc < 0 { Err(err) } else { Ok(()) }
}

fn kprobes_present() -> bool {
    std::path::Path::new("/sys/bus/event_source/devices/kprobe/type").exists()
        || std::path::Path::new("/sys/kernel/tracing/kprobe_events").exists()
}

#[test]
fn attach_claims_agree_with_raw_attempts() {
    require_root();
    let _guard = kernel_lock();
    let doctor = doctor_json(); // also mounts tracefs if it was missing
    let btf = bpftool_btf();
    let kprobes = kprobes_present();
    let mut checked = 0;
    for role in doctor["functions"].as_array().unwrap() {
        for f in role["functions"].as_array().unwrap() {
            let name = f["name"].as_str().unwrap();
            if let Some(&id) = btf.funcs.get(name) {
                let raw = raw_fentry(id);
                let claimed = f["fentry"]["result"].as_str().unwrap();
                assert_eq!(
                    claimed == "works",
                    raw.is_ok(),
                    "fentry on {name}: doctor says {claimed}, raw attempt gave {raw:?}"
                );
                if let (Err(errno), Some(e)) = (raw, f["fentry"]["errno"].as_str()) {
                    assert_eq!(
                        e,
                        match errno {
                            libc::EPERM => "EPERM",
                            libc::EINVAL => "EINVAL",
                            libc::EACCES => "EACCES",
                            _ => e,
                        },
                        "fentry errno on {name}"
                    );
                }
                checked += 1;
            }
            if !kprobes {
                assert_ne!(
                    f["kprobe"]["result"], "works",
                    "kprobe on {name} without kprobes"
                );
            }
        }
    }
    assert!(checked >= 3, "expected to check allocate, close and more");
    // The tracepoints record attaches (raw sys_enter, not a per-syscall one).
    for (tp, key) in [
        ("contention_begin", "lock_tracepoints"),
        ("sys_enter", "fd_syscall_tracepoints"),
    ] {
        let category = if key == "lock_tracepoints" {
            "lock"
        } else {
            "raw_syscalls"
        };
        let claim = doctor[key]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"].as_str().unwrap().ends_with(tp))
            .unwrap();
        let raw = raw_tracepoint(category, tp);
        assert_eq!(
            claim["tracepoint"]["result"] == "works",
            raw.is_ok(),
            "tracepoint {tp}: doctor {claim}, raw {raw:?}"
        );
    }
    assert_no_programs_left();
}

#[test]
fn this_kernel_as_documented() {
    // The facts docs/probe-modes.md states for kernels like this one; a different kernel skips nothing
    // silently: it prints what differs.
    require_root();
    let _guard = kernel_lock();
    let doctor = doctor_json();
    let role = |r: &str| {
        doctor["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["role"] == r)
            .unwrap()
            .clone()
    };
    let alloc = role("allocate");
    let alloc_name = alloc["functions"][0]["name"].as_str().unwrap();
    assert!(["alloc_fd", "__alloc_fd"].contains(&alloc_name));
    let close = role("close");
    let close_name = close["functions"][0]["name"].as_str().unwrap();
    let btf = bpftool_btf();
    // close(2) calls file_close_fd wherever it exists.
    if btf.funcs.contains_key("file_close_fd") {
        assert_eq!(close_name, "file_close_fd");
    }
    for key in [
        "task_struct_files",
        "files_struct_file_lock",
        "fdtable_max_fds",
    ] {
        assert!(doctor["offsets"][key].is_u64());
    }
    assert_eq!(doctor["mode"], alloc["chosen"]);
}

#[test]
fn not_root_is_one_line_and_exit_2() {
    require_root();
    let out = run(fdprof().args(["doctor"]).uid(65534).gid(65534));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("root"), "{stderr}");
}

/// A user with CAP_BPF and CAP_PERFMON but not root (tracefs is mode 0700 to it) is told what
/// `record` would use: the tp_btf syscall tracepoints, as root is, and no claim that tracefs
/// could not be mounted (it is mounted; the user cannot look inside).
#[test]
fn with_bpf_capabilities_but_not_root_doctor_claims_what_record_uses() {
    require_root();
    let _guard = kernel_lock();
    let as_root = doctor_json();
    let out = run(Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=+bpf,+perfmon,+syslog",
            "--ambient-caps=+bpf,+perfmon,+syslog",
        ])
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["doctor", "--json"]));
    assert!(
        out.status.success(),
        "doctor with capabilities failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let capable: Value = serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    for family in ["fd_syscalls", "lock_tracepoints"] {
        assert_eq!(
            capable["chosen"][family], as_root["chosen"][family],
            "{family}: root and capabilities disagree"
        );
    }
    let notes = capable["notes"].to_string();
    assert!(!notes.contains("tracefs is not mounted"), "{notes}");
    assert_no_programs_left();
}

/// With CAP_BPF and CAP_PERFMON only, on a host whose kallsyms shows addresses only to
/// CAP_SYSLOG (kptr_restrict 1, or 0 with perf_event_paranoid above 1), doctor runs (it needs
/// no more) and names the missing CAP_SYSLOG that record would demand, in its findings and on
/// its standard error.
#[test]
fn doctor_names_the_cap_syslog_record_would_demand() {
    require_root();
    let _guard = kernel_lock();
    let setting = |name: &str| -> i64 {
        std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let needs_syslog = match setting("kptr_restrict") {
        0 => setting("perf_event_paranoid") > 1,
        1 => true,
        _ => false,
    };
    let out = run(Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=+bpf,+perfmon",
            "--ambient-caps=+bpf,+perfmon",
        ])
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["doctor", "--json"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let doctor: Value = serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    let notes = doctor["notes"].to_string();
    assert!(out.status.success(), "{stderr}");
    assert_eq!(notes.contains("CAP_SYSLOG"), needs_syslog, "{notes}");
    if needs_syslog {
        assert!(stderr.contains("missing: CAP_SYSLOG"), "{stderr}");
    }
    assert_no_programs_left();
}

/// A kernel whose BTF is missing or broken still gets a JSON answer: the error, and what works
/// without BTF (classic tracepoints, the syscall role), with the BTF-typed mechanisms marked
/// unavailable rather than guessed.
#[test]
fn missing_or_broken_btf_still_answers_in_json() {
    require_root();
    let _guard = kernel_lock();
    let dir = std::env::temp_dir().join(format!("fdprof-doctor-btf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.btf");
    std::fs::write(&broken, b"\x9f\xeb\x01\x00 this is not BTF at all").unwrap();
    let missing = dir.join("missing.btf");
    for (path, says) in [(&missing, "No such file"), (&broken, "cannot parse")] {
        let out = run(fdprof().args(["doctor", "--json", "--btf"]).arg(path));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {stderr}", path.display());
        let doctor: Value = serde_json::from_slice(&out.stdout).expect("JSON even without BTF");
        assert_eq!(doctor["btf"], false);
        let error = doctor["btf_error"].as_str().unwrap();
        assert!(error.contains(says), "{error}");
        assert!(doctor["offsets"].is_null());
        let lock = &doctor["lock_tracepoints"][0];
        assert_eq!(lock["tracepoint"]["result"], "works", "{lock}");
        assert_eq!(lock["tp_btf"]["result"], "unavailable", "{lock}");
        for role in doctor["functions"].as_array().unwrap() {
            for f in role["functions"].as_array().unwrap() {
                assert_eq!(f["fentry"]["result"], "unavailable", "{f}");
                assert_eq!(f["btf"], false, "{f}");
            }
            assert_ne!(role["chosen"], "fentry");
        }
        assert_eq!(doctor["chosen"]["fd_syscalls"], "tracepoint");
        // The text form says the same in one line, and prints the rest.
        let text = run(fdprof().args(["doctor", "--btf"]).arg(path));
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("BTF             unusable:"), "{text}");
        assert!(text.contains("unknown without BTF"), "{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert_no_programs_left();
}
