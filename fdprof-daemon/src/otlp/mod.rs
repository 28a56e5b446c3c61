//! Pushing each interval's profiles to an OTLP receiver (`--otlp-endpoint`): a sink on the
//! interval's figures, as `/metrics` and the stream are. The interval only encodes its request
//! and queues it; one task sends the queue oldest first, retrying with backoff while the
//! receiver is down or asks to wait, so a receiver that hangs never holds up an interval,
//! `/healthz` or shutdown. Without `--otlp-endpoint` none of this exists.

mod queue;
mod send;
pub mod settings;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fdprof_profiler::analysis::{self, ProfileKind, ProfileOptions};
use fdprof_profiler::render::metrics::OtlpFigures;
use fdprof_profiler::render::otlp::{self, Sender};
use fdprof_recording::Recording;
use hyper::body::Bytes;
use tokio::task::JoinHandle;

use crate::interval::IntervalFigures;
use crate::log;
use queue::{Counters, Queue};
use send::{Client, Outcome};
pub use settings::{Push, PushArgs};

/// The first wait after a failure, and the longest.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A receiver that keeps failing is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// At shutdown, what is queued is sent for at most this long.
const FLUSH: Duration = Duration::from_secs(2);

pub(crate) struct Pusher {
    queue: Arc<Queue>,
    task: JoinHandle<()>,
    sender: Sender,
}

impl Pusher {
    /// Starts the sending task (on the runtime it is called from).
    pub(crate) fn start(push: Push) -> Self {
        log::info(&format!(
            "pushing profiles to {} ({}), up to {} requests queued",
            push.uri,
            push.protocol.name(),
            push.queue
        ));
        let queue = Arc::new(Queue::new(push.queue));
        let task = tokio::spawn(run(Arc::new(push), queue.clone()));
        Self {
            queue,
            task,
            sender: Sender::this_host(),
        }
    }

    /// Queues an interval's profiles: its lock waits, and its on-CPU samples if it has any,
    /// each wait labelled with its target name and process. An interval without either sends
    /// nothing.
    pub(crate) fn interval(&self, figures: &IntervalFigures) {
        let names: Vec<(Option<&str>, &Recording)> = figures
            .each_name()
            .map(|(name, rec)| (Some(name.as_str()), rec))
            .collect();
        let facts = &figures.daemon;
        for kind in [ProfileKind::Contention, ProfileKind::Cpu] {
            let opts = ProfileOptions {
                per_process: true,
                ..ProfileOptions::all(kind)
            };
            let Ok(profile) = analysis::targets_profile(facts, &names, &opts) else {
                continue;
            };
            if profile.samples.is_empty() {
                continue;
            }
            self.queue
                .push(Bytes::from(otlp::otlp(&profile, &self.sender)));
        }
    }

    /// What `/metrics` reads of the push.
    pub(crate) fn figures(&self) -> PushFigures {
        PushFigures(self.queue.clone())
    }

    /// Sends what is queued for at most [`FLUSH`], then stops; what is left is counted dropped.
    pub(crate) async fn finish(self) {
        let until = Instant::now() + FLUSH;
        while self.queue.len() > 0 && Instant::now() < until && !self.task.is_finished() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.task.abort();
        let left = self.queue.drop_all();
        if left > 0 {
            log::warn(&format!(
                "OTLP: {left} requests not sent at shutdown (the receiver did not take them in {FLUSH:?})"
            ));
        }
    }
}

/// The push's counts, read at each scrape.
#[derive(Clone)]
pub(crate) struct PushFigures(Arc<Queue>);

impl PushFigures {
    pub(crate) fn read(&self) -> OtlpFigures {
        let c = &self.0.counters;
        OtlpFigures {
            sent: Counters::read(&c.sent),
            sent_bytes: Counters::read(&c.sent_bytes),
            failed: Counters::read(&c.failed),
            dropped: Counters::read(&c.dropped),
            rejected_profiles: Counters::read(&c.rejected_profiles),
            queued: self.0.len() as u64,
        }
    }
}

/// Sends the queue, oldest first, for the daemon's life.
async fn run(push: Arc<Push>, queue: Arc<Queue>) {
    let mut client = Client::new(push.clone());
    let mut backoff = BACKOFF_FIRST;
    let mut failing_since: Option<Instant> = None;
    let mut logged: Option<Instant> = None;
    loop {
        let Some(request) = queue.oldest() else {
            queue.added.notified().await;
            continue;
        };
        let bytes = request.body.len() as u64;
        let counters = &queue.counters;
        match client.send(request.body).await {
            Outcome::Sent { rejected, message } => {
                queue.done(request.seq);
                Counters::add(&counters.sent, 1);
                Counters::add(&counters.sent_bytes, bytes);
                if rejected > 0 {
                    Counters::add(&counters.rejected_profiles, rejected);
                    log::warn(&format!(
                        "OTLP: the receiver rejected {rejected} profiles: {message}"
                    ));
                }
                if let Some(since) = failing_since.take() {
                    log::info(&format!(
                        "OTLP: the receiver takes requests again, after {:.0?}",
                        since.elapsed()
                    ));
                }
                backoff = BACKOFF_FIRST;
                logged = None;
            }
            Outcome::Retry { after, why } => {
                Counters::add(&counters.failed, 1);
                failing_since.get_or_insert_with(Instant::now);
                if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                    log::warn(&format!(
                        "OTLP: {} did not take a request ({why}); trying again, {} requests queued",
                        push.uri,
                        queue.len()
                    ));
                    logged = Some(Instant::now());
                }
                tokio::time::sleep(after.unwrap_or(backoff)).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Outcome::Refused(why) => {
                queue.done(request.seq);
                Counters::add(&counters.failed, 1);
                Counters::add(&counters.dropped, 1);
                if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                    log::error(&format!(
                        "OTLP: {} refused a request for good ({why}); it is dropped, as are the \
                         next ones it refuses (counted in fdprof_otlp_requests_dropped_total)",
                        push.uri
                    ));
                    logged = Some(Instant::now());
                }
            }
        }
    }
}
