//! The durations only the daemon takes, on its command line and in its config file: the
//! ranges beside the shared ones of `fdprof_profiler::duration`, and their flags' parsers.

use std::time::Duration;

use fdprof_profiler::duration::{Range, parse_in};

use super::TraceOn;

/// `daemon --capture-window`, `--capture-after`, `--capture-every`: `0` (none) to a day.
pub(super) const CAPTURE: Range = Range {
    min: Duration::from_millis(1),
    max: Duration::from_secs(24 * 3600),
};

/// `daemon --trace-max`: full tracing per hour, from a second to all of it.
pub(super) const TRACE_MAX: Range = Range {
    min: Duration::from_secs(1),
    max: Duration::from_secs(3600),
};

/// `daemon --trace-on`: a `file_lock` wait per second, from 1 µs to all of it.
pub(super) const TRACE_ON: Range = Range {
    min: Duration::from_micros(1),
    max: Duration::from_secs(1),
};

/// `daemon --otlp-timeout`: one request to the receiver, from a millisecond to 10 minutes.
pub(super) const OTLP_TIMEOUT: Range = Range {
    min: Duration::from_millis(1),
    max: Duration::from_secs(600),
};

/// The parser for `daemon --otlp-timeout`.
pub fn parse_otlp_timeout(text: &str) -> Result<Duration, String> {
    parse_in(text, OTLP_TIMEOUT)
}

/// The parser for `daemon --trace-max`.
pub fn parse_trace_max(text: &str) -> Result<Duration, String> {
    parse_in(text, TRACE_MAX)
}

/// The parser for `daemon --trace-on`; `off` is none.
pub fn parse_trace_on(text: &str) -> Result<TraceOn, String> {
    match text.trim() {
        "off" => Ok(TraceOn::Off),
        _ => parse_in(text, TRACE_ON).map(TraceOn::Wait),
    }
}

/// The parser for the daemon's capture durations; `0` is none.
pub fn parse_capture(text: &str) -> Result<Duration, String> {
    match text.trim() {
        "0" => Ok(Duration::ZERO),
        _ => parse_in(text, CAPTURE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_ranges() {
        assert_eq!(parse_capture(" 0 "), Ok(Duration::ZERO));
        assert_eq!(parse_capture("1d").map_err(|_| ()), Err(()));
        assert_eq!(parse_capture("24h"), Ok(Duration::from_secs(24 * 3600)));
        assert!(parse_capture("25h").unwrap_err().contains("(1 days)"));
        assert_eq!(parse_trace_on("off"), Ok(TraceOn::Off));
        assert_eq!(
            parse_trace_on("1ms"),
            Ok(TraceOn::Wait(Duration::from_millis(1)))
        );
        assert!(parse_trace_on("2s").is_err());
        assert!(parse_trace_max("500ms").is_err());
        assert_eq!(parse_trace_max("1h"), Ok(Duration::from_secs(3600)));
    }
}
