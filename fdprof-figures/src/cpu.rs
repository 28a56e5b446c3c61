//! The on-CPU section (`record --cpu`): where the target's samples fell, and how many of them
//! were in the fd-table paths spinning on a lock.

use fdprof_common::{cpu::CpuEvent, fnops::Operation};
use serde::{Deserialize, Serialize};

use crate::Frame;

/// The on-CPU figures of one recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    /// `cycles` or `cpu-clock`.
    pub event: CpuEvent,
    /// Samples a second asked for, per CPU.
    pub frequency_hz: u64,
    /// Samples of the target in all.
    pub samples: u64,
    /// Samples whose kernel stack spins on a lock (`_raw_spin_lock`, `*queued_spin_lock_slowpath`).
    pub spinning: Share,
    /// Samples in the fd-table paths: the kernel stack holds `alloc_fd` or the close function.
    pub fd_table: Share,
    /// Of [`Cpu::fd_table`], those spinning on a lock beneath the fd-table function.
    pub fd_table_spinning: Share,
    /// The fd-table samples by operation (`alloc`, `close`, then `other`), as the model
    /// classifies kernel stacks.
    pub by_operation: Vec<CpuOperation>,
    /// The first `options.top` stacks, most samples first (all with `top` 0).
    pub top_stacks: Vec<CpuStack>,
    /// How many distinct stacks there are in all.
    pub stacks_total: usize,
}

/// A number of samples and its shares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub samples: u64,
    /// Of all the target's samples, 0..=1.
    pub share_of_all: Option<f64>,
}

/// The fd-table samples of one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuOperation {
    pub operation: Operation,
    pub samples: Share,
    /// Those spinning on a lock beneath the fd-table function.
    pub spinning: Share,
    /// `spinning` as a share of this operation's samples, 0..=1.
    pub spinning_share: Option<f64>,
}

/// Samples with the same stacks (the same function and module per frame), merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuStack {
    /// 1 for the first.
    pub rank: usize,
    /// The fd-table operation of the kernel stack; `other` outside the fd table.
    pub operation: Operation,
    pub samples: Share,
    /// Innermost frame first; the kernel stack is empty for samples taken in user mode.
    pub kernel_stack: Vec<Frame>,
    pub user_stack: Vec<Frame>,
}
