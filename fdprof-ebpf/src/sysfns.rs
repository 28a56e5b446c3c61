//! The fd syscalls seen at their own functions (`__x64_sys_<name>`), in the fentry and kprobe
//! modes: only fd syscalls pay, where `raw_syscalls:sys_enter/sys_exit` put every syscall of
//! every task on the slow path. Same per-thread state and accounting as the tracepoints
//! (`syscalls::on_enter` / `on_exit`).
//!
//! Each syscall function takes the task's user registers (`const struct pt_regs *`) as its
//! only argument; the syscall arguments are read from there.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use fdprof_common::syscalls::FD_SYSCALLS;

use crate::{
    settings::trace_on,
    syscall_table::{effect_of, index_of, needs_args},
    syscalls::{PT_REGS_ARGS, on_enter, on_exit, reg_at},
};

/// x86_64 `struct pt_regs` offset of `orig_ax`: the syscall number.
const PT_REGS_ORIG_AX: usize = 120;

/// Entry of syscall `nr` (index `index`) with the user registers at `regs`.
#[inline(always)]
fn enter(regs: u64, nr: u64, index: u32, btf: bool) {
    // Most fd syscalls need no argument: read registers only for those that do.
    let mut args = [0u64; 4];
    if needs_args(effect_of(index)) || trace_on() {
        args = [
            reg_at(regs, PT_REGS_ARGS[0]),
            reg_at(regs, PT_REGS_ARGS[1]),
            reg_at(regs, PT_REGS_ARGS[2]),
            reg_at(regs, PT_REGS_ARGS[3]),
        ];
    }
    on_enter(nr, args, btf);
}

/// One fentry/fexit pair per syscall function: a fentry program is bound to one function when
/// it is loaded, so the syscall is a constant of the program.
macro_rules! syscall_fentry {
    ($($enter:ident $exit:ident $index:literal;)*) => {$(
        #[fentry]
        pub(crate) fn $enter(ctx: FEntryContext) -> i32 {
            enter(ctx.arg::<u64>(0), FD_SYSCALLS[$index].nr as u64, $index, true);
            0
        }

        /// The return value follows the one argument in the context.
        #[fexit]
        pub(crate) fn $exit(ctx: FExitContext) -> i32 {
            on_exit(ctx.arg::<i64>(1));
            0
        }
    )*};
}

syscall_fentry! {
    fdprof_fes_0 fdprof_fxs_0 0;
    fdprof_fes_1 fdprof_fxs_1 1;
    fdprof_fes_2 fdprof_fxs_2 2;
    fdprof_fes_3 fdprof_fxs_3 3;
    fdprof_fes_4 fdprof_fxs_4 4;
    fdprof_fes_5 fdprof_fxs_5 5;
    fdprof_fes_6 fdprof_fxs_6 6;
    fdprof_fes_7 fdprof_fxs_7 7;
    fdprof_fes_8 fdprof_fxs_8 8;
    fdprof_fes_9 fdprof_fxs_9 9;
    fdprof_fes_10 fdprof_fxs_10 10;
    fdprof_fes_11 fdprof_fxs_11 11;
    fdprof_fes_12 fdprof_fxs_12 12;
    fdprof_fes_13 fdprof_fxs_13 13;
    fdprof_fes_14 fdprof_fxs_14 14;
    fdprof_fes_15 fdprof_fxs_15 15;
    fdprof_fes_16 fdprof_fxs_16 16;
    fdprof_fes_17 fdprof_fxs_17 17;
    fdprof_fes_18 fdprof_fxs_18 18;
    fdprof_fes_19 fdprof_fxs_19 19;
    fdprof_fes_20 fdprof_fxs_20 20;
    fdprof_fes_21 fdprof_fxs_21 21;
    fdprof_fes_22 fdprof_fxs_22 22;
    fdprof_fes_23 fdprof_fxs_23 23;
    fdprof_fes_24 fdprof_fxs_24 24;
    fdprof_fes_25 fdprof_fxs_25 25;
    fdprof_fes_26 fdprof_fxs_26 26;
    fdprof_fes_27 fdprof_fxs_27 27;
    fdprof_fes_28 fdprof_fxs_28 28;
    fdprof_fes_29 fdprof_fxs_29 29;
    fdprof_fes_30 fdprof_fxs_30 30;
    fdprof_fes_31 fdprof_fxs_31 31;
    fdprof_fes_32 fdprof_fxs_32 32;
    fdprof_fes_33 fdprof_fxs_33 33;
    fdprof_fes_34 fdprof_fxs_34 34;
    fdprof_fes_35 fdprof_fxs_35 35;
}

/// One kprobe on every syscall function: the syscall is read from the user registers (the
/// function's first argument, in `di`).
#[kprobe]
pub(crate) fn fdprof_kp_sys(ctx: ProbeContext) -> u32 {
    let regs = ctx.arg::<u64>(0).unwrap_or(0);
    let nr = reg_at(regs, PT_REGS_ORIG_AX);
    if let Some(index) = index_of(nr) {
        enter(regs, nr, index, false);
    }
    0
}

#[kretprobe]
pub(crate) fn fdprof_kr_sys(ctx: RetProbeContext) -> u32 {
    on_exit(ctx.ret::<i64>());
    0
}
