//! The daemon's log: one line per event on standard error, `2026-12-01T10:00:00.123Z LEVEL
//! message`. Lines are escaped whole: they carry comm names, which any process may choose.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static VERBOSE: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// `-v`: debug lines too.
pub fn set_verbose(on: bool) {
    VERBOSE.store(on, Ordering::Relaxed);
}

pub(crate) fn log(level: Level, message: &str) {
    if level == Level::Debug && !VERBOSE.load(Ordering::Relaxed) {
        return;
    }
    let line = format!(
        "{} {:<5} {message}",
        timestamp(SystemTime::now()),
        level.as_str()
    );
    eprintln!("{}", fdprof_recording::escape::name(&line));
}

pub(crate) fn debug(message: &str) {
    log(Level::Debug, message);
}
pub(crate) fn info(message: &str) {
    log(Level::Info, message);
}
pub fn warn(message: &str) {
    log(Level::Warn, message);
}
pub(crate) fn error(message: &str) {
    log(Level::Error, message);
}

/// RFC 3339 in UTC with milliseconds.
fn timestamp(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = fdprof_profiler::render::human::civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let at = |s: u64, ms: u64| UNIX_EPOCH + Duration::from_millis(s * 1000 + ms);
        assert_eq!(timestamp(at(0, 0)), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year), and a date past 2038.
        assert_eq!(timestamp(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(
            timestamp(at(4_102_444_799, 999)),
            "2099-12-31T23:59:59.999Z"
        );
        assert_eq!(
            timestamp(at(1_796_086_401, 103)),
            "2026-12-01T00:53:21.103Z"
        );
    }
}
