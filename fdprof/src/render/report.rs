//! `fdprof report`: the recording as text tables for people and as JSON for machines. Both are
//! built from the same computed figures ([`super::aggregate`]).

use serde_json::{Value, json};

use super::aggregate::{self, FILE_LOCK, LockOperation, StackGroup};
use super::human::{self, duration, duration_f, percent, share};
use crate::model::hist::{Log2Hist, slot_range};
use crate::model::recording::{Frame, Recording, SyscallStats};

/// How the top stacks are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SortKey {
    /// Total wait time.
    #[default]
    Wait,
    /// Number of waits.
    Count,
    /// Longest single wait.
    Max,
    /// Average wait.
    Avg,
}

impl SortKey {
    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Wait => "wait",
            SortKey::Count => "count",
            SortKey::Max => "max",
            SortKey::Avg => "avg",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            SortKey::Wait => "total wait",
            SortKey::Count => "count",
            SortKey::Max => "max wait",
            SortKey::Avg => "avg wait",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOptions {
    /// How many stacks to show; 0 shows all.
    pub top: usize,
    pub sort: SortKey,
    /// Keep offsets in frames (`alloc_fd+0x1f`) and do not merge stacks that differ only there.
    pub offsets: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            top: 10,
            sort: SortKey::Wait,
            offsets: false,
        }
    }
}

/// How many syscalls get a latency histogram in the text report.
const SYSCALL_HISTOGRAMS: usize = 3;

/// The stack groups to show, sorted, and how many groups there are in all.
pub fn top_stacks<'a>(rec: &'a Recording, opts: &ReportOptions) -> (Vec<StackGroup<'a>>, usize) {
    let mut groups = aggregate::stack_groups(rec, opts.offsets);
    let total = groups.len();
    let avg = |g: &StackGroup<'_>| g.avg_wait_ns().unwrap_or(0.0);
    groups.sort_by(|a, b| {
        let primary = match opts.sort {
            SortKey::Wait => b.total_wait_ns.cmp(&a.total_wait_ns),
            SortKey::Count => b.count.cmp(&a.count),
            SortKey::Max => b.max_wait_ns.cmp(&a.max_wait_ns),
            SortKey::Avg => avg(b).total_cmp(&avg(a)),
        };
        primary
            .then(b.total_wait_ns.cmp(&a.total_wait_ns))
            .then(b.count.cmp(&a.count))
            .then((b.lock == FILE_LOCK).cmp(&(a.lock == FILE_LOCK)))
    });
    if opts.top > 0 {
        groups.truncate(opts.top);
    }
    (groups, total)
}

fn latency_level(rec: &Recording) -> &'static str {
    if rec.mode == "tracepoint" {
        "syscall-level"
    } else {
        "entry-to-exit"
    }
}

/// False for `record --lock-only` recordings, which have no fd syscall probes.
fn fd_activity_recorded(rec: &Recording) -> bool {
    rec.modes
        .get("fd_syscalls")
        .is_none_or(|m| !m.starts_with("off"))
}

fn syscalls_shown(rec: &Recording) -> Vec<&SyscallStats> {
    rec.syscalls.iter().filter(|s| s.calls > 0).collect()
}

// ---------------------------------------------------------------------------------------------
// Text

/// The text report.
pub fn text(rec: &Recording, opts: &ReportOptions) -> String {
    let mut out = Vec::new();
    header(&mut out, rec);
    contention(&mut out, rec);
    functions(&mut out, rec);
    stacks(&mut out, rec, opts);
    if fd_activity_recorded(rec) {
        scan(&mut out, rec);
        syscalls(&mut out, rec);
        table(&mut out, rec);
    } else {
        section(&mut out, "fd-table activity");
        out.push("  not recorded (--lock-only): no scan, syscall or table figures".into());
    }
    drops(&mut out, rec);
    own_cost(&mut out, rec);
    let mut s = out.join("\n");
    s.push('\n');
    s
}

fn section(out: &mut Vec<String>, title: &str) {
    out.push(String::new());
    out.push(format!("== {title} =="));
}

fn header(out: &mut Vec<String>, rec: &Recording) {
    out.push(format!("fdprof report: {}", rec.target.describe()));
    let mut kv = vec![
        ("kernel".to_string(), rec.kernel_release.clone()),
        (
            "recorded".to_string(),
            format!(
                "{} for {} (ended: {})",
                human::utc(rec.started_unix_ms),
                duration(rec.duration_ns),
                end_reason(&rec.end_reason)
            ),
        ),
        ("probe mode".to_string(), rec.mode.clone()),
    ];
    if let Some(status) = rec.target.exit_status {
        kv.insert(2, ("exit status".to_string(), status.describe()));
    }
    for (role, mode) in &rec.modes {
        kv.push((format!("  {role}"), mode.clone()));
    }
    let file_lock = rec.file_lock_wait_ns();
    let file_lock_waits: u64 = rec
        .contention
        .iter()
        .filter(|c| c.lock == FILE_LOCK)
        .map(|c| c.count)
        .sum();
    kv.push((
        "file_lock wait".to_string(),
        format!("{} in {file_lock_waits} waits", duration(file_lock)),
    ));
    kv.push(("drops".to_string(), drops_summary(rec)));
    out.extend(key_values(&kv, 2));
    for note in &rec.notes {
        out.push(format!("  note: {note}"));
    }
}

fn end_reason(reason: &str) -> &str {
    match reason {
        "duration" => "duration reached",
        "interrupted" => "interrupted",
        "target_exited" => "target exited",
        "command_exited" => "command exited",
        other => other,
    }
}

fn drops_summary(rec: &Recording) -> String {
    let total = rec.total_drops();
    if rec.drops.is_empty() {
        "unknown (the recording has no drop counters)".into()
    } else if total == 0 {
        "none".into()
    } else {
        format!("{total} events lost: figures are lower bounds (see drops)")
    }
}

fn contention(out: &mut Vec<String>, rec: &Recording) {
    section(out, "contention by lock and operation");
    let rows = aggregate::by_lock_operation(rec);
    if rows.is_empty() {
        out.push("  no lock waits recorded".into());
        return;
    }
    let body: Vec<Vec<String>> = rows.iter().map(lock_operation_cells).collect();
    out.extend(columns(
        &[
            "lock",
            "operation",
            "count",
            "total wait",
            "avg",
            "p50",
            "p99",
            "max",
            "of lock",
            "of all",
        ],
        2,
        &body,
        2,
    ));
    out.push("  (p50/p99: upper bound of the log2 bucket; max: exact)".into());
    let all = rows[0].all_wait_ns;
    let waits: u64 = rows.iter().map(|r| r.count).sum();
    let mut totals = format!("  all locks: {} in {waits} waits", duration(all));
    for lock in aggregate::by_lock(rec) {
        totals.push_str(&format!(
            "; {} {} ({})",
            lock.lock,
            duration(lock.total_wait_ns),
            percent(lock.total_wait_ns, all)
        ));
    }
    out.push(totals);
    if let Some(line) = stack_walks_line(rec) {
        out.push(line);
    }
}

/// How the stacks were taken, when some were reused (recordings before reuse have no figure).
fn stack_walks_line(rec: &Recording) -> Option<String> {
    let w = &rec.stack_walks;
    (w.walked + w.reused > 0).then(|| {
        format!(
            "  stacks: walked at {} contentions, reused from the same site (thread, syscall, \
             user return point, lock) at {}, re-walked every {}th; waits are timed after the walk",
            w.walked, w.reused, w.refresh_every
        )
    })
}

/// Direct-probe figures (fentry/kprobe modes): durations, hold times, slow-path waits, and the
/// file_lock waits each source saw, side by side.
fn functions(out: &mut Vec<String>, rec: &Recording) {
    if rec.functions.is_empty() {
        return;
    }
    section(out, "fd-table functions (direct probes)");
    let q = |h: &Log2Hist| {
        format!(
            "{} / {} / {}",
            human::opt(h.quantile(0.5), duration),
            human::opt(h.quantile(0.99), duration),
            if h.count == 0 {
                "-".into()
            } else {
                duration(h.max)
            }
        )
    };
    let body: Vec<Vec<String>> = rec
        .functions
        .iter()
        .map(|f| {
            vec![
                f.operation.clone(),
                f.calls.to_string(),
                q(&f.duration),
                q(&f.hold),
                f.slowpath_wait.count.to_string(),
                duration(f.slowpath_wait.sum),
                f.unpaired.to_string(),
            ]
        })
        .collect();
    out.extend(columns(
        &[
            "operation",
            "calls",
            "duration p50/p99/max",
            "hold p50/p99/max",
            "slow-path waits",
            "wait",
            "unpaired",
        ],
        1,
        &body,
        2,
    ));
    out.push(
        "  (hold = duration − slow-path wait inside the call; p50/p99: log2 bucket bound)".into(),
    );
    if let Some(f) = rec.functions.iter().find(|f| f.expanded > 0) {
        out.push(format!(
            "  expand_files grew the table {} times",
            f.expanded
        ));
    }
    out.push(String::new());
    out.push("  file_lock waits by source:".into());
    let tracepoint = aggregate::by_lock_operation(rec);
    let body: Vec<Vec<String>> = rec
        .functions
        .iter()
        .map(|f| {
            let tp = tracepoint
                .iter()
                .find(|r| r.lock == "file_lock" && r.operation == f.operation);
            vec![
                f.operation.clone(),
                tp.map_or(0, |r| r.count).to_string(),
                duration(tp.map_or(0, |r| r.total_wait_ns)),
                f.slowpath_wait.count.to_string(),
                duration(f.slowpath_wait.sum),
            ]
        })
        .collect();
    out.extend(columns(
        &[
            "operation",
            "tracepoint waits",
            "wait",
            "slow-path waits",
            "wait",
        ],
        1,
        &body,
        2,
    ));
}

fn functions_json(rec: &Recording) -> Value {
    Value::Array(
        rec.functions
            .iter()
            .map(|f| {
                json!({
                    "operation": f.operation,
                    "calls": f.calls,
                    "expanded": f.expanded,
                    "duration": hist_json(&f.duration, "ns"),
                    "hold": hist_json(&f.hold, "ns"),
                    "slowpath_wait": hist_json(&f.slowpath_wait, "ns"),
                    "unpaired": f.unpaired,
                })
            })
            .collect(),
    )
}

fn lock_operation_cells(r: &LockOperation) -> Vec<String> {
    vec![
        r.lock.clone(),
        r.operation.clone(),
        r.count.to_string(),
        duration(r.total_wait_ns),
        r.avg_wait_ns().map_or("-".into(), duration_f),
        human::opt(r.wait.quantile(0.5), duration),
        human::opt(r.wait.quantile(0.99), duration),
        duration(r.max_wait_ns),
        percent(r.total_wait_ns, r.lock_wait_ns),
        percent(r.total_wait_ns, r.all_wait_ns),
    ]
}

fn stacks(out: &mut Vec<String>, rec: &Recording, opts: &ReportOptions) {
    let (groups, total) = top_stacks(rec, opts);
    section(
        out,
        &format!(
            "top {} of {total} stacks by {}",
            groups.len(),
            opts.sort.describe()
        ),
    );
    if groups.is_empty() {
        out.push("  no lock waits recorded".into());
        return;
    }
    let all: u64 = rec.contention.iter().map(|c| c.total_wait_ns).sum();
    for (i, g) in groups.iter().enumerate() {
        let merged = if g.sites > 1 {
            format!("  ({} sites merged)", g.sites)
        } else {
            String::new()
        };
        out.push(String::new());
        out.push(format!(
            "#{}  {} {}  count {}  total {} ({} of all wait)  avg {}  p99 {}  max {}{merged}",
            i + 1,
            g.lock,
            g.operation,
            g.count,
            duration(g.total_wait_ns),
            percent(g.total_wait_ns, all),
            g.avg_wait_ns().map_or("-".into(), duration_f),
            human::opt(g.wait.quantile(0.99), duration),
            duration(g.max_wait_ns),
        ));
        if g.kernel_stack.is_empty() {
            out.push("      [unknown]  (kernel stack not captured)".into());
        }
        for f in g.kernel_stack {
            out.push(format!("      {}", frame_text(f, opts.offsets)));
        }
        out.push("      [user]".into());
        if g.user_stack.is_empty() {
            out.push("      [unknown]  (no user stack)".into());
        }
        for f in g.user_stack {
            out.push(format!("      {}", frame_text(f, opts.offsets)));
        }
    }
}

fn frame_text(f: &Frame, offsets: bool) -> String {
    let label = aggregate::frame_label(f, offsets);
    match &f.module {
        Some(m) if !m.is_empty() => format!("{label} ({m})"),
        _ => label,
    }
}

fn scan(out: &mut Vec<String>, rec: &Recording) {
    let s = &rec.scan;
    section(out, "scan (lowest-free-fd search in alloc_fd)");
    let hit = if s.allocations > 0 {
        format!(
            "{} ({} of allocations)",
            s.next_fd_hits,
            percent(s.next_fd_hits, s.allocations)
        )
    } else {
        s.next_fd_hits.to_string()
    };
    let origin = if s.origin.is_empty() {
        "not recorded".to_string()
    } else {
        s.origin.clone()
    };
    out.extend(key_values(
        &[
            ("allocations".into(), s.allocations.to_string()),
            ("next_fd hits".into(), hit),
            ("below origin".into(), s.below_origin.to_string()),
            ("origin".into(), origin),
        ],
        2,
    ));
    let count = |v: u64| v.to_string();
    for (title, hist, unit) in [
        ("scan distance past origin", &s.bits, "bits"),
        ("open_fds words read", &s.open_fds_words, "words"),
        ("full_fds_bits words read", &s.full_fds_words, "words"),
    ] {
        out.push(String::new());
        out.push(format!(
            "  {title} ({unit}): {}",
            human::quantiles_line(hist, count)
        ));
        out.extend(human::log2_hist_lines(hist, unit, 2));
    }
}

fn syscalls(out: &mut Vec<String>, rec: &Recording) {
    let level = latency_level(rec);
    section(out, &format!("syscalls (latency: {level})"));
    let shown = syscalls_shown(rec);
    if shown.is_empty() {
        out.push("  no traced syscalls were called".into());
        return;
    }
    let body: Vec<Vec<String>> = shown
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.calls.to_string(),
                s.errors.to_string(),
                s.fds_created.to_string(),
                s.fds_closed.to_string(),
                s.allocs.to_string(),
                human::opt(s.latency.quantile(0.5), duration),
                human::opt(s.latency.quantile(0.99), duration),
                if s.latency.count > 0 {
                    duration(s.latency.max)
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    out.extend(columns(
        &[
            "syscall",
            "calls",
            "errors",
            "fds created",
            "fds closed",
            "allocs",
            "p50",
            "p99",
            "max",
        ],
        1,
        &body,
        2,
    ));
    let mut by_calls = shown.clone();
    by_calls.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.name.cmp(&b.name)));
    for s in by_calls.iter().take(SYSCALL_HISTOGRAMS) {
        out.push(String::new());
        out.push(format!(
            "  {} latency ({level}): {}",
            s.name,
            human::quantiles_line(&s.latency, duration)
        ));
        out.extend(human::log2_hist_lines(&s.latency, "nsecs", 2));
    }
}

fn table(out: &mut Vec<String>, rec: &Recording) {
    let t = &rec.table;
    section(out, "fd table");
    let max_fds = if t.max_fds_first == 0 && t.max_fds_max == 0 {
        "not observed".to_string()
    } else {
        format!(
            "{} at first syscall, {} max",
            t.max_fds_first, t.max_fds_max
        )
    };
    out.extend(key_values(
        &[
            ("max_fds".into(), max_fds),
            ("expansions".into(), t.expansions.to_string()),
        ],
        2,
    ));
}

fn drops(out: &mut Vec<String>, rec: &Recording) {
    section(out, "drops");
    if rec.drops.is_empty() {
        out.push(
            "  unknown: this recording has no drop counters, so loss cannot be ruled out".into(),
        );
        return;
    }
    let total = rec.total_drops();
    let mut body: Vec<Vec<String>> = rec
        .drops
        .iter()
        .map(|d| vec![d.probe.clone(), d.reason.clone(), d.count.to_string()])
        .collect();
    body.push(vec!["total".into(), String::new(), total.to_string()]);
    out.extend(columns(&["probe", "reason", "count"], 2, &body, 2));
    if total == 0 {
        out.push("  none: no event was lost".into());
    } else {
        out.push(format!(
            "  {total} events lost: the figures above are lower bounds"
        ));
    }
}

fn own_cost(out: &mut Vec<String>, rec: &Recording) {
    let c = &rec.own_cost;
    section(out, "fdprof's own cost");
    if c.programs.is_empty() {
        out.push("  no program statistics recorded".into());
    } else {
        let mut body: Vec<Vec<String>> = c
            .programs
            .iter()
            .map(|p| {
                vec![
                    p.name.clone(),
                    duration(p.run_time_ns),
                    p.run_count.to_string(),
                    per_run(p.run_time_ns, p.run_count),
                    p.recursion_misses.to_string(),
                ]
            })
            .collect();
        let run_time: u64 = c.programs.iter().map(|p| p.run_time_ns).sum();
        let runs: u64 = c.programs.iter().map(|p| p.run_count).sum();
        let misses: u64 = c.programs.iter().map(|p| p.recursion_misses).sum();
        body.push(vec![
            "total".into(),
            duration(run_time),
            runs.to_string(),
            per_run(run_time, runs),
            misses.to_string(),
        ]);
        out.extend(columns(
            &["program", "run time", "runs", "ns/run", "recursion misses"],
            1,
            &body,
            2,
        ));
        let window = stats_window(rec);
        out.push(format!(
            "  programs: {} of one CPU (measured over {} of the {} recording, in sampled windows)",
            percent(run_time, window),
            duration(window),
            duration(rec.duration_ns)
        ));
        if runs == 0 {
            out.push(
                "  (all run counts are zero: kernel BPF run-time statistics were probably not enabled)"
                    .into(),
            );
        }
    }
    out.push(format!(
        "  collector CPU: {} ({} of one CPU)",
        duration(c.collector_cpu_ns),
        percent(c.collector_cpu_ns, rec.duration_ns)
    ));
}

/// The time the programs' run-time statistics cover (older recordings: all of it).
fn stats_window(rec: &Recording) -> u64 {
    match rec.own_cost.stats_window_ns {
        0 => rec.duration_ns,
        w => w,
    }
}

fn per_run(run_time_ns: u64, runs: u64) -> String {
    if runs == 0 {
        "-".into()
    } else {
        format!("{:.0}", run_time_ns as f64 / runs as f64)
    }
}

/// `key  value` lines with the values aligned.
fn key_values(kv: &[(String, String)], indent: usize) -> Vec<String> {
    let width = kv.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let pad = " ".repeat(indent);
    kv.iter()
        .map(|(k, v)| {
            let fill = " ".repeat(width - k.chars().count());
            format!("{pad}{k}{fill}  {v}")
        })
        .collect()
}

/// A table: the first `text_columns` columns left-aligned, the rest right-aligned.
fn columns(head: &[&str], text_columns: usize, body: &[Vec<String>], indent: usize) -> Vec<String> {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for row in body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let pad = " ".repeat(indent);
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let parts: Vec<String> = cells
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                let fill = " ".repeat(w - cell.chars().count());
                if i < text_columns {
                    format!("{cell}{fill}")
                } else {
                    format!("{fill}{cell}")
                }
            })
            .collect();
        format!("{pad}{}", parts.join("  ").trim_end())
    };
    let mut lines = vec![line(&mut head.iter().copied())];
    for row in body {
        lines.push(line(&mut row.iter().map(String::as_str)));
    }
    lines
}

// ---------------------------------------------------------------------------------------------
// JSON

/// The JSON report: the same figures as [`text`], as numbers (durations in ns, shares 0..=1).
pub fn json(rec: &Recording, opts: &ReportOptions) -> Value {
    let mut target = serde_json::to_value(&rec.target).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut target {
        map.insert("description".into(), rec.target.describe().into());
    }
    json!({
        "fdprof_version": rec.fdprof_version,
        "target": target,
        "kernel_release": rec.kernel_release,
        "started_unix_ms": rec.started_unix_ms,
        "duration_ns": rec.duration_ns,
        "end_reason": rec.end_reason,
        "mode": rec.mode,
        "modes": rec.modes,
        "notes": rec.notes,
        "options": {"top": opts.top, "sort": opts.sort.as_str(), "offsets": opts.offsets},
        "contention": contention_json(rec),
        "stack_walks": rec.stack_walks,
        "functions": functions_json(rec),
        "top_stacks": top_stacks_json(rec, opts),
        "scan": scan_json(rec),
        "syscalls": syscalls_json(rec),
        "table": {
            "max_fds_first": rec.table.max_fds_first,
            "max_fds_max": rec.table.max_fds_max,
            "expansions": rec.table.expansions,
        },
        "drops": drops_json(rec),
        "own_cost": own_cost_json(rec),
    })
}

fn contention_json(rec: &Recording) -> Value {
    let rows = aggregate::by_lock_operation(rec);
    let all: u64 = rec.contention.iter().map(|c| c.total_wait_ns).sum();
    let count: u64 = rec.contention.iter().map(|c| c.count).sum();
    let by_lock: Vec<Value> = aggregate::by_lock(rec)
        .iter()
        .map(|l| {
            json!({
                "lock": l.lock,
                "count": l.count,
                "total_wait_ns": l.total_wait_ns,
                "max_wait_ns": l.max_wait_ns,
                "share_of_all": share(l.total_wait_ns, all),
            })
        })
        .collect();
    let by_lock_operation: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "lock": r.lock,
                "operation": r.operation,
                "sites": r.sites,
                "count": r.count,
                "total_wait_ns": r.total_wait_ns,
                "avg_wait_ns": r.avg_wait_ns(),
                "p50_wait_ns": r.wait.quantile(0.5),
                "p99_wait_ns": r.wait.quantile(0.99),
                "p999_wait_ns": r.wait.quantile(0.999),
                "max_wait_ns": r.max_wait_ns,
                "share_of_lock": share(r.total_wait_ns, r.lock_wait_ns),
                "share_of_all": share(r.total_wait_ns, r.all_wait_ns),
                "wait": hist_json(&r.wait, "ns"),
            })
        })
        .collect();
    json!({
        "count": count,
        "total_wait_ns": all,
        "file_lock_wait_ns": rec.file_lock_wait_ns(),
        "by_lock": by_lock,
        "by_lock_operation": by_lock_operation,
    })
}

fn top_stacks_json(rec: &Recording, opts: &ReportOptions) -> Value {
    let all: u64 = rec.contention.iter().map(|c| c.total_wait_ns).sum();
    let (groups, _) = top_stacks(rec, opts);
    let frames = |stack: &[Frame]| -> Vec<Value> {
        stack
            .iter()
            .map(|f| {
                let mut v = json!({ "function": aggregate::frame_label(f, false) });
                if opts.offsets {
                    v["offset"] = f.offset.into();
                }
                if let Some(m) = &f.module {
                    v["module"] = m.clone().into();
                }
                v
            })
            .collect()
    };
    groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            json!({
                "rank": i + 1,
                "lock": g.lock,
                "operation": g.operation,
                "sites": g.sites,
                "count": g.count,
                "total_wait_ns": g.total_wait_ns,
                "avg_wait_ns": g.avg_wait_ns(),
                "p50_wait_ns": g.wait.quantile(0.5),
                "p99_wait_ns": g.wait.quantile(0.99),
                "max_wait_ns": g.max_wait_ns,
                "share_of_all": share(g.total_wait_ns, all),
                "kernel_stack": frames(g.kernel_stack),
                "user_stack": frames(g.user_stack),
            })
        })
        .collect()
}

fn scan_json(rec: &Recording) -> Value {
    let s = &rec.scan;
    json!({
        "allocations": s.allocations,
        "next_fd_hits": s.next_fd_hits,
        "next_fd_hit_rate": share(s.next_fd_hits, s.allocations),
        "below_origin": s.below_origin,
        "origin": s.origin,
        "bits": hist_json(&s.bits, "bits"),
        "open_fds_words": hist_json(&s.open_fds_words, "words"),
        "full_fds_words": hist_json(&s.full_fds_words, "words"),
    })
}

fn syscalls_json(rec: &Recording) -> Value {
    let level = latency_level(rec);
    syscalls_shown(rec)
        .iter()
        .map(|s| {
            let mut latency = hist_json(&s.latency, "ns");
            latency["level"] = level.into();
            json!({
                "name": s.name,
                "calls": s.calls,
                "errors": s.errors,
                "fds_created": s.fds_created,
                "fds_closed": s.fds_closed,
                "allocs": s.allocs,
                "latency": latency,
            })
        })
        .collect()
}

fn drops_json(rec: &Recording) -> Value {
    let counters: Vec<Value> = rec
        .drops
        .iter()
        .map(|d| json!({"probe": d.probe, "reason": d.reason, "count": d.count}))
        .collect();
    json!({
        "total": rec.total_drops(),
        "none": !rec.drops.is_empty() && rec.total_drops() == 0,
        "known": !rec.drops.is_empty(),
        "counters": counters,
    })
}

fn own_cost_json(rec: &Recording) -> Value {
    let c = &rec.own_cost;
    let programs: Vec<Value> = c
        .programs
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "run_time_ns": p.run_time_ns,
                "run_count": p.run_count,
                "ns_per_run": (p.run_count > 0).then(|| p.run_time_ns as f64 / p.run_count as f64),
                "recursion_misses": p.recursion_misses,
            })
        })
        .collect();
    let run_time: u64 = c.programs.iter().map(|p| p.run_time_ns).sum();
    json!({
        "programs": programs,
        "run_time_ns": run_time,
        "run_count": c.programs.iter().map(|p| p.run_count).sum::<u64>(),
        "recursion_misses": c.programs.iter().map(|p| p.recursion_misses).sum::<u64>(),
        "programs_cpu_share": share(run_time, stats_window(rec)),
        "stats_window_ns": stats_window(rec),
        "collector_cpu_ns": c.collector_cpu_ns,
        "collector_cpu_share": share(c.collector_cpu_ns, rec.duration_ns),
    })
}

/// A histogram summary with its non-empty buckets.
fn hist_json(h: &Log2Hist, unit: &str) -> Value {
    let buckets: Vec<Value> = h
        .slots
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n > 0)
        .map(|(k, &n)| {
            let (low, high) = slot_range(k);
            json!({"low": low, "high": high, "count": n})
        })
        .collect();
    json!({
        "unit": unit,
        "count": h.count,
        "sum": h.sum,
        "mean": h.mean(),
        "p50": h.quantile(0.5),
        "p99": h.quantile(0.99),
        "p999": h.quantile(0.999),
        "max": (h.count > 0).then_some(h.max),
        "buckets": buckets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::recording::ExitStatus;
    use crate::render::testdata::{self, cells, line_with};

    #[test]
    fn contention_rows_have_shares_and_quantiles() {
        let rec = testdata::recording();
        let t = text(&rec, &ReportOptions::default());
        let alloc = cells(line_with(&t, "file_lock  alloc"));
        assert_eq!(
            alloc,
            [
                "file_lock",
                "alloc",
                "591",
                "6.00 ms",
                "10.2 µs",
                "16.4 µs",
                "16.4 µs",
                "100 µs",
                "60.0%",
                "54.5%"
            ],
            "{t}"
        );
        let close = cells(line_with(&t, "file_lock  close"));
        assert_eq!(close[close.len() - 2..], ["40.0%", "36.4%"]);
        let spin = cells(line_with(&t, "spinlock   other"));
        assert_eq!(spin[spin.len() - 2..], ["100.0%", "9.1%"]);
        // file_lock rows come before the spinlock row.
        assert!(t.find("file_lock  close").unwrap() < t.find("spinlock   other").unwrap());
    }

    #[test]
    fn top_stacks_merge_by_name_and_sort() {
        let rec = testdata::recording();
        let (groups, total) = top_stacks(&rec, &ReportOptions::default());
        assert_eq!(total, 3);
        assert_eq!(groups[0].operation, "alloc");
        assert_eq!((groups[0].sites, groups[0].count), (2, 591));
        assert_eq!(groups[0].total_wait_ns, 6_000_000);
        assert_eq!(groups[0].max_wait_ns, 100_000);

        let by_max = ReportOptions {
            sort: SortKey::Max,
            top: 1,
            offsets: false,
        };
        let (groups, total) = top_stacks(&rec, &by_max);
        assert_eq!((groups.len(), total), (1, 3));
        // alloc and the spinlock both reach 100 µs; the tie goes to more total wait.
        assert_eq!(groups[0].operation, "alloc");

        let by_avg = ReportOptions {
            sort: SortKey::Avg,
            ..by_max.clone()
        };
        assert_eq!(top_stacks(&rec, &by_avg).0[0].lock, "spinlock");
        let by_count = ReportOptions {
            sort: SortKey::Count,
            top: 0,
            offsets: true,
        };
        let (groups, total) = top_stacks(&rec, &by_count);
        assert_eq!((groups.len(), total), (4, 4));
        let counts: Vec<u64> = groups.iter().map(|g| g.count).collect();
        assert_eq!(counts, [400, 300, 291, 10]);
    }

    #[test]
    fn stack_text_shows_frames_in_order_with_user_marker() {
        let rec = testdata::recording();
        let t = text(&rec, &ReportOptions::default());
        let first = t.find("#1  file_lock alloc").expect("first stack");
        let block: Vec<&str> = t[first..].lines().skip(1).take(9).map(str::trim).collect();
        assert_eq!(
            block,
            [
                "__pv_queued_spin_lock_slowpath",
                "_raw_spin_lock",
                "alloc_fd",
                "__sys_socket",
                "do_syscall_64",
                "[user]",
                "__socket (libc.so.6)",
                "worker (opensock)",
                "start_thread (libc.so.6)",
            ]
        );
        assert!(line_with(&t, "#1  file_lock alloc").contains("(2 sites merged)"));
        assert!(line_with(&t, "#1  file_lock alloc").contains("max 100 µs"));

        let with_offsets = text(
            &rec,
            &ReportOptions {
                offsets: true,
                ..Default::default()
            },
        );
        assert!(with_offsets.contains("alloc_fd+0x3f\n"), "{with_offsets}");
        assert!(with_offsets.contains("alloc_fd+0x52\n"));
        assert!(with_offsets.contains("__socket+0xb (libc.so.6)"));
        assert!(!with_offsets.contains("sites merged"));
    }

    #[test]
    fn drops_are_totalled_and_none_is_said() {
        let mut rec = testdata::recording();
        let t = text(&rec, &ReportOptions::default());
        assert_eq!(cells(line_with(&t, "  total  ")), ["total", "3"]);
        assert!(t.contains("3 events lost"));
        assert!(
            line_with(&t, "stack_id").ends_with(" 0"),
            "zero counters are listed too"
        );
        let j = json(&rec, &ReportOptions::default());
        assert_eq!(j["drops"]["total"], 3);
        assert_eq!(j["drops"]["none"], false);
        assert_eq!(j["drops"]["counters"].as_array().unwrap().len(), 3);

        for d in &mut rec.drops {
            d.count = 0;
        }
        let t = text(&rec, &ReportOptions::default());
        assert!(t.contains("none: no event was lost"), "{t}");
        assert_eq!(cells(line_with(&t, "  drops  ")), ["drops", "none"]);
        assert_eq!(json(&rec, &ReportOptions::default())["drops"]["none"], true);

        rec.drops.clear();
        let t = text(&rec, &ReportOptions::default());
        assert!(
            !t.contains("none"),
            "no counters is not the same as no loss:\n{t}"
        );
        assert!(t.contains("unknown"));
    }

    #[test]
    fn scan_syscalls_table_and_cost() {
        let rec = testdata::recording();
        let t = text(&rec, &ReportOptions::default());
        assert!(line_with(&t, "next_fd hits").ends_with("590 (99.8% of allocations)"));
        assert!(line_with(&t, "below origin").ends_with(" 1"));
        assert!(line_with(&t, "  origin  ").contains("exact for single-threaded"));
        assert!(
            line_with(&t, "scan distance past origin (bits)")
                .ends_with("n 591  p50 0  p99 0  p999 4000  max 4000")
        );
        assert!(
            line_with(&t, "2048 -> 4095  : 1 ")
                .contains("|                                        |")
        );
        assert!(line_with(&t, "open_fds words read (words)").contains("max 63"));
        assert!(t.contains("full_fds_bits words read (words)"));

        assert!(t.contains("== syscalls (latency: syscall-level) =="));
        assert_eq!(
            cells(line_with(&t, "  socket ")),
            [
                "socket", "591", "0", "591", "0", "591", "4.09 µs", "40.0 µs", "40.0 µs"
            ]
        );
        assert!(!t.contains("dup2"), "syscalls never called are left out");
        assert!(t.contains("socket latency (syscall-level)"));
        assert!(t.contains("close latency (syscall-level)"));

        assert!(line_with(&t, "max_fds").ends_with("64 at first syscall, 1024 max"));
        assert!(line_with(&t, "expansions").ends_with(" 4"));

        assert_eq!(
            cells(line_with(&t, "  contention_begin  ")),
            ["contention_begin", "2.00 ms", "10000", "200", "0"]
        );
        assert!(
            t.contains("collector CPU: 30.0 ms (0.30% of one CPU)"),
            "{t}"
        );
    }

    #[test]
    fn header() {
        let rec = testdata::recording();
        let t = text(&rec, &ReportOptions::default());
        assert!(t.starts_with("fdprof report: pid 4242 (opensock)\n"));
        assert!(line_with(&t, "kernel").ends_with("6.18.0-test"));
        assert!(line_with(&t, "recorded").contains("for 10.0 s (ended: duration reached)"));
        assert!(line_with(&t, "probe mode").ends_with("tracepoint"));
        assert!(line_with(&t, "  contention  ").ends_with("tracepoint"));
        assert!(t.contains("note: tracepoint mode: waits are seen"));
        assert!(line_with(&t, "file_lock wait").ends_with("10.0 ms in 991 waits"));
    }

    #[test]
    fn header_and_json_show_how_the_command_ended() {
        let mut rec = testdata::recording();
        let t = text(&rec, &ReportOptions::default());
        assert!(
            !t.contains("exited with") && !t.contains("killed by"),
            "{t}"
        );
        assert!(
            json(&rec, &ReportOptions::default())["target"]
                .get("exit_status")
                .is_none()
        );

        rec.target.exit_status = Some(ExitStatus::Code(3));
        let t = text(&rec, &ReportOptions::default());
        assert!(
            line_with(&t, "exit status").ends_with("exited with code 3"),
            "{t}"
        );
        let j = json(&rec, &ReportOptions::default());
        assert_eq!(j["target"]["exit_status"]["code"], 3);

        rec.target.exit_status = Some(ExitStatus::Signal(15));
        let t = text(&rec, &ReportOptions::default());
        assert!(line_with(&t, "exit status").ends_with("killed by signal 15 (SIGTERM)"));
        let j = json(&rec, &ReportOptions::default());
        assert_eq!(j["target"]["exit_status"]["signal"], 15);
    }

    #[test]
    fn json_carries_computed_figures() {
        let rec = testdata::recording();
        let j = json(&rec, &ReportOptions::default());
        let rows = j["contention"]["by_lock_operation"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0]["lock"], "file_lock");
        assert_eq!(rows[0]["operation"], "alloc");
        assert_eq!(rows[0]["count"], 591);
        assert_eq!(rows[0]["total_wait_ns"], 6_000_000);
        assert_eq!(rows[0]["p99_wait_ns"], 16_383);
        assert_eq!(rows[0]["max_wait_ns"], 100_000);
        assert_eq!(rows[0]["share_of_lock"], 0.6);
        assert_eq!(rows[1]["share_of_lock"], 0.4);
        assert_eq!(rows[2]["share_of_lock"], 1.0);
        assert_eq!(j["contention"]["total_wait_ns"], 11_000_000);
        assert_eq!(j["contention"]["file_lock_wait_ns"], 10_000_000);
        let top = j["top_stacks"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(top[0]["sites"], 2);
        assert_eq!(top[0]["kernel_stack"][2]["function"], "alloc_fd");
        assert!(top[0]["kernel_stack"][2].get("offset").is_none());
        assert_eq!(top[0]["user_stack"][0]["module"], "libc.so.6");
        assert_eq!(j["scan"]["next_fd_hits"], 590);
        assert_eq!(j["scan"]["bits"]["max"], 4000);
        assert_eq!(j["scan"]["bits"]["unit"], "bits");
        let sc = j["syscalls"].as_array().unwrap();
        assert_eq!(sc.len(), 2);
        assert_eq!(sc[0]["latency"]["level"], "syscall-level");
        assert_eq!(j["table"]["max_fds_max"], 1024);
        assert_eq!(j["own_cost"]["programs"][0]["ns_per_run"], 200.0);
        assert_eq!(j["mode"], "tracepoint");
        assert_eq!(j["modes"]["contention"], "tracepoint");
        assert_eq!(j["target"]["description"], "pid 4242 (opensock)");
        assert_eq!(j["duration_ns"], 10_000_000_000u64);
    }

    #[test]
    fn empty_recording_says_so() {
        let mut rec = testdata::recording();
        rec.contention.clear();
        rec.syscalls.clear();
        let t = text(&rec, &ReportOptions::default());
        assert!(t.contains("== contention by lock and operation ==\n  no lock waits recorded"));
        assert!(t.contains("== top 0 of 0 stacks by total wait ==\n  no lock waits recorded"));
        assert!(t.contains("no traced syscalls were called"));
        let j = json(&rec, &ReportOptions::default());
        assert_eq!(j["contention"]["total_wait_ns"], 0);
        assert_eq!(j["top_stacks"].as_array().unwrap().len(), 0);
    }
}
