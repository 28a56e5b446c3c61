//! The kernel's raw events turned into [`fdprof_figures::Event`]s: time since attach, lock and
//! operation named, stacks symbolized.

use std::collections::HashMap;

use fdprof_figures::{Event, EventKind, Frame};
use fdprof_recording::{lock, recording};

use super::{build::Symbolizers, lock_names, operation};
use crate::collect::events::{RawEvent, RawKind};

/// Symbolizes events, remembering each stack it has symbolized (a site's stack ids recur).
pub(crate) struct EventSymbolizer {
    /// `CLOCK_MONOTONIC` ns at attach ([`crate::collect::Profiler::attached_ns`]).
    pub attached_ns: u64,
    kernel: HashMap<i32, Vec<recording::Frame>>,
    user: HashMap<(u32, i32), Vec<recording::Frame>>,
}

impl EventSymbolizer {
    pub(crate) fn new(attached_ns: u64) -> Self {
        Self {
            attached_ns,
            kernel: HashMap::new(),
            user: HashMap::new(),
        }
    }

    /// Forgets the symbolized stacks once there are more than `max` (a stack id is reused by
    /// the kernel for another stack only when the map is full, and pids come and go): a live
    /// view's memory stays bounded.
    pub(crate) fn trim(&mut self, max: usize) {
        if self.kernel.len() + self.user.len() > max {
            self.kernel.clear();
            self.user.clear();
        }
    }

    /// `stacks` holds the addresses of the events' stack ids
    /// ([`crate::collect::Profiler::stacks`]); an id missing there gives an empty stack.
    pub(crate) fn event(
        &mut self,
        raw: &RawEvent,
        stacks: &HashMap<i32, Vec<u64>>,
        sym: &mut Symbolizers,
    ) -> Event {
        let what = match raw.what {
            RawKind::SlowWait {
                lock,
                wait_ns,
                kernel_stack,
                user_stack,
            } => {
                let kernel = kernel_stack.map_or_else(Vec::new, |id| {
                    self.kernel
                        .entry(id)
                        .or_insert_with(|| kernel_frames(stacks.get(&id), sym))
                        .clone()
                });
                let user = user_stack.map_or_else(Vec::new, |id| {
                    self.user
                        .entry((raw.pid, id))
                        .or_insert_with(|| user_frames(raw.pid, stacks.get(&id), sym))
                        .clone()
                });
                let kind = fdprof_common::contention::LockKind::from_class(lock.class);
                let name = lock_names::name(&lock, &kernel, sym.kernel);
                EventKind::SlowWait {
                    lock: lock::figure(kind, name.as_ref()),
                    operation: operation::of_stack(kernel.iter().map(|f| f.function.as_str())),
                    wait_ns,
                    kernel_stack: kernel.iter().map(figure_frame).collect(),
                    user_stack: user.iter().map(figure_frame).collect(),
                }
            }
            RawKind::Expansion {
                old_max_fds,
                new_max_fds,
                duration_ns,
            } => EventKind::Expansion {
                old_max_fds: u64::from(old_max_fds),
                new_max_fds: u64::from(new_max_fds),
                duration_ns,
            },
            RawKind::Exit { process } => EventKind::Exit { process },
        };
        Event {
            at_ns: raw.at_ns.saturating_sub(self.attached_ns),
            pid: raw.pid,
            tid: raw.tid,
            what,
        }
    }

    /// [`EventSymbolizer::event`] of each.
    pub(crate) fn events(
        &mut self,
        raws: &[RawEvent],
        stacks: &HashMap<i32, Vec<u64>>,
        sym: &mut Symbolizers,
    ) -> Vec<Event> {
        raws.iter().map(|r| self.event(r, stacks, sym)).collect()
    }
}

fn kernel_frames(ips: Option<&Vec<u64>>, sym: &Symbolizers) -> Vec<recording::Frame> {
    ips.map(|ips| {
        super::build::trim_probe_frames(
            ips.iter()
                .map(|&ip| sym.kernel.resolve(ip, sym.raw_addrs).into())
                .collect(),
        )
    })
    .unwrap_or_default()
}

/// Symbolized in the waiter's own process.
fn user_frames(pid: u32, ips: Option<&Vec<u64>>, sym: &mut Symbolizers) -> Vec<recording::Frame> {
    ips.map(|ips| {
        sym.user
            .resolve(pid, ips, sym.raw_addrs)
            .into_iter()
            .map(recording::Frame::from)
            .collect()
    })
    .unwrap_or_default()
}

/// As the figures show a frame: the name escaped, `[unknown]` when there is none.
fn figure_frame(f: &recording::Frame) -> Frame {
    let name = f.function.trim();
    let (build_id, file_offset) = f.unnamed_object();
    Frame {
        function: if name.is_empty() {
            "[unknown]".into()
        } else {
            crate::escape::name(name).into_owned()
        },
        offset: Some(f.offset),
        module: f.module.clone(),
        build_id,
        file_offset,
    }
}

#[cfg(test)]
mod tests {
    use fdprof_common::{contention::LockKind, fnops::Operation};

    use super::*;
    use crate::symbolize::{KernelSymbols, UserSymbolizer};

    #[test]
    fn times_are_since_attach_and_kinds_carry_over() {
        let kernel = KernelSymbols::parse(
            "ffffffff81000000 T _raw_spin_lock\nffffffff81000100 T alloc_fd\n\
             ffffffff81000300 T bpf_trace_run2\n",
        )
        .unwrap();
        let mut user = UserSymbolizer::new();
        let mut sym = Symbolizers {
            kernel: &kernel,
            user: &mut user,
            user_pid: None,
            raw_addrs: false,
        };
        let mut events = EventSymbolizer::new(1_000);
        let raws = [
            RawEvent {
                at_ns: 1_500,
                pid: 7,
                tid: 8,
                what: RawKind::Expansion {
                    old_max_fds: 64,
                    new_max_fds: 256,
                    duration_ns: Some(3),
                },
            },
            RawEvent {
                at_ns: 2_000,
                pid: 7,
                tid: 7,
                what: RawKind::SlowWait {
                    lock: fdprof_common::contention::LockIdentity {
                        class: fdprof_common::contention::lock_class::MUTEX,
                        ..Default::default()
                    },
                    wait_ns: 400,
                    kernel_stack: Some(3),
                    user_stack: None,
                },
            },
            RawEvent {
                at_ns: 2_100,
                pid: 7,
                tid: 9,
                what: RawKind::SlowWait {
                    lock: fdprof_common::contention::LockIdentity::default(),
                    wait_ns: 90,
                    kernel_stack: Some(4),
                    user_stack: Some(-1),
                },
            },
            RawEvent {
                at_ns: 500,
                pid: 7,
                tid: 7,
                what: RawKind::Exit { process: true },
            },
        ];
        let stacks = HashMap::from([(
            4,
            vec![0xffffffff81000301, 0xffffffff81000004, 0xffffffff81000110],
        )]);
        let out = events.events(&raws, &stacks, &mut sym);
        assert_eq!(out[0].at_ns, 500);
        assert_eq!(
            out[0].what,
            EventKind::Expansion {
                old_max_fds: 64,
                new_max_fds: 256,
                duration_ns: Some(3)
            }
        );
        // A stack that is not in the map is empty, and its operation unknown.
        assert_eq!(
            out[1].what,
            EventKind::SlowWait {
                lock: fdprof_figures::Lock::of_kind(LockKind::Mutex),
                operation: Operation::Other,
                wait_ns: 400,
                kernel_stack: vec![],
                user_stack: vec![],
            }
        );
        // The probe's own frames trimmed; the operation from the first fd-table function.
        let EventKind::SlowWait {
            operation,
            kernel_stack,
            user_stack,
            ..
        } = &out[2].what
        else {
            panic!("{:?}", out[2]);
        };
        assert_eq!(*operation, Operation::Alloc);
        let names: Vec<_> = kernel_stack.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["_raw_spin_lock", "alloc_fd"]);
        assert_eq!(kernel_stack[1].offset, Some(0x10));
        assert!(user_stack.is_empty());
        // Before attach (cannot happen, but never wraps).
        assert_eq!(out[3].at_ns, 0);
        assert_eq!(out[3].what, EventKind::Exit { process: true });
    }
}
