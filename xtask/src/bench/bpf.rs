//! The few `bpf(2)` commands the benches make by hand, without a loader: load a raw tracepoint
//! program, attach it, read a program's run-time statistics, and hold those statistics on.

use std::ffi::CStr;

use anyhow::{Context, Result};

const BPF_PROG_LOAD: i64 = 5;
const BPF_OBJ_GET_INFO_BY_FD: i64 = 15;
const BPF_RAW_TRACEPOINT_OPEN: i64 = 17;
const BPF_ENABLE_STATS: i64 = 32;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

/// One `bpf(2)` call with a 128-byte attribute block.
pub(crate) fn bpf(cmd: i64, attr: &mut [u8; 128]) -> std::io::Result<i32> {
    // SAFETY: attr is a zero-padded bpf_attr of the size passed.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc as i32)
    }
}

/// Loads `code` (8-byte instructions) as a GPL raw tracepoint program named `name`: its fd.
pub(crate) fn load_raw_tracepoint(code: &[u8], name: &[u8]) -> std::io::Result<i32> {
    let license = c"GPL";
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_RAW_TRACEPOINT.to_ne_bytes());
    attr[4..8].copy_from_slice(&((code.len() / 8) as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(code.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    attr[48..48 + name.len()].copy_from_slice(name);
    bpf(BPF_PROG_LOAD, &mut attr)
}

/// Attaches the program `prog` to the raw tracepoint `hook`: the link's fd (closing it
/// detaches).
pub(crate) fn attach_raw_tracepoint(hook: &CStr, prog: i32) -> std::io::Result<i32> {
    let mut attr = [0u8; 128];
    attr[0..8].copy_from_slice(&(hook.as_ptr() as u64).to_ne_bytes());
    attr[8..12].copy_from_slice(&(prog as u32).to_ne_bytes());
    bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// A loaded program's name (the kernel keeps 15 bytes) and its cumulative statistics.
pub(crate) struct ProgInfo {
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The program `fd`'s [`ProgInfo`].
pub(crate) fn prog_info(fd: i32) -> std::io::Result<ProgInfo> {
    // `struct bpf_prog_info`: name at 64 (16 bytes), run_time_ns at 192, run_cnt at 200.
    let mut info = [0u8; 232];
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(info.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let name = &info[64..80];
    let name = String::from_utf8_lossy(&name[..name.iter().position(|&b| b == 0).unwrap_or(16)])
        .into_owned();
    let at = |o: usize| u64::from_ne_bytes(info[o..o + 8].try_into().unwrap());
    Ok(ProgInfo {
        name,
        run_time_ns: at(192),
        run_cnt: at(200),
    })
}

/// Kernel BPF run-time statistics held on while this lives, or for its first `window` only.
/// The kernel counts the holders: fdprof's own sampler switching its statistics off does not
/// switch these off.
pub(crate) struct StatsWindow(Option<std::thread::JoinHandle<()>>, Option<i32>);

impl StatsWindow {
    pub(crate) fn start(window: Option<std::time::Duration>) -> Result<Self> {
        let mut attr = [0u8; 128]; // enable_stats.type = BPF_STATS_RUN_TIME (0)
        let fd = bpf(BPF_ENABLE_STATS, &mut attr).context("cannot enable BPF statistics")?;
        Ok(match window {
            Some(window) => Self(
                Some(std::thread::spawn(move || {
                    std::thread::sleep(window);
                    // SAFETY: the statistics fd, closed once.
                    unsafe { libc::close(fd) };
                })),
                None,
            ),
            None => Self(None, Some(fd)),
        })
    }
}

impl Drop for StatsWindow {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            let _ = t.join();
        }
        if let Some(fd) = self.1.take() {
            // SAFETY: the statistics fd, closed once.
            unsafe { libc::close(fd) };
        }
    }
}
