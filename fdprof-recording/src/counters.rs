//! The target's per-thread counters as recorded (`record`, on unless `--no-counters`): for
//! each counter, whether it could be counted; per thread alive at the start (with the tasks it
//! created since), each counter's count and times enabled and running, unscaled.

use std::cmp::Reverse;

use fdprof_figures::CounterName;
use serde::{Deserialize, Serialize};

use super::bounded;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Every counter asked for, each available or not.
    #[serde(deserialize_with = "bounded::counter_events")]
    pub events: Vec<CounterEvent>,
    /// Past [`bounded::COUNTER_ROWS`] threads, those of least task-clock are folded into one
    /// row without a tid.
    #[serde(deserialize_with = "bounded::counter_rows")]
    pub threads: Vec<ThreadCounters>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterEvent {
    pub name: CounterName,
    /// Why it could not be counted: the errno's meaning and name.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded::opt_text"
    )]
    pub unavailable: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadCounters {
    /// Absent for the row of folded threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(deserialize_with = "bounded::name")]
    pub comm: String,
    /// The threads this row stands for: 1, or how many were folded into it.
    #[serde(default = "one")]
    pub threads: u64,
    #[serde(deserialize_with = "bounded::counter_events")]
    pub readings: Vec<Reading>,
}

fn one() -> u64 {
    1
}

/// A counter's count, as the kernel read it, and its times enabled and on the PMU (ns, summed
/// over the thread and its inherited children): running < enabled means multiplexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reading {
    pub name: CounterName,
    pub count: u64,
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
}

impl ThreadCounters {
    /// The count of `name`, 0 when not counted.
    pub fn count(&self, name: CounterName) -> u64 {
        self.reading(name).map_or(0, |r| r.count)
    }

    pub fn reading(&self, name: CounterName) -> Option<&Reading> {
        self.readings.iter().find(|r| r.name == name)
    }
}

/// Adds `other`'s counters to `into`: a counter either could count is available; rows of the
/// same thread add, others are kept, and the rows are bounded again.
pub fn add(into: &mut Counters, other: &Counters) {
    for e in &other.events {
        match into.events.iter_mut().find(|x| x.name == e.name) {
            Some(x) if e.unavailable.is_none() => x.unavailable = None,
            Some(_) => {}
            None => into.events.push(e.clone()),
        }
    }
    into.events.sort_by_key(|e| e.name);
    for t in &other.threads {
        match into.threads.iter_mut().find(|x| x.tid == t.tid) {
            Some(x) => {
                // A thread is one thread however often it is added; folded rows add up.
                x.threads = match t.tid {
                    Some(_) => x.threads.max(t.threads),
                    None => x.threads.saturating_add(t.threads),
                };
                add_readings(&mut x.readings, &t.readings);
            }
            None => into.threads.push(t.clone()),
        }
    }
    bound_rows(into, bounded::COUNTER_ROWS);
}

fn add_readings(into: &mut Vec<Reading>, other: &[Reading]) {
    for r in other {
        match into.iter_mut().find(|x| x.name == r.name) {
            Some(x) => {
                x.count = x.count.saturating_add(r.count);
                x.time_enabled_ns = x.time_enabled_ns.saturating_add(r.time_enabled_ns);
                x.time_running_ns = x.time_running_ns.saturating_add(r.time_running_ns);
            }
            None => into.push(*r),
        }
    }
}

/// Keeps at most `max` rows: the threads of most task-clock, the rest folded into one row
/// without a tid (which counts the threads folded).
pub fn bound_rows(c: &mut Counters, max: usize) {
    c.threads
        .sort_by_key(|t| (t.tid.is_none(), Reverse(t.count(CounterName::TaskClock))));
    if c.threads.len() <= max || max == 0 {
        return;
    }
    let rest = c.threads.split_off(max - 1);
    let mut folded = ThreadCounters {
        tid: None,
        comm: String::new(),
        threads: 0,
        readings: Vec::new(),
    };
    for t in &rest {
        folded.threads = folded.threads.saturating_add(t.threads);
        add_readings(&mut folded.readings, &t.readings);
    }
    folded.comm = format!("({} other threads)", folded.threads);
    c.threads.push(folded);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tid: Option<u32>, task_clock: u64) -> ThreadCounters {
        ThreadCounters {
            tid,
            comm: format!("t{tid:?}"),
            threads: 1,
            readings: vec![Reading {
                name: CounterName::TaskClock,
                count: task_clock,
                time_enabled_ns: task_clock,
                time_running_ns: task_clock,
            }],
        }
    }

    fn counters(rows: Vec<ThreadCounters>, cycles: Option<&str>) -> Counters {
        Counters {
            events: vec![
                CounterEvent {
                    name: CounterName::TaskClock,
                    unavailable: None,
                },
                CounterEvent {
                    name: CounterName::Cycles,
                    unavailable: cycles.map(str::to_string),
                },
            ],
            threads: rows,
        }
    }

    #[test]
    fn two_recordings_add_per_thread() {
        let mut a = counters(vec![row(Some(1), 10), row(Some(2), 5)], Some("no PMU"));
        let b = counters(vec![row(Some(2), 20), row(Some(3), 1)], None);
        add(&mut a, &b);
        let tids: Vec<_> = a
            .threads
            .iter()
            .map(|t| (t.tid, t.count(CounterName::TaskClock)))
            .collect();
        assert_eq!(tids, [(Some(2), 25), (Some(1), 10), (Some(3), 1)]);
        let r = a.threads[0].reading(CounterName::TaskClock).unwrap();
        assert_eq!((r.time_enabled_ns, r.time_running_ns), (25, 25));
        // Counted in one of the two: available.
        assert_eq!(a.events[1].unavailable, None);
        let mut c = counters(vec![], Some("no PMU"));
        add(&mut c, &counters(vec![], Some("no PMU")));
        assert_eq!(c.events[1].unavailable.as_deref(), Some("no PMU"));
    }

    #[test]
    fn rows_past_the_bound_fold_into_one() {
        let mut c = counters((1..=5).map(|t| row(Some(t), t as u64)).collect(), None);
        bound_rows(&mut c, 3);
        assert_eq!(c.threads.len(), 3);
        assert_eq!(c.threads[0].tid, Some(5));
        assert_eq!(c.threads[1].tid, Some(4));
        let folded = &c.threads[2];
        assert_eq!((folded.tid, folded.threads), (None, 3));
        assert_eq!(folded.count(CounterName::TaskClock), 1 + 2 + 3);
        assert_eq!(folded.comm, "(3 other threads)");
        // Folding again keeps the total and the count of threads.
        add(&mut c, &counters(vec![row(Some(9), 100)], None));
        bound_rows(&mut c, 3);
        let total: u64 = c
            .threads
            .iter()
            .map(|t| t.count(CounterName::TaskClock))
            .sum();
        assert_eq!(total, 115);
        assert_eq!(c.threads.iter().map(|t| t.threads).sum::<u64>(), 6);
    }
}
