//! The daemon's profiles in Go's `net/http/pprof` convention, so that `go tool pprof`, Parca's
//! scrape configs and Grafana Alloy's `pyroscope.scrape` read them at the paths they expect:
//! `/debug/pprof/mutex` (the kernel lock waits, as Go's mutex profile: `contentions/count` and
//! `delay/nanoseconds`) and `/debug/pprof/profile` (the on-CPU samples of `--cpu`), each a
//! gzipped pprof protobuf; `/debug/pprof/` lists them.
//!
//! `?seconds=N`, as in Go, is a delta: the request waits N seconds and answers with the
//! intervals that ended within the last N (within N plus one interval). Without it, everything
//! kept. Each wait is labelled with its target's name (`target`), its `lock`, `operation` and,
//! where known, `container` and `pod_uid`.

use std::sync::Arc;
use std::time::Duration;

use axum::{
    extract::{Query, State as Shared},
    http::{StatusCode, header},
    response::{Html, IntoResponse},
};
use fdprof_recording::Recording;
use serde::Deserialize;

use super::app::{App, Reply, bad, blocking, quoted, unknown_target};
use super::history::Span;
use super::span;
use fdprof_profiler::analysis::{self, LockFilter, OpFilter, ProfileKind, ProfileOptions};
use fdprof_profiler::model::merge::{self, STACK_BOUND_PROBE, STACK_BOUND_REASON};
use fdprof_profiler::model::process;
use fdprof_profiler::render;

/// The longest `seconds` a request may wait for (Go's own bound for a CPU profile is the
/// server's write timeout; this one is an hour).
pub(super) const MAX_SECONDS: u64 = 3600;

/// What a profile request asks for.
#[derive(Debug, Deserialize)]
pub(super) struct ProfileQuery {
    seconds: Option<String>,
    /// A range of the kept intervals instead, Unix time in ms (no waiting).
    from: Option<String>,
    to: Option<String>,
    /// One target name (default: every target, each wait labelled with its own).
    target: Option<String>,
    /// `file_lock` or `all` (the mutex profile; default all).
    lock: Option<String>,
    /// One container: its id or a prefix of 12 digits or more.
    container: Option<String>,
}

pub(super) async fn index() -> Html<&'static str> {
    Html(concat!(
        "<!DOCTYPE html><html><head><title>/debug/pprof/</title></head><body>\n",
        "<p>fdprof daemon: profiles in Go's net/http/pprof convention (gzipped pprof).</p>\n",
        "<ul>\n",
        "<li><a href=\"mutex\">mutex</a>: kernel lock waits (contentions/count, ",
        "delay/nanoseconds); ?seconds=N for the next N seconds, ?lock=file_lock, ?target=NAME, ",
        "?container=ID</li>\n",
        "<li><a href=\"profile\">profile</a>: on-CPU samples (daemon --cpu); ?seconds=N</li>\n",
        "</ul>\n</body></html>\n"
    ))
}

pub(super) async fn mutex(Shared(app): Shared<Arc<App>>, Query(q): Query<ProfileQuery>) -> Reply {
    let lock = match q.lock.as_deref() {
        None | Some("all") => LockFilter::All,
        Some("file_lock") => LockFilter::FileLock,
        Some(other) => {
            return Err(bad(format!(
                "lock is file_lock or all, not {}",
                quoted(other)
            )));
        }
    };
    let opts = ProfileOptions {
        kind: ProfileKind::Contention,
        op: OpFilter::All,
        lock,
        raw_addrs: false,
        per_process: false,
    };
    answer(app, q, opts, "mutex").await
}

pub(super) async fn cpu(Shared(app): Shared<Arc<App>>, Query(q): Query<ProfileQuery>) -> Reply {
    let opts = ProfileOptions {
        kind: ProfileKind::Cpu,
        op: OpFilter::All,
        lock: LockFilter::All,
        raw_addrs: false,
        per_process: false,
    };
    answer(app, q, opts, "profile").await
}

/// The profile `q` asks for; with `seconds`, a long-lived request, which holds one of their
/// slots while it waits.
async fn answer(app: Arc<App>, q: ProfileQuery, opts: ProfileOptions, name: &'static str) -> Reply {
    let seconds = match &q.seconds {
        None => None,
        Some(s) => Some(
            s.parse::<u64>()
                .ok()
                .filter(|n| (1..=MAX_SECONDS).contains(n))
                .ok_or_else(|| bad(format!("seconds is 1 to {MAX_SECONDS}, not {}", quoted(s))))?,
        ),
    };
    let container = q
        .container
        .as_deref()
        .map(process::container_prefix)
        .transpose()
        .map_err(|e| bad(format!("container: {e}")))?;
    if seconds.is_some() && (q.from.is_some() || q.to.is_some()) {
        return Err(bad("give seconds, or from and to, not both"));
    }
    // What cannot be answered is said before any wait or work.
    {
        let h = app.state.read();
        if let Some(t) = q.target.as_deref()
            && !h.names.contains_key(t)
        {
            return Err(unknown_target(&h, t));
        }
        // A daemon that samples has a profile from its first interval on, samples or not.
        let sampled = h.daemon.kept_seconds() == 0 || h.daemon.total.cpu.is_some();
        if opts.kind == ProfileKind::Cpu && !sampled {
            return Err(no_samples());
        }
    }
    if let Some(n) = seconds {
        let _slot = app.long_lived.take()?;
        tokio::time::sleep(Duration::from_secs(n)).await;
    }
    blocking(move || profile(&app, &q, container.as_deref(), seconds, &opts, name)).await
}

/// The profile of the window `seconds` long (all kept without), as a gzipped pprof file.
fn profile(
    app: &App,
    q: &ProfileQuery,
    container: Option<&str>,
    seconds: Option<u64>,
    opts: &ProfileOptions,
    name: &str,
) -> Reply {
    let Windows { facts, targets } = windows(app, q, seconds)?;
    let narrowed: Vec<(String, Recording)> = targets
        .into_iter()
        .map(|(name, rec)| match container {
            None => (name, rec),
            Some(c) => (name, process::only(&rec, |p| process::in_container(p, c))),
        })
        .collect();
    let parts: Vec<(Option<&str>, &Recording)> = narrowed
        .iter()
        .map(|(name, rec)| (Some(name.as_str()), rec))
        .collect();
    let profile = analysis::targets_profile(&facts, &parts, opts).map_err(|_| no_samples())?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        render::pprof(&profile),
    )
        .into_response())
}

fn no_samples() -> (StatusCode, String) {
    (
        StatusCode::NOT_FOUND,
        "no on-CPU samples in this window (the daemon samples with --cpu)\n".to_string(),
    )
}

/// A window of the daemon's figures: the daemon's own (its facts), and each target's.
struct Windows {
    facts: Recording,
    targets: Vec<(String, Recording)>,
}

/// The daemon's window and each target's within it: `seconds` long, else `q`'s range, or all
/// kept.
fn windows(
    app: &App,
    q: &ProfileQuery,
    seconds: Option<u64>,
) -> Result<Windows, (StatusCode, String)> {
    let h = app.state.read();
    let target = q.target.as_deref();
    if let Some(t) = target
        && !h.names.contains_key(t)
    {
        return Err(unknown_target(&h, t));
    }
    let span = match seconds {
        Some(seconds) => Span::Last { seconds },
        None => span::parse(
            None,
            q.from.as_deref(),
            q.to.as_deref(),
            h.daemon.kept_seconds(),
        )?,
    };
    // The daemon's facts without its rows (each name's window has its own), and the waits
    // whose stacks the names' windows folded away, which the profile is made of.
    let mut facts = h
        .daemon
        .span_facts(span)
        .map_err(|e| span::refused(span, e))?;
    let mut targets = Vec::new();
    for (name, history) in h.named() {
        if target.is_some_and(|t| t != name) {
            continue;
        }
        if let Ok((rec, folded)) = history.span_folding(span) {
            if folded > 0 {
                merge::add_drop(
                    &mut facts.drops,
                    STACK_BOUND_PROBE,
                    STACK_BOUND_REASON,
                    folded,
                );
            }
            targets.push((name.clone(), rec));
        }
    }
    Ok(Windows { facts, targets })
}
