//! Duration arguments: `5s`, `500ms`, `100us`, `1m`, `1.5s`, `2h`; a bare number is seconds.
//!
//! Each option states the range it accepts, and a value outside it is refused with a clear
//! message (clap exits 2), never clamped: `-d` takes 1 ms to 365 days. The ranges only the
//! daemon takes are its config's (`fdprof_daemon::config::durations`).

use std::time::Duration;

/// The range a duration option accepts.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub min: Duration,
    pub max: Duration,
}

/// `-d` of `record` and `workload`: below 1 ms nothing can be measured; past a year is a typo,
/// and far past it would overflow the clock arithmetic.
pub const RUN_LENGTH: Range = Range {
    min: Duration::from_millis(1),
    max: Duration::from_secs(365 * 24 * 3600),
};

/// `top --interval`: shorter than 10 ms the snapshots themselves would be the load; longer than
/// an hour is not live.
pub const INTERVAL: Range = Range {
    min: Duration::from_millis(10),
    max: Duration::from_secs(3600),
};

/// `top --slow`: a wait threshold, from the shortest wait worth a record of its own to far past
/// any sane one.
pub const SLOW: Range = Range {
    min: Duration::from_micros(1),
    max: Duration::from_secs(10),
};

/// `record --debuginfod-wait`: how long a recording's end waits for debug files being fetched.
pub const NAMES_WAIT: Range = Range {
    min: Duration::from_millis(1),
    max: Duration::from_secs(600),
};

/// Parses a duration such as `5s`, `500ms`, `1m` and checks it against `range`.
pub fn parse_in(text: &str, range: Range) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 5s, 500ms, 1m)"))?;
    let seconds = match unit.trim() {
        "" | "s" | "sec" => value,
        "ms" => value / 1e3,
        "us" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}` (use ns, us, ms, s, m or h)"
            ));
        }
    };
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(format!("`{text}`: the duration must be positive"));
    }
    if seconds > range.max.as_secs_f64() {
        return Err(format!(
            "`{text}` is longer than the longest accepted here ({})",
            shown(range.max)
        ));
    }
    let d = Duration::from_secs_f64(seconds);
    if d < range.min {
        return Err(format!(
            "`{text}` is shorter than the shortest accepted here ({})",
            shown(range.min)
        ));
    }
    Ok(d)
}

/// What a duration of `range` must be, without the value given (a config file's errors never
/// quote its values): `a duration from 10 ms to 1 h (e.g. 5s, 500ms, 1m)`.
pub fn hint(range: Range) -> String {
    format!(
        "a duration from {} to {} (e.g. 5s, 500ms, 1m)",
        shown(range.min),
        shown(range.max)
    )
}

/// A bound as the user would write it: whole days as days, else ns to s.
fn shown(d: Duration) -> String {
    const DAY: u64 = 24 * 3600;
    if d.as_secs() >= DAY && d.as_secs().is_multiple_of(DAY) && d.subsec_nanos() == 0 {
        format!("{} days", d.as_secs() / DAY)
    } else {
        crate::render::human::duration(d.as_nanos() as u64)
    }
}

/// The parser for `-d` (clap `value_parser`).
pub fn parse_run_length(text: &str) -> Result<Duration, String> {
    parse_in(text, RUN_LENGTH)
}

/// The parser for `top --interval`.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    parse_in(text, INTERVAL)
}

/// The parser for `record --debuginfod-wait`.
pub fn parse_names_wait(text: &str) -> Result<Duration, String> {
    parse_in(text, NAMES_WAIT)
}

/// The parser for `top --slow`.
pub fn parse_slow(text: &str) -> Result<Duration, String> {
    parse_in(text, SLOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        let p = parse_run_length;
        assert_eq!(p("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(p("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(p("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(p("2"), Ok(Duration::from_secs(2)));
        assert_eq!(p("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(p("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(
            p("365d").unwrap_err(),
            "unknown unit `d` in `365d` (use ns, us, ms, s, m or h)"
        );
        assert!(p("0s").is_err());
        assert!(p("5x").is_err());
        assert!(p("s").is_err());
        assert!(p("-1s").is_err());
    }

    #[test]
    fn out_of_range_is_refused_not_clamped() {
        let p = parse_run_length;
        for huge in ["18446744073709551615", "9999999999999999999s", "8761h"] {
            let err = p(huge).unwrap_err();
            assert!(err.contains("longer than the longest"), "{huge}: {err}");
        }
        assert!(p("8760h").is_ok());
        for tiny in ["0.0000000001s", "999us", "0.5ms", "10ns"] {
            let err = p(tiny).unwrap_err();
            assert!(err.contains("shorter than the shortest"), "{tiny}: {err}");
        }
        let slow = Range {
            min: Duration::from_micros(1),
            max: Duration::from_secs(10),
        };
        assert_eq!(parse_in("100us", slow), Ok(Duration::from_micros(100)));
    }
}
