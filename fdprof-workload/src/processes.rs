//! Processes mode (will-it-scale's `_processes` variant): each task is a forked child with its
//! own fd table. Children report through a shared anonymous mapping (no fd involved) and are
//! started and watched through futexes on it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::control::{Control, announce_and_wait, supervise};
use crate::fd_model::table_size_after;
use crate::ground_truth::{Fast, Tracker};
use crate::outcome::{Outcome, TaskResult};
use crate::phase::TaskSlot;
use crate::setup::{Config, prepare};
use crate::table::snapshot_and_reset;
use crate::task::{allowed_cpus, pin_to};

const RUNNING: u32 = 0;
const FINISHED: u32 = 1;
const FAILED: u32 = 2;
const MESSAGE_LEN: usize = 512;

#[repr(C, align(128))]
struct Header {
    ready: AtomicU32,
    go: AtomicU32,
    done: AtomicU32,
    stop: AtomicBool,
}

#[repr(C, align(128))]
struct ChildSlot {
    task: TaskSlot,
    status: AtomicU32,
    start_ns: AtomicU64,
    end_ns: AtomicU64,
    max_fds: AtomicU32,
    fds_held: AtomicU64,
    message_len: AtomicU32,
    message: [u8; MESSAGE_LEN],
}

/// The shared mapping: a header, then one slot per child.
struct Shared {
    base: *mut u8,
    len: usize,
    tasks: usize,
}

impl Shared {
    fn new(tasks: usize) -> Result<Self> {
        let len = size_of::<Header>() + tasks * size_of::<ChildSlot>();
        // SAFETY: an anonymous shared mapping; zeroed memory is a valid Header and ChildSlots
        // (atomics and byte arrays).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            bail!(
                "mmap of the shared results area: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Shared {
            base: base.cast(),
            len,
            tasks,
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header and lives as long as self.
        unsafe { &*(self.base as *const Header) }
    }

    fn slot(&self, i: usize) -> &ChildSlot {
        assert!(i < self.tasks);
        // SAFETY: slot i lies inside the mapping, suitably aligned (page + multiples of 128).
        unsafe {
            &*(self
                .base
                .add(size_of::<Header>() + i * size_of::<ChildSlot>())
                as *const ChildSlot)
        }
    }

    fn write_message(&self, i: usize, text: &str) {
        let bytes = &text.as_bytes()[..text.len().min(MESSAGE_LEN)];
        let slot = self.slot(i);
        // SAFETY: only child i writes its message, before setting its status; the parent reads
        // it after the child has exited.
        unsafe {
            let dst = slot.message.as_ptr() as *mut u8;
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
        }
        slot.message_len
            .store(bytes.len() as u32, Ordering::Release);
    }

    fn message(&self, i: usize) -> String {
        let slot = self.slot(i);
        let len = slot.message_len.load(Ordering::Acquire) as usize;
        String::from_utf8_lossy(&slot.message[..len.min(MESSAGE_LEN)]).into_owned()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live u32 in shared memory; a shared (non-private) futex because the
    // waiters and wakers are different processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0,
        )
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as in futex_wait.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// Waits up to `timeout` for `word` to reach `target`; says whether it did.
fn wait_count(word: &AtomicU32, target: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let now_value = word.load(Ordering::Acquire);
        if now_value >= target {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        futex_wait(word, now_value, Some(deadline - now));
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The body of child `index`; returns its exit code.
fn child(cfg: &Config, ctl: &Control, shared: &Shared, index: usize, tasks: u32) -> i32 {
    let header = shared.header();
    let slot = shared.slot(index);
    let fail = |text: String| {
        shared.write_message(index, &text);
        slot.status.store(FAILED, Ordering::Release);
        header.stop.store(true, Ordering::Relaxed);
        1
    };
    let setup = (|| -> Result<_> {
        if cfg.pin {
            let cpus = allowed_cpus();
            let cpu = cpus[index % cpus.len()];
            pin_to(cpu).map_err(|e| anyhow::anyhow!("pinning to CPU {cpu}: {e}"))?;
        }
        let prepared = prepare(cfg, index as u32, 1, tasks)?;
        let baseline = snapshot_and_reset()?;
        Ok((prepared, baseline))
    })();
    let (mut prepared, baseline) = match setup {
        Ok(v) => v,
        Err(e) => {
            let code = fail(format!("{e:#}"));
            header.ready.fetch_add(1, Ordering::AcqRel);
            futex_wake(&header.ready);
            return code;
        }
    };
    slot.fds_held.store(prepared.fds_held, Ordering::Relaxed);
    header.ready.fetch_add(1, Ordering::AcqRel);
    futex_wake(&header.ready);
    while header.go.load(Ordering::Acquire) == 0 {
        futex_wait(&header.go, 0, None);
    }

    let mut tracker = Fast::default();
    slot.start_ns.store(monotonic_ns(), Ordering::Relaxed);
    let result = prepared.ops[0].drive(&mut tracker, ctl.plan, &slot.task, &header.stop);
    slot.end_ns.store(monotonic_ns(), Ordering::Relaxed);
    let max_fds = match tracker.max_fd() {
        fd if fd < 0 => baseline.max_fds,
        fd => table_size_after(baseline.max_fds, fd as u32, baseline.nr_open),
    };
    slot.max_fds.store(max_fds, Ordering::Relaxed);
    let code = match result {
        Ok(ops) => {
            slot.task.ops.store(ops, Ordering::Relaxed);
            slot.status.store(FINISHED, Ordering::Release);
            0
        }
        Err(e) => fail(e.to_string()),
    };
    header.done.fetch_add(1, Ordering::AcqRel);
    futex_wake(&header.done);
    code
}

/// Kills and reaps the children this run forked (only those pids).
fn kill_children(pids: &[libc::pid_t]) {
    for &pid in pids {
        // SAFETY: signalling and reaping our own children by pid.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Runs `cfg` in `tasks` forked processes.
pub(crate) fn run(cfg: &Config, tasks: u32, ctl: &Control) -> Result<Outcome> {
    let shared = Shared::new(tasks as usize)?;
    let header = shared.header();
    let pids = fork_children(cfg, ctl, &shared, tasks)?;
    await_setup(&shared, &pids, tasks)?;
    if ctl.wait_signal {
        announce_and_wait(&pids)?;
    }
    header.go.store(1, Ordering::Release);
    futex_wake(&header.go);
    let start = Instant::now();
    supervise(
        ctl,
        cfg.scenario.name(),
        start,
        |timeout| wait_count(&header.done, tasks, timeout),
        || {
            (0..tasks as usize)
                .map(|i| shared.slot(i).task.ops.load(Ordering::Relaxed))
                .sum()
        },
        || header.stop.store(true, Ordering::Relaxed),
    );
    for &pid in &pids {
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    outcome(cfg, &shared, tasks)
}

/// Forks the `tasks` children, each running [`child`] and leaving through `_exit`; returns
/// their pids (none left behind on failure).
fn fork_children(
    cfg: &Config,
    ctl: &Control,
    shared: &Shared,
    tasks: u32,
) -> Result<Vec<libc::pid_t>> {
    let mut pids = Vec::with_capacity(tasks as usize);
    for index in 0..tasks as usize {
        // SAFETY: this process is single-threaded here (processes mode starts no threads), so
        // the child may allocate; it leaves only through _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let err = std::io::Error::last_os_error();
            kill_children(&pids);
            bail!("fork() failed: {err}");
        }
        if pid == 0 {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                child(cfg, ctl, shared, index, tasks)
            }))
            .unwrap_or(101);
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        pids.push(pid);
    }
    Ok(pids)
}

/// Waits until every child has set up its table; one that died or failed there fails the
/// run, its siblings killed.
fn await_setup(shared: &Shared, pids: &[libc::pid_t], tasks: u32) -> Result<()> {
    while !wait_count(&shared.header().ready, tasks, Duration::from_millis(100)) {
        for &pid in pids {
            let mut status = 0;
            // SAFETY: polling our own child.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                kill_children(pids);
                bail!("a worker process ended during setup (wait status {status:#x})");
            }
        }
    }
    if let Some(i) =
        (0..tasks as usize).find(|&i| shared.slot(i).status.load(Ordering::Acquire) == FAILED)
    {
        let message = shared.message(i);
        kill_children(pids);
        bail!("worker process {i}: {message}");
    }
    Ok(())
}

/// What the reaped children reported in their slots.
fn outcome(cfg: &Config, shared: &Shared, tasks: u32) -> Result<Outcome> {
    let mut results = Vec::with_capacity(tasks as usize);
    let (mut first, mut last) = (u64::MAX, 0u64);
    let (mut fds_held, mut max_fds) = (0u64, 0u32);
    for i in 0..tasks as usize {
        let slot = shared.slot(i);
        match slot.status.load(Ordering::Acquire) {
            FINISHED => {}
            FAILED => bail!("measured phase, process {i}: {}", shared.message(i)),
            RUNNING => bail!("worker process {i} died without reporting"),
            other => bail!("worker process {i}: bad status {other}"),
        }
        let (s, e) = (
            slot.start_ns.load(Ordering::Relaxed),
            slot.end_ns.load(Ordering::Relaxed),
        );
        first = first.min(s);
        last = last.max(e);
        fds_held += slot.fds_held.load(Ordering::Relaxed);
        max_fds = max_fds.max(slot.max_fds.load(Ordering::Relaxed));
        results.push(TaskResult {
            ops: slot.task.ops.load(Ordering::Relaxed),
            secs: e.saturating_sub(s) as f64 / 1e9,
            cpu: cfg.pin.then(|| {
                let cpus = allowed_cpus();
                cpus[i % cpus.len()]
            }),
        });
    }
    Ok(Outcome {
        tasks: results,
        secs: last.saturating_sub(first) as f64 / 1e9,
        fds_held,
        max_fds,
        connects: None,
        expected: None,
    })
}
