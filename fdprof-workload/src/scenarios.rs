//! The scenarios: what one "op" is for each, and the per-task state that performs it.
//!
//! An op is one iteration of the scenario's loop; ops/s and `--ops K` count these. Each op does
//! only its system calls (and, in deterministic runs, tells the lockstep tracker about them).

use std::ffi::CString;

use crate::ground_truth::{LoopError, Mismatch, Tracker};
use crate::sys::{self, Sys};

/// The load to generate; [`Scenario::help`] says what one op of each is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Opensock,
    SocketClose,
    OpenClose,
    DupClose,
    Pipe,
    Socketpair,
    Accept,
    Dup2Worst,
    Holes,
    Cputime,
    CloseLoop,
    UdpLoopback,
}

impl Scenario {
    /// Every scenario, in the order the command line lists them.
    pub const ALL: [Scenario; 12] = [
        Scenario::Opensock,
        Scenario::SocketClose,
        Scenario::OpenClose,
        Scenario::DupClose,
        Scenario::Pipe,
        Scenario::Socketpair,
        Scenario::Accept,
        Scenario::Dup2Worst,
        Scenario::Holes,
        Scenario::Cputime,
        Scenario::CloseLoop,
        Scenario::UdpLoopback,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Opensock => "opensock",
            Scenario::SocketClose => "socket-close",
            Scenario::OpenClose => "open-close",
            Scenario::DupClose => "dup-close",
            Scenario::Pipe => "pipe",
            Scenario::Socketpair => "socketpair",
            Scenario::Accept => "accept",
            Scenario::Dup2Worst => "dup2-worst",
            Scenario::Holes => "holes",
            Scenario::Cputime => "cputime",
            Scenario::CloseLoop => "close-loop",
            Scenario::UdpLoopback => "udp-loopback",
        }
    }

    /// What one op is and what the options change, for the command line's help.
    pub fn help(self) -> &'static str {
        match self {
            Scenario::Opensock => {
                "op = close(random own slot) + socket(AF_INET, SOCK_STREAM, 0) into that slot; \
                 -n sockets held in total (default 1000), split across tasks (Eric Dumazet's \
                 opensock)"
            }
            Scenario::SocketClose => "op = socket(AF_INET, SOCK_STREAM, 0) + close(it)",
            Scenario::OpenClose => "op = openat(--path, O_RDONLY) + close(it)",
            Scenario::DupClose => "op = dup(held fd) + close(it)",
            Scenario::Pipe => "op = pipe2(fds, 0) + close(both)",
            Scenario::Socketpair => "op = socketpair(AF_UNIX, SOCK_STREAM, 0) + close(both)",
            Scenario::Accept => {
                "op = accept4() + close() of one loopback connection; as many connector threads \
                 do socket + setsockopt(SO_LINGER 0) + connect + close against 127.0.0.1"
            }
            Scenario::Dup2Worst => {
                "fds 0..N-1 open (default N 1000); op = close(K) + dup2(0, K) + dup(0), which \
                 scans from K to N, + close(N) (Linus Torvalds' worst case; K = --hole)"
            }
            Scenario::Holes => {
                "fds 0..N-1 open (default N 1000); op = close(K) + openat() -> K + openat(), \
                 which scans from K+1 to N, + close(N) (K = --hole)"
            }
            Scenario::Cputime => {
                "op = glibc clock_gettime() of the next thread's CPU-time clock (task i reads \
                 task (i+1) % N's; -t 1: its own), which takes the scheduler's task_rq_lock \
                 (contended most with more threads than CPUs); no fd system call; threads only"
            }
            Scenario::CloseLoop => {
                "op = dup(held fd) N times, then close(2) of each of those N consecutive fds in \
                 a loop (N = -n, default 64); --close-range: one close_range(first, last, 0) \
                 instead of the loop"
            }
            Scenario::UdpLoopback => {
                "op = sendto() of a 64-byte datagram to one UDP socket on 127.0.0.1 that all \
                 tasks share, + recv(MSG_DONTWAIT) from it; loopback delivers each datagram in \
                 the NET_RX softirq on the sender's CPU, which takes the socket's queue lock, so \
                 with 2 threads or more most of the lock wait is interrupt time; no fd system \
                 call; threads only"
            }
        }
    }

    /// What one op is, for people.
    pub fn op(self) -> &'static str {
        match self {
            Scenario::Opensock => "close(random own slot) + socket(AF_INET, SOCK_STREAM, 0)",
            Scenario::SocketClose => "socket(AF_INET, SOCK_STREAM, 0) + close",
            Scenario::OpenClose => "openat(path, O_RDONLY) + close",
            Scenario::DupClose => "dup(held fd) + close",
            Scenario::Pipe => "pipe2 + close both",
            Scenario::Socketpair => "socketpair(AF_UNIX, SOCK_STREAM) + close both",
            Scenario::Accept => "accept4 + close (connectors: socket + connect + close)",
            Scenario::Dup2Worst => "close(K) + dup2(0, K) + dup(0) -> N + close(N)",
            Scenario::Holes => "close(K) + openat -> K + openat -> N + close(N)",
            Scenario::Cputime => "clock_gettime(next thread's CPU-time clock)",
            Scenario::CloseLoop => "dup(held fd) x N + close each of the N",
            Scenario::UdpLoopback => "sendto(shared loopback UDP socket) + recv(it)",
        }
    }

    /// Whether a single-task `--ops` run of it is exactly predictable.
    pub fn deterministic(self) -> bool {
        self != Scenario::Accept
    }

    /// Whether its measured phase makes fd system calls (cputime and udp-loopback make none,
    /// so their ground truth is exact with any number of threads).
    pub fn makes_fd_calls(self) -> bool {
        !matches!(self, Scenario::Cputime | Scenario::UdpLoopback)
    }

    /// Whether its tasks read their peer threads' clocks: threads of one process only, and
    /// each must outlive the others' loops (a finished thread's clock is gone).
    pub fn reads_peer_threads(self) -> bool {
        self == Scenario::Cputime
    }

    /// Whether several threads may share one table (the hole patterns own fixed fd numbers).
    pub fn threads_share_table(self) -> bool {
        !matches!(
            self,
            Scenario::Holes | Scenario::Dup2Worst | Scenario::CloseLoop
        )
    }

    /// The fill patterns keep fds 0..N-1 open.
    pub fn fills_below_n(self) -> bool {
        matches!(self, Scenario::Holes | Scenario::Dup2Worst)
    }

    pub fn default_fds(self) -> u32 {
        match self {
            Scenario::Opensock | Scenario::Holes | Scenario::Dup2Worst => 1000,
            Scenario::CloseLoop => 64,
            _ => 0,
        }
    }

    /// Fds one task has open at once inside an op of a tight loop.
    pub fn fds_per_op(self) -> u32 {
        match self {
            Scenario::SocketClose | Scenario::OpenClose | Scenario::DupClose => 1,
            Scenario::Pipe | Scenario::Socketpair => 2,
            // accept: the accepted socket and the connector's socket.
            Scenario::Accept => 2,
            // opensock closes before it opens; the hole patterns are counted by their fill,
            // close-loop by its -n.
            Scenario::Opensock | Scenario::Holes | Scenario::Dup2Worst | Scenario::CloseLoop => 0,
            Scenario::Cputime | Scenario::UdpLoopback => 0,
        }
    }
}

/// A remedy applied to a scenario's load, shown against the plain load on the same machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Variant {
    #[default]
    Plain,
    /// holes: the refill goes through dup2 onto the reserved slot K, which never becomes a hole.
    Reserve,
    /// close-loop: one close_range(2) closes the N fds.
    CloseRange,
    /// opensock: sockets as io_uring direct descriptors in fixed slots, never in the fd table.
    IoUringDirect,
}

impl Variant {
    /// The command-line flag that asks for it.
    pub fn flag(self) -> Option<&'static str> {
        match self {
            Variant::Plain => None,
            Variant::Reserve => Some("--reserve"),
            Variant::CloseRange => Some("--close-range"),
            Variant::IoUringDirect => Some("--io-uring-direct"),
        }
    }

    /// The name reports give it (`null` for the plain load).
    pub fn name(self) -> Option<&'static str> {
        self.flag().map(|f| f.trim_start_matches('-'))
    }

    /// The scenario it applies to.
    pub fn scenario(self) -> Option<Scenario> {
        match self {
            Variant::Plain => None,
            Variant::Reserve => Some(Scenario::Holes),
            Variant::CloseRange => Some(Scenario::CloseLoop),
            Variant::IoUringDirect => Some(Scenario::Opensock),
        }
    }

    /// What one op is, when the variant changes it.
    pub fn op(self) -> Option<&'static str> {
        match self {
            Variant::Plain => None,
            Variant::Reserve => Some("openat -> N + dup2(N, K) + close(N)"),
            Variant::CloseRange => Some("dup(held fd) x N + close_range(first, last, 0)"),
            Variant::IoUringDirect => Some(
                "IORING_OP_CLOSE(random own fixed slot) + IORING_OP_SOCKET into it; 16 ops linked \
                 an io_uring_enter",
            ),
        }
    }
}

/// Slots (sockets held) of task `task` when `total` are split over `tasks`.
pub(crate) fn opensock_share(total: u32, tasks: u32, task: u32) -> u32 {
    total / tasks + u32::from(task < total % tasks)
}

/// One op of a scenario, performed by one task.
pub(crate) trait Op: Send {
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError>;

    /// Completes every op [`Op::once`] queued and did not finish yet (the io_uring variant
    /// submits its ops in batches); called before ops are counted.
    #[inline(always)]
    fn flush<T: Tracker>(&mut self, _t: &mut T) -> Result<(), LoopError> {
        Ok(())
    }
}

#[inline(always)]
fn closed<T: Tracker>(t: &mut T, fd: i32) -> Result<(), LoopError> {
    sys::close(fd)?;
    t.call(Sys::Close);
    t.closed(Sys::Close, fd)?;
    Ok(())
}

#[inline(always)]
fn created<T: Tracker>(t: &mut T, sys: Sys, fd: i32) -> Result<(), Mismatch> {
    t.call(sys);
    t.allocated(sys, 0, fd)
}

pub(crate) struct SocketClose;

impl Op for SocketClose {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        let fd = sys::tcp_socket()?;
        created(t, Sys::Socket, fd)?;
        closed(t, fd)
    }
}

pub(crate) struct OpenClose {
    pub path: CString,
}

impl Op for OpenClose {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        let fd = sys::openat(&self.path, libc::O_RDONLY)?;
        created(t, Sys::Openat, fd)?;
        closed(t, fd)
    }
}

pub(crate) struct DupClose {
    pub src: i32,
}

impl Op for DupClose {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        let fd = sys::dup(self.src)?;
        created(t, Sys::Dup, fd)?;
        closed(t, fd)
    }
}

pub(crate) struct Pipe;

impl Op for Pipe {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        let [r, w] = sys::pipe2(0)?;
        t.call(Sys::Pipe2);
        // The kernel reserves the read end first, then the write end.
        t.allocated(Sys::Pipe2, 0, r)?;
        t.allocated(Sys::Pipe2, 0, w)?;
        closed(t, r)?;
        closed(t, w)
    }
}

pub(crate) struct SocketPair;

impl Op for SocketPair {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        let [a, b] = sys::unix_socketpair()?;
        t.call(Sys::Socketpair);
        t.allocated(Sys::Socketpair, 0, a)?;
        t.allocated(Sys::Socketpair, 0, b)?;
        closed(t, a)?;
        closed(t, b)
    }
}

/// The seed's opensock: each task owns slots pre-filled with sockets and replaces a random one
/// per op.
pub(crate) struct Opensock {
    pub slots: Vec<i32>,
    pub rng: XorShift,
}

impl Op for Opensock {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        let i = self.rng.below(self.slots.len() as u32) as usize;
        closed(t, self.slots[i])?;
        let fd = sys::tcp_socket()?;
        created(t, Sys::Socket, fd)?;
        self.slots[i] = fd;
        Ok(())
    }
}

/// fds 0..N-1 open: punch hole K, refill it, and open once more, which scans from K+1 to N.
pub(crate) struct Holes {
    pub hole: i32,
    pub path: CString,
}

impl Op for Holes {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        closed(t, self.hole)?;
        let refill = sys::openat(&self.path, libc::O_RDONLY)?;
        created(t, Sys::Openat, refill)?;
        let far = sys::openat(&self.path, libc::O_RDONLY)?;
        created(t, Sys::Openat, far)?;
        closed(t, far)
    }
}

/// holes --reserve: fds 0..N-1 open, K a reserved slot that stays open: the new file is opened
/// at next_fd (N) and moved onto K with dup2, which replaces K's file without a hole, so every
/// allocation takes next_fd itself.
pub(crate) struct HolesReserve {
    pub hole: i32,
    pub path: CString,
}

impl Op for HolesReserve {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        let fd = sys::openat(&self.path, libc::O_RDONLY)?;
        created(t, Sys::Openat, fd)?;
        sys::dup2(fd, self.hole)?;
        t.call(Sys::Dup2);
        t.installed(Sys::Dup2, self.hole);
        closed(t, fd)
    }
}

/// close-loop: N dups of a held fd (N consecutive fds from next_fd: setup checks they are
/// free), then the N closed, one close(2) each or, with `range`, one close_range(2).
pub(crate) struct CloseLoop {
    pub src: i32,
    /// The fds of the op in progress; its length is N.
    pub fds: Vec<i32>,
    pub range: bool,
}

impl Op for CloseLoop {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        for slot in self.fds.iter_mut() {
            let fd = sys::dup(self.src)?;
            created(t, Sys::Dup, fd)?;
            *slot = fd;
        }
        let (first, last) = (self.fds[0], self.fds[self.fds.len() - 1]);
        if !self.range {
            for &fd in &self.fds {
                closed(t, fd)?;
            }
            return Ok(());
        }
        // The range closes only the op's own fds: they must be consecutive.
        if last - first + 1 != self.fds.len() as i32 {
            return Err(LoopError::Model(Mismatch {
                sys: Sys::Dup,
                kernel_fd: last,
                model_fd: first + self.fds.len() as i32 - 1,
                what: "returned a non-consecutive",
            }));
        }
        sys::close_range(first, last)?;
        t.call(Sys::CloseRange);
        t.closed_range(Sys::CloseRange, first, last);
        Ok(())
    }
}

/// fds 0..N-1 open: `close(K); dup2(0, K); dup(0); close(that)`. dup2 does not move `next_fd`
/// back up, so dup(0) scans from K to N.
pub(crate) struct Dup2Worst {
    pub hole: i32,
}

impl Op for Dup2Worst {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        closed(t, self.hole)?;
        sys::dup2(0, self.hole)?;
        t.call(Sys::Dup2);
        t.installed(Sys::Dup2, self.hole);
        let fd = sys::dup(0)?;
        created(t, Sys::Dup, fd)?;
        closed(t, fd)
    }
}

/// Marsaglia's xorshift64: a few instructions, no allocation, same sequence as the C baseline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct XorShift(u64);

impl XorShift {
    /// The generator of task `task` (a fixed seed each, so `--ops` runs are reproducible).
    pub(crate) fn for_task(task: u32) -> Self {
        // splitmix64 of the task number: distinct, never zero in practice.
        let mut z = (u64::from(task) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        XorShift((z ^ (z >> 31)) | 1)
    }

    #[inline(always)]
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (multiply-shift: no division).
    #[inline(always)]
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opensock_shares_add_up() {
        for (total, tasks) in [(1000, 1), (1000, 3), (7, 7), (10, 4)] {
            let sum: u32 = (0..tasks).map(|i| opensock_share(total, tasks, i)).sum();
            assert_eq!(sum, total);
        }
        assert_eq!(opensock_share(10, 4, 0), 3);
        assert_eq!(opensock_share(10, 4, 3), 2);
    }

    #[test]
    fn xorshift_stays_in_range_and_spreads() {
        let mut rng = XorShift::for_task(0);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[rng.below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        let a = XorShift::for_task(0).next_u64();
        let b = XorShift::for_task(1).next_u64();
        assert_ne!(a, b);
    }
}
