//! Records, map keys and constants shared by fdprof's eBPF programs and its user space. Defined
//! once here so both sides agree on every layout and index.
#![no_std]

#[cfg(feature = "serde")]
extern crate alloc;

pub mod contention;
pub mod counters;
pub mod cpu;
pub mod events;
pub mod fnops;
pub mod probes;
pub mod process;
pub mod session;
pub mod syscalls;
pub mod targets;
pub mod trace;

/// Number of log2 buckets in every histogram: slot `k` holds values with `k` significant bits
/// (slot 0 holds 0, slot 1 holds 1, slot 2 holds 2..=3, …), as bcc's `funclatency` does.
pub const HIST_SLOTS: u32 = 64;

/// The log2 slot of `v`: its number of significant bits. BPF has no count-leading-zeros, and
/// LLVM spells `leading_zeros` there as ~45 instructions; six halvings take at most 18, on the
/// path of every allocation's three histograms.
#[inline(always)]
pub fn log2_slot(v: u64) -> u32 {
    let (mut v, mut n) = (v, 0);
    for shift in [32, 16, 8, 4, 2, 1] {
        if v >> shift != 0 {
            v >>= shift;
            n += shift;
        }
    }
    n + v as u32
}

#[cfg(test)]
mod tests {
    use super::log2_slot;

    #[test]
    fn log2_slot_counts_significant_bits() {
        for v in (0..4096u64)
            .chain((0..64).flat_map(|b| [1u64 << b, (1u64 << b) - 1, (1u64 << b) + 1]))
            .chain([u64::MAX])
        {
            assert_eq!(log2_slot(v), 64 - v.leading_zeros(), "{v}");
        }
    }
}
