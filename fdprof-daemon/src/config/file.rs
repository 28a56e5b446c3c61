//! The config file (TOML): its keys over the command line's [`Defaults`], read at start and
//! again at each SIGHUP ([`Reload`]). Its errors are one line naming the file and the key,
//! never quoting a value.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use fdprof_common::cpu::{DEFAULT_FREQUENCY_HZ, MAX_FREQUENCY_HZ};
use fdprof_common::probes::Mode;
use fdprof_profiler::duration::{self, INTERVAL, Range, SLOW};
use fdprof_profiler::error::{EXIT_USAGE, fatal};
use fdprof_profiler::symbolize::DebugOptions;
use serde::Deserialize;

use super::defaults::Defaults;
use super::durations::{CAPTURE, TRACE_MAX, TRACE_ON};
use super::targets::Shown;
use super::{Capture, Targets, Tier, TraceOn, Tracing, Trigger, Watch};
use crate::files::{self, Access};

/// The largest config file read.
const CONFIG_MAX: u64 = 64 * 1024;

/// The config file and the command line it overrides: what SIGHUP reads again, on a thread of
/// its own. The daemon has none without `--config`.
#[derive(Debug, Clone)]
pub struct Reload {
    path: PathBuf,
    defaults: Defaults,
}

impl Reload {
    pub fn new(path: PathBuf, defaults: Defaults) -> Self {
        Self { path, defaults }
    }

    /// Reads the file (a regular file on disk that only root can change, never one that could
    /// block: see `files::read_text`); every error is one line naming the file.
    pub fn read(&self) -> Result<Watch> {
        read(&self.path, &self.defaults)
    }
}

/// A config file's fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    pid: Option<Vec<u32>>,
    comm: Option<Vec<String>>,
    cgroup: Option<Vec<PathBuf>>,
    all: Option<bool>,
    children: Option<bool>,
    interval: Option<String>,
    slow: Option<String>,
    latency: Option<bool>,
    cpu: Option<bool>,
    freq: Option<u64>,
    mode: Option<ModeName>,
    lock_only: Option<bool>,
    tier: Option<Tier>,
    trace_window: Option<String>,
    trace_max: Option<String>,
    trace_on: Option<String>,
    capture_on: Option<Vec<String>>,
    capture_dir: Option<PathBuf>,
    capture_window: Option<String>,
    capture_after: Option<String>,
    capture_every: Option<String>,
    capture_max: Option<usize>,
    debug_dir: Option<Vec<PathBuf>>,
    debuginfod: Option<String>,
    debuginfod_cache: Option<PathBuf>,
    debuginfod_cache_size: Option<String>,
}

/// The file's `mode`: the names `--mode` takes (the command line's `ModeArg`, which is clap's).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum ModeName {
    Auto,
    Fentry,
    Kprobe,
    Tracepoint,
}

impl ModeName {
    /// The mode forced on every function role; `None` lets each take the most direct one.
    fn forced(self) -> Option<Mode> {
        match self {
            ModeName::Auto => None,
            ModeName::Fentry => Some(Mode::Fentry),
            ModeName::Kprobe => Some(Mode::Kprobe),
            ModeName::Tracepoint => Some(Mode::Tracepoint),
        }
    }
}

fn read(path: &Path, defaults: &Defaults) -> Result<Watch> {
    let Defaults {
        interval,
        slow,
        forced,
        lock_only,
        latency,
        cpu_hz,
        call_graph,
        children,
        ..
    } = *defaults;
    let shown = path.display();
    let bad = |why: String| fatal(EXIT_USAGE, format!("bad config {shown}: {why}"));
    let text = files::read_text(path, Access::ReadableByAll, CONFIG_MAX).map_err(&bad)?;
    let file: File = toml::from_str(&text).map_err(|e| bad(toml_error(&text, &e)))?;
    let duration = |key, text: Option<String>, default, range| {
        file_duration(key, text.as_deref(), default, range).map_err(&bad)
    };
    let capture = file_capture(&file, &defaults.capture).map_err(&bad)?;
    let tracing = file_tracing(&file, &defaults.tracing).map_err(&bad)?;
    let debug = file_debug(&file, &defaults.debug).map_err(&bad)?;
    let interval = duration("interval", file.interval, interval, INTERVAL)?;
    let capture = capture.checked(interval).map_err(&bad)?;
    Ok(Watch {
        capture,
        targets: Targets::given(
            file.pid.as_deref().unwrap_or_default(),
            file.comm.as_deref().unwrap_or_default(),
            file.cgroup.as_deref().unwrap_or_default(),
            file.all.unwrap_or(false),
            Shown::Key,
        )
        .map_err(|e| bad(e.to_string()))?,
        interval,
        slow: duration("slow", file.slow, slow, SLOW)?,
        forced: file.mode.map_or(forced, ModeName::forced),
        lock_only: file.lock_only.unwrap_or(lock_only),
        tracing,
        latency: file.latency.unwrap_or(latency),
        children: file.children.unwrap_or(children),
        call_graph,
        cpu_hz: match file.cpu.unwrap_or(cpu_hz.is_some()) {
            false => None,
            true => {
                let hz = file.freq.or(cpu_hz).unwrap_or(DEFAULT_FREQUENCY_HZ);
                if !(1..=MAX_FREQUENCY_HZ).contains(&hz) {
                    return Err(bad(format!("freq is not 1 to {MAX_FREQUENCY_HZ}")));
                }
                Some(hz)
            }
        },
        debug,
    })
}

/// The file's debug keys over the command line's: `debug_dir` replaces `--debug-dir`.
fn file_debug(file: &File, defaults: &DebugOptions) -> Result<DebugOptions, String> {
    let cache_size = match &file.debuginfod_cache_size {
        None => defaults.cache_size,
        Some(text) => fdprof_profiler::size::parse(text)
            .map_err(|_| "debuginfod_cache_size is not a size such as 512M or 2G".to_string())?,
    };
    Ok(DebugOptions {
        dirs: file
            .debug_dir
            .clone()
            .unwrap_or_else(|| defaults.dirs.clone()),
        debuginfod: file
            .debuginfod
            .clone()
            .or_else(|| defaults.debuginfod.clone()),
        cache: file
            .debuginfod_cache
            .clone()
            .unwrap_or_else(|| defaults.cache.clone()),
        cache_size,
        wait: defaults.wait,
    })
}

/// A config file's duration `key` (`default` when absent); an error names the key and what it
/// must be, never the value.
fn file_duration(
    key: &str,
    text: Option<&str>,
    default: Duration,
    range: Range,
) -> Result<Duration, String> {
    text.map_or(Ok(default), |t| duration::parse_in(t, range))
        .map_err(|_| format!("{key} is not {}", duration::hint(range)))
}

/// A config file's tracing settings over the command line's (`default`); errors quote no
/// value.
fn file_tracing(file: &File, default: &Tracing) -> Result<Tracing, String> {
    let on = match file.trace_on.as_deref() {
        None => default.on,
        Some("off") => TraceOn::Off,
        text => TraceOn::Wait(file_duration("trace_on", text, Duration::ZERO, TRACE_ON)?),
    };
    Ok(Tracing {
        tier: file.tier.unwrap_or(default.tier),
        window: file_duration(
            "trace_window",
            file.trace_window.as_deref(),
            default.window,
            INTERVAL,
        )?,
        max: file_duration(
            "trace_max",
            file.trace_max.as_deref(),
            default.max,
            TRACE_MAX,
        )?,
        on,
    })
}

/// A config file's capture settings over the command line's (`default`), not yet checked
/// against the interval; errors quote no value.
fn file_capture(file: &File, default: &Capture) -> Result<Capture, String> {
    let mut capture = default.clone();
    if let Some(on) = &file.capture_on {
        capture.on = on
            .iter()
            .map(|t| Trigger::parse(t))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("capture_on names no rule (rules: {})", Trigger::names()))?;
    }
    if let Some(dir) = &file.capture_dir {
        capture.dir = dir.clone();
    }
    let duration = |key, text: &Option<String>, default| match text.as_deref() {
        Some("0") => Ok(Duration::ZERO),
        text => file_duration(key, text, default, CAPTURE),
    };
    capture.window = duration("capture_window", &file.capture_window, capture.window)?;
    capture.after = duration("capture_after", &file.capture_after, capture.after)?;
    capture.every = duration("capture_every", &file.capture_every, capture.every)?;
    if let Some(max) = file.capture_max {
        if !(1..=Capture::MAX_LIMIT).contains(&max) {
            return Err(format!("capture_max is not 1 to {}", Capture::MAX_LIMIT));
        }
        capture.max = max;
    }
    Ok(capture)
}

/// A TOML or type error of a config file as one line naming the line and key, never the value
/// (serde's messages quote it: ``unknown variant `…` ``, ``invalid type: string "…"``): the
/// message keeps only what was expected.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let at = e.span().and_then(|span| {
        let before = text.get(..span.start)?;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line_text = text[line_start..].lines().next().unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let key = line_text
            .split_once('=')
            .map(|(k, _)| k.trim())
            .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        Some(match key {
            Some(key) => format!("line {line}, key {key}: "),
            None => format!("line {line}: "),
        })
    });
    let message = e.message().lines().next().unwrap_or("").trim();
    // serde's messages about a value describe it before ", expected …"; the parser's own
    // (`key with no value, expected `=``) and `unknown field `x`` quote no value.
    const ABOUT_A_VALUE: [&str; 4] = [
        "invalid type",
        "invalid value",
        "unknown variant",
        "invalid length",
    ];
    let said = match message.split_once(", expected ") {
        Some((about, expected)) if ABOUT_A_VALUE.iter().any(|p| about.starts_with(p)) => {
            format!("a value it does not take: expected {expected}")
        }
        _ if ABOUT_A_VALUE.iter().any(|p| message.starts_with(p)) => {
            "a value it does not take".to_string()
        }
        _ => message.to_string(),
    };
    format!("{}{said}", at.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mode` takes `--mode`'s names, to the same modes.
    #[test]
    fn mode_names() {
        let mode = |text: &str| {
            toml::from_str::<File>(&format!("mode = {text:?}"))
                .map(|f| f.mode.and_then(ModeName::forced))
        };
        assert_eq!(mode("auto").unwrap(), None);
        assert_eq!(mode("fentry").unwrap(), Some(Mode::Fentry));
        assert_eq!(mode("kprobe").unwrap(), Some(Mode::Kprobe));
        assert_eq!(mode("tracepoint").unwrap(), Some(Mode::Tracepoint));
        let text = "mode = \"uprobe\"";
        let e = toml::from_str::<File>(text).unwrap_err();
        assert_eq!(
            toml_error(text, &e),
            "line 1, key mode: a value it does not take: expected one of `auto`, `fentry`, \
             `kprobe`, `tracepoint`"
        );
    }

    #[test]
    fn errors_quote_no_value() {
        let text = "all = true\ninterval = 5\n";
        let e = toml::from_str::<File>(text).unwrap_err();
        let said = toml_error(text, &e);
        assert!(
            said.starts_with("line 2, key interval: a value it does not take"),
            "{said}"
        );
        assert!(!said.contains('5'), "{said}");
        assert_eq!(
            file_duration("slow", Some("1h"), Duration::ZERO, SLOW).unwrap_err(),
            format!("slow is not {}", duration::hint(SLOW))
        );
    }
}
