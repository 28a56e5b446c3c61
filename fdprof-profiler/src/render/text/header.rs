//! The header: target, kernel, time, probe modes, file_lock wait, drops, notes.

use crate::analysis::Report;
use crate::render::human::{self, duration};
use crate::render::layout::key_values;

pub(super) fn header(out: &mut Vec<String>, r: &Report) {
    let h = &r.header;
    out.push(format!("fdprof report: {}", h.target.description));
    let mut kv = vec![
        ("kernel".to_string(), h.kernel_release.clone()),
        (
            "recorded".to_string(),
            format!(
                "{} for {} (ended: {})",
                human::utc(h.started_unix_ms),
                duration(h.duration_ns),
                h.end_reason.describe()
            ),
        ),
        ("probe mode".to_string(), h.mode.to_string()),
    ];
    if let Some(status) = h.target.exit_status {
        kv.insert(2, ("exit status".to_string(), status.to_string()));
    }
    for (role, how) in &h.probes {
        kv.push((format!("  {role}"), how.to_string()));
    }
    kv.push((
        "file_lock wait".to_string(),
        format!(
            "{} in {} waits",
            duration(r.contention.file_lock_wait_ns),
            r.contention.file_lock_count
        ),
    ));
    if let Some(s) = &r.steal {
        kv.push((
            "steal time".to_string(),
            format!(
                "{} of {} CPUs' {} ({}; most on one CPU: {}, {}): time the host ran \
                 something else, a wait's included",
                duration(s.steal_ns),
                s.cpus,
                duration(s.total_ns),
                human::percent(s.share),
                duration(s.max_cpu_steal_ns),
                human::percent(s.max_cpu_share)
            ),
        ));
    }
    if let Some(t) = &r.full_tracing {
        kv.push(("fd syscalls traced".to_string(), traced(t, h.duration_ns)));
    }
    kv.push(("drops".to_string(), drops_summary(r)));
    out.extend(key_values(&kv, 2));
    for note in &h.notes {
        out.push(format!("  note: {note}"));
    }
}

/// The daemon at rest: how much of the recording the fd syscall figures cover, and when.
fn traced(t: &fdprof_figures::FullTracing, duration_ns: u64) -> String {
    const SHOWN: usize = 3;
    let share = (duration_ns > 0).then(|| t.traced_ns as f64 / duration_ns as f64);
    let mut text = format!(
        "{} of {} ({}), in {} window{} of full tracing: the fd syscall, scan and table \
         figures cover only {}",
        duration(t.traced_ns),
        duration(duration_ns),
        human::percent(share),
        t.windows.len(),
        if t.windows.len() == 1 { "" } else { "s" },
        if t.windows.len() == 1 { "it" } else { "them" },
    );
    for w in t.windows.iter().take(SHOWN) {
        text += &format!(
            "; {} for {}",
            human::utc(w.from_unix_ms),
            duration(w.to_unix_ms.saturating_sub(w.from_unix_ms) * 1_000_000)
        );
    }
    if t.windows.len() > SHOWN {
        text += &format!("; {} more", t.windows.len() - SHOWN);
    }
    text
}

fn drops_summary(r: &Report) -> String {
    let d = &r.drops;
    if !d.known {
        "unknown (the recording has no drop counters)".into()
    } else if d.none {
        "none".into()
    } else {
        format!(
            "{} events lost: figures are lower bounds (see drops)",
            d.total
        )
    }
}
