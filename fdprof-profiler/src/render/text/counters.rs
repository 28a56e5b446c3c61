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

#[cfg(test)]
mod tests {
    use crate::analysis::{CounterName, CounterTotal, Counters, Report, TargetCpu, ThreadRow};

    fn total(name: CounterName, value: Option<u64>, running: u64) -> CounterTotal {
        CounterTotal {
            name,
            unavailable: value.is_none().then(|| "no hardware PMU (ENOENT)".into()),
            value,
            raw: value.unwrap_or(0),
            time_enabled_ns: 100,
            time_running_ns: running,
            multiplexed: running < 100,
            running_share: Some(running as f64 / 100.0),
        }
    }

    #[test]
    fn counters_and_the_cost_line_read_as_figures() {
        let mut r = Report {
            counters: Some(Counters {
                totals: vec![
                    total(CounterName::TaskClock, Some(2_000_000), 100),
                    total(CounterName::PageFaults, Some(6000), 50),
                    total(CounterName::Cycles, None, 0),
                ],
                threads: vec![
                    ThreadRow {
                        tid: Some(7),
                        comm: "w\x1b1".into(),
                        threads: 1,
                        values: vec![Some(2_000_000), Some(6000), None],
                    },
                    ThreadRow {
                        tid: None,
                        comm: "(300 other threads)".into(),
                        threads: 300,
                        values: vec![Some(0), Some(0), None],
                    },
                ],
                folded_threads: 300,
            }),
            ..Report::default()
        };
        r.own_cost.target_cpu = Some(TargetCpu {
            target_cpu_ns: 2_000_000,
            programs_ns: Some(20_000),
            programs_share: Some(0.01),
            collector_share: Some(0.5),
        });
        let text = crate::render::text::text(&r);
        let lines: Vec<&str> = text.lines().collect();
        let line = |start: &str| {
            *lines
                .iter()
                .find(|l| l.trim_start().starts_with(start))
                .unwrap_or_else(|| panic!("no line {start:?} in\n{text}"))
        };
        assert!(line("task-clock ").contains("2.00 ms"), "{text}");
        assert!(line("page-faults ").contains("scaled: on the PMU 50.0% of its time"));
        assert!(line("cycles ").contains("unavailable: no hardware PMU (ENOENT)"));
        // The table has the counted columns only, and names escaped.
        assert!(!line("tid ").contains("cycles"), "{text}");
        assert!(line("7 ").contains("w\\x1b1"), "{text}");
        assert!(line("- ").contains("(300 other threads)"), "{text}");
        assert!(text.contains("300 threads of least task-clock are folded"));
        assert!(
            text.contains(
                "beside the target's 2.00 ms on CPU (task-clock): fdprof's programs ran for \
                 ~20.0 µs (1.0% of it"
            ),
            "{text}"
        );
    }
}
