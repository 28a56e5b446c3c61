//! What the HTTP handlers ([`super::http`], [`super::page`], [`super::profiles`]) share: the
//! state they read and how they answer a request they cannot serve.

use std::sync::Arc;

use axum::{http::StatusCode, response::Response};
use prometheus_client::registry::Registry;

use super::long_lived::LongLived;
use super::state::{Histories, State};

/// What every handler reads.
pub(crate) struct App {
    pub state: Arc<State>,
    pub registry: Registry,
    /// The slots of the long-lived requests.
    pub long_lived: LongLived,
    /// Requests for full tracing, to the main loop.
    pub asks: tokio::sync::mpsc::Sender<super::windows::Ask>,
}

/// A handler's answer: the response, or a status and its one-line reason.
pub(super) type Reply = Result<Response, (StatusCode, String)>;

/// Runs `work` on a blocking thread: figures made from many rows never hold up the runtime's
/// two threads, which answer `/healthz`, accept connections and feed the stream meanwhile.
/// The memory the figures took goes back to the kernel before the answer is sent.
pub(super) async fn blocking(work: impl FnOnce() -> Reply + Send + 'static) -> Reply {
    let work = move || {
        let reply = work();
        super::heap::give_back();
        reply
    };
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?
}

pub(super) fn bad(message: impl Into<String>) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, message.into() + "\n")
}

/// An offending value as a 400 quotes it: escaped and cut to [`QUOTED`] characters, so a
/// 10 KB parameter makes no 10 KB answer (nor log line).
pub(super) fn quoted(value: &str) -> String {
    match value.char_indices().nth(QUOTED) {
        Some((at, _)) => format!("{:?}… ({} bytes)", &value[..at], value.len()),
        None => format!("{value:?}"),
    }
}

/// Characters of an offending value a 400 quotes.
pub(super) const QUOTED: usize = 64;

/// 404 for a target name the daemon has no figures of, naming those it has (escaped).
pub(super) fn unknown_target(h: &Histories, name: &str) -> (StatusCode, String) {
    let names: Vec<String> = h
        .names
        .keys()
        .map(|n| fdprof_recording::escape::name(n).into_owned())
        .collect();
    (
        StatusCode::NOT_FOUND,
        format!(
            "no target named \"{}\" (targets: {})\n",
            fdprof_recording::escape::name(name),
            names.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_400_quotes_the_start_of_a_long_value_escaped() {
        assert_eq!(quoted("2.5"), "\"2.5\"");
        assert_eq!(quoted("\x1b[2J"), "\"\\u{1b}[2J\"");
        let long = quoted(&"é".repeat(10_000));
        assert!(
            long.starts_with(&format!("\"{}\"…", "é".repeat(QUOTED))),
            "{long}"
        );
        assert!(long.ends_with("(20000 bytes)"), "{long}");
    }
}
