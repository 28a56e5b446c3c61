//! One task's measured loop: the op repeated for `--ops K` or until the stop flag, with a
//! per-task counter that only this task writes.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::accept::{Acceptor, Connector};
use crate::cputime::Cputime;
use crate::ground_truth::{LoopError, Tracker};
use crate::phase::{Plan, TaskSlot};
use crate::scenarios::{
    CloseLoop, Dup2Worst, DupClose, Holes, HolesReserve, Op, OpenClose, Opensock, Pipe,
    SocketClose, SocketPair,
};
use crate::udp::UdpLoopback;
use crate::uring::UringOpensock;

/// Ops between two looks at the stop flag and two counter updates.
pub(crate) const BATCH: u64 = 256;

/// Repeats `op` per `plan`; returns the ops done.
#[inline(never)]
pub(crate) fn drive<O: Op, T: Tracker>(
    op: &mut O,
    t: &mut T,
    plan: Plan,
    slot: &TaskSlot,
    stop: &AtomicBool,
) -> Result<u64, LoopError> {
    let mut done = 0u64;
    match plan {
        Plan::Ops(k) => {
            while done < k {
                let batch = (k - done).min(BATCH);
                for _ in 0..batch {
                    op.once(t)?;
                }
                op.flush(t)?;
                done += batch;
                slot.ops.store(done, Relaxed);
            }
        }
        Plan::Timed(_) => loop {
            for _ in 0..BATCH {
                op.once(t)?;
            }
            op.flush(t)?;
            done += BATCH;
            slot.ops.store(done, Relaxed);
            if stop.load(Relaxed) {
                break;
            }
        },
    }
    Ok(done)
}

/// The state of one task of any scenario.
pub(crate) enum TaskOp {
    SocketClose(SocketClose),
    OpenClose(OpenClose),
    DupClose(DupClose),
    Pipe(Pipe),
    SocketPair(SocketPair),
    Opensock(Opensock),
    UringOpensock(Box<UringOpensock>),
    Holes(Holes),
    HolesReserve(HolesReserve),
    CloseLoop(CloseLoop),
    Dup2Worst(Dup2Worst),
    Acceptor(Acceptor),
    Connector(Connector),
    Cputime(Cputime),
    UdpLoopback(UdpLoopback),
}

impl TaskOp {
    /// Runs the measured loop of this task.
    pub(crate) fn drive<T: Tracker>(
        &mut self,
        t: &mut T,
        plan: Plan,
        slot: &TaskSlot,
        stop: &AtomicBool,
    ) -> Result<u64, LoopError> {
        match self {
            TaskOp::SocketClose(op) => drive(op, t, plan, slot, stop),
            TaskOp::OpenClose(op) => drive(op, t, plan, slot, stop),
            TaskOp::DupClose(op) => drive(op, t, plan, slot, stop),
            TaskOp::Pipe(op) => drive(op, t, plan, slot, stop),
            TaskOp::SocketPair(op) => drive(op, t, plan, slot, stop),
            TaskOp::Opensock(op) => drive(op, t, plan, slot, stop),
            TaskOp::UringOpensock(op) => drive(op.as_mut(), t, plan, slot, stop),
            TaskOp::Holes(op) => drive(op, t, plan, slot, stop),
            TaskOp::HolesReserve(op) => drive(op, t, plan, slot, stop),
            TaskOp::CloseLoop(op) => drive(op, t, plan, slot, stop),
            TaskOp::Dup2Worst(op) => drive(op, t, plan, slot, stop),
            TaskOp::Acceptor(a) => a.drive(t, plan, slot, stop),
            TaskOp::Connector(c) => c.drive(t, plan, slot, stop),
            TaskOp::Cputime(c) => drive(&mut c.peer_op()?, t, plan, slot, stop),
            TaskOp::UdpLoopback(op) => drive(op, t, plan, slot, stop),
        }
    }

    /// On the task's own thread, before the start barrier: what its peers must learn of it.
    pub(crate) fn publish(&self) {
        if let TaskOp::Cputime(c) = self {
            c.publish();
        }
    }

    /// Whether this task's count is the scenario's ops (connectors only feed the acceptors).
    pub(crate) fn counts_ops(&self) -> bool {
        !matches!(self, TaskOp::Connector(_))
    }

    /// Fds this task still holds (closed between the runs of a sweep).
    pub(crate) fn held_fds(&self) -> &[i32] {
        match self {
            TaskOp::Opensock(op) => &op.slots,
            TaskOp::UringOpensock(op) => op.held_fds(),
            TaskOp::UdpLoopback(op) => op.held_fds(),
            _ => &[],
        }
    }
}

/// The CPUs this process may run on, for `--pin`.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    let ok = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) } == 0;
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `i` is below CPU_SETSIZE.
        .filter(|&i| ok && unsafe { libc::CPU_ISSET(i, &set) })
        .collect();
    if cpus.is_empty() { vec![0] } else { cpus }
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is one of the CPUs sched_getaffinity reported, below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
