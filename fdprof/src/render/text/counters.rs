//! The target's per-thread counters.

use crate::analysis::{CounterName, Counters, Report};
use crate::render::human::{duration, percent};
use crate::render::layout::{columns, section};

/// Thread rows shown; the JSON has them all.
const SHOWN_THREADS: usize = 20;

pub(super) fn counters(out: &mut Vec<String>, r: &Report) {
    let Some(c) = &r.counters else {
        return;
    };
    section(out, "counters");
    out.push(
        "  counted: the threads alive at the start, each with the threads and processes it \
         created since"
            .into(),
    );
    let body: Vec<Vec<String>> = c
        .totals
        .iter()
        .map(|t| {
            let value = match (&t.unavailable, t.value) {
                (Some(why), _) => format!("unavailable: {}", crate::escape::name(why)),
                (None, Some(v)) => value_text(t.name, v),
                (None, None) => "-".into(),
            };
            let note = if t.multiplexed {
                format!(
                    "scaled: on the PMU {} of its time",
                    percent(t.running_share)
                )
            } else {
                String::new()
            };
            vec![t.name.name().to_string(), value, note]
        })
        .collect();
    out.extend(columns(&["counter", "total", ""], 1, &body, 2));
    threads(out, c);
}

fn threads(out: &mut Vec<String>, c: &Counters) {
    if c.threads.is_empty() {
        return;
    }
    let shown: Vec<usize> = (0..c.totals.len())
        .filter(|&i| c.totals[i].unavailable.is_none())
        .collect();
    let mut head = vec!["tid", "comm"];
    head.extend(shown.iter().map(|&i| c.totals[i].name.name()));
    let body: Vec<Vec<String>> = c
        .threads
        .iter()
        .take(SHOWN_THREADS)
        .map(|t| {
            let mut row = vec![
                t.tid.map_or("-".into(), |tid| tid.to_string()),
                crate::escape::name(&t.comm).into_owned(),
            ];
            row.extend(shown.iter().map(|&i| {
                t.values
                    .get(i)
                    .copied()
                    .flatten()
                    .map_or("-".into(), |v| value_text(c.totals[i].name, v))
            }));
            row
        })
        .collect();
    out.push(String::new());
    out.extend(columns(&head, 2, &body, 2));
    if c.threads.len() > SHOWN_THREADS {
        out.push(format!(
            "  … {} more rows (report --json has them all)",
            c.threads.len() - SHOWN_THREADS
        ));
    }
    if c.folded_threads > 0 {
        out.push(format!(
            "  {} threads of least task-clock are folded into the row without a tid",
            c.folded_threads
        ));
    }
}

fn value_text(name: CounterName, v: u64) -> String {
    match name {
        CounterName::TaskClock => duration(v),
        _ => v.to_string(),
    }
}
