//! What fdprof's own programs cost: kernel BPF run-time statistics, sampled, and each program's
//! run time, run count and recursion misses.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use aya::Ebpf;

/// One program's cost so far (cumulative: the kernel keeps the counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramStats {
    pub name: String,
    pub run_time_ns: u64,
    pub run_count: u64,
    pub recursion_misses: u64,
}

/// Kernel BPF run-time statistics (`BPF_ENABLE_STATS`) add two clock reads to every program
/// run: here they doubled what tracing adds to a syscall (+293 ns against +146 ns). They are on
/// for 250 ms of every 10 s only: ns/run comes out exact, totals are those of the sampled
/// windows. Each switch patches kernel text (a static key), so switches stay rare: under qemu
/// TCG, a switch every 100 ms crashed a 6.12 guest.
pub(crate) struct StatsSampler {
    /// The statistics fd while they are on, since when, and the stack-walk time then.
    on: Option<(OwnedFd, Instant, u64)>,
    window: Duration,
    period: Duration,
    /// Time the statistics were on so far.
    pub sampled: Duration,
    /// Stack-walk time (`global::WALK_NS`) within the windows so far: the part of the lock
    /// probes' run time that the waits leave out.
    walk_ns: u64,
    /// Why the kernel refused to switch the statistics on, the first time it did
    /// (`BPF_ENABLE_STATS` needs `CAP_SYS_ADMIN`): then no run time is measured.
    pub refused: Option<String>,
}

impl StatsSampler {
    pub(crate) fn new() -> Self {
        Self {
            on: None,
            window: Duration::from_millis(250),
            period: Duration::from_secs(10),
            sampled: Duration::ZERO,
            walk_ns: 0,
            refused: None,
        }
    }

    /// Switches statistics on or off for the moment `elapsed` into the recording, and says how
    /// long until the next switch is due (a little after it, so the next call is past it).
    /// `walk_ns` reads the programs' stack-walk time, at switches only: after switching on and
    /// before switching off, so no walk outside a window is counted in one.
    pub(crate) fn tick(&mut self, elapsed: Duration, walk_ns: impl Fn() -> u64) -> Duration {
        let phase = Duration::from_nanos((elapsed.as_nanos() % self.period.as_nanos()) as u64);
        let want = phase < self.window;
        match (&self.on, want) {
            (None, true) => {
                self.on = match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
                    Ok(fd) => Some((fd, Instant::now(), walk_ns())),
                    Err(e) => {
                        self.refused.get_or_insert_with(|| e.to_string());
                        None
                    }
                };
            }
            (Some(_), false) => self.stop(walk_ns),
            _ => {}
        }
        let next = match want {
            true => self.window - phase,
            false => self.period - phase,
        };
        next + Duration::from_millis(1)
    }

    /// Time the statistics have been on, the current window included.
    pub(crate) fn sampled_so_far(&self) -> Duration {
        self.sampled
            + self
                .on
                .as_ref()
                .map_or(Duration::ZERO, |(_, since, _)| since.elapsed())
    }

    /// Stack-walk time within the windows so far, the current one included (`walk_ns_now` is
    /// the programs' total now).
    pub(crate) fn walk_ns_so_far(&self, walk_ns_now: u64) -> u64 {
        self.walk_ns
            + self
                .on
                .as_ref()
                .map_or(0, |(_, _, at)| walk_ns_now.saturating_sub(*at))
    }

    /// Switches statistics off (closing the fd is what disables them).
    pub(crate) fn stop(&mut self, walk_ns: impl Fn() -> u64) {
        if let Some((fd, since, at)) = self.on.take() {
            self.walk_ns += walk_ns().saturating_sub(at);
            drop(fd);
            self.sampled += since.elapsed();
        }
    }
}

impl Default for StatsSampler {
    fn default() -> Self {
        Self::new()
    }
}

/// Run time, run count and recursion misses of every loaded program.
pub(crate) fn program_costs(ebpf: &Ebpf) -> Vec<ProgramStats> {
    ebpf.programs()
        .filter_map(|(name, p)| {
            let fd = p.fd().ok()?;
            let (run_time_ns, run_count, recursion_misses) = raw_prog_info(fd.as_fd().as_raw_fd())?;
            Some(ProgramStats {
                name: name.to_string(),
                run_time_ns,
                run_count,
                recursion_misses,
            })
        })
        .collect()
}

/// `run_time_ns`, `run_cnt` and `recursion_misses` from `BPF_OBJ_GET_INFO_BY_FD` (aya does not
/// expose recursion misses). Offsets from `struct bpf_prog_info` (stable uapi).
fn raw_prog_info(fd: i32) -> Option<(u64, u64, u64)> {
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let mut info = [0u8; 256];
    let mut attr = [0u8; 16];
    attr[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(info.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: attr and info are valid for the sizes given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            attr.as_mut_ptr(),
            attr.len(),
        )
    };
    if rc != 0 {
        return None;
    }
    let at = |o: usize| u64::from_ne_bytes(info[o..o + 8].try_into().unwrap());
    Some((at(192), at(200), at(208)))
}

/// fdprof's own CPU time so far (user + system, all threads), ns.
pub fn own_cpu_ns() -> u64 {
    // SAFETY: valid out-pointer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
