//! Requests that hold their connection for long: the SSE stream (as long as its client stays,
//! reading or not) and a pprof delta (`?seconds=N`, up to an hour). They have a bound of their
//! own, below `--max-connections` ([`bound`]), so that however many of them clients open, the
//! other connections stay free for `/healthz`, scrapes and reports (and an idle one is closed
//! to make room for those, [`super::server`]). One past the bound is answered `503` at once
//! with one line, and counted (`fdprof_http_requests_refused_total{reason="long_lived"}`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::server::Counters;

/// Long-lived requests at once, at most: a quarter of `max_connections`, at least one, and
/// never all of them (with `--max-connections 1`, none).
pub(crate) fn bound(max_connections: usize) -> usize {
    (max_connections / 4)
        .max(1)
        .min(max_connections.saturating_sub(1))
}

/// The long-lived requests being answered.
pub(crate) struct LongLived {
    permits: Arc<Semaphore>,
    max: usize,
    counters: Arc<Counters>,
}

/// Held while a long-lived request is answered (dropped with its answer's body).
pub(crate) type Slot = OwnedSemaphorePermit;

impl LongLived {
    pub(crate) fn new(max_connections: usize, counters: Arc<Counters>) -> Self {
        let max = bound(max_connections);
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            counters,
        }
    }

    /// A slot for one more long-lived request, or the `503` that refuses it.
    pub(crate) fn take(&self) -> Result<Slot, (StatusCode, String)> {
        self.permits.clone().try_acquire_owned().map_err(|_| {
            self.counters
                .refused_long_lived
                .fetch_add(1, Ordering::Relaxed);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{} long-lived requests (the stream, pprof's seconds=) are being answered, \
                     the most at once: try again later\n",
                    self.max
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_leaves_room_for_other_requests() {
        assert_eq!(bound(256), 64);
        assert_eq!(bound(4096), 1024);
        assert_eq!(bound(3), 1);
        assert_eq!(bound(2), 1);
        assert_eq!(bound(1), 0);
        let long = LongLived::new(8, Arc::default());
        let held: Vec<Slot> = (0..2).map(|_| long.take().unwrap()).collect();
        let (code, line) = long.take().unwrap_err();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(line.lines().count(), 1);
        assert_eq!(long.counters.refused_long_lived.load(Ordering::Relaxed), 1);
        drop(held);
        assert!(long.take().is_ok());
    }
}
