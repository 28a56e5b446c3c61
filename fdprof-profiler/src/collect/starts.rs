//! Process starts under `record -a`: the programs on `sched_process_fork` (new processes, not
//! threads; tp_btf only) and `sched_process_exec` send the pid through the `PROCESS_STARTS`
//! ring buffer, and the recorder snapshots that process's maps at once rather than at its next
//! pass over `/proc` (`symbolize::system`), so a process that lives a few milliseconds still
//! gets its user stacks symbolized.
//!
//! Bounded end to end: the ring holds 4096 starts (past that the kernel counts
//! `processes`/`ringbuf_full` drops), a batch is at most that many, and no more batches are
//! read while [`MAX_PENDING`] starts are handed out and not yet handled (a [`StartBatch`] is
//! handled when dropped), so a recorder that falls behind leaves the excess to the ring's drop
//! counter instead of queueing it in memory.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};
use std::time::Duration;

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use fdprof_common::process::{ProcessStart, STARTS_RING_BYTES, start};

use super::ring::{AsyncRing, decode_plain};

/// Starts the ring holds: 16 bytes each with its header.
pub(crate) const RING_STARTS: usize = STARTS_RING_BYTES as usize / 16;

/// Starts handed out and not yet handled at most.
pub(crate) const MAX_PENDING: usize = RING_STARTS;

/// How long reading waits before looking again whether the recorder has caught up.
const BACKOFF: Duration = Duration::from_millis(5);

/// How a process started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Fork,
    Exec,
}

/// One start as the kernel sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub pid: u32,
    pub how: How,
    /// In a target set, which target it is of (`TargetEntry::slot`).
    pub slot: u16,
}

impl Start {
    /// Decodes one ring record; `None` for another size or an unknown `how`.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let r: ProcessStart = decode_plain(bytes)?;
        let how = match r.how {
            start::FORK => How::Fork,
            start::EXEC => How::Exec,
            _ => return None,
        };
        Some(Self {
            pid: r.tgid,
            how,
            slot: r.slot,
        })
    }
}

/// Starts read together; handled once dropped.
#[derive(Debug)]
pub struct StartBatch {
    pub starts: Vec<Start>,
    pending: Arc<AtomicUsize>,
}

impl Drop for StartBatch {
    fn drop(&mut self) {
        self.pending.fetch_sub(self.starts.len(), Ordering::Relaxed);
    }
}

/// The `PROCESS_STARTS` ring of a [`super::Profiler`] ([`super::Profiler::take_starts`]),
/// registered with the tokio reactor: create and read it inside a runtime with IO enabled.
pub(crate) struct StartStream {
    ring: AsyncRing,
    pending: Arc<AtomicUsize>,
}

impl StartStream {
    pub(crate) fn new(ring: RingBuf<MapData>) -> Result<Self> {
        Ok(Self {
            ring: AsyncRing::new(ring, "process starts")?,
            pending: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Waits until the recorder has room and there are starts, then returns those there are.
    /// Cancel-safe (a `select!` branch).
    pub(crate) async fn next_batch(&mut self) -> Result<StartBatch> {
        let room = loop {
            let pending = self.pending.load(Ordering::Relaxed);
            if pending < MAX_PENDING {
                break MAX_PENDING - pending;
            }
            tokio::time::sleep(BACKOFF).await;
        };
        let starts = self.ring.next_batch(room, Start::decode).await?;
        Ok(self.hand_out(starts))
    }

    /// The starts still in the ring, without waiting (at the stop, so that every start sent
    /// is read or counted as dropped).
    pub(crate) fn try_batch(&mut self) -> StartBatch {
        let starts = self.ring.try_batch(RING_STARTS, Start::decode);
        self.hand_out(starts)
    }

    fn hand_out(&self, starts: Vec<Start>) -> StartBatch {
        self.pending.fetch_add(starts.len(), Ordering::Relaxed);
        StartBatch {
            starts,
            pending: self.pending.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(r: &ProcessStart) -> Vec<u8> {
        // SAFETY: plain #[repr(C)] data without padding.
        unsafe {
            std::slice::from_raw_parts((r as *const ProcessStart).cast::<u8>(), size_of_val(r))
        }
        .to_vec()
    }

    #[test]
    fn decodes_forks_and_execs_only() {
        let exec = ProcessStart {
            tgid: 42,
            how: start::EXEC,
            slot: 3,
        };
        assert_eq!(
            Start::decode(&bytes(&exec)),
            Some(Start {
                pid: 42,
                how: How::Exec,
                slot: 3,
            })
        );
        let fork = ProcessStart {
            how: start::FORK,
            ..exec
        };
        assert_eq!(Start::decode(&bytes(&fork)).unwrap().how, How::Fork);
        let unknown = ProcessStart { how: 9, ..exec };
        assert_eq!(Start::decode(&bytes(&unknown)), None);
        assert_eq!(Start::decode(&bytes(&exec)[..7]), None);
        // With the ring's 8-byte header a record takes 16 bytes, as RING_STARTS counts.
        assert_eq!(size_of::<ProcessStart>(), 8);
    }

    #[test]
    fn a_batch_is_handled_when_dropped() {
        let pending = Arc::new(AtomicUsize::new(3));
        let batch = StartBatch {
            starts: vec![
                Start {
                    pid: 1,
                    how: How::Exec,
                    slot: 0,
                };
                3
            ],
            pending: pending.clone(),
        };
        drop(batch);
        assert_eq!(pending.load(Ordering::Relaxed), 0);
    }
}
