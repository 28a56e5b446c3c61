//! `POST /api/v1/trace?seconds=N`: the one request that changes what the daemon does. It opens
//! (or lengthens) a window of full tracing of N seconds, as far as `--trace-max` allows; the
//! main loop answers it, as it answers SIGUSR1.

use std::sync::Arc;
use std::time::Duration;

use axum::{
    extract::{Query, State as Shared},
    http::{StatusCode, header},
    response::IntoResponse,
};
use serde::Deserialize;
use tokio::sync::oneshot;

use fdprof_profiler::live::unix_ms;

use super::app::{App, Reply, bad, quoted};
use super::windows::{Ask, Traced};

/// The longest window one request may ask for: an hour, the budget's own span.
const SECONDS_MAX: u64 = 3600;

#[derive(Debug, Deserialize)]
pub(super) struct Asked {
    seconds: Option<String>,
}

pub(super) async fn trace(Shared(app): Shared<Arc<App>>, Query(asked): Query<Asked>) -> Reply {
    let text = asked.seconds.as_deref().unwrap_or_default();
    let seconds = text
        .parse::<u64>()
        .ok()
        .filter(|s| (1..=SECONDS_MAX).contains(s))
        .ok_or_else(|| {
            bad(format!(
                "seconds must be a whole number from 1 to {SECONDS_MAX}, not {}",
                quoted(text)
            ))
        })?;
    let (answer, answered) = oneshot::channel();
    let ask = Ask {
        length: Duration::from_secs(seconds),
        answer,
    };
    let busy = || {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the daemon is answering other requests for full tracing, or stopping\n".to_string(),
        )
    };
    app.asks.try_send(ask).map_err(|_| busy())?;
    let traced = answered.await.map_err(|_| busy())?;
    let json = match traced {
        Traced::Always => serde_json::json!({ "full_tracing": true, "tier": "full" }),
        Traced::For(left) => serde_json::json!({
            "full_tracing": true,
            "tier": "rest",
            "seconds": left.as_secs_f64(),
            "until_unix_ms": unix_ms() + left.as_millis() as u64,
        }),
        Traced::Never => {
            return Err((
                StatusCode::CONFLICT,
                "the daemon runs with --lock-only: it has no fd syscall program to attach\n".into(),
            ));
        }
        Traced::Spent(spent) => {
            let after = spent.retry_after.as_secs().max(1);
            return Ok((
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, after.to_string())],
                format!("full tracing's budget for the hour (--trace-max) is spent: some is free again in {after} s\n"),
            )
                .into_response());
        }
    };
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        format!("{json:#}\n"),
    )
        .into_response())
}
