//! `fdprof export --format trace-jsonl`: a recording's fd trace, one JSON object a line: the
//! tables' snapshots first, then every operation as recorded, in exit order.

use fdprof_common::{
    syscalls::FD_SYSCALLS,
    trace::{flag, op},
};
use std::io::{self, Write};

use fdprof_recording::trace::{Trace, codec::Row};
use serde_json::{Value, json};

fn op_name(op: u8) -> &'static str {
    match op {
        op::ALLOC => "alloc",
        op::RELEASE => "release",
        op::INSTALL => "install_at",
        op::CLOSE_RANGE => "close_range",
        op::EXEC => "exec",
        op::EXPAND => "expand",
        op::FORK => "fork",
        _ => "unknown",
    }
}

fn row(r: &Row) -> Value {
    let mut v = json!({
        "time_ns": r.exit_ns,
        "enter_ns": r.enter_ns,
        "tid": r.tid,
        "table": r.table,
        "op": op_name(r.op),
    });
    let o = v.as_object_mut().expect("an object");
    if let Some(s) = FD_SYSCALLS.get(usize::from(r.syscall)) {
        o.insert("syscall".into(), s.name.into());
    }
    match r.op {
        op::ALLOC if r.fd < 0 => {
            o.insert("errno".into(), (-i64::from(r.fd)).into());
        }
        op::CLOSE_RANGE => {
            o.insert("lo".into(), r.fd.into());
            o.insert("hi".into(), r.arg.into());
            o.insert(
                "cloexec_only".into(),
                (r.flags & flag::CLOEXEC_ONLY != 0).into(),
            );
        }
        op::EXPAND => {
            o.insert("max_fds".into(), r.fd.into());
        }
        op::EXEC => {}
        op::FORK => {
            o.insert("child_table".into(), r.arg.into());
            o.insert("child_pid".into(), r.fd.into());
        }
        _ => {
            o.insert("fd".into(), r.fd.into());
        }
    }
    if matches!(r.op, op::ALLOC | op::INSTALL) {
        o.insert("cloexec".into(), (r.flags & flag::CLOEXEC != 0).into());
    }
    if r.op == op::ALLOC {
        o.insert("start".into(), r.arg.into());
    }
    if r.flags & flag::LOCKED != 0 {
        // Both times are the moment inside file_lock.
        o.insert("locked".into(), true.into());
    }
    if r.max_fds != 0 {
        o.insert("next_fd".into(), r.next_fd.into());
        o.insert("max_fds".into(), r.max_fds.into());
    }
    v
}

/// The trace's rows, decoded and in exit order, to be written as lines.
pub struct Lines<'a> {
    trace: &'a Trace,
    rows: Vec<Row>,
}

/// The trace's lines, or why the trace cannot be read.
pub fn lines(trace: &Trace) -> Result<Lines<'_>, String> {
    let mut rows = trace.rows()?;
    rows.sort_by_key(|r| r.exit_ns);
    Ok(Lines { trace, rows })
}

impl Lines<'_> {
    /// Writes the lines, one at a time.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let trace = self.trace;
        for s in &trace.snapshots {
            let v = json!({
                "time_ns": s.from_ns,
                "table": s.table,
                "op": "snapshot",
                "pid": trace.tables.get(s.table as usize).map(|t| t.pid),
                "open": s.open,
                "cloexec": s.cloexec,
                "next_fd": s.next_fd,
                "max_fds": s.max_fds,
            });
            writeln!(out, "{v}")?;
        }
        for r in &self.rows {
            writeln!(out, "{}", row(r))?;
        }
        Ok(())
    }
}

impl Lines<'_> {
    /// The bytes [`Lines::write`] writes, found by writing them nowhere.
    pub fn size(&self) -> u64 {
        let mut counted = Counted(0);
        self.write(&mut counted).expect("counting cannot fail");
        counted.0
    }

    /// The rows written (snapshots aside).
    pub fn rows(&self) -> usize {
        self.rows.len()
    }
}

/// A writer that only counts.
struct Counted(u64);

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
