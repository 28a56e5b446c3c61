//! From the collector's and the symbolizers' types to the recording's: the one place the
//! recording format meets the code that fills it, so the format's own files
//! (`recording`, `series`, `counters`, …) depend on neither.

use fdprof_figures::CounterName;
use fdprof_recording::bounded;
use fdprof_recording::counters::{CounterEvent, Counters, Reading, ThreadCounters, bound_rows};
use fdprof_recording::recording::{Frame, StealTime};

use crate::collect::counters::{CounterReadings, Reading as CollectedReading};

impl From<crate::symbolize::Frame> for Frame {
    fn from(f: crate::symbolize::Frame) -> Self {
        Self {
            function: f.function,
            offset: f.offset,
            module: f.module,
            address: f.address,
            build_id: f.build_id,
            file_offset: f.file_offset,
        }
    }
}

impl From<crate::collect::steal::Steal> for StealTime {
    fn from(s: crate::collect::steal::Steal) -> Self {
        Self {
            steal_ns: s.steal_ns,
            total_ns: s.total_ns,
            cpus: s.cpus,
            max_cpu_steal_ns: s.max_cpu_steal_ns,
            max_cpu_total_ns: s.max_cpu_total_ns,
        }
    }
}

impl From<&CollectedReading> for Reading {
    fn from(r: &CollectedReading) -> Self {
        Reading {
            name: r.name,
            count: r.count,
            time_enabled_ns: r.time_enabled_ns,
            time_running_ns: r.time_running_ns,
        }
    }
}

impl From<&CounterReadings> for Counters {
    fn from(c: &CounterReadings) -> Self {
        let mut out = Counters {
            events: CounterName::ALL
                .iter()
                .map(|&name| CounterEvent {
                    name,
                    unavailable: c
                        .unavailable
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, why)| why.clone()),
                })
                .collect(),
            threads: c
                .threads
                .iter()
                .map(|t| ThreadCounters {
                    tid: Some(t.tid),
                    comm: t.comm.clone(),
                    threads: 1,
                    readings: t.readings.iter().map(Reading::from).collect(),
                })
                .collect(),
        };
        bound_rows(&mut out, bounded::COUNTER_ROWS);
        out
    }
}
