//! The fd-table trace (`record --trace`): a thread drains the `TRACE` ring buffer into memory
//! while the target runs (woken by the kernel through `poll`, so bursts are read as they come),
//! up to a limit; and the target's table as `/proc` shows it at attach, the trace's start.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};
use fdprof_common::trace::TraceRecord;

/// What the reader kept: the records, oldest first as the ring handed them out, and how many
/// came past the limit.
#[derive(Debug, Default)]
pub struct Drained {
    pub(crate) records: Vec<TraceRecord>,
    pub(crate) over_limit: u64,
    /// Records of another size (none, unless the object and fdprof disagree).
    pub undecoded: u64,
}

/// The draining thread; [`TraceReader::finish`] after detaching returns what it kept.
pub struct TraceReader {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Drained>,
}

/// How long a read waits for the kernel's wakeup before checking whether to stop.
const POLL_MS: i32 = 50;

impl TraceReader {
    pub fn start(ring: RingBuf<MapData>, limit: u64) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fdprof-trace".into())
            .spawn(move || drain_until(ring, limit, &stopped))
            .context("cannot start the trace reader")?;
        Ok(Self { stop, thread })
    }

    /// Stops the reader once it has read what the ring holds; call it after the programs are
    /// detached, so nothing is sent after the last read.
    pub fn finish(self) -> Drained {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

fn drain_until(mut ring: RingBuf<MapData>, limit: u64, stop: &AtomicBool) -> Drained {
    let mut out = Drained::default();
    let fd = ring.as_raw_fd();
    loop {
        let last = stop.load(Ordering::Relaxed);
        drain(&mut ring, limit, &mut out);
        if last {
            return out;
        }
        wait_readable(fd);
    }
}

fn drain(ring: &mut RingBuf<MapData>, limit: u64, out: &mut Drained) {
    while let Some(item) = ring.next() {
        let bytes: &[u8] = &item;
        if bytes.len() != size_of::<TraceRecord>() {
            out.undecoded += 1;
            continue;
        }
        if out.records.len() as u64 >= limit {
            out.over_limit += 1;
            continue;
        }
        // SAFETY: the length is checked; TraceRecord is plain data valid for any bytes.
        let r: TraceRecord = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        out.records.push(r);
    }
}

fn wait_readable(fd: RawFd) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; the ring's fd stays open while the reader owns the ring.
    unsafe { libc::poll(&mut pfd, 1, POLL_MS) };
}

/// A table as `/proc/PID/fd` and `fdinfo` show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcTable {
    pub(crate) pid: u32,
    /// Open fds, ascending, and whether each is close-on-exec.
    pub(crate) fds: Vec<(u32, bool)>,
    /// `CLOCK_MONOTONIC` before and after the read: operations ending before `read_from_ns`
    /// are in it; those starting after `read_until_ns` are not.
    pub(crate) read_from_ns: u64,
    pub(crate) read_until_ns: u64,
}

/// `O_CLOEXEC` in fdinfo's octal `flags`.
const O_CLOEXEC: u32 = 0o2_000_000;

/// The open fds of `pid` with their close-on-exec flags. An fd closed while the directory is
/// read is left out.
pub fn proc_table(pid: u32) -> Result<ProcTable> {
    let read_from_ns = super::profiler::monotonic_ns();
    let mut fds = Vec::new();
    for fd in crate::procfs::fds(pid).with_context(|| format!("cannot read /proc/{pid}/fd"))? {
        let Some(info) = crate::procfs::fdinfo(pid, fd) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .unwrap_or(0);
        fds.push((fd, flags & O_CLOEXEC != 0));
    }
    fds.sort_unstable();
    Ok(ProcTable {
        pid,
        fds,
        read_from_ns,
        read_until_ns: super::profiler::monotonic_ns(),
    })
}
