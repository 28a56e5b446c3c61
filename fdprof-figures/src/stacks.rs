//! The top stacks: contention sites merged by stack and ranked.

use fdprof_common::fnops::Operation;

use crate::Lock;
use serde::{Deserialize, Serialize};

/// Contention sites of one lock and operation with the same stacks (the same function and
/// module per frame; the same offsets too when the report keeps offsets), merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopStack {
    /// 1 for the first.
    pub rank: usize,
    #[serde(flatten)]
    pub lock: Lock,
    pub operation: Operation,
    /// Contention sites merged into this group.
    pub sites: usize,
    pub count: u64,
    pub total_wait_ns: u64,
    pub avg_wait_ns: Option<f64>,
    /// Upper bounds of the log2 buckets holding them (capped at the max), ns.
    pub p50_wait_ns: Option<u64>,
    pub p99_wait_ns: Option<u64>,
    /// Exact, ns.
    pub max_wait_ns: u64,
    /// Of the wait on all locks, 0..=1.
    pub share_of_all: Option<f64>,
    /// Innermost frame first; empty when the stack was not captured.
    pub kernel_stack: Vec<Frame>,
    pub user_stack: Vec<Frame>,
}

/// One stack frame.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// The function, control characters escaped; `[unknown]` when unsymbolized.
    pub function: String,
    /// Offset into the function in bytes; only when the report keeps offsets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The binary or library (user frames), as recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Unnamed user frames: the mapped file's build id and the address's offset in that file,
    /// which name the frame wherever the file's symbols are (`addr2line`, a symbol server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<crate::BuildId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_offset: Option<u64>,
}
