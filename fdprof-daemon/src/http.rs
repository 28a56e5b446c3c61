//! The daemon's HTTP endpoints, all read-only (GET) but one: `POST /api/v1/trace` opens a
//! window of full tracing, bounded by `--trace-max`; no request can attach to another process
//! or change the targets. Each is a sink on the same figures: the histories'
//! recordings, turned into figures by `analysis` and formatted by `render`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::{
    Router,
    extract::{Query, State as Shared},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use fdprof_recording::Recording;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use tokio::sync::broadcast::{self, error::RecvError};

use fdprof_profiler::analysis::{
    self, FlamegraphOptions, LockFilter, OpFilter, ReportOptions, TimeRange,
};
use fdprof_profiler::model::process;
use fdprof_profiler::render::{self, metrics};

use super::access;
use super::app::{App, Reply, bad, blocking, quoted, unknown_target};
use super::long_lived::Slot;
use super::named::NameView;
use super::state::{State, Streamed};
use super::{log, page, profiles, span, trace_request};

/// The endpoints behind the access check ([`super::access`]), every request logged with `-v`.
pub(crate) fn router(app: Arc<App>, policy: Arc<access::Policy>) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/static/page.css", get(page::css))
        .route("/static/page.js", get(page::script))
        .route("/api/v1/targets", get(page::targets))
        .route("/healthz", get(healthz))
        .route("/metrics", get(scrape))
        .route("/report.json", get(report))
        .route("/flamegraph.svg", get(flamegraph))
        .route("/api/v1/stream", get(stream))
        .route("/api/v1/timeline", get(timeline))
        .route("/api/v1/compare", get(compare))
        .route("/api/v1/trace", post(trace_request::trace))
        .route("/captures", get(captures))
        .route("/captures/{name}", get(capture))
        .route("/debug/pprof/", get(profiles::index))
        .route("/debug/pprof/mutex", get(profiles::mutex))
        .route("/debug/pprof/profile", get(profiles::cpu))
        .with_state(app)
        .layer(axum::middleware::from_fn_with_state(
            policy.clone(),
            access::check,
        ))
        .layer(axum::middleware::from_fn_with_state(policy, logged))
}

/// `--health-listen`: `/healthz` alone, for probes that send no credential and no certificate.
pub(crate) fn health_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(app)
}

/// `-v`: one line per request, with its status and time (the token hidden: see
/// [`access::Policy::shown`]).
async fn logged(
    Shared(policy): Shared<Arc<access::Policy>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let uri = policy.shown(request.uri());
    let began = std::time::Instant::now();
    let mut response = next.run(request).await;
    // What the page links to, or a pprof URL holding `?token=`, never goes on to another site.
    response.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The web config's `http_server_config.headers`, on every answer.
    for (name, value) in policy.web_headers() {
        response.headers_mut().insert(name, value);
    }
    log::debug(&format!(
        "{method} {uri} {} in {:?}",
        response.status().as_u16(),
        began.elapsed()
    ));
    response
}

/// `ok`, or 503 with one line when the collector has stopped ending intervals.
async fn healthz(Shared(app): Shared<Arc<App>>) -> Reply {
    match app.state.health.check(std::time::Instant::now()) {
        Ok(()) => Ok((StatusCode::OK, "ok\n".to_string()).into_response()),
        Err(why) => Err((StatusCode::SERVICE_UNAVAILABLE, why + "\n")),
    }
}

/// OpenMetrics when the scraper accepts it (Prometheus asks for it first), else the text
/// format 0.0.4.
async fn scrape(Shared(app): Shared<Arc<App>>, headers: HeaderMap) -> Reply {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    blocking(move || {
        let mut body = String::new();
        let (encoded, content_type) = match openmetrics {
            true => (
                prometheus_client::encoding::text::encode(&mut body, &app.registry),
                metrics::OPENMETRICS_CONTENT_TYPE,
            ),
            false => (
                prometheus_client::encoding::prometheus_text::encode(&mut body, &app.registry),
                metrics::TEXT_CONTENT_TYPE,
            ),
        };
        encoded.map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?;
        Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
    })
    .await
}

/// The window a request asks for.
#[derive(Debug, Clone, Deserialize)]
struct Window {
    /// The last this many seconds (default: every interval kept).
    seconds: Option<String>,
    /// A range instead, Unix time in ms: every kept interval that overlaps it.
    from: Option<String>,
    to: Option<String>,
    /// The range to compare with (`/flamegraph.svg`: a differential one; `/api/v1/compare`).
    base_from: Option<String>,
    base_to: Option<String>,
    /// One target name (default: every target together).
    target: Option<String>,
    /// Only the processes of one container: its id or a prefix of 12 digits or more.
    container: Option<String>,
    op: Option<String>,
    lock: Option<String>,
    /// `1` or `true`: the on-CPU samples (`--cpu`) instead of the lock waits.
    cpu: Option<String>,
    /// `/report.json`: how many stacks (of the waits, and of the on-CPU samples), 1 to
    /// [`TOP_MAX`]; 10 without.
    top: Option<String>,
    // `token=`, the credential, is checked before any handler ([`super::access`]) and is
    // ignored here as every unknown parameter is.
}

impl Window {
    /// The same request over the base range, where one is asked for.
    fn base(&self) -> Option<Window> {
        (self.base_from.is_some() || self.base_to.is_some()).then(|| Window {
            seconds: None,
            from: self.base_from.clone(),
            to: self.base_to.clone(),
            base_from: None,
            base_to: None,
            ..self.clone()
        })
    }

    /// The range asked for and the time its intervals cover.
    fn range(&self, rec: &Recording) -> TimeRange {
        let ms = |v: &Option<String>| v.as_deref().and_then(|v| v.parse().ok());
        let start = rec.started_unix_ms;
        TimeRange {
            from_unix_ms: ms(&self.from).unwrap_or(start),
            to_unix_ms: ms(&self.to).unwrap_or(start + rec.duration_ns / 1_000_000),
            duration_ns: rec.duration_ns,
        }
    }

    /// The recording of the window, or why there is none.
    fn recording(&self, state: &State) -> Result<Recording, (StatusCode, String)> {
        let h = state.read();
        let span = span::parse(
            self.seconds.as_deref(),
            self.from.as_deref(),
            self.to.as_deref(),
            h.daemon.kept_seconds(),
        )?;
        let history = match &self.target {
            None => NameView::daemon(&h.daemon),
            Some(name) => h.name(name).ok_or_else(|| unknown_target(&h, name))?,
        };
        let rec = history.span(span).map_err(|e| span::refused(span, e))?;
        let Some(arg) = &self.container else {
            return Ok(rec);
        };
        let prefix = process::container_prefix(arg).map_err(|e| bad(format!("container: {e}")))?;
        let narrowed = process::only(&rec, |p| process::in_container(p, &prefix));
        if narrowed.processes.is_empty() {
            return Err((
                StatusCode::NOT_FOUND,
                format!("no process of container {prefix} in this window\n"),
            ));
        }
        Ok(narrowed)
    }
}

/// The most stacks `/report.json?top=N` lists.
const TOP_MAX: usize = 1000;

async fn report(Shared(app): Shared<Arc<App>>, Query(window): Query<Window>) -> Reply {
    blocking(move || {
        let mut opts = ReportOptions::default();
        if let Some(top) = &window.top {
            opts.top = top
                .parse()
                .ok()
                .filter(|n| (1..=TOP_MAX).contains(n))
                .ok_or_else(|| bad(format!("top is 1 to {TOP_MAX}, not {}", quoted(top))))?;
        }
        let rec = window.recording(&app.state)?;
        let report = analysis::report(&rec, &opts);
        let json = serde_json::to_string_pretty(&report)
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?;
        Ok(([(header::CONTENT_TYPE, "application/json")], json + "\n").into_response())
    })
    .await
}

/// Which history a timeline is of.
#[derive(Debug, Deserialize)]
struct TimelineQuery {
    /// One target name (default: every target together).
    target: Option<String>,
}

/// Every kept interval of a target (or of every target) as a point in time, oldest first:
/// what the page's timeline draws, and the `from`/`to` a selection of it asks for.
async fn timeline(Shared(app): Shared<Arc<App>>, Query(q): Query<TimelineQuery>) -> Reply {
    blocking(move || {
        let h = app.state.read();
        let history = match &q.target {
            None => NameView::daemon(&h.daemon),
            Some(name) => h.name(name).ok_or_else(|| unknown_target(&h, name))?,
        };
        let timeline = analysis::timeline(q.target.as_deref(), history.points());
        let json = serde_json::to_string(&timeline)
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?;
        Ok(([(header::CONTENT_TYPE, "application/json")], json + "\n").into_response())
    })
    .await
}

/// Two ranges side by side (`base_from`, `base_to` against `from`, `to`): what changed most.
async fn compare(Shared(app): Shared<Arc<App>>, Query(window): Query<Window>) -> Reply {
    blocking(move || {
        let (Some(base), Some(_), Some(_)) = (window.base(), &window.from, &window.to) else {
            return Err(bad(
                "compare takes from, to, base_from and base_to (Unix times in milliseconds)",
            ));
        };
        let (old, new) = (base.recording(&app.state)?, window.recording(&app.state)?);
        let opts = ReportOptions::default();
        let comparison = analysis::compare(
            &analysis::report(&old, &opts),
            &analysis::report(&new, &opts),
            (base.range(&old), window.range(&new)),
        );
        let json = serde_json::to_string_pretty(&comparison)
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?;
        Ok(([(header::CONTENT_TYPE, "application/json")], json + "\n").into_response())
    })
    .await
}

async fn flamegraph(Shared(app): Shared<Arc<App>>, Query(window): Query<Window>) -> Reply {
    blocking(move || flamegraph_svg(&app, &window)).await
}

fn flamegraph_svg(app: &App, window: &Window) -> Reply {
    let op = match window.op.as_deref() {
        None | Some("all") => OpFilter::All,
        Some("alloc") => OpFilter::Alloc,
        Some("close") => OpFilter::Close,
        Some(other) => {
            return Err(bad(format!(
                "op is alloc, close or all, not {}",
                quoted(other)
            )));
        }
    };
    let lock = match window.lock.as_deref() {
        None | Some("file_lock") => LockFilter::FileLock,
        Some("all") => LockFilter::All,
        Some(other) => {
            return Err(bad(format!(
                "lock is file_lock or all, not {}",
                quoted(other)
            )));
        }
    };
    let opts = FlamegraphOptions {
        op,
        lock,
        offsets: false,
    };
    let graph = folded(&window.recording(&app.state)?, window, &opts)?;
    let drawn = match window.base() {
        // Against the base range: red where the range waited more, blue where less.
        Some(base) => {
            let old = folded(&base.recording(&app.state)?, window, &opts)?;
            render::flamegraph::diff_svg(&graph, &old)
        }
        None => render::svg(&graph),
    };
    let svg = drawn.map_err(|e| {
        (
            StatusCode::NOT_FOUND,
            format!("{}\n", fdprof_recording::escape::name(&e.to_string())),
        )
    })?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response())
}

/// The stacks of `rec` `window` asks for: the waits, or with `cpu=1` the on-CPU samples.
fn folded(
    rec: &Recording,
    window: &Window,
    opts: &FlamegraphOptions,
) -> Result<analysis::Folded, (StatusCode, String)> {
    match window.cpu.as_deref() {
        None | Some("0" | "false") => Ok(analysis::folded(rec, opts)),
        Some("1" | "true") => analysis::folded_cpu(rec, opts).ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                "no on-CPU samples in this window (the daemon samples with --cpu)\n".to_string(),
            )
        }),
        Some(other) => Err(bad(format!("cpu is 1 or 0, not {}", quoted(other)))),
    }
}

/// The captures in `--capture-dir` (the daemon's, by their names), oldest first, as JSON.
async fn captures(Shared(app): Shared<Arc<App>>) -> Reply {
    let dir = capture_dir(&app)?;
    let shown = dir.display().to_string();
    let listed = tokio::task::spawn_blocking(move || super::capture_dir::list(&dir))
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?
        .map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot list the captures: {e}\n"),
            )
        })?;
    let json = serde_json::json!({ "dir": shown, "captures": listed });
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        format!("{json:#}\n"),
    )
        .into_response())
}

/// One capture, a recording `fdprof report` reads.
async fn capture(
    Shared(app): Shared<Arc<App>>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Reply {
    let dir = capture_dir(&app)?;
    let asked = name.clone();
    let data = tokio::task::spawn_blocking(move || super::capture_dir::read(&dir, &asked))
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?
        .map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read the capture: {e}\n"),
            )
        })?
        .ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!(
                    "no capture named \"{}\"\n",
                    fdprof_recording::escape::name(&name)
                ),
            )
        })?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        data,
    )
        .into_response())
}

fn capture_dir(app: &App) -> Result<std::path::PathBuf, (StatusCode, String)> {
    app.state.capture_dir().ok_or_else(|| {
        (
            StatusCode::NOT_FOUND,
            "this daemon makes no captures (--capture-on, --capture-dir)\n".to_string(),
        )
    })
}

/// One SSE event per interval (`interval`), the interval's figures as `top --jsonl` prints
/// them, and one per capture written (`capture`); a reader too slow for [`super::state`]'s
/// buffer skips ahead. A long-lived request: it holds one of their slots while it lasts.
async fn stream(Shared(app): Shared<Arc<App>>) -> Reply {
    let slot = app.long_lived.take()?;
    Ok(Sse::new(events(app.state.subscribe(), slot))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// The stream's events, as they come; `slot` goes with the stream.
fn events(
    receiver: broadcast::Receiver<Streamed>,
    slot: Slot,
) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold((receiver, slot), |(mut receiver, slot)| async move {
        loop {
            match receiver.recv().await {
                Ok(streamed) => {
                    let event = match streamed {
                        Streamed::Interval(json) => Event::default().event("interval").data(&*json),
                        Streamed::Capture(json) => Event::default().event("capture").data(&*json),
                    };
                    return Some((Ok(event), (receiver, slot)));
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    })
}
