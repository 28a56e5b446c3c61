//! `fdprof top --from RECORDING`: plays back the series of a recording made with
//! `record --interval`, through the same outputs as a live `top`. Nothing is attached, so no
//! privileges are needed. The screen shows each interval when its time comes (the recorded
//! pace); `--jsonl` and `--batch` write them all at once, for scripts. `-n` stops early.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fdprof_recording::Recording;

use super::session;
use super::{Sink, TopArgs};
use fdprof_profiler::analysis;
use fdprof_profiler::error::{EXIT_USAGE, fatal};

/// How often a paced playback checks for a quit or a signal.
const POLL: Duration = Duration::from_millis(20);

pub(super) fn run(args: &TopArgs, path: &Path) -> Result<()> {
    let rec = Recording::read(path)?;
    let Some(len) = analysis::series_len(&rec) else {
        return Err(fatal(
            EXIT_USAGE,
            format!(
                "{}: this recording has no series to play back: make one with `fdprof record \
                 --interval 1s …`",
                path.display()
            ),
        ));
    };
    session::install_signal_handlers();
    let len = args.count.map_or(len, |n| len.min(n as usize));
    let sink = Sink::choose(args);
    let paced = matches!(sink, Sink::Screen { .. });
    let started = Instant::now();
    // Where the screen's cumulative view starts (r resets it).
    let mut since = 0;
    let mut write_error = None;
    'intervals: for index in 0..len {
        let interval = analysis::playback(&rec, index).context("a sample went missing")?;
        if paced {
            // Shown when the interval ended in the recording.
            let due = Duration::from_nanos(interval.start_ns.saturating_add(interval.duration_ns));
            while started.elapsed() < due {
                if sink.closed() || session::stop_signals() > 0 {
                    break 'intervals;
                }
                std::thread::sleep(POLL.min(due.saturating_sub(started.elapsed())));
            }
        }
        if sink.closed() || session::stop_signals() > 0 {
            break;
        }
        let written = match &sink {
            Sink::Screen { updates, reset, .. } => {
                if reset.swap(false, Ordering::Relaxed) {
                    since = index;
                }
                let cumulative = analysis::playback_total(&rec, since, index)
                    .context("a sample went missing")?;
                let _ = updates.blocking_send(fdprof_top::Update::Interval {
                    interval,
                    cumulative,
                });
                Ok(())
            }
            text => text.print(&interval)?,
        };
        if let Err(e) = written {
            write_error = Some(e);
            break;
        }
    }
    // The screen stays on the last interval until it is closed (q), like a finished top.
    sink.close(write_error, true)
}
