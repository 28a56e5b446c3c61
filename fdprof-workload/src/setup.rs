//! Setup of one fd table before the measured phase: pre-expansion, pre-filled fds, listeners,
//! and the per-task states.

use std::ffi::CString;
use std::ops::Range;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::accept::{AcceptShared, Acceptor, Connector, listen_loopback};
use crate::cputime::{CpuClocks, Cputime};
use crate::error::usage;
use crate::scenarios::{
    CloseLoop, Dup2Worst, DupClose, Holes, HolesReserve, OpenClose, Opensock, Pipe, Scenario,
    SocketClose, SocketPair, Variant, XorShift, opensock_share,
};
use crate::sys;
use crate::task::TaskOp;
use crate::udp::{UdpLoopback, bind_loopback};
use crate::uring::UringOpensock;

/// A validated workload configuration (everything but the task count, which a sweep varies).
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub scenario: Scenario,
    /// `-n`: fds held (opensock: in total over the tasks; others: per fd table).
    pub fds: u32,
    /// `--hole K` of holes and dup2-worst.
    pub hole: u32,
    /// `--path` opened by open-close and holes.
    pub path: CString,
    /// `--prealloc SIZE`: expand the table to cover fd SIZE-1 first.
    pub prealloc: Option<u32>,
    pub processes: bool,
    pub pin: bool,
    /// The remedy applied to the scenario's load (checked to fit the scenario).
    pub variant: Variant,
}

impl Config {
    /// What one op is, for people: the variant's op where it changes it.
    pub(crate) fn op(&self) -> &'static str {
        self.variant.op().unwrap_or(self.scenario.op())
    }
}

/// One fd table, ready for its measured phase.
pub(crate) struct Prepared {
    pub ops: Vec<TaskOp>,
    /// Fds setup opened that no task owns (closed between the runs of a sweep).
    pub held: Vec<i32>,
    /// Fds the scenario holds open besides the per-op ones.
    pub fds_held: u64,
}

/// Sets up the table of this process for tasks `first .. first + count` of `total`.
pub(crate) fn prepare(cfg: &Config, first: u32, count: u32, total: u32) -> Result<Prepared> {
    if let Some(size) = cfg.prealloc {
        prealloc(size).with_context(|| format!("--prealloc {size}"))?;
    }
    if matches!(cfg.scenario, Scenario::OpenClose | Scenario::Holes) {
        // Fail now, with the path named, rather than in the measured phase.
        let fd = sys::openat(&cfg.path, libc::O_RDONLY)
            .map_err(|e| usage(format!("cannot open --path {:?}: {e}", cfg.path)))?;
        sys::close(fd)?;
    }
    let mut held = Vec::new();
    let mut ops = Vec::with_capacity(count as usize * 2);
    let tasks = first..first + count;
    let fds_held = match cfg.scenario {
        Scenario::Opensock if cfg.variant == Variant::IoUringDirect => {
            uring_opensock(cfg, tasks, total, &mut ops)?
        }
        Scenario::Opensock => opensock(cfg, tasks, total, &mut ops)?,
        Scenario::Holes | Scenario::Dup2Worst => holes(cfg, &mut ops, &mut held)?,
        Scenario::CloseLoop => close_loop(cfg, &mut ops, &mut held)?,
        Scenario::Accept => accept(cfg, count, &mut ops, &mut held)?,
        Scenario::Cputime => cputime(cfg, count, &mut ops, &mut held)?,
        Scenario::UdpLoopback => udp_loopback(cfg, count, &mut ops, &mut held)?,
        tight => tight_loop(cfg, tight, count, &mut ops, &mut held)?,
    };
    Ok(Prepared {
        ops,
        held,
        fds_held,
    })
}

// Each scenario's setup below adds its tasks' states to `ops` and the fds no task owns to
// `held`, and returns the fds the scenario holds open besides the per-op ones.

/// opensock over io_uring: a ring per task, its share of the sockets in fixed slots.
fn uring_opensock(
    cfg: &Config,
    tasks: Range<u32>,
    total: u32,
    ops: &mut Vec<TaskOp>,
) -> Result<u64> {
    let count = tasks.len() as u64;
    for task in tasks {
        let share = opensock_share(cfg.fds, total, task);
        let ring = UringOpensock::new(share, XorShift::for_task(task))
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("setting up a ring of fixed-slot sockets")?;
        ops.push(TaskOp::UringOpensock(Box::new(ring)));
    }
    // The sockets live in the rings' fixed slots; the table holds the rings' fds.
    Ok(count)
}

/// opensock: each task's share of the sockets, in its own slots.
fn opensock(cfg: &Config, tasks: Range<u32>, total: u32, ops: &mut Vec<TaskOp>) -> Result<u64> {
    let mut sum = 0u64;
    for task in tasks {
        let share = opensock_share(cfg.fds, total, task);
        let slots = fill_sockets(share).context("pre-filling opensock's sockets")?;
        sum += u64::from(share);
        ops.push(TaskOp::Opensock(Opensock {
            slots,
            rng: XorShift::for_task(task),
        }));
    }
    Ok(sum)
}

/// holes and dup2-worst: fds 0..N-1 open around the hole the one task refills.
fn holes(cfg: &Config, ops: &mut Vec<TaskOp>, held: &mut Vec<i32>) -> Result<u64> {
    fill_below(cfg.fds, held).context("opening fds 0..N-1")?;
    let hole = cfg.hole as i32;
    ops.push(if cfg.variant == Variant::Reserve {
        TaskOp::HolesReserve(HolesReserve {
            hole,
            path: cfg.path.clone(),
        })
    } else if cfg.scenario == Scenario::Holes {
        TaskOp::Holes(Holes {
            hole,
            path: cfg.path.clone(),
        })
    } else {
        TaskOp::Dup2Worst(Dup2Worst { hole })
    });
    Ok(u64::from(cfg.fds))
}

/// close-loop: the fd its dups are made of, and a table already large enough for them.
fn close_loop(cfg: &Config, ops: &mut Vec<TaskOp>, held: &mut Vec<i32>) -> Result<u64> {
    let src = open_dev_null()?;
    held.push(src);
    let first = consecutive_free(cfg.fds)?;
    // The table the process inherits from its parent can be of any size: grow it now for the
    // N fds, so that the measured phase never does.
    prealloc(first + cfg.fds).context("sizing the table for close-loop's fds")?;
    ops.push(TaskOp::CloseLoop(CloseLoop {
        src,
        fds: vec![-1; cfg.fds as usize],
        range: cfg.variant == Variant::CloseRange,
    }));
    Ok(1)
}

/// accept: a loopback listener, and per task an acceptor and the connector feeding it.
fn accept(cfg: &Config, count: u32, ops: &mut Vec<TaskOp>, held: &mut Vec<i32>) -> Result<u64> {
    hold_extra(cfg.fds, held)?;
    let (listener, addr) = listen_loopback()?;
    held.push(listener);
    let shared = Arc::new(AcceptShared::new(count as usize, count as usize));
    for index in 0..count as usize {
        ops.push(TaskOp::Acceptor(Acceptor {
            listener,
            index,
            shared: shared.clone(),
        }));
    }
    for index in 0..count as usize {
        ops.push(TaskOp::Connector(Connector {
            addr,
            index,
            shared: shared.clone(),
        }));
    }
    Ok(u64::from(cfg.fds) + 1)
}

/// cputime: the clocks the tasks read of each other.
fn cputime(cfg: &Config, count: u32, ops: &mut Vec<TaskOp>, held: &mut Vec<i32>) -> Result<u64> {
    hold_extra(cfg.fds, held)?;
    let clocks = Arc::new(CpuClocks::new(count as usize));
    for index in 0..count as usize {
        ops.push(TaskOp::Cputime(Cputime {
            index,
            clocks: clocks.clone(),
        }));
    }
    Ok(u64::from(cfg.fds))
}

/// udp-loopback: one receiving socket, and a sending socket per task.
fn udp_loopback(
    cfg: &Config,
    count: u32,
    ops: &mut Vec<TaskOp>,
    held: &mut Vec<i32>,
) -> Result<u64> {
    hold_extra(cfg.fds, held)?;
    let (receiver, to) = bind_loopback()?;
    held.push(receiver);
    for _ in 0..count {
        ops.push(TaskOp::UdpLoopback(UdpLoopback::new(receiver, to)?));
    }
    Ok(u64::from(cfg.fds) + 1 + u64::from(count))
}

/// The tight loops (socket-close, open-close, dup-close, pipe, socketpair): stateless tasks,
/// dup-close's dups all made of one held fd.
fn tight_loop(
    cfg: &Config,
    tight: Scenario,
    count: u32,
    ops: &mut Vec<TaskOp>,
    held: &mut Vec<i32>,
) -> Result<u64> {
    let first_held = hold_extra(cfg.fds, held)?;
    let mut total_held = u64::from(cfg.fds);
    let dup_src = match (tight, first_held) {
        (Scenario::DupClose, Some(fd)) => fd,
        (Scenario::DupClose, None) => {
            let fd = open_dev_null()?;
            held.push(fd);
            total_held += 1;
            fd
        }
        _ => -1,
    };
    for _ in 0..count {
        ops.push(match tight {
            Scenario::SocketClose => TaskOp::SocketClose(SocketClose),
            Scenario::OpenClose => TaskOp::OpenClose(OpenClose {
                path: cfg.path.clone(),
            }),
            Scenario::DupClose => TaskOp::DupClose(DupClose { src: dup_src }),
            Scenario::Pipe => TaskOp::Pipe(Pipe),
            _ => TaskOp::SocketPair(SocketPair),
        });
    }
    Ok(total_held)
}

/// Closes what [`prepare`] opened (between the runs of a sweep).
pub(crate) fn teardown(prepared: &Prepared) -> Result<()> {
    for op in &prepared.ops {
        for &fd in op.held_fds() {
            sys::close(fd)?;
        }
    }
    for &fd in &prepared.held {
        sys::close(fd)?;
    }
    Ok(())
}

fn open_dev_null() -> Result<i32> {
    Ok(sys::openat(c"/dev/null", libc::O_RDONLY)?)
}

/// Expands the table to cover fd `size - 1` as the seed's expand_fd_array does: dup2 a socket
/// onto that fd, then close both.
fn prealloc(size: u32) -> Result<()> {
    let target = size as i32 - 1;
    if target < 0 || sys::is_open(target) {
        // Fd 0 fits any table; an open fd is already covered.
        return Ok(());
    }
    let fd = sys::tcp_socket()?;
    if fd != target {
        sys::dup2(fd, target)?;
        sys::close(target)?;
    }
    sys::close(fd)?;
    Ok(())
}

/// `count` sockets: one socket() and count-1 dup()s of it, as the seed fills its slots.
fn fill_sockets(count: u32) -> Result<Vec<i32>> {
    let mut slots = Vec::with_capacity(count as usize);
    let first = sys::tcp_socket()?;
    slots.push(first);
    for _ in 1..count {
        slots.push(sys::dup(first)?);
    }
    Ok(slots)
}

/// Makes fds 0..n-1 all open (dup2 of one /dev/null fd into every free one).
fn fill_below(n: u32, held: &mut Vec<i32>) -> Result<()> {
    let src = open_dev_null()?;
    if src as u32 >= n {
        sys::close(src)?;
        return Ok(());
    }
    held.push(src);
    for fd in 0..n as i32 {
        if !sys::is_open(fd) {
            sys::dup2(src, fd)?;
            held.push(fd);
        }
    }
    Ok(())
}

/// Checks that the `n` fds from the lowest free one are all free, so that close-loop's dups
/// are consecutive and a close_range over them closes nothing else; returns the first.
fn consecutive_free(n: u32) -> Result<u32> {
    let mut first = 0;
    while sys::is_open(first) {
        first += 1;
    }
    if let Some(open) = (first..first + n as i32).find(|&fd| sys::is_open(fd)) {
        return Err(usage(format!(
            "close-loop needs fds {first}..{} free, and fd {open} is open (inherited?): close \
             it or use a smaller -n",
            first + n as i32 - 1
        )));
    }
    Ok(first as u32)
}

/// Holds `n` idle fds (/dev/null and its dups); returns the first.
fn hold_extra(n: u32, held: &mut Vec<i32>) -> Result<Option<i32>> {
    if n == 0 {
        return Ok(None);
    }
    let first = open_dev_null()?;
    held.push(first);
    for _ in 1..n {
        held.push(sys::dup(first)?);
    }
    Ok(Some(first))
}
