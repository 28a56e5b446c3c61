//! Which syscalls are fd syscalls and what each does to the table, looked up in
//! `fdprof_common::syscalls`' tables: shared by the syscall programs and the trace.

use fdprof_common::syscalls::{EFFECT_BY_INDEX, Effect, MAX_NR, NOT_TRACED, SYSCALL_INDEX};

/// The fd syscall index of syscall number `nr`; `None` for a syscall not traced.
#[inline(always)]
pub(crate) fn index_of(nr: u64) -> Option<u32> {
    if nr >= u64::from(MAX_NR) {
        return None;
    }
    let index = SYSCALL_INDEX[nr as usize];
    (index != NOT_TRACED).then_some(u32::from(index))
}

#[inline(always)]
pub(crate) fn effect_of(index: u32) -> Effect {
    EFFECT_BY_INDEX[(index & 63) as usize]
}

/// Effects whose exit needs syscall arguments saved at entry.
#[inline(always)]
pub(crate) fn needs_args(effect: Effect) -> bool {
    matches!(
        effect,
        Effect::AllocPair | Effect::FcntlDup | Effect::Install | Effect::CloseRange
    )
}
