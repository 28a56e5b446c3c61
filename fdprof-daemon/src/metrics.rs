//! What `/metrics` serves: each target name's running total and the daemon's, made into reports
//! once an interval, and the HTTP server's and the flight recorder's counts as they are.

use std::sync::{Arc, Mutex};

use prometheus_client::registry::Registry;

use fdprof_profiler::analysis::{self, ReportOptions};
use fdprof_profiler::render::metrics::{Exposition, MetricsCollector};

use super::otlp::PushFigures;
use super::server::Counters;
use super::state::State;

/// The registry `/metrics` encodes, read from `state` and `counters` at each scrape.
pub(super) fn registry(
    state: Arc<State>,
    counters: Arc<Counters>,
    push: Option<PushFigures>,
) -> Registry {
    // The totals change once an interval: scrapes in between (several Prometheus servers,
    // a person with curl) reuse the figures.
    let cache: Mutex<Option<(u64, Exposition)>> = Default::default();
    MetricsCollector::new(move || {
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        let now = state.read().intervals;
        let mut figures = match &*cache {
            Some((made, figures)) if *made == now => figures.clone(),
            _ => {
                let figures = exposition(&state);
                *cache = Some((now, figures.clone()));
                figures
            }
        };
        // The server's counts change with every connection, the captures' as they are
        // written: read at each scrape.
        figures.http = counters.figures();
        figures.captures = state.capture_counts();
        figures.otlp = push.as_ref().map(PushFigures::read);
        figures
    })
    .into_registry()
}

/// One scrape's figures: each name's running total and the daemon's, made into reports.
fn exposition(state: &State) -> Exposition {
    // Copied under the lock, analysed outside it: an interval is never held up by a scrape.
    let (names, daemon, attached, full_tracing, full_tracing_ns) = {
        let h = state.read();
        let names: Vec<_> = h.named().map(|(n, v)| (n.clone(), v.total())).collect();
        let tracing = (h.full_tracing, h.full_tracing_ns);
        (
            names,
            h.daemon.total.clone(),
            h.attached,
            tracing.0,
            tracing.1,
        )
    };
    let opts = ReportOptions::default();
    Exposition {
        targets: names
            .into_iter()
            .map(|(n, rec)| (n, analysis::report(&rec, &opts)))
            .collect(),
        daemon: analysis::report(&daemon, &opts),
        attached,
        full_tracing,
        full_tracing_ns,
        http: Default::default(),
        captures: Vec::new(),
        otlp: None,
    }
}
