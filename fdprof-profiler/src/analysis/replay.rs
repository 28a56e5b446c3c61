//! `fdprof replay`: a trace of fd-table operations run through each allocator model
//! (`fdprof-replay`), side by side, with each model's cost against mainline's.

use std::borrow::Borrow;

use serde::Serialize;

use fdprof_recording::{Recording, budget, budget::Work, trace::order};
use fdprof_replay::synthetic::{self, Params, Pattern};
use fdprof_replay::{Limits, ModelKind, ModelResult, Ratios, TraceEvent, Version, model};

/// Which models to run: mainline as the trace's kernel runs it, one named version, Al Viro's
/// multi-level bitmap, `O_FD_FASTALLOC` over mainline, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelChoice {
    Mainline,
    Linear,
    Fb61,
    Fb613,
    Viro,
    Fastalloc,
    All,
}

/// Where the trace came from.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    /// `synthetic opensock`, …
    pub trace: String,
    pub fds: u32,
    pub ops: u64,
    pub threads: u32,
    pub events: u64,
    /// The kernel whose allocator "mainline" means, and that version's model.
    pub kernel: String,
    pub mainline: Version,
    /// What a recorded trace could not show (gaps, ambiguous allocations).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One model's figures, and its allocation cost over mainline's.
#[derive(Debug, Clone, Serialize)]
pub struct ModelRow {
    pub name: String,
    #[serde(flatten)]
    pub result: ModelResult,
    /// Absent for mainline itself, or when mainline was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_mainline: Option<Ratios>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub source: Source,
    pub models: Vec<ModelRow>,
}

/// The models `choice` names, mainline (the trace's kernel's version) first.
pub(crate) fn models(
    choice: ModelChoice,
    mainline: Version,
    seed: u64,
) -> Vec<(String, ModelKind)> {
    let version_name = |v: Version| match v {
        Version::Linear => "linear",
        Version::Fb61 => "fb61",
        Version::Fb613 => "fb613",
    };
    let main = (
        format!("mainline ({})", version_name(mainline)),
        ModelKind::Mainline(mainline),
    );
    let named = |v: Version| (version_name(v).to_string(), ModelKind::Mainline(v));
    let viro = ("viro".to_string(), ModelKind::Viro);
    let fast = (
        "fastalloc".to_string(),
        ModelKind::Fastalloc {
            base: mainline,
            seed,
        },
    );
    match choice {
        ModelChoice::Mainline => vec![main],
        ModelChoice::Linear => vec![main, named(Version::Linear)],
        ModelChoice::Fb61 => vec![main, named(Version::Fb61)],
        ModelChoice::Fb613 => vec![main, named(Version::Fb613)],
        ModelChoice::Viro => vec![main, viro],
        ModelChoice::Fastalloc => vec![main, fast],
        ModelChoice::All => {
            let mut all = vec![main];
            for v in [Version::Linear, Version::Fb61, Version::Fb613] {
                if v != mainline {
                    all.push(named(v));
                }
            }
            all.push(viro);
            all.push(fast);
            all
        }
    }
}

/// Limits high enough for a table of `fds` (the synthetic patterns go beyond this machine's).
pub(crate) fn limits_for(fds: u32) -> Limits {
    let need = (u64::from(fds) * 4).max(Limits::default().nr_open);
    let top = need.min(model::NR_OPEN_MAX);
    Limits {
        rlimit: top,
        nr_open: top,
    }
}

/// Runs the events `events()` gives through each model (each from the start); mainline (the
/// first) is the reference of the ratios. The models' work is added to `work`; past its bound
/// `Err` names the model it stopped in.
pub(crate) fn replay<E, I>(
    source: Source,
    events: impl Fn() -> I,
    models: &[(String, ModelKind)],
    limits: Limits,
    work: &mut Work,
) -> Result<ReplayReport, String>
where
    E: Borrow<TraceEvent>,
    I: Iterator<Item = E>,
{
    let mut results: Vec<(String, ModelResult)> = Vec::with_capacity(models.len());
    for (name, kind) in models {
        match fdprof_replay::replay_within(events(), *kind, limits, work.left()) {
            Ok((result, spent)) => {
                work.add(spent);
                results.push((name.clone(), result));
            }
            Err(spent) => {
                work.add(spent);
                return Err(format!("in the {name} model"));
            }
        }
    }
    let mainline = results
        .first()
        .filter(|(_, r)| r.model == ModelKind::Mainline(source.mainline))
        .map(|(_, r)| r.clone());
    let models = results
        .into_iter()
        .enumerate()
        .map(|(i, (name, result))| ModelRow {
            vs_mainline: mainline
                .as_ref()
                .filter(|_| i > 0)
                .map(|m| fdprof_replay::ratios(&result, m)),
            name,
            result,
        })
        .collect();
    Ok(ReplayReport { source, models })
}

/// A seed pattern generated without a kernel, replayed.
pub fn synthetic(
    pattern: Pattern,
    params: &Params,
    choice: ModelChoice,
    kernel: &str,
    mainline: Version,
) -> ReplayReport {
    let events = synthetic::generate(pattern, params);
    let source = Source {
        trace: format!("synthetic {}", pattern_name(pattern)),
        fds: params.fds,
        ops: params.ops,
        threads: params.threads,
        events: events.len() as u64,
        kernel: kernel.to_string(),
        mainline,
        notes: Vec::new(),
    };
    let models = models(choice, mainline, params.seed);
    // Its size is the flags' (--fds, --ops), bounded there.
    let mut work = Work::unbounded();
    replay(
        source,
        || events.iter(),
        &models,
        limits_for(params.fds),
        &mut work,
    )
    .expect("an unbounded replay")
}

/// A recording's fd trace (`record --trace`), replayed with "mainline" the allocator of the
/// recording's kernel; `Err` is one line saying why it cannot be.
pub fn recorded(
    rec: &Recording,
    name: &str,
    choice: ModelChoice,
    seed: u64,
) -> Result<ReplayReport, String> {
    let Some(trace) = &rec.trace else {
        return Err(format!("{name} has no fd trace: record with --trace"));
    };
    let mainline = Version::for_kernel(&rec.kernel_release).ok_or_else(|| {
        format!(
            "{name}: kernel release {:?} is not one a model exists for",
            rec.kernel_release
        )
    })?;
    let corrupt = |e| format!("{name}: corrupt fd trace: {e}");
    let rows = trace.rows().map_err(corrupt)?;
    // The rows show which tables they grow: checked before any is built.
    budget::check(rec, Some(&rows), name)?;
    // What ordering and modelling take is bounded by the trace's size.
    let mut work = Work::bound(trace);
    let ordered = order::order(trace, rows, &mut work).map_err(|e| match work.over() {
        true => work.refusal(name, "while ordering its rows"),
        false => corrupt(e),
    })?;
    // What the recorder said it could not see, then what this trace lacks.
    let mut notes = trace.notes.clone();
    if trace.lost > 0 {
        notes.push(format!(
            "the trace has gaps: {} operations lost (full ring buffer or unreadable): \
             mismatches after a gap are expected",
            trace.lost
        ));
    }
    if trace.over_limit > 0 {
        notes.push(format!(
            "the trace stops early: {} operations past --trace-limit {} were not kept",
            trace.over_limit, trace.limit
        ));
    }
    if ordered.ambiguous > 0 {
        notes.push(format!(
            "{} allocations overlapped another thread's operation on their table: their \
             syscalls' entries and exits cannot order them, so they are not counted as mismatches",
            ordered.ambiguous
        ));
    }
    if ordered.reordered > 0 || ordered.in_snapshot > 0 {
        notes.push(format!(
            "{} overlapping operations put in the only order their fds allow; {} already in \
             the table read at attach",
            ordered.reordered, ordered.in_snapshot
        ));
    }
    let source = Source {
        trace: format!("recording {name}"),
        fds: ordered.highest_fd.saturating_add(1),
        ops: trace.events,
        threads: ordered.threads as u32,
        events: ordered.len() as u64,
        kernel: rec.kernel_release.clone(),
        mainline,
        notes,
    };
    let models = models(choice, mainline, seed);
    // Tables beyond what a snapshot may hold are refused, not grown: a corrupt trace's fd
    // numbers must not size the models' bitmaps.
    let top = (u64::from(source.fds) * 4).clamp(
        Limits::default().nr_open,
        u64::from(order::MAX_SNAPSHOT_FDS),
    );
    let limits = Limits {
        rlimit: top,
        nr_open: top,
    };
    replay(source, || ordered.events(), &models, limits, &mut work)
        .map_err(|at| work.refusal(name, &at))
}

pub(crate) fn pattern_name(p: Pattern) -> &'static str {
    match p {
        Pattern::LinusLoop => "linus-loop",
        Pattern::Opensock => "opensock",
        Pattern::Holes => "holes",
        Pattern::Dup2Worst => "dup2-worst",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mainline_is_first_and_the_reference() {
        let p = Params {
            fds: 200,
            ops: 500,
            ..Params::default()
        };
        let r = synthetic(Pattern::Holes, &p, ModelChoice::All, "6.1.0", Version::Fb61);
        let names: Vec<&str> = r.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            ["mainline (fb61)", "linear", "fb613", "viro", "fastalloc"]
        );
        assert!(r.models[0].vs_mainline.is_none());
        assert!(r.models[1..].iter().all(|m| m.vs_mainline.is_some()));
        // holes: every op allocates twice (the hole, then the top).
        assert_eq!(r.models[0].result.allocations, 1000);
        assert_eq!(r.models[0].result.posix.unwrap().model_mismatch, 0);
        // The linear scan reads the whole table for the top fd: more words than fb61.
        assert!(r.models[1].vs_mainline.as_ref().unwrap().words.unwrap() > 1.0);
    }

    #[test]
    fn limits_cover_ten_million_fds() {
        let l = limits_for(10_000_000);
        assert!(l.rlimit > 10_000_000 && l.nr_open <= model::NR_OPEN_MAX);
    }
}
