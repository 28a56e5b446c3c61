//! The events ring buffer: records decoded as the programs wrote them ([`RawEvent`]), read
//! asynchronously ([`super::ring::AsyncRing`]).

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use fdprof_common::{
    contention::LockIdentity,
    events::{EventRecord, RING_BYTES, flag, kind},
};

use super::ring::{AsyncRing, decode_plain};

/// One event as the kernel sent it: times are `CLOCK_MONOTONIC` ns, stacks are ids in the
/// profiler's stack map (`super::Profiler::stacks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawEvent {
    pub(crate) at_ns: u64,
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) what: RawKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawKind {
    SlowWait {
        lock: LockIdentity,
        wait_ns: u64,
        /// `None` when the stack could not be taken.
        kernel_stack: Option<i32>,
        user_stack: Option<i32>,
    },
    Expansion {
        old_max_fds: u32,
        new_max_fds: u32,
        /// Where `expand_files` is probed directly.
        duration_ns: Option<u64>,
    },
    Exit {
        /// The last thread of its process.
        process: bool,
    },
}

impl RawEvent {
    /// Decodes one ring-buffer record; `None` for a record of another size or an unknown kind.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let r: EventRecord = decode_plain(bytes)?;
        let stack = |id: i32| (id >= 0).then_some(id);
        let what = match r.kind {
            kind::SLOW_WAIT => RawKind::SlowWait {
                lock: r.lock,
                wait_ns: r.value,
                kernel_stack: stack(r.kernel_stack),
                user_stack: stack(r.user_stack),
            },
            kind::EXPANSION => RawKind::Expansion {
                old_max_fds: r.old_max_fds,
                new_max_fds: r.new_max_fds,
                duration_ns: (r.flags & flag::DURATION != 0).then_some(r.value),
            },
            kind::EXIT => RawKind::Exit {
                process: r.flags & flag::PROCESS != 0,
            },
            _ => return None,
        };
        Some(Self {
            at_ns: r.at_ns,
            pid: r.pid,
            tid: r.tid,
            what,
        })
    }

    /// The stack ids this event refers to.
    pub(crate) fn stack_ids(&self) -> impl Iterator<Item = i32> {
        let (k, u) = match self.what {
            RawKind::SlowWait {
                kernel_stack,
                user_stack,
                ..
            } => (kernel_stack, user_stack),
            _ => (None, None),
        };
        k.into_iter().chain(u)
    }
}

/// Events drained at most per batch: the whole ring's worth of records.
const MAX_BATCH: usize = (RING_BYTES as usize) / size_of::<EventRecord>();

/// The events ring buffer of a [`super::Profiler`], registered with the tokio reactor: create
/// and read it inside a runtime with IO enabled (creating it elsewhere panics).
pub(crate) struct EventStream {
    ring: AsyncRing,
}

impl EventStream {
    pub(crate) fn new(ring: RingBuf<MapData>) -> Result<Self> {
        Ok(Self {
            ring: AsyncRing::new(ring, "events")?,
        })
    }

    /// Waits until there are events, then returns those there are, oldest first.
    pub(crate) async fn next_batch(&mut self) -> Result<Vec<RawEvent>> {
        self.ring.next_batch(MAX_BATCH, RawEvent::decode).await
    }

    /// The events there are now, without waiting.
    pub(crate) fn try_batch(&mut self) -> Vec<RawEvent> {
        self.ring.try_batch(MAX_BATCH, RawEvent::decode)
    }

    #[cfg(test)]
    /// Records that did not decode (none, unless the object and fdprof disagree).
    pub(crate) fn undecoded(&self) -> u64 {
        self.ring.undecoded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(r: &EventRecord) -> Vec<u8> {
        // SAFETY: plain #[repr(C)] data without padding.
        unsafe {
            std::slice::from_raw_parts((r as *const EventRecord).cast::<u8>(), size_of_val(r))
        }
        .to_vec()
    }

    #[test]
    fn record_has_no_padding() {
        // 2 u64 + 10 u32/i32: any hole would make the size larger.
        assert_eq!(size_of::<EventRecord>(), 4 * 8 + 8 * 4);
    }

    #[test]
    fn decodes_each_kind() {
        let base = EventRecord {
            at_ns: 5,
            pid: 10,
            tid: 11,
            ..EventRecord::default()
        };
        let slow = EventRecord {
            kind: kind::SLOW_WAIT,
            value: 1234,
            lock: LockIdentity {
                class: 2,
                known: 0,
                static_addr: 0xffff_ffff_8200_1000,
            },
            kernel_stack: 7,
            user_stack: -14,
            ..base
        };
        assert_eq!(
            RawEvent::decode(&bytes(&slow)),
            Some(RawEvent {
                at_ns: 5,
                pid: 10,
                tid: 11,
                what: RawKind::SlowWait {
                    lock: LockIdentity {
                        class: 2,
                        known: 0,
                        static_addr: 0xffff_ffff_8200_1000,
                    },
                    wait_ns: 1234,
                    kernel_stack: Some(7),
                    user_stack: None,
                },
            })
        );
        assert_eq!(
            RawEvent::decode(&bytes(&slow))
                .unwrap()
                .stack_ids()
                .collect::<Vec<_>>(),
            [7]
        );
        let grown = EventRecord {
            kind: kind::EXPANSION,
            old_max_fds: 64,
            new_max_fds: 256,
            value: 99,
            ..base
        };
        assert_eq!(
            RawEvent::decode(&bytes(&grown)).unwrap().what,
            RawKind::Expansion {
                old_max_fds: 64,
                new_max_fds: 256,
                duration_ns: None
            }
        );
        let timed = EventRecord {
            flags: flag::DURATION,
            ..grown
        };
        assert!(matches!(
            RawEvent::decode(&bytes(&timed)).unwrap().what,
            RawKind::Expansion {
                duration_ns: Some(99),
                ..
            }
        ));
        let exit = EventRecord {
            kind: kind::EXIT,
            flags: flag::PROCESS,
            ..base
        };
        assert_eq!(
            RawEvent::decode(&bytes(&exit)).unwrap().what,
            RawKind::Exit { process: true }
        );
    }

    #[test]
    fn refuses_unknown_kinds_and_sizes() {
        let r = EventRecord {
            kind: 99,
            ..EventRecord::default()
        };
        assert_eq!(RawEvent::decode(&bytes(&r)), None);
        let exit = bytes(&EventRecord {
            kind: kind::EXIT,
            ..EventRecord::default()
        });
        assert_eq!(RawEvent::decode(&exit[..exit.len() - 1]), None);
        assert_eq!(RawEvent::decode(&[]), None);
    }
}
