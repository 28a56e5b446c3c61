//! cputime: each task reads the CPU-time clock of the next task's thread, as a server that
//! samples its workers' CPU time does. The kernel answers through `posix_cpu_clock_get` →
//! `task_sched_runtime` → `task_rq_lock`, so the reader contends the peer's `pi_lock` and its
//! runqueue's lock.
//!
//! Through glibc's `clock_gettime`, not a raw system call: the vDSO cannot read CPU-time clocks
//! and makes the system call itself, so the kernel sees it return into the `[vdso]` mapping.

use std::sync::atomic::{AtomicI32, Ordering};

use crate::ground_truth::{LoopError, Tracker};
use crate::scenarios::Op;

/// Not yet published (0 is CLOCK_REALTIME, never a thread's CPU-time clock).
const UNPUBLISHED: libc::clockid_t = 0;

/// The kernel's id of the CPU-time clock of thread `tid`: `~tid << 3 | CPUCLOCK_PERTHREAD_MASK
/// (4) | CPUCLOCK_SCHED (2)`, what glibc's `pthread_getcpuclockid` computes (the libc crate
/// does not bind it on Linux).
pub(crate) fn thread_cpu_clock(tid: libc::pid_t) -> libc::clockid_t {
    ((!tid) << 3) | 6
}

/// The CPU-time clock of every task's thread, published by the task before the start barrier.
pub(crate) struct CpuClocks {
    clocks: Vec<AtomicI32>,
}

impl CpuClocks {
    pub(crate) fn new(tasks: usize) -> Self {
        CpuClocks {
            clocks: (0..tasks).map(|_| AtomicI32::new(UNPUBLISHED)).collect(),
        }
    }
}

/// One cputime task: its index and the clocks it and its peers publish.
pub(crate) struct Cputime {
    pub index: usize,
    pub clocks: std::sync::Arc<CpuClocks>,
}

impl Cputime {
    /// On the task's own thread, before the start barrier: publishes this thread's clock.
    pub(crate) fn publish(&self) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.clocks.clocks[self.index].store(thread_cpu_clock(tid), Ordering::Release);
    }

    /// After the start barrier: the op that reads task (index + 1) % N's clock.
    pub(crate) fn peer_op(&self) -> Result<ReadClock, LoopError> {
        let peer = (self.index + 1) % self.clocks.clocks.len();
        match self.clocks.clocks[peer].load(Ordering::Acquire) {
            UNPUBLISHED => Err(LoopError::PeerClock { peer }),
            clock => Ok(ReadClock { clock }),
        }
    }
}

/// The op: one `clock_gettime(clock)`.
pub(crate) struct ReadClock {
    pub clock: libc::clockid_t,
}

impl Op for ReadClock {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, _t: &mut T) -> Result<(), LoopError> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a live timespec.
        if unsafe { libc::clock_gettime(self.clock, &mut ts) } != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(LoopError::Clock { errno });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ground_truth::Fast;

    unsafe extern "C" {
        fn pthread_getcpuclockid(
            thread: libc::pthread_t,
            clock: *mut libc::clockid_t,
        ) -> libc::c_int;
    }

    #[test]
    fn clock_id_is_glibcs() {
        assert_eq!(thread_cpu_clock(1234), -9874);
        let mut glibc: libc::clockid_t = 0;
        // SAFETY: pthread_self is always valid; `glibc` is a live clockid_t.
        assert_eq!(
            unsafe { pthread_getcpuclockid(libc::pthread_self(), &mut glibc) },
            0
        );
        // SAFETY: gettid has no preconditions.
        assert_eq!(thread_cpu_clock(unsafe { libc::gettid() }), glibc);
    }

    #[test]
    fn reads_its_own_and_a_peer_threads_clock() {
        let clocks = std::sync::Arc::new(CpuClocks::new(2));
        let me = Cputime {
            index: 0,
            clocks: clocks.clone(),
        };
        let peer = Cputime { index: 1, clocks };
        assert!(matches!(
            me.peer_op(),
            Err(LoopError::PeerClock { peer: 1 })
        ));
        me.publish();
        // Task 1 (this thread too, here) reads task 0's clock.
        let mut op = peer.peer_op().unwrap();
        let mut t = Fast::default();
        op.once(&mut t).unwrap();
        // A thread that cannot exist has no clock: a joined thread's id may still name a task
        // being reaped, so the id is 2^23, above PID_MAX_LIMIT (2^22): no task can have it.
        let mut op = ReadClock {
            clock: thread_cpu_clock(1 << 23),
        };
        assert!(matches!(
            op.once(&mut t),
            Err(LoopError::Clock {
                errno: libc::EINVAL
            })
        ));
    }
}
