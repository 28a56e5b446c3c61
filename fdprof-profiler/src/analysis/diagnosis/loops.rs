//! close-loops: runs of close(2) calls, one thread closing fd after consecutive fd, which one
//! close_range(2) does in one call. Only the fd trace (`record --trace`) sees which fd each
//! close closed, so without it the rule says it did not look.

use std::collections::HashMap;

use fdprof_common::syscalls::FD_SYSCALLS;
use fdprof_common::trace::op;
use fdprof_figures::{Comparison, Finding, Remedy, Report, Rule};
use fdprof_recording::Recording;
use fdprof_recording::trace::codec::Row;

use super::{CLOSE_LOOP_MIN_FDS, CLOSE_RUN_MIN, check, figure};

/// The runs of consecutive closes in the trace's rows.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Runs {
    /// Runs of [`CLOSE_RUN_MIN`] closes or more.
    pub runs: u64,
    /// The closes in them.
    pub fds: u64,
    pub longest: u64,
    /// Every close(2) that released an fd.
    pub closes: u64,
}

/// One thread's run so far: the table, the last fd and the step (+1 or -1; 0 after one fd).
#[derive(Clone, Copy)]
struct Open {
    table: u32,
    last: i32,
    step: i32,
    len: u64,
}

/// A close(2) as the search for runs needs it (a report reads only these of a trace's rows).
#[derive(Debug, Clone, Copy)]
pub(super) struct Close {
    exit_ns: u64,
    tid: u32,
    table: u32,
    fd: i32,
}

/// The close(2) calls among `rows` that released an fd.
pub(super) fn closes(
    rows: impl IntoIterator<Item = Result<Row, String>>,
) -> Result<Vec<Close>, String> {
    let close = FD_SYSCALLS
        .iter()
        .position(|s| s.name == "close")
        .map(|i| i as u8);
    let mut out = Vec::new();
    for r in rows {
        let r = r?;
        if r.op == op::RELEASE && Some(r.syscall) == close {
            out.push(Close {
                exit_ns: r.exit_ns,
                tid: r.tid,
                table: r.table,
                fd: r.fd,
            });
        }
    }
    Ok(out)
}

pub(super) fn runs(mut order: Vec<Close>) -> Runs {
    order.sort_by_key(|r| r.exit_ns);
    let mut out = Runs::default();
    let end = |out: &mut Runs, len: u64| {
        if len >= CLOSE_RUN_MIN {
            out.runs += 1;
            out.fds += len;
            out.longest = out.longest.max(len);
        }
    };
    let mut open: HashMap<u32, Open> = HashMap::new();
    for r in order {
        out.closes += 1;
        let run = open.entry(r.tid).or_insert(Open {
            table: r.table,
            last: r.fd,
            step: 0,
            len: 0,
        });
        let step = r.fd.wrapping_sub(run.last);
        let extends = run.len > 0
            && run.table == r.table
            && (step == 1 || step == -1)
            && (run.step == 0 || run.step == step);
        if extends {
            run.step = step;
            run.len += 1;
        } else {
            let len = run.len;
            end(&mut out, len);
            *run = Open {
                table: r.table,
                last: r.fd,
                step: 0,
                len: 1,
            };
        }
        run.last = r.fd;
    }
    for run in open.into_values() {
        end(&mut out, run.len);
    }
    out
}

/// The close-loops finding; `Err` says why the rule could not look.
pub(super) fn close_loops(rec: &Recording, r: &Report) -> Result<Option<Finding>, String> {
    let Some(trace) = &rec.trace else {
        return Err(
            "recorded without --trace: only the fd trace shows which fd each close \
                    closed"
                .into(),
        );
    };
    // Streamed: only the closes are kept.
    let found = trace
        .stream()
        .and_then(closes)
        .map(runs)
        .map_err(|e| format!("the fd trace cannot be read: {e}"))?;
    let evidence = check(
        "trace.close_loop_fds",
        found.fds as f64,
        Comparison::AtLeast,
        CLOSE_LOOP_MIN_FDS as f64,
    );
    let Some(evidence) = evidence else {
        return Ok(None);
    };
    let saved = found.fds.saturating_sub(found.runs);
    let gaps = if trace.has_gaps() {
        " (the trace has gaps: at least this many)"
    } else {
        ""
    };
    Ok(Some(Finding {
        rule: Rule::CloseLoops,
        summary: format!(
            "{} close(2) calls of {} closed runs of consecutive fds, {} runs of {CLOSE_RUN_MIN} \
             or more (the longest {}){gaps}: a loop closing fd after fd",
            found.fds, found.closes, found.runs, found.longest
        ),
        evidence: vec![evidence],
        context: vec![
            figure("trace.close_loops", found.runs as f64),
            figure("trace.close_loop_longest", found.longest as f64),
            figure("trace.closes", found.closes as f64),
            figure(
                "syscalls.close.calls",
                r.syscalls
                    .iter()
                    .find(|s| s.name == "close")
                    .map_or(0, |s| s.calls) as f64,
            ),
        ],
        // The trace keeps no stacks.
        stacks: Vec::new(),
        remedy: Remedy {
            change: "close each run with one close_range(first, last, 0) (Linux 5.9 or later), \
                     which takes file_lock once for the whole range"
                .into(),
            shown_by: Some("fdprof workload close-loop --close-range".into()),
            saving: format!(
                "{saved} of {} close(2) calls: {} close_range calls instead of {} closes",
                found.closes, found.runs, found.fds
            ),
            wait_ns: None,
            syscalls: Some(saved),
            scan_words: None,
            table_copies: None,
        },
    }))
}
