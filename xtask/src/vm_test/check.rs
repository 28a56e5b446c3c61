//! Host-side judgement of a guest's results: recorded counts against the generator's
//! `expected` object, the doctor's findings, and the kernel × mode table. The guest's
//! `report --json` is read into fdprof's typed figures ([`fdprof_figures::Report`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use fdprof_figures::{Attachment, Histogram, Report, Role, SCHEMA, SCHEMA_VERSION, WaitSource};
use serde_json::Value;

use super::guest::{self, GuestOutput, Scenario, Start, StepResult, Traced};
use super::row::{Row, failure};

/// The last JSON object a step printed on stdout.
fn json_of(step: &StepResult) -> Option<Value> {
    serde_json::from_str(step.stdout.trim())
        .ok()
        .or_else(|| {
            step.stdout
                .lines()
                .rev()
                .find(|l| l.trim_start().starts_with('{'))
                .and_then(|l| serde_json::from_str(l).ok())
        })
        .filter(Value::is_object)
}

/// The typed report a `report --json` step printed, or why there is none.
fn report_of(step: &StepResult) -> Result<Report, String> {
    let report: Report = serde_json::from_str(step.stdout.trim())
        .map_err(|e| format!("report --json printed no {SCHEMA} JSON: {e}"))?;
    if report.schema != SCHEMA || report.schema_version != SCHEMA_VERSION {
        return Err(format!(
            "report --json printed {} version {}; this xtask reads {SCHEMA} version {SCHEMA_VERSION}",
            report.schema, report.schema_version
        ));
    }
    Ok(report)
}

fn calls(report: &Report, syscall: &str) -> u64 {
    report
        .syscalls
        .iter()
        .find(|s| s.name == syscall)
        .map_or(0, |s| s.calls)
}

/// The doctor's `role=mode role=mode …`.
fn modes_summary(modes: &Value) -> String {
    modes
        .as_object()
        .map(|m| {
            let pairs: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("?")))
                .collect();
            pairs.join(" ")
        })
        .unwrap_or_default()
}

/// Compares one scenario's recording with the generator's ground truth.
fn judge(scenario: &Scenario, mode: &str, workload: &Value, report: &Report) -> (bool, String) {
    if scenario.contention {
        return judge_contention(mode, report);
    }
    let mut ok = true;
    let mut figures = Vec::new();
    let expected = &workload["expected"];
    match expected["syscalls"].as_object() {
        Some(syscalls) if !syscalls.is_empty() => {
            // The exact ones first, as the table's headline figure.
            let mut names: Vec<&String> = syscalls.keys().collect();
            names.sort_by_key(|n| !scenario.exact.contains(&n.as_str()));
            for name in names {
                let want = syscalls[name].as_u64().unwrap_or(0);
                let got = calls(report, name);
                if scenario.exact.contains(&name.as_str()) {
                    ok &= got == want;
                    figures.push(format!("{name} {got}/{want}"));
                } else {
                    ok &= got >= want;
                    figures.push(format!("{name} {got}/>={want}"));
                }
            }
        }
        _ => {
            ok = false;
            figures.push("workload printed no expected.syscalls".into());
        }
    }
    if let Some(want) = scenario.scan_max {
        let got = report.scan.bits.max;
        // The generator's own figure must agree with the scenario's arithmetic.
        let generator = expected["allocs"]
            .as_array()
            .and_then(|a| a.iter().filter_map(|x| x["scan_bits"].as_u64()).max());
        ok &= got == Some(want) && generator == Some(want);
        let show = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let mut s = format!("scan max {}/{want}", show(got));
        if generator != Some(want) {
            let _ = write!(s, " (generator expects {})", show(generator));
        }
        figures.push(s);
    }
    if mode != "tracepoint" {
        let (good, text) = direct_figures(expected, report);
        ok &= good;
        figures.push(text);
    }
    if mode != "tracepoint" {
        let (good, text) = fd_syscalls_direct(mode, report);
        ok &= good;
        figures.push(text);
    }
    let recorded_mode = report.header.mode.name();
    if recorded_mode != mode {
        ok = false;
        figures.push(format!("recorded in {recorded_mode} mode"));
    }
    figures.push(format!("drops {}", report.drops.total));
    // The programs' run time is sampled from the collector's start, however slow the attach.
    let window = report.own_cost.stats_window_ns;
    ok &= window > 0;
    figures.push(format!("stats window {} ms", window / 1_000_000));
    let probes: Vec<String> = report
        .header
        .probes
        .iter()
        .map(|(role, how)| format!("{role}={how}"))
        .collect();
    figures.push(format!("[{}]", probes.join(" ")));
    (ok, figures.join(", "))
}

/// Two threads on one table: file_lock waits as the tracepoint and the slow-path probe saw
/// them (the probe on the slow path also sees pending-bit spinners, so it sees at least as
/// many), and, in the direct modes, hold times of alloc and close: measured, and with a median
/// far below a scheduler tick (1 ms), which a hold that wrongly kept the slow-path wait inside
/// would not be. Not a speed check: under TCG the median moves between log2 buckets from run
/// to run (4–16 µs seen), so a tight bound only measured the emulator.
/// Single-threaded TCG runs one vCPU at a time, so a wait needs the holder's vCPU to be
/// switched out inside the locked section: some runs see a hundred, some none. The number is
/// shown, not required.
fn judge_contention(mode: &str, report: &Report) -> (bool, String) {
    let mut ok = report.header.mode.name() == mode;
    let tracepoint = report.contention.file_lock_count;
    let mut figures = vec![format!("tracepoint-seen file_lock waits {tracepoint}")];
    // Without the lock tracepoints (before 5.19) the report says what saw the waits: the
    // slow-path probe in the direct modes, nothing in tracepoint mode (never 0 as if measured).
    let source = report.contention.source;
    let expected = match report.header.probes.get(&Role::LockTracepoints) {
        Some(Attachment::Off) if mode == "tracepoint" => WaitSource::Unavailable,
        Some(Attachment::Off) => WaitSource::SlowPath,
        _ => WaitSource::LockTracepoints,
    };
    ok &= source == expected;
    figures.push(format!("lock waits {}", source.name()));
    if mode != "tracepoint" {
        let (good, text) = fd_syscalls_direct(mode, report);
        ok &= good;
        figures.push(text);
        let functions = &report.functions;
        let slowpath: u64 = functions.iter().map(|f| f.slowpath_wait.count).sum();
        ok &= slowpath >= tracepoint;
        figures.push(format!("slow-path-seen {slowpath}"));
        if source == WaitSource::SlowPath {
            let ops: u64 = functions
                .iter()
                .filter(|f| matches!(f.operation.name(), "alloc" | "close"))
                .map(|f| f.slowpath_wait.count)
                .sum();
            let (good, text) = slow_path_breakdown(report, slowpath, ops);
            ok &= good;
            figures.push(text);
        }
        let ns = |v: Option<u64>| v.map_or("-".into(), |v| format!("{v}ns"));
        for op in ["alloc", "close"] {
            let empty = Histogram::default();
            let hold = functions
                .iter()
                .find(|f| f.operation.name() == op)
                .map_or(&empty, |f| &f.hold);
            ok &= hold.count > 0 && hold.p50.is_some_and(|p| p < 1_000_000);
            figures.push(format!(
                "{op} hold n={} p50={} p99={} max={}",
                hold.count,
                ns(hold.p50),
                ns(hold.p99),
                ns(hold.max)
            ));
        }
    }
    (ok, figures.join(", "))
}

/// Where the slow-path probe sees every spinlock (no lock tracepoints), its file_lock waits are
/// in the breakdown too, as many as the functions' own figures counted, those inside the
/// allocator and close in their stacks; every lock it names is listed.
fn slow_path_breakdown(report: &Report, slowpath: u64, in_alloc_close: u64) -> (bool, String) {
    let c = &report.contention;
    let in_ops: u64 = c
        .by_lock_operation
        .iter()
        .filter(|r| r.lock.name == "file_lock" && matches!(r.operation.name(), "alloc" | "close"))
        .map(|r| r.count)
        .sum();
    let locks: Vec<String> = c
        .by_lock
        .iter()
        .map(|l| format!("{} {}", l.lock.name, l.count))
        .collect();
    let ok = c.file_lock_count == slowpath && in_ops == in_alloc_close;
    let text = format!(
        "breakdown: file_lock {} (alloc/close stacks {in_ops}), locks [{}]",
        c.file_lock_count,
        locks.join(", ")
    );
    (ok, text)
}

/// In the direct modes the fd syscalls are probed at their own functions, in the same mode, and
/// no raw syscall tracepoint program is loaded: the programs listed are those the kernel
/// answered `BPF_OBJ_GET_INFO_BY_FD` for while recording.
fn fd_syscalls_direct(mode: &str, report: &Report) -> (bool, String) {
    let how = report.header.probes.get(&Role::FdSyscalls);
    let direct = matches!(how, Some(Attachment::Direct { mode: m, .. }) if m.name() == mode);
    let raw: Vec<&str> = Role::FdSyscalls
        .tp_btf_programs()
        .iter()
        .map(|(p, _)| *p)
        .chain(
            Role::FdSyscalls
                .tracepoint_programs()
                .iter()
                .map(|(p, _, _)| *p),
        )
        .collect();
    let programs = &report.own_cost.programs;
    let loaded_raw: Vec<&str> = programs
        .iter()
        .map(|p| p.name.as_str())
        .filter(|n| raw.contains(n))
        .collect();
    let ok = direct && loaded_raw.is_empty() && !programs.is_empty();
    let how = how.map_or("?".into(), ToString::to_string);
    let text = if loaded_raw.is_empty() {
        format!(
            "fd_syscalls {how}, no raw syscall tracepoint among {} programs",
            programs.len()
        )
    } else {
        format!("fd_syscalls {how}, raw syscall tracepoints loaded: {loaded_raw:?}")
    };
    (ok, text)
}

/// The allocations the generator's `expected` object counts, where it has one.
fn expected_allocs(expected: &Value) -> Option<u64> {
    expected["allocs"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["count"].as_u64()).sum())
}

/// Direct-probe figures against the generator: `alloc_fd` calls and calls of the close function
/// close(2) uses equal the allocations and closes of the measured phase exactly.
fn direct_figures(expected: &Value, report: &Report) -> (bool, String) {
    let op_calls = |op: &str| {
        report
            .functions
            .iter()
            .find(|f| f.operation.name() == op)
            .map_or(0, |f| f.calls)
    };
    let want_allocs = expected_allocs(expected).unwrap_or(0);
    let want_closes = expected["fds_closed"]["close"].as_u64().unwrap_or(0);
    let (allocs, closes) = (op_calls("alloc"), op_calls("close"));
    let close_fn = report
        .header
        .probes
        .get(&Role::Close)
        .map_or("?".into(), ToString::to_string);
    (
        allocs == want_allocs && closes == want_closes,
        format!(
            "alloc calls {allocs}/{want_allocs}, close calls {closes}/{want_closes} via {close_fn}"
        ),
    )
}

fn scenario_row(out: &GuestOutput, kernel: &str, mode: &str, scenario: &Scenario) -> Row {
    let mut row = Row::failed(kernel, mode, scenario.name);
    let record = out.steps.get(&guest::record_step(mode, scenario.name));
    let report = out.steps.get(&guest::report_step(mode, scenario.name));
    row.figures = match (record, report) {
        (None, _) => "no result from the guest (it stopped early?)".into(),
        (Some(rec), _) if rec.rc != 0 => failure("record", rec),
        (Some(_), None) => "no report from the guest".into(),
        (Some(_), Some(rep)) if rep.rc != 0 => failure("report", rep),
        (Some(rec), Some(rep)) => match (json_of(rec), report_of(rep)) {
            (None, _) => "the workload printed no JSON".into(),
            (_, Err(why)) => why,
            (Some(workload), Ok(report)) => {
                let (ok, figures) = judge(scenario, mode, &workload, &report);
                row.pass = ok;
                row.probes = report
                    .header
                    .probes
                    .iter()
                    .map(|(role, how)| (role.to_string(), how.to_string()))
                    .collect();
                format!("{figures} ({:.1}s)", rec.secs)
            }
        },
    };
    row
}

/// A traced scenario's replay under the guest kernel's allocator: every allocation of the
/// measured phase replayed (attached) or at least the workload's (launched), and none
/// mismatched, ambiguous, rejected, or on a table the trace never introduced.
fn judge_trace(traced: &Traced, mode: &str, workload: &Value, replay: &Value) -> (bool, String) {
    let m = &replay["models"][0];
    let n = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
    let allocations = n(&m["allocations"]);
    // Without an `expected` (--processes), each op is one allocation (socket-close's socket).
    let want = expected_allocs(&workload["expected"])
        .or_else(|| workload["ops"].as_u64())
        .unwrap_or(0);
    let tables = n(&m["tables"]);
    let counted = match traced.start {
        Start::Attached => allocations == want,
        Start::Launched => allocations >= want && allocations != u64::MAX,
    };
    let zero = ["model_mismatch", "ambiguous", "rejected", "implicit_tables"];
    let may_be_ambiguous = |k: &str| traced.shared && mode == "tracepoint" && k == "ambiguous";
    let ok = counted
        && want > 0
        && tables == traced.tables
        && zero.iter().all(|k| may_be_ambiguous(k) || n(&m[*k]) == 0);
    let zeros: Vec<String> = zero.iter().map(|k| format!("{k} {}", m[*k])).collect();
    let relation = if traced.start == Start::Attached {
        ""
    } else {
        ">="
    };
    (
        ok,
        format!(
            "{} replayed: allocations {allocations}/{relation}{want}, tables {tables}/{}, {}, {} \
             events",
            m["name"].as_str().unwrap_or("?"),
            traced.tables,
            zeros.join(", "),
            m["events"]
        ),
    )
}

fn trace_row(out: &GuestOutput, kernel: &str, mode: &str, traced: &Traced) -> Row {
    let mut row = Row::failed(kernel, mode, traced.name);
    let record = out.steps.get(&guest::record_step(mode, traced.name));
    let replay = out.steps.get(&guest::replay_step(mode, traced.name));
    row.figures = match (record, replay) {
        (None, _) => "no result from the guest (it stopped early?)".into(),
        (Some(rec), _) if rec.rc != 0 => failure("record --trace", rec),
        (Some(_), None) => "no replay from the guest".into(),
        (Some(_), Some(rep)) if rep.rc != 0 => failure("replay", rep),
        (Some(rec), Some(rep)) => match (json_of(rec), json_of(rep)) {
            (None, _) => "the workload printed no JSON".into(),
            (_, None) => "replay --json printed no JSON".into(),
            (Some(workload), Some(replay)) => {
                let (ok, figures) = judge_trace(traced, mode, &workload, &replay);
                row.pass = ok;
                format!("{figures} ({:.1}s)", rec.secs)
            }
        },
    };
    row
}

/// How one probe trial went, in a few words.
fn trial(v: &Value) -> String {
    let result = v["result"].as_str().unwrap_or("?");
    let mut s = result.to_string();
    let detail: Vec<&str> = [&v["stage"], &v["errno"]]
        .iter()
        .filter_map(|x| x.as_str())
        .collect();
    if !detail.is_empty() {
        let _ = write!(s, " at {}", detail.join(", "));
    } else if result != "works"
        && let Some(m) = v["message"].as_str()
    {
        let _ = write!(s, " ({m})");
    }
    s
}

/// The doctor's choice per role, for the table.
fn doctor_figures(doc: &Value) -> String {
    let chosen = &doc["chosen"];
    let mut s = format!("auto mode {}", doc["mode"].as_str().unwrap_or("?"));
    for role in [Role::Allocate, Role::Close, Role::LockSlowpath] {
        let chosen = chosen[role.name()].as_str().unwrap_or("?");
        let _ = write!(s, ", {role}={chosen}");
    }
    // Whether any function of the role took fentry / kprobe.
    let works = |kind: &str| {
        doc["functions"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["functions"].as_array().into_iter().flatten())
            .filter(|f| f[kind]["result"] == "works")
            .count()
    };
    let total: usize = doc["functions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["functions"].as_array().map_or(0, Vec::len))
        .sum();
    let _ = write!(
        s,
        "; fentry works on {}/{total} functions, kprobe on {}/{total}",
        works("fentry"),
        works("kprobe")
    );
    s
}

/// The doctor's findings in full: per role, the functions found and each trial's outcome.
pub(super) fn doctor_details(doc: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  kernel {} (BTF {}), record would use {} mode",
        doc["kernel_release"].as_str().unwrap_or("?"),
        if doc["btf"] == true { "yes" } else { "no" },
        doc["mode"].as_str().unwrap_or("?")
    );
    for role in doc["functions"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {:<14} chosen {}",
            role["role"].as_str().unwrap_or("?"),
            role["chosen"].as_str().unwrap_or("?")
        );
        let functions = role["functions"].as_array().cloned().unwrap_or_default();
        if functions.is_empty() {
            let _ = writeln!(out, "    none of {} found", role["candidates"]);
        }
        for f in functions {
            let seen: Vec<&str> = [("BTF", &f["btf"]), ("kallsyms", &f["kallsyms"])]
                .into_iter()
                .filter(|(_, v)| **v == true)
                .map(|(n, _)| n)
                .collect();
            let _ = writeln!(
                out,
                "    {} (in {}): fentry {}; fexit {}; kprobe {}; kretprobe {}",
                f["name"].as_str().unwrap_or("?"),
                seen.join(", "),
                trial(&f["fentry"]),
                trial(&f["fexit"]),
                trial(&f["kprobe"]),
                trial(&f["kretprobe"])
            );
        }
    }
    let tps: Vec<String> = doc["lock_tracepoints"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(
            doc["fd_syscall_tracepoints"]
                .as_array()
                .into_iter()
                .flatten(),
        )
        .map(|t| {
            let mut s = format!(
                "{}: {}",
                t["name"].as_str().unwrap_or("?"),
                trial(&t["tracepoint"])
            );
            if t["tp_btf"].is_object() {
                let _ = write!(s, " (tp_btf {})", trial(&t["tp_btf"]));
            }
            s
        })
        .collect();
    let _ = writeln!(out, "  tracepoints: {}", tps.join("; "));
    let _ = writeln!(out, "  chosen: {}", modes_summary(&doc["chosen"]));
    if let Some(notes) = doc["notes"].as_array().filter(|n| !n.is_empty()) {
        for n in notes {
            let _ = writeln!(out, "  note: {}", n.as_str().unwrap_or("?"));
        }
    }
    out
}

/// The doctor row and one row per mode × scenario.
pub(super) fn rows(out: &GuestOutput, kernel: &str, modes: &[&str]) -> (Vec<Row>, Option<Value>) {
    let mut rows = Vec::new();
    let doctor = out.steps.get(guest::DOCTOR_STEP);
    let doc = doctor.and_then(json_of);
    let figures = match (doctor, &doc) {
        (None, _) => "no result from the guest".into(),
        (Some(d), _) if d.rc != 0 => failure("doctor", d),
        (Some(_), None) => "doctor --json printed no JSON".into(),
        (Some(d), Some(doc)) => format!("{} ({:.1}s)", doctor_figures(doc), d.secs),
    };
    rows.push(Row {
        kernel: kernel.to_string(),
        mode: "-".into(),
        scenario: "doctor".into(),
        pass: doc.is_some() && doctor.is_some_and(|d| d.rc == 0),
        figures,
        probes: BTreeMap::new(),
    });
    for mode in modes {
        for s in guest::SCENARIOS {
            rows.push(scenario_row(out, kernel, mode, s));
        }
        for t in guest::TRACED {
            rows.push(trace_row(out, kernel, mode, t));
        }
        rows.push(unwound::row(out, kernel, mode));
        rows.push(super::live::top_row(out, kernel, mode, doc.as_ref()));
        rows.push(super::live::daemon_row(out, kernel, mode, doc.as_ref()));
    }
    (rows, doc)
}

/// How each kernel attached each role in each mode, as its guest's socket-close recording
/// says: a Markdown table, roles by kernel and mode (docs/probe-modes.md).
pub(super) fn roles_table(rows: &[Row]) -> String {
    let columns: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == "socket-close" && !r.probes.is_empty())
        .collect();
    let mut roles: Vec<&String> = columns.iter().flat_map(|r| r.probes.keys()).collect();
    roles.sort();
    roles.dedup();
    let mut out = String::from("| role |");
    for c in &columns {
        let _ = write!(out, " {} {} |", c.kernel, c.mode);
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(columns.len()));
    out.push('\n');
    for role in roles {
        let _ = write!(out, "| `{role}` |");
        for c in &columns {
            let how = c.probes.get(role).map_or("-", String::as_str);
            let _ = write!(out, " {how} |");
        }
        out.push('\n');
    }
    out
}

pub(super) fn table(rows: &[Row]) -> String {
    let w = |f: fn(&Row) -> &str, title: &str| {
        rows.iter()
            .map(|r| f(r).len())
            .chain([title.len()])
            .max()
            .unwrap_or(0)
    };
    let (wk, wm, ws) = (
        w(|r| &r.kernel, "kernel"),
        w(|r| &r.mode, "mode"),
        w(|r| &r.scenario, "scenario"),
    );
    let mut out = format!(
        "{:<wk$}  {:<wm$}  {:<ws$}  result  figures\n",
        "kernel", "mode", "scenario"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<wk$}  {:<wm$}  {:<ws$}  {:<6}  {}",
            r.kernel,
            r.mode,
            r.scenario,
            if r.pass { "PASS" } else { "FAIL" },
            r.figures
        );
    }
    out
}

#[cfg(test)]
mod tests;
mod unwound;
