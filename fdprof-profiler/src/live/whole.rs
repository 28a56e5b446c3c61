//! A recorded profile's whole, once the stage is finished: its recording, with what the stage
//! knows of its figures (the notes of how they were taken, and the starts whose maps went
//! unread counted with the kernel's drops).

use std::time::Duration;

use fdprof_common::{counters::drop, session::EndReason};

use super::stage::Finished;
use crate::model::merge;
use crate::symbolize::system;
use fdprof_recording::Recording;

impl Finished {
    /// The whole profile, `duration` long, ended by `end`, having cost fdprof `cpu_ns`;
    /// `traced`: a trace ring buffer was read (`record --trace`).
    pub fn whole(
        &mut self,
        duration: Duration,
        end: EndReason,
        cpu_ns: u64,
        traced: bool,
    ) -> Recording {
        let notes = self.notes(traced);
        let assembler = &mut self.assembler;
        assembler.facts.notes.extend(notes);
        let came = assembler.symbols.user.names_came();
        let mut recording = assembler.whole(&self.total, duration, end, cpu_ns);
        // Debug files that came while naming, or are still being fetched (waited for within
        // the bound): the stacks are named again.
        let waited = assembler.symbols.user.wait_for_names();
        if waited || assembler.symbols.user.names_came() != came {
            recording = assembler.whole(&self.total, duration, end, cpu_ns);
        }
        recording.notes.extend(assembler.symbols.user.names_note());
        // The starts left unread past the snapshot bounds count with the kernel's drops, as
        // `processes`/`limit` (the kernel counts a full ring as `processes`/`ringbuf_full`).
        if assembler.facts.target.kind.per_process() {
            let over_bounds = assembler
                .symbols
                .system()
                .map_or(0, |s| s.start_counts().over_bounds);
            merge::add_drop(
                &mut recording.drops,
                drop::PROBE_NAMES[drop::PROBE_PROCESSES as usize],
                drop::REASON_NAMES[drop::LIMIT as usize],
                over_bounds,
            );
        }
        recording
    }

    /// What the whole's figures rest on: the programs' run-time statistics, the ring buffers
    /// and, system-wide, how every process's maps were read.
    fn notes(&self, traced: bool) -> Vec<String> {
        let mut notes = Vec::new();
        if self.total.stats_window.is_zero() {
            // BPF_ENABLE_STATS takes CAP_SYS_ADMIN, which CAP_BPF and CAP_PERFMON do not give.
            notes.push(
                "BPF run-time statistics could not be switched on (that takes CAP_SYS_ADMIN): \
                 the programs' run times were not measured"
                    .into(),
            );
        }
        notes.push(if traced {
            "aggregated in the kernel, but for the fd trace, whose ring buffer can fill (trace.lost)"
                .into()
        } else {
            "aggregated in the kernel: no ring buffer, so nothing is lost to a full buffer".into()
        });
        if let Some(system) = self.assembler.symbols.system() {
            let starts = system.start_counts();
            notes.push(format!(
                "user stacks of every process: maps read as the kernel told of each fork or exec \
                 ({} starts: {} processes read at once in {:.1} ms, {} gone before they could be \
                 read, {} past the bounds, {} repeated) and by a pass over /proc a second ({} snapshots in all; at \
                 most {} starts read a second, {} processes followed, {} snapshots)",
                starts.received,
                starts.snapshotted,
                starts.read_ns as f64 / 1e6,
                starts.gone,
                starts.over_bounds,
                starts.repeated,
                system.taken(),
                system::MAX_STARTS_PER_SECOND,
                system::MAX_PROCESSES,
                system::MAX_SNAPSHOTS
            ));
        }
        notes
    }
}
