//! The target's per-thread counters: perf events in counting mode (no sampling, no buffer), one
//! per counter and thread alive at the start, each with `inherit`, so the threads and processes
//! a counted thread creates later are counted with it; the kernel folds an inherited counter
//! into its parent's when that task exits, so nothing a counted thread created is lost. Read
//! once, at the end: a counter of a thread that has exited still reads its final count.

use std::os::fd::AsRawFd;

use fdprof_figures::CounterName;
use perf_event::{
    Builder, Counter,
    events::{Event, Hardware, Software},
};

/// At most this many threads are counted (a counter is a file descriptor: 7 per thread).
pub(crate) const MAX_THREADS: usize = 1024;

/// One counter's reading: the count and the times the counter was enabled and on the PMU
/// (summed with its inherited children's), ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub name: CounterName,
    pub count: u64,
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
}

/// One counted thread's readings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadReadings {
    pub tid: u32,
    pub comm: String,
    pub readings: Vec<Reading>,
}

/// Everything read at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterReadings {
    /// Counters that could not be opened, and why (`no hardware PMU (ENOENT)`).
    pub unavailable: Vec<(CounterName, String)>,
    pub threads: Vec<ThreadReadings>,
    /// What the reader should know: threads left uncounted, and why.
    pub notes: Vec<String>,
}

struct Thread {
    tid: u32,
    comm: String,
    counters: Vec<(CounterName, Counter)>,
}

/// Counters open on the target's threads.
pub struct ThreadCounters {
    threads: Vec<Thread>,
    unavailable: Vec<(CounterName, String)>,
    notes: Vec<String>,
}

impl ThreadCounters {
    /// Opens every counter on each of `threads` (tid, comm), enabled at once. A counter the
    /// first thread cannot have (no PMU, …) is unavailable for all; a thread that exits before
    /// its counters are open is left out and noted.
    pub fn open(threads: &[(u32, String)]) -> Self {
        raise_fd_limit();
        let mut out = ThreadCounters {
            threads: Vec::new(),
            unavailable: Vec::new(),
            notes: Vec::new(),
        };
        let mut names: Vec<CounterName> = CounterName::ALL.to_vec();
        let mut gone = 0usize;
        for (tid, comm) in threads.iter().take(MAX_THREADS) {
            let mut counters = Vec::new();
            let mut exited = false;
            names.retain(|&name| match open(name, *tid) {
                Ok(c) => {
                    counters.push((name, c));
                    true
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    exited = true;
                    true
                }
                Err(e) if out.threads.is_empty() => {
                    out.unavailable.push((name, reason(name, &e)));
                    false
                }
                Err(e) => {
                    out.notes.push(format!(
                        "{} not counted on thread {tid}: {}",
                        name.name(),
                        reason(name, &e)
                    ));
                    true
                }
            });
            if exited {
                gone += 1;
            } else if !counters.is_empty() {
                out.threads.push(Thread {
                    tid: *tid,
                    comm: comm.clone(),
                    counters,
                });
            }
        }
        if out.threads.is_empty() {
            // Nothing counted: no counter has a value, whichever could have been opened.
            let why = if threads.is_empty() || gone > 0 {
                "the target exited before its counters were opened"
            } else {
                "no thread of the target could be counted"
            };
            out.unavailable
                .extend(names.iter().map(|&name| (name, why.to_string())));
            out.unavailable.sort_by_key(|(name, _)| *name);
        }
        if gone > 0 {
            out.notes.push(format!(
                "counters: {gone} threads exited before their counters were opened"
            ));
        }
        if threads.len() > MAX_THREADS {
            out.notes.push(format!(
                "counters: {} threads of {} counted (at most {MAX_THREADS})",
                MAX_THREADS,
                threads.len()
            ));
        }
        out.notes.dedup();
        out
    }

    /// Reads every counter (the last reading: call at the end). A thread still alive is named
    /// by its comm now (a launched command's after its exec).
    pub fn read(mut self) -> CounterReadings {
        let mut threads = Vec::new();
        let mut notes = self.notes;
        for t in &mut self.threads {
            let mut readings = Vec::new();
            for (name, c) in &mut t.counters {
                match c.read_count_and_time() {
                    Ok(r) => readings.push(Reading {
                        name: *name,
                        count: r.count,
                        time_enabled_ns: r.time_enabled,
                        time_running_ns: r.time_running,
                    }),
                    Err(e) => notes.push(format!(
                        "counters: {} of thread {} could not be read: {e}",
                        name.name(),
                        t.tid
                    )),
                }
            }
            let now = comm(t.tid);
            threads.push(ThreadReadings {
                tid: t.tid,
                comm: if now.is_empty() { t.comm.clone() } else { now },
                readings,
            });
        }
        CounterReadings {
            unavailable: self.unavailable,
            threads,
            notes,
        }
    }
}

fn event(name: CounterName) -> Event {
    match name {
        CounterName::TaskClock => Software::TASK_CLOCK.into(),
        CounterName::ContextSwitches => Software::CONTEXT_SWITCHES.into(),
        CounterName::CpuMigrations => Software::CPU_MIGRATIONS.into(),
        CounterName::PageFaults => Software::PAGE_FAULTS.into(),
        CounterName::Cycles => Hardware::CPU_CYCLES.into(),
        CounterName::Instructions => Hardware::INSTRUCTIONS.into(),
        CounterName::CacheMisses => Hardware::CACHE_MISSES.into(),
    }
}

/// One counter on one thread, on any CPU, counting in the kernel too (a context switch
/// happens there), inherited by the tasks it creates, enabled at once.
fn open(name: CounterName, tid: u32) -> std::io::Result<Counter> {
    let mut builder = Builder::new()
        .kind(event(name))
        .observe_pid(tid as libc::pid_t)
        .any_cpu();
    builder.inherit(true).include_kernel().enabled(true);
    let counter = builder.build()?;
    // The crate opens without O_CLOEXEC: no command fdprof runs later may inherit it.
    // SAFETY: the fd is the counter's own, open for as long as it lives.
    unsafe { libc::fcntl(counter.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(counter)
}

/// Why `name` could not be opened, as a reader can act on it: the errno's meaning and name.
fn reason(name: CounterName, e: &std::io::Error) -> String {
    let errno = e.raw_os_error().unwrap_or(0);
    let code = match errno {
        libc::ENOENT => "ENOENT",
        libc::ENODEV => "ENODEV",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::EBUSY => "EBUSY",
        _ => return e.to_string(),
    };
    if name.is_hardware() && matches!(errno, libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP) {
        return format!("no hardware PMU ({code})");
    }
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    format!("{text} ({code})")
}

/// Counters take a file descriptor each: the soft limit is raised to the hard one.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid, fully set struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// The threads of process `pid` now, with their comm (empty when unreadable).
pub fn threads_of(pid: u32) -> Vec<(u32, String)> {
    let Some(tasks) = crate::procfs::tasks(pid) else {
        return Vec::new();
    };
    let mut tids: Vec<u32> = tasks.collect();
    tids.sort_unstable();
    tids.into_iter().map(|t| (t, comm(t))).collect()
}

/// A thread's comm now (empty when it has gone).
pub fn comm(tid: u32) -> String {
    crate::procfs::comm(tid).unwrap_or_default()
}
