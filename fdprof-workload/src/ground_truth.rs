//! What the measured phase did to the fd table: the fast tracker (highest fd only) used by timed
//! runs, and the lockstep tracker that runs [`FdModel`] beside the kernel in deterministic runs,
//! checks every fd the kernel returns against the model and builds the `expected` object.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use crate::fd_model::FdModel;
use crate::sys::{Sys, SysError};

/// The model and the kernel disagree: the ground truth would be wrong, so the run fails.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mismatch {
    pub sys: Sys,
    pub kernel_fd: i32,
    pub model_fd: i32,
    pub what: &'static str,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the fd-table model disagrees with the kernel: {}() {} fd {}, the model expected fd {}",
            self.sys.name(),
            self.what,
            self.kernel_fd,
            self.model_fd
        )
    }
}

/// Why a measured loop stopped early.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LoopError {
    Sys(SysError),
    Model(Mismatch),
    /// accept: no connection arrived for this many seconds.
    Stalled(u32),
    /// `--pin`: sched_setaffinity failed with this errno.
    Pin {
        cpu: usize,
        errno: i32,
    },
    /// cputime: `clock_gettime` of a peer thread's CPU-time clock failed with this errno.
    Clock {
        errno: i32,
    },
    /// cputime: task `peer` had not published its clock by the start barrier.
    PeerClock {
        peer: usize,
    },
    /// udp-loopback: `what` (sendto, recv) failed with this errno.
    Net {
        what: &'static str,
        errno: i32,
    },
    /// opensock --io-uring-direct: the ring refused `what` with this errno.
    Ring {
        what: &'static str,
        errno: i32,
    },
}

impl From<SysError> for LoopError {
    fn from(e: SysError) -> Self {
        LoopError::Sys(e)
    }
}

impl From<Mismatch> for LoopError {
    fn from(e: Mismatch) -> Self {
        LoopError::Model(e)
    }
}

impl fmt::Display for LoopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoopError::Sys(e) => write!(f, "{e}"),
            LoopError::Model(e) => write!(f, "{e}"),
            LoopError::Stalled(s) => write!(f, "accept4() got no connection for {s} s"),
            LoopError::Pin { cpu, errno } => write!(
                f,
                "pinning to CPU {cpu}: sched_setaffinity() failed: {}",
                crate::sys::describe_errno(*errno)
            ),
            LoopError::Clock { errno } => write!(
                f,
                "clock_gettime() of a peer thread's CPU-time clock failed: {}",
                crate::sys::describe_errno(*errno)
            ),
            LoopError::PeerClock { peer } => {
                write!(f, "task {peer} did not publish its CPU-time clock")
            }
            LoopError::Net { what, errno } => {
                write!(f, "{what} failed: {}", crate::sys::describe_errno(*errno))
            }
            LoopError::Ring { what, errno } => write!(
                f,
                "io_uring: {what} failed: {}",
                crate::sys::describe_errno(*errno)
            ),
        }
    }
}

/// Observes the fd-table effects of each successful system call of the measured phase.
pub(crate) trait Tracker {
    /// A successful call of `sys`.
    fn call(&mut self, sys: Sys);
    /// `sys` allocated `fd` through `alloc_fd(start, ...)`.
    fn allocated(&mut self, sys: Sys, start: u32, fd: i32) -> Result<(), Mismatch>;
    /// `sys` closed `fd`.
    fn closed(&mut self, sys: Sys, fd: i32) -> Result<(), Mismatch>;
    /// `sys` (dup2/dup3) installed at `fd`, replacing whatever was open there.
    fn installed(&mut self, sys: Sys, fd: i32);
    /// `sys` (close_range) closed every open fd from `first` to `last`.
    fn closed_range(&mut self, sys: Sys, first: i32, last: i32);
    /// io_uring created and closed files in fixed slots, outside the fd table.
    fn direct(&mut self, created: u64, closed: u64);
    /// The highest fd allocated or installed so far (-1: none).
    fn max_fd(&self) -> i32;
}

/// Timed runs: remembers the highest fd only (for the table size), nothing else.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fast {
    max_fd: i32,
}

impl Default for Fast {
    fn default() -> Self {
        Fast { max_fd: -1 }
    }
}

impl Tracker for Fast {
    #[inline(always)]
    fn call(&mut self, _sys: Sys) {}

    #[inline(always)]
    fn allocated(&mut self, _sys: Sys, _start: u32, fd: i32) -> Result<(), Mismatch> {
        self.max_fd = self.max_fd.max(fd);
        Ok(())
    }

    #[inline(always)]
    fn closed(&mut self, _sys: Sys, _fd: i32) -> Result<(), Mismatch> {
        Ok(())
    }

    #[inline(always)]
    fn installed(&mut self, _sys: Sys, fd: i32) {
        self.max_fd = self.max_fd.max(fd);
    }

    #[inline(always)]
    fn closed_range(&mut self, _sys: Sys, _first: i32, _last: i32) {}

    #[inline(always)]
    fn direct(&mut self, _created: u64, _closed: u64) {}

    fn max_fd(&self) -> i32 {
        self.max_fd
    }
}

/// Deterministic runs: the model in lockstep with the kernel, and the counts for `expected`.
#[derive(Debug)]
pub(crate) struct Lockstep {
    model: FdModel,
    next_fd_start: u32,
    max_fds_start: u32,
    calls: [u64; Sys::COUNT],
    created: [u64; Sys::COUNT],
    closed: [u64; Sys::COUNT],
    allocs: HashMap<(Sys, u32, u32), u64>,
    max_fd: i32,
    direct: DirectFiles,
}

impl Lockstep {
    pub(crate) fn new(model: FdModel) -> Self {
        Lockstep {
            next_fd_start: model.next_fd(),
            max_fds_start: model.max_fds(),
            model,
            calls: [0; Sys::COUNT],
            created: [0; Sys::COUNT],
            closed: [0; Sys::COUNT],
            allocs: HashMap::new(),
            max_fd: -1,
            direct: DirectFiles::default(),
        }
    }

    /// The `expected` object for the measured phase tracked so far.
    pub(crate) fn expected(&self) -> Expected {
        let counts = |a: &[u64; Sys::COUNT]| {
            a.iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| (Sys::from_index(i).name(), *n))
                .collect()
        };
        let mut allocs: Vec<AllocGroup> = self
            .allocs
            .iter()
            .map(|(&(sys, fd, origin), &count)| AllocGroup {
                syscall: sys.name(),
                fd,
                origin,
                scan_bits: fd - origin,
                count,
            })
            .collect();
        allocs.sort_by(|a, b| (a.syscall, a.fd, a.origin).cmp(&(b.syscall, b.fd, b.origin)));
        Expected {
            syscalls: counts(&self.calls),
            fds_created: counts(&self.created),
            fds_closed: counts(&self.closed),
            allocs,
            max_fds: self.model.max_fds(),
            max_fds_start: self.max_fds_start,
            next_fd_start: self.next_fd_start,
            next_fd_end: self.model.next_fd(),
            direct_files: (self.direct != DirectFiles::default()).then_some(self.direct),
        }
    }
}

impl Tracker for Lockstep {
    fn call(&mut self, sys: Sys) {
        self.calls[sys.index()] += 1;
    }

    fn allocated(&mut self, sys: Sys, start: u32, fd: i32) -> Result<(), Mismatch> {
        let predicted = self.model.alloc(start);
        if predicted.fd as i32 != fd {
            return Err(Mismatch {
                sys,
                kernel_fd: fd,
                model_fd: predicted.fd as i32,
                what: "returned",
            });
        }
        self.created[sys.index()] += 1;
        *self
            .allocs
            .entry((sys, predicted.fd, predicted.origin))
            .or_insert(0) += 1;
        self.max_fd = self.max_fd.max(fd);
        Ok(())
    }

    fn closed(&mut self, sys: Sys, fd: i32) -> Result<(), Mismatch> {
        if fd < 0 || !self.model.close(fd as u32) {
            return Err(Mismatch {
                sys,
                kernel_fd: fd,
                model_fd: -1,
                what: "closed the open",
            });
        }
        self.closed[sys.index()] += 1;
        Ok(())
    }

    fn installed(&mut self, sys: Sys, fd: i32) {
        self.created[sys.index()] += 1;
        if self.model.install(fd as u32) {
            self.closed[sys.index()] += 1;
        }
        self.max_fd = self.max_fd.max(fd);
    }

    fn closed_range(&mut self, sys: Sys, first: i32, last: i32) {
        for fd in first.max(0)..=last {
            if self.model.close(fd as u32) {
                self.closed[sys.index()] += 1;
            }
        }
    }

    fn direct(&mut self, created: u64, closed: u64) {
        self.direct.created += created;
        self.direct.closed += closed;
    }

    fn max_fd(&self) -> i32 {
        self.max_fd
    }
}

/// Exactly what the measured phase of a deterministic run did (docs/figures.md defines each
/// figure).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Expected {
    /// Successful calls per system call.
    pub syscalls: std::collections::BTreeMap<&'static str, u64>,
    /// Fds created per system call (pipe2/socketpair: 2 a call; dup2: 1).
    pub fds_created: std::collections::BTreeMap<&'static str, u64>,
    /// Fds closed per system call (dup2 onto an open fd closes one, counted under dup2).
    pub fds_closed: std::collections::BTreeMap<&'static str, u64>,
    /// `alloc_fd`-backed allocations grouped by (syscall, fd, origin); dup2 is not one.
    pub allocs: Vec<AllocGroup>,
    /// `fdt->max_fds` at the end of the measured phase.
    pub max_fds: u32,
    /// `fdt->max_fds` when the measured phase began.
    pub max_fds_start: u32,
    /// `files->next_fd` when the measured phase began.
    pub next_fd_start: u32,
    /// `files->next_fd` at the end of the measured phase.
    pub next_fd_end: u32,
    /// Files io_uring created and closed in fixed slots (`opensock --io-uring-direct`): none
    /// of them is in the fd table, so none is in the counts above. Absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct_files: Option<DirectFiles>,
}

/// Files created and closed as io_uring direct descriptors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct DirectFiles {
    pub created: u64,
    pub closed: u64,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct AllocGroup {
    pub syscall: &'static str,
    pub fd: u32,
    pub origin: u32,
    pub scan_bits: u32,
    pub count: u64,
}
