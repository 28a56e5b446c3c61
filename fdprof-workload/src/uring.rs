//! `opensock --io-uring-direct`: opensock's load with io_uring direct descriptors. Each task
//! has a ring of its own with a registered (fixed) file table; its sockets are created by
//! `IORING_OP_SOCKET` straight into fixed slots and closed by `IORING_OP_CLOSE` on the slot, so
//! they never enter the process's fd table: no `alloc_fd`, no `file_lock`. Ops are submitted
//! [`RING_BATCH`] at a time, linked into one chain so that they run in order, with one
//! `io_uring_enter`: batching is what a ring is for.

use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;

use io_uring::{IoUring, opcode, squeue, types};

use crate::ground_truth::{LoopError, Tracker};
use crate::scenarios::{Op, XorShift};

/// One task's ring and its slots. The ring is never dropped: like the other scenarios' fds,
/// its fd stays open until the process exits (or a sweep's teardown closes it), so that no
/// close outside the measured phase's ops is seen while a profiler records.
pub(crate) struct UringOpensock {
    ring: ManuallyDrop<IoUring>,
    /// The ring's fd, for the teardown between the runs of a sweep.
    ring_fd: [i32; 1],
    slots: u32,
    rng: XorShift,
    /// The ops queued and not submitted yet (two entries each).
    queued: Vec<squeue::Entry>,
}

/// Ops submitted with one `io_uring_enter` (a divisor of the loop's batch of 256, so that every
/// counted op has completed).
pub(crate) const RING_BATCH: usize = 16;
/// Entries the ring's queues hold: one op takes two.
const RING_ENTRIES: u32 = 2 * RING_BATCH as u32;

fn socket_into(slot: u32) -> Result<squeue::Entry, LoopError> {
    let dest = types::DestinationSlot::try_from_slot_target(slot).map_err(|_| LoopError::Ring {
        what: "a fixed slot number",
        errno: libc::EINVAL,
    })?;
    Ok(opcode::Socket::new(libc::AF_INET, libc::SOCK_STREAM, 0)
        .file_index(Some(dest))
        .build())
}

impl UringOpensock {
    /// A ring with `slots` fixed slots, each holding a socket made by `IORING_OP_SOCKET`.
    pub(crate) fn new(slots: u32, rng: XorShift) -> Result<Self, LoopError> {
        let ring = IoUring::new(RING_ENTRIES).map_err(|e| ring_error("io_uring_setup", &e))?;
        ring.submitter()
            .register_files_sparse(slots)
            .map_err(|e| ring_error("registering the fixed-file table", &e))?;
        let ring_fd = [ring.as_raw_fd()];
        let mut task = UringOpensock {
            ring: ManuallyDrop::new(ring),
            ring_fd,
            slots,
            rng,
            queued: Vec::with_capacity(2 * RING_BATCH),
        };
        for slot in 0..slots {
            task.run(&[socket_into(slot)?])?;
        }
        Ok(task)
    }

    /// Submits `entries` (linked into one chain, so in order) with one `io_uring_enter` and
    /// checks that each completed.
    fn run(&mut self, entries: &[squeue::Entry]) -> Result<(), LoopError> {
        {
            let mut sq = self.ring.submission();
            for (i, e) in entries.iter().enumerate() {
                let e = if i + 1 < entries.len() {
                    e.clone().flags(squeue::Flags::IO_LINK)
                } else {
                    e.clone()
                };
                // SAFETY: the entries reference no user memory.
                unsafe { sq.push(&e) }.map_err(|_| LoopError::Ring {
                    what: "a full submission queue",
                    errno: libc::EBUSY,
                })?;
            }
        }
        self.ring
            .submit_and_wait(entries.len())
            .map_err(|e| ring_error("io_uring_enter", &e))?;
        let mut done = 0;
        for cqe in self.ring.completion() {
            done += 1;
            if cqe.result() < 0 {
                return Err(LoopError::Ring {
                    what: "an IORING_OP_SOCKET or IORING_OP_CLOSE on a fixed slot",
                    errno: -cqe.result(),
                });
            }
        }
        if done != entries.len() {
            return Err(LoopError::Ring {
                what: "a completion",
                errno: libc::EAGAIN,
            });
        }
        Ok(())
    }
}

impl UringOpensock {
    /// The fd the process holds for this task: its ring's.
    pub(crate) fn held_fds(&self) -> &[i32] {
        &self.ring_fd
    }
}

fn ring_error(what: &'static str, e: &std::io::Error) -> LoopError {
    LoopError::Ring {
        what,
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    }
}

impl Op for UringOpensock {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, t: &mut T) -> Result<(), LoopError> {
        let slot = self.rng.below(self.slots);
        self.queued
            .push(opcode::Close::new(types::Fixed(slot)).build());
        self.queued.push(socket_into(slot)?);
        t.direct(1, 1);
        if self.queued.len() == 2 * RING_BATCH {
            self.flush(t)?;
        }
        Ok(())
    }

    fn flush<T: Tracker>(&mut self, _t: &mut T) -> Result<(), LoopError> {
        if self.queued.is_empty() {
            return Ok(());
        }
        let entries = std::mem::take(&mut self.queued);
        let done = self.run(&entries);
        self.queued = entries;
        self.queued.clear();
        done
    }
}
