//! Records, map keys and constants shared by fdprof's eBPF programs and its user space. Defined
//! once here so both sides agree on every layout and index.
#![no_std]
#![warn(unreachable_pub)]

#[cfg(feature = "serde")]
extern crate alloc;

pub mod contention;
pub mod copies;
pub mod counters;
pub mod cpu;
pub mod events;
pub mod fnops;
pub mod probes;
pub mod process;
pub mod session;
pub mod settings;
pub mod syscalls;
pub mod targets;
pub mod trace;

/// Number of log2 buckets in every histogram: slot `k` holds values with `k` significant bits
/// (slot 0 holds 0, slot 1 holds 1, slot 2 holds 2..=3, …), as bcc's `funclatency` does.
pub const HIST_SLOTS: u32 = 64;

/// The log2 slot of `v`: its number of significant bits. (Six halvings would take fewer BPF
/// instructions than LLVM's spelling of `leading_zeros`, but their branches made the 6.1
/// verifier refuse `contention_end`.)
#[inline(always)]
pub fn log2_slot(v: u64) -> u32 {
    64 - v.leading_zeros()
}
