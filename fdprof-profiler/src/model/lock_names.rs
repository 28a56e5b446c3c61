//! Names a lock from what the programs told at `contention_begin` (its class, a kind they
//! recognised from the waiting task, its address when static) and from the waiter's kernel
//! stack, in that order of trust.

use fdprof_common::contention::{KnownLock, LockIdentity, LockKind};
use fdprof_figures::NamedBy;
use fdprof_recording::lock::LockName;
use fdprof_recording::recording::Frame;

use super::operation;
use crate::symbolize::kernel::KernelSymbols;

/// The name of the lock of `identity`, waited for from `kernel_stack` (innermost first, probe
/// frames trimmed). `None` for the target's `file_lock` and where nothing tells more than the
/// kind.
pub(crate) fn name(
    identity: &LockIdentity,
    kernel_stack: &[Frame],
    symbols: &KernelSymbols,
) -> Option<LockName> {
    let kind = LockKind::from_class(identity.class);
    if kind == LockKind::FileLock {
        return None;
    }
    let named = |name: &str, named_by| {
        Some(LockName {
            name: name.to_string(),
            named_by,
        })
    };
    match KnownLock::from_code(identity.known) {
        KnownLock::MmapLock => return named("mmap_lock", NamedBy::Kind),
        KnownLock::Siglock => return named("siglock", NamedBy::Kind),
        KnownLock::RqLock => return named("rq_lock", NamedBy::Kind),
        KnownLock::None => {}
    }
    if identity.static_addr != 0
        && let Some((symbol, offset)) = symbols.data_symbol(identity.static_addr)
    {
        return match offset {
            0 => named(symbol, NamedBy::Symbol),
            _ => named(&format!("{symbol}+{offset:#x}"), NamedBy::Symbol),
        };
    }
    let caller = kernel_stack
        .iter()
        .map(|f| base(&f.function))
        .find(|f| !is_lock_function(f))?;
    if RQ_LOCK_FUNCTIONS.contains(&caller) {
        return named("rq_lock", NamedBy::Kind);
    }
    if kind == LockKind::Spinlock
        && operation::of_stack([caller]) != fdprof_common::fnops::Operation::Other
    {
        // The target's own file_lock is told by its address: this is another table's.
        return named("file_lock (other table)", NamedBy::Kind);
    }
    if caller == crate::symbolize::kernel::UNKNOWN {
        return None;
    }
    named(caller, NamedBy::Caller)
}

/// Compiler clones (`foo.isra.0`, `foo.constprop.0`) are `foo`.
fn base(function: &str) -> &str {
    function.split('.').next().unwrap_or(function)
}

/// The lock primitives and their slow paths: a lock is named after what called them.
fn is_lock_function(f: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "_raw_spin_",
        "_raw_read_",
        "_raw_write_",
        "__raw_spin_",
        "do_raw_spin_",
        "queued_spin_",
        "queued_read_",
        "queued_write_",
        "native_queued_spin_",
        "__pv_queued_spin_",
        "resilient_",
        "mutex_lock",
        "__mutex_lock",
        "mutex_spin_on_owner",
        "rwsem_down_",
        "rwsem_optimistic_spin",
        "down_read",
        "down_write",
        "__down_read",
        "__down_write",
        "__down_common",
        "percpu_down_",
        "__percpu_down_",
        "rt_mutex",
        "__rt_mutex",
        "rt_spin_lock",
        "rtlock_",
        "rwbase_",
        "__rwbase_",
    ];
    PREFIXES.iter().any(|p| f.starts_with(p))
}

/// Functions that take a runqueue's lock (`rq->__lock`) and no other. (`task_rq_lock` takes
/// the task's `pi_lock` first, so it names its waits itself; `raw_spin_rq_lock_nested` often
/// leaves no frame, as it ends in a tail call.)
const RQ_LOCK_FUNCTIONS: &[&str] = &[
    "raw_spin_rq_lock_nested",
    "raw_spin_rq_lock",
    "raw_spin_rq_lock_irqsave",
    "double_rq_lock",
    "_double_lock_balance",
    "double_lock_balance",
    "__task_rq_lock",
    "rq_lock",
    "rq_lock_irq",
    "rq_lock_irqsave",
];

#[cfg(test)]
mod tests {
    use super::*;
    use fdprof_common::contention::lock_class;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|n| Frame {
                function: n.to_string(),
                offset: 0,
                ..Default::default()
            })
            .collect()
    }

    fn symbols() -> KernelSymbols {
        KernelSymbols::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff82000000 D _sdata\n\
             ffffffff82001000 D tasklist_lock\n\
             ffffffff82001040 d some_table\n\
             ffffffff83000000 B _end\n",
        )
        .unwrap()
    }

    fn identity(class: u32, known: KnownLock, static_addr: u64) -> LockIdentity {
        LockIdentity {
            class,
            known: known as u32,
            static_addr,
        }
    }

    fn named(id: LockIdentity, stack: &[&str]) -> Option<(String, NamedBy)> {
        name(&id, &frames(stack), &symbols()).map(|n| (n.name, n.named_by))
    }

    #[test]
    fn each_way_of_naming() {
        let spin = |known, addr| identity(lock_class::SPINLOCK, known, addr);
        let rq = [
            "__pv_queued_spin_lock_slowpath",
            "_raw_spin_lock",
            "raw_spin_rq_lock_nested",
            "task_rq_lock",
            "thread_group_cputime",
        ];
        assert_eq!(
            named(spin(KnownLock::None, 0), &rq),
            Some(("rq_lock".into(), NamedBy::Kind))
        );
        let caller = [
            "native_queued_spin_lock_slowpath",
            "_raw_spin_lock_irqsave",
            "__put_partials.isra.0",
            "kmem_cache_free",
        ];
        assert_eq!(
            named(spin(KnownLock::None, 0), &caller),
            Some(("__put_partials".into(), NamedBy::Caller))
        );
        assert_eq!(
            named(spin(KnownLock::None, 0xffffffff82001000), &caller),
            Some(("tasklist_lock".into(), NamedBy::Symbol))
        );
        assert_eq!(
            named(spin(KnownLock::None, 0xffffffff82001048), &caller),
            Some(("some_table+0x8".into(), NamedBy::Symbol))
        );
        assert_eq!(
            named(spin(KnownLock::Siglock, 0), &caller),
            Some(("siglock".into(), NamedBy::Kind))
        );
        // The running task's runqueue, told by its address where no frame names it.
        assert_eq!(
            named(
                spin(KnownLock::RqLock, 0),
                &["_raw_spin_lock", "__schedule", "schedule"]
            ),
            Some(("rq_lock".into(), NamedBy::Kind))
        );
        assert_eq!(
            named(identity(lock_class::RWSEM, KnownLock::MmapLock, 0), &[]),
            Some(("mmap_lock".into(), NamedBy::Kind))
        );
        let other_table = ["_raw_spin_lock", "alloc_fd", "__x64_sys_pidfd_getfd"];
        assert_eq!(
            named(spin(KnownLock::None, 0), &other_table),
            Some(("file_lock (other table)".into(), NamedBy::Kind))
        );
        // The target's own, and nothing to go by.
        assert_eq!(
            named(identity(lock_class::FILE_LOCK, KnownLock::None, 0), &rq),
            None
        );
        assert_eq!(named(spin(KnownLock::None, 0), &[]), None);
        assert_eq!(named(spin(KnownLock::None, 0), &["_raw_spin_lock"]), None);
    }
}
