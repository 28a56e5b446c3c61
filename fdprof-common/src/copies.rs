//! User stacks walked from call-frame information. A program copies the top of the user stack
//! with the three registers a walk starts from (ip, sp, bp) into `STACK_COPIES`; user space
//! unwinds each copy once with the mapped files' `.eh_frame` (frame pointers where code keeps
//! them) and keys the figures by the copy's id, as it keyed them by a stack-map id before.
//!
//! A copy stands for every later stack with the same (address space, ip, depth below the
//! thread's TLS block): `COPY_IDS` gives them its id, so a site is copied once, not at every walk.

/// Ring buffer of [`CopyHeader`] records, each followed by `len` bytes of stack from `sp` up.
pub const COPIES_MAP: &str = "STACK_COPIES";
/// LRU hash of a stack's (process, ip, depth) hash → its copy's id.
pub const COPY_IDS_MAP: &str = "COPY_IDS";
/// Per-CPU perf buffers of the slow-path probe's copies (same records as `STACK_COPIES`).
pub const SLOW_COPIES_MAP: &str = "SLOW_COPIES";

/// Bytes of stack copied at most (as `perf record --call-graph dwarf`'s default dump).
pub const COPY_BYTES: usize = 8192;
/// Room for a few hundred copies between two reads of the ring (user space reads it every
/// [`READ_EVERY_MS`]: the programs do not wake it).
pub const COPIES_RING_BYTES: u32 = 4 << 20;
pub const READ_EVERY_MS: u64 = 10;
/// Stacks remembered as copied (`COPY_IDS` entries).
pub const COPY_IDS: u32 = 32768;
/// Copy ids are in `COPY_ID_BASE..COPY_ID_END`: stack-map ids are below (a map holds fewer
/// entries), the ids user space gives the slow-path sites' frames above, so one id space
/// carries them all.
pub const COPY_ID_BASE: i32 = 1 << 29;
pub const COPY_ID_END: i32 = 1 << 30;
/// Bytes a CPU may copy in a second before copies become `copy_budget` drops.
pub const BUDGET_BYTES_PER_CPU_SEC: u32 = 16 << 20;

/// What precedes a copy's bytes in `STACK_COPIES`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyHeader {
    /// The (process, ip, depth) hash `COPY_IDS` knows the copy by.
    pub key: u64,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// The address space the stack is of (`task->mm`): an exec gives a process another, whose
    /// mappings the unwinder must read again. Never leaves fdprof.
    pub mm: u64,
    /// The id figures carry (at least [`COPY_ID_BASE`]).
    pub id: i32,
    pub tgid: u32,
    /// Bytes of stack that follow.
    pub len: u32,
    pub _pad: u32,
}

/// A copy as the programs build it before sending its first `size_of::<CopyHeader>() + len`
/// bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StackCopy {
    pub header: CopyHeader,
    pub bytes: [u8; COPY_BYTES],
}

/// Why a user stack's walk ended before the thread's start. User space puts the reason last
/// in the stack's addresses as [`WalkEnd::address`], a value no user address takes (the top
/// page of the kernel half), so it flows through every stage as a frame and is named where
/// frames are named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[repr(u8)]
pub enum WalkEnd {
    /// A return address outside every executable mapping (JIT code, a corrupt stack).
    UnknownCode = 1,
    /// The walk needed stack beyond the copy.
    CopyTooShort = 2,
    /// The call-frame information gave no way on (or the walk did not advance).
    NoUnwindInfo = 3,
    /// The process was gone before its copy was unwound.
    ProcessGone = 4,
    /// The walk reached the frame bound.
    TooDeep = 5,
}

/// Frames a walk keeps at most.
pub const MAX_FRAMES: usize = 127;

impl WalkEnd {
    const BASE: u64 = 0xffff_ffff_ffff_f000;
    pub const ALL: [WalkEnd; 5] = [
        WalkEnd::UnknownCode,
        WalkEnd::CopyTooShort,
        WalkEnd::NoUnwindInfo,
        WalkEnd::ProcessGone,
        WalkEnd::TooDeep,
    ];

    pub const fn address(self) -> u64 {
        Self::BASE + self as u64
    }

    pub fn from_address(a: u64) -> Option<WalkEnd> {
        Self::ALL.into_iter().find(|w| w.address() == a)
    }

    /// As a report's frame names it.
    pub const fn name(self) -> &'static str {
        match self {
            WalkEnd::UnknownCode => "[truncated: unknown code]",
            WalkEnd::CopyTooShort => "[truncated: stack copy too short]",
            WalkEnd::NoUnwindInfo => "[truncated: no unwind info]",
            WalkEnd::ProcessGone => "[truncated: process gone]",
            WalkEnd::TooDeep => "[truncated: too deep]",
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data: five u64s then four u32s, no padding.
    unsafe impl aya::Pod for super::CopyHeader {}
}

const _: () = assert!(core::mem::size_of::<CopyHeader>() == 56);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_end_is_told_back_from_its_address_and_no_user_address_is_one() {
        for end in WalkEnd::ALL {
            assert_eq!(WalkEnd::from_address(end.address()), Some(end));
        }
        assert_eq!(WalkEnd::from_address(0x7fff_ffff_f000), None);
        assert_eq!(WalkEnd::from_address(0), None);
    }
}
