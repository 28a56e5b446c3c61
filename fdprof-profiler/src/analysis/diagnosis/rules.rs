//! The rules that read the report's figures alone: shared-table contention, long scans, table
//! growth.

use fdprof_figures::{Comparison, Finding, LockKind, Operation, Remedy, Report, Rule};

use super::{
    FAR_SCAN_BITS, GROWTH_MIN, INTERRUPT_MIN_SHARE, INTERRUPT_MIN_WAIT_NS,
    INTERRUPT_MIN_WAIT_SHARE, INTERRUPT_MIN_WAITS, LONG_SCAN_MIN, LONG_SCAN_SHARE, NEXT_FD_HIT_MAX,
    SHARED_MIN_WAIT_SHARE, SHARED_MIN_WAITS, STEAL_MIN_SHARE, STEAL_MIN_WAITS, Stacks, check,
    figure, pct, span,
};

/// How many threads the figures say share the table, where they say it: the live view's count,
/// else the counted threads (`record -p` counts every thread alive at its start).
fn threads(r: &Report) -> Option<u64> {
    let counted = r.counters.as_ref().map(|c| {
        c.threads
            .iter()
            .map(|t| t.threads)
            .fold(0, u64::saturating_add)
    });
    r.header
        .target
        .threads
        .map(u64::from)
        .or(counted)
        .filter(|&n| n > 1)
}

/// `file_lock` waits spread over the threads of one process: only tasks sharing the table take
/// its lock, so a contended `file_lock` is the sharing itself.
pub(super) fn shared_table(r: &Report, stacks: &Stacks) -> Option<Finding> {
    let c = &r.contention;
    let duration = r.header.duration_ns.max(1);
    let wait_share = c.file_lock_wait_ns as f64 / duration as f64;
    let evidence = vec![
        check(
            "contention.file_lock_count",
            c.file_lock_count as f64,
            Comparison::AtLeast,
            SHARED_MIN_WAITS as f64,
        )?,
        check(
            "contention.file_lock_wait_share_of_duration",
            wait_share,
            Comparison::AtLeast,
            SHARED_MIN_WAIT_SHARE,
        )?,
    ];
    // The wait split by operation, as the by-lock rows give it.
    let rows: Vec<_> = c
        .by_lock_operation
        .iter()
        .filter(|o| o.lock.kind == LockKind::FileLock && o.total_wait_ns > 0)
        .collect();
    let split: Vec<String> = rows
        .iter()
        .map(|o| format!("{} {}", pct(o.share_of_lock.unwrap_or(0.0)), o.operation))
        .collect();
    let mut context = vec![
        figure("contention.file_lock_wait_ns", c.file_lock_wait_ns as f64),
        figure("duration_ns", r.header.duration_ns as f64),
    ];
    for o in &rows {
        context.push(figure(
            &format!("file_lock.{}.share_of_lock", o.operation),
            o.share_of_lock.unwrap_or(0.0),
        ));
    }
    let who = match threads(r) {
        Some(n) => {
            context.push(figure("threads", n as f64));
            format!("{n} threads")
        }
        None => "the threads".into(),
    };
    // Sharing, not the allocator, unless the allocator's scans are long too.
    let scanning = r.scan.next_fd_hit_rate.is_some_and(|h| h < NEXT_FD_HIT_MAX);
    let verdict = if scanning {
        "fd-table sharing, made worse by long scans under the lock"
    } else {
        "fd-table sharing, not the allocator"
    };
    Some(Finding {
        rule: Rule::SharedTable,
        summary: format!(
            "file_lock wait is {} across {who} sharing one table ({} waits, {} in all): {verdict}",
            split.join(" and "),
            c.file_lock_count,
            span(c.file_lock_wait_ns),
        ),
        evidence,
        context,
        stacks: stacks.of(None, false),
        remedy: shared_table_remedy(r),
    })
}

/// What to change for a shared table, and what it saves: the file_lock wait itself.
fn shared_table_remedy(r: &Report) -> Remedy {
    let c = &r.contention;
    let duration = r.header.duration_ns.max(1);
    let per_s = c.file_lock_wait_ns as f64 / (duration as f64 / 1e9);
    Remedy {
        change: "give each thread or core a table of its own: a process per worker (or \
                 unshare(CLONE_FILES) in each worker thread), or create the sockets as \
                 io_uring direct descriptors, which never enter the table"
            .into(),
        shown_by: Some("fdprof workload opensock --io-uring-direct (or --processes)".into()),
        saving: format!(
            "the file_lock wait itself: {} ({} per second of recording, {} waits)",
            span(c.file_lock_wait_ns),
            span(per_s as u64),
            c.file_lock_count
        ),
        wait_ns: Some(c.file_lock_wait_ns),
        syscalls: None,
        scan_words: None,
        table_copies: None,
    }
}

/// Allocations far past `next_fd`, seldom at it: holes low in a large table, refilled by each
/// open while the next one scans past every open fd above them.
pub(super) fn long_scans(r: &Report, stacks: &Stacks) -> Option<Finding> {
    let s = &r.scan;
    let far = crate::analysis::scan::far_scans(&s.bits);
    let far_share = far as f64 / s.allocations.max(1) as f64;
    let hit_rate = s.next_fd_hit_rate?;
    let evidence = vec![
        check(
            "scan.far_scans",
            far as f64,
            Comparison::AtLeast,
            LONG_SCAN_MIN as f64,
        )?,
        check(
            "scan.far_share",
            far_share,
            Comparison::AtLeast,
            LONG_SCAN_SHARE,
        )?,
        check(
            "scan.next_fd_hit_rate",
            hit_rate,
            Comparison::AtMost,
            NEXT_FD_HIT_MAX,
        )?,
    ];
    let p99 = s.bits.p99.unwrap_or(0);
    // Bits scanned past the origin, at least (the kernel keeps no exact sum of distances).
    let scanned = crate::analysis::scan::bits_at_least(&s.bits);
    let closes = r.syscalls.iter().find(|c| c.name == "close");
    let mut allocating: Vec<_> = r.syscalls.iter().filter(|c| c.allocs > 0).collect();
    allocating.sort_by_key(|c| std::cmp::Reverse(c.allocs));
    let opens: Vec<String> = allocating
        .iter()
        .take(3)
        .map(|c| format!("{} {}", c.name, c.allocs))
        .collect();
    let mut context = vec![
        figure("scan.allocations", s.allocations as f64),
        figure("scan.bits.p99", p99 as f64),
        figure("scan.bits_at_least", scanned as f64),
        figure("table.max_fds_max", r.table.max_fds_max as f64),
    ];
    if let Some(c) = closes {
        context.push(figure("syscalls.close.calls", c.calls as f64));
    }
    for c in allocating.iter().take(3) {
        context.push(figure(
            &format!("syscalls.{}.allocs", c.name),
            c.allocs as f64,
        ));
    }
    Some(Finding {
        rule: Rule::LongScans,
        summary: format!(
            "{} of {} allocations scanned {FAR_SCAN_BITS} bits or more past next_fd (p99 {p99} \
             bits) and next_fd hit {}: the holes pattern, a close(2) of a low fd in a table of \
             {} slots ({} closes) sends next_fd back to the hole, one open refills it and the \
             next scans past every open fd above it ({})",
            far,
            s.allocations,
            pct(hit_rate),
            r.table.max_fds_max,
            closes.map_or(0, |c| c.calls),
            opens.join(", "),
        ),
        evidence,
        context,
        stacks: stacks.of(Some(Operation::Alloc), true),
        remedy: long_scans_remedy(r, scanned),
    })
}

/// What to change for long scans (`scanned`: the bits scanned at least), and what it saves.
fn long_scans_remedy(r: &Report, scanned: u64) -> Remedy {
    let words = scanned / 64;
    Remedy {
        change: "keep the low fds in place: replace a long-lived fd with dup2(new, reserved \
                 slot) and close the new one, instead of close then open, so no hole opens \
                 below next_fd"
            .into(),
        shown_by: Some("fdprof workload holes --reserve".into()),
        saving: format!(
            "at least {scanned} bits ({words} bitmap words) scanned past next_fd, {:.1} \
             bits an allocation: every allocation would take next_fd itself",
            scanned as f64 / r.scan.allocations.max(1) as f64
        ),
        wait_ns: None,
        syscalls: None,
        scan_words: Some(words),
        table_copies: None,
    }
}

/// The table grew during the recording: each growth allocates a table twice as large (or
/// more) and copies the old one into it, and a shared table's old copy is freed after an RCU
/// grace period the growing thread waits for.
pub(super) fn table_growth(r: &Report, stacks: &Stacks) -> Option<Finding> {
    let t = &r.table;
    let evidence = vec![check(
        "table.expansions",
        t.expansions as f64,
        Comparison::AtLeast,
        GROWTH_MIN as f64,
    )?];
    let shared = r.contention.file_lock_count > 0 || threads(r).is_some();
    let rcu = if shared {
        ", and the table being shared, waits for an RCU grace period (synchronize_rcu) before \
         the old one is freed"
    } else {
        ""
    };
    Some(Finding {
        rule: Rule::TableGrowth,
        summary: format!(
            "the table grew {} times during the recording, max_fds {} to {}: each growth \
             allocates a larger table and copies the fd array and bitmaps into it{rcu}",
            t.expansions, t.max_fds_first, t.max_fds_max
        ),
        evidence,
        context: vec![
            figure("table.max_fds_first", t.max_fds_first as f64),
            figure("table.max_fds_max", t.max_fds_max as f64),
        ],
        stacks: stacks.of(Some(Operation::Expand), false),
        remedy: Remedy {
            change: format!(
                "size the table before the load: at start-up, with RLIMIT_NOFILE above {}, \
                 make fd {} once (fcntl(fd, F_DUPFD, {})) and close it, so the table grows \
                 once, before the threads start",
                t.max_fds_max.saturating_sub(1),
                t.max_fds_max.saturating_sub(1),
                t.max_fds_max.saturating_sub(1)
            ),
            shown_by: None,
            saving: format!(
                "{} table copies under load (one at start-up instead)",
                t.expansions
            ),
            wait_ns: None,
            syscalls: None,
            scan_words: None,
            table_copies: Some(t.expansions),
        },
    })
}

/// Waits in interrupt handlers that landed on the profiled tasks (a timer's softirq waking a
/// thread, say): the handler's, not the fd operation beneath it, and no change to the program
/// removes them.
pub(super) fn interrupt_time(r: &Report, stacks: &Stacks) -> Option<Finding> {
    let c = &r.contention;
    let (mut count, mut wait_ns, mut irq_ns) = (0u64, 0u64, 0u64);
    for s in stacks.interrupts() {
        count = count.saturating_add(s.count);
        wait_ns = wait_ns.saturating_add(s.total_wait_ns);
        if s.operation == Operation::Irq {
            irq_ns = irq_ns.saturating_add(s.total_wait_ns);
        }
    }
    let share = wait_ns as f64 / c.total_wait_ns.max(1) as f64;
    let evidence = vec![
        check(
            "contention.interrupt_waits",
            count as f64,
            Comparison::AtLeast,
            INTERRUPT_MIN_WAITS as f64,
        )?,
        check(
            "contention.interrupt_wait_ns",
            wait_ns as f64,
            Comparison::AtLeast,
            INTERRUPT_MIN_WAIT_NS as f64,
        )?,
        check(
            "contention.interrupt_share_of_all",
            share,
            Comparison::AtLeast,
            INTERRUPT_MIN_SHARE,
        )?,
        check(
            "contention.interrupt_wait_share_of_duration",
            wait_ns as f64 / r.header.duration_ns.max(1) as f64,
            Comparison::AtLeast,
            INTERRUPT_MIN_WAIT_SHARE,
        )?,
    ];
    Some(Finding {
        rule: Rule::InterruptTime,
        summary: format!(
            "{} of all lock wait ({count} waits, {}) is interrupt handlers' that landed on the \
             profiled tasks ({} in irq, {} in softirq): the handlers' waits, not the fd \
             operations they interrupted",
            pct(share),
            span(wait_ns),
            span(irq_ns),
            span(wait_ns - irq_ns),
        ),
        evidence,
        context: vec![
            figure("contention.irq.total_wait_ns", c.irq.total_wait_ns as f64),
            figure(
                "contention.softirq.total_wait_ns",
                c.softirq.total_wait_ns as f64,
            ),
            figure(
                "contention.fdprof_on_stack.total_wait_ns",
                c.fdprof_on_stack.total_wait_ns as f64,
            ),
            figure("contention.total_wait_ns", c.total_wait_ns as f64),
        ],
        stacks: stacks.of_interrupts(),
        remedy: Remedy {
            change: "leave these waits out when judging the fd table; to cut them, steer the \
                     interrupts (IRQ affinity, RPS) and timers away from the CPUs the hot \
                     threads run on, and where the handler is the program's own loopback \
                     traffic (NET_RX runs on the sending CPU), send fewer, larger messages"
                .into(),
            shown_by: None,
            saving: format!(
                "{} of wait that is not the fd table's (the rest of the report is)",
                span(wait_ns)
            ),
            wait_ns: Some(wait_ns),
            syscalls: None,
            scan_words: None,
            table_copies: None,
        },
    })
}

/// The hypervisor ran something else while this VM's vCPUs were runnable: a spinning waiter
/// whose lock holder's vCPU was preempted waits until the host runs it again.
pub(super) fn host_steal(r: &Report) -> Option<Finding> {
    let s = r.steal.as_ref()?;
    let c = &r.contention;
    let evidence = vec![
        check(
            "steal.share",
            s.share?,
            Comparison::AtLeast,
            STEAL_MIN_SHARE,
        )?,
        check(
            "contention.count",
            c.count as f64,
            Comparison::AtLeast,
            STEAL_MIN_WAITS as f64,
        )?,
    ];
    let longest = c.by_lock.iter().map(|l| l.max_wait_ns).max().unwrap_or(0);
    Some(Finding {
        rule: Rule::HostSteal,
        summary: format!(
            "the host took {} of the {} CPUs' time over the recording ({} of steal, {} on the \
             worst CPU): waits beside it, the longest {}, may be a preempted vCPU's, not the \
             program's",
            pct(s.share.unwrap_or(0.0)),
            s.cpus,
            span(s.steal_ns),
            pct(s.max_cpu_share.unwrap_or(0.0)),
            span(longest),
        ),
        evidence,
        context: vec![
            figure("steal.steal_ns", s.steal_ns as f64),
            figure("steal.max_cpu_steal_ns", s.max_cpu_steal_ns as f64),
            figure("contention.max_wait_ns", longest as f64),
        ],
        stacks: Vec::new(),
        remedy: Remedy {
            change: "measure again where the host does not overcommit these CPUs (dedicated or \
                     pinned vCPUs), or compare with a run whose steal share is near 0, before \
                     changing the program for its longest waits"
                .into(),
            shown_by: None,
            saving: format!("{} of CPU time the VM did not get", span(s.steal_ns)),
            wait_ns: None,
            syscalls: None,
            scan_words: None,
            table_copies: None,
        },
    })
}
