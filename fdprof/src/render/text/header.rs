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
    kv.push(("drops".to_string(), drops_summary(r)));
    out.extend(key_values(&kv, 2));
    for note in &h.notes {
        out.push(format!("  note: {note}"));
    }
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
