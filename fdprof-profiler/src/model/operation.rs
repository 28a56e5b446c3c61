//! Which fd-table operation a wait belongs to: the first frame below the lock functions that is
//! an fd-table function, unless an interrupt entry comes first. An interrupt or softirq that
//! lands on a task runs on top of whatever the task was doing: a lock it waits for is the
//! interrupt's wait, not the task's, so the innermost interrupt entry ends the search.

use fdprof_common::fnops::Operation;

/// fd-table functions, by operation. Checked from the innermost frame outwards.
const OPERATIONS: &[(Operation, &[&str])] = &[
    (
        Operation::Alloc,
        &[
            "alloc_fd",
            "__alloc_fd",
            "get_unused_fd_flags",
            "__get_unused_fd_flags",
        ],
    ),
    (
        Operation::Close,
        &[
            "file_close_fd",
            "close_fd",
            "__close_fd",
            "file_close_fd_locked",
        ],
    ),
    (Operation::Expand, &["expand_files", "expand_fdtable"]),
    (Operation::Dup2, &["do_dup2", "replace_fd", "ksys_dup3"]),
    (
        Operation::CloseRange,
        &["__close_range", "__do_sys_close_range", "__range_close"],
    ),
    (Operation::Exec, &["do_close_on_exec"]),
    (Operation::Fork, &["dup_fd", "copy_files"]),
];

/// Where softirqs are run: on interrupt exit (`irq_exit_rcu`, which inlines the softirq loop on
/// some builds), where bottom halves are re-enabled (`do_softirq`), or in `ksoftirqd`.
const SOFTIRQ_ENTRIES: &[&str] = &[
    "handle_softirqs",
    "__do_softirq",
    "do_softirq",
    "invoke_softirq",
    "irq_exit_rcu",
    "__irq_exit_rcu",
    "irq_exit",
    "run_ksoftirqd",
];

/// Hardware interrupt (and NMI) entries: x86's IDT entry points and handlers, the generic IRQ
/// flow, arm64's exception entry.
const IRQ_ENTRIES: &[&str] = &[
    "asm_common_interrupt",
    "common_interrupt",
    "__common_interrupt",
    "handle_irq_event",
    "handle_irq_event_percpu",
    "__handle_irq_event_percpu",
    "asm_exc_nmi",
    "exc_nmi",
    "default_do_nmi",
    "el1_interrupt",
    "el0_interrupt",
];

/// Prefixes of the x86 system-vector entries (`asm_sysvec_apic_timer_interrupt`,
/// `sysvec_call_function_single`, `__sysvec_irq_work`, …).
const IRQ_PREFIXES: &[&str] = &["asm_sysvec_", "sysvec_", "__sysvec_"];

/// The operation one frame marks, if any: an fd-table function or an interrupt entry.
fn of_frame(function: &str) -> Option<Operation> {
    // Compiler clones (`foo.isra.0`, `foo.constprop.0`) count as `foo`.
    let base = function.split('.').next().unwrap_or(function);
    if let Some((op, _)) = OPERATIONS.iter().find(|(_, fns)| fns.contains(&base)) {
        return Some(*op);
    }
    if SOFTIRQ_ENTRIES.contains(&base) {
        return Some(Operation::Softirq);
    }
    if IRQ_ENTRIES.contains(&base) || IRQ_PREFIXES.iter().any(|p| base.starts_with(p)) {
        return Some(Operation::Irq);
    }
    None
}

/// The operation of a kernel stack given innermost frame first: the innermost frame that is an
/// fd-table function or an interrupt entry decides.
pub(crate) fn of_stack<'a>(functions: impl IntoIterator<Item = &'a str>) -> Operation {
    functions
        .into_iter()
        .find_map(of_frame)
        .unwrap_or(Operation::Other)
}

#[cfg(test)]
mod tests {
    use super::Operation;

    #[test]
    fn first_fd_function_wins() {
        let stack = [
            "__pv_queued_spin_lock_slowpath",
            "_raw_spin_lock",
            "file_close_fd",
            "__x64_sys_close",
        ];
        assert_eq!(super::of_stack(stack), Operation::Close);
        assert_eq!(
            super::of_stack(["_raw_spin_lock", "alloc_fd.isra.0"]),
            Operation::Alloc
        );
        assert_eq!(
            super::of_stack(["_raw_spin_lock", "tcp_v4_rcv"]),
            Operation::Other
        );
    }

    /// The stack of issue 17: a timer softirq, landed on a task spinning on `file_lock` in
    /// `alloc_fd`, waits for a scheduler lock. The wait is the softirq's.
    #[test]
    fn softirq_on_top_of_alloc_is_the_softirqs() {
        let stack = [
            "native_queued_spin_lock_slowpath",
            "_raw_spin_lock_irqsave",
            "try_to_wake_up",
            "call_timer_fn",
            "__run_timers",
            "run_timer_softirq",
            "handle_softirqs",
            "__irq_exit_rcu",
            "sysvec_apic_timer_interrupt",
            "asm_sysvec_apic_timer_interrupt",
            "bpf_trace_run2",
            "native_queued_spin_lock_slowpath",
            "_raw_spin_lock",
            "alloc_fd",
            "do_sys_openat2",
            "__x64_sys_socket",
            "do_syscall_64",
        ];
        assert_eq!(super::of_stack(stack), Operation::Softirq);
        // Without the interrupt frames, the same task's wait is the allocator's.
        assert_eq!(
            super::of_stack(stack[11..].iter().copied()),
            Operation::Alloc
        );
    }

    #[test]
    fn hardirq_and_softirq_entries() {
        // A wait in the hard interrupt handler itself, above a close.
        let hard = [
            "_raw_spin_lock",
            "hrtimer_interrupt",
            "__sysvec_apic_timer_interrupt",
            "sysvec_apic_timer_interrupt",
            "asm_sysvec_apic_timer_interrupt",
            "file_close_fd",
        ];
        assert_eq!(super::of_stack(hard), Operation::Irq);
        let device = ["_raw_spin_lock", "e1000_intr", "__handle_irq_event_percpu"];
        assert_eq!(super::of_stack(device), Operation::Irq);
        assert_eq!(
            super::of_stack(["_raw_spin_lock", "asm_common_interrupt", "alloc_fd"]),
            Operation::Irq
        );
        // Softirqs run where bottom halves are re-enabled, and on interrupt exit when the
        // softirq loop is inlined into it.
        let bh = [
            "_raw_spin_lock",
            "net_rx_action",
            "__do_softirq",
            "do_softirq",
        ];
        assert_eq!(super::of_stack(bh), Operation::Softirq);
        assert_eq!(
            super::of_stack(["_raw_spin_lock", "irq_exit_rcu", "sysvec_reschedule_ipi"]),
            Operation::Softirq
        );
        // Not an interrupt: a task's own wait outside the fd table stays `other`, and a
        // function merely named like an entry's suffix does not count.
        assert_eq!(
            super::of_stack(["_raw_spin_lock", "my_sysvec_helper", "do_syscall_64"]),
            Operation::Other
        );
    }
}
