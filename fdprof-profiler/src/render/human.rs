//! Formatting for people: durations, shares, bcc-style log2 histograms, dates.

use fdprof_recording::hist::slot_range;

use crate::analysis::Histogram;

/// Width of the histogram bar, in characters (as bcc's `print_log2_hist`).
const BAR_WIDTH: u64 = 40;

/// A duration in ns as `850 ns`, `12.3 µs`, `4.56 ms`, `1.23 s`.
/// A size for people: `512 B`, `18.3 KiB`, `425.3 MiB`, `2.0 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let (mut value, mut unit) = (n as f64 / 1024.0, 0);
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

pub fn duration(ns: u64) -> String {
    if ns < 1_000 {
        return format!("{ns} ns");
    }
    duration_f(ns as f64)
}

/// Like [`duration`] for a fractional value (an average).
pub fn duration_f(ns: f64) -> String {
    if !ns.is_finite() || ns < 0.0 {
        return "-".into();
    }
    const UNITS: [(&str, f64); 4] = [("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)];
    // Pick the largest unit the value reaches, then re-check after rounding so 999.96 µs
    // becomes 1.00 ms rather than 1000 µs.
    let mut i = UNITS
        .iter()
        .rposition(|&(_, scale)| ns >= scale)
        .unwrap_or(0);
    loop {
        let (name, scale) = UNITS[i];
        let text = three_significant(ns / scale);
        if i + 1 < UNITS.len() && text.parse::<f64>().is_ok_and(|v| v >= 1000.0) {
            i += 1;
            continue;
        }
        return format!("{text} {name}");
    }
}

/// `v` with three significant digits (no exponent): `1.23`, `12.3`, `123`, `1234`.
fn three_significant(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v < 9.995 {
        format!("{v:.2}")
    } else if v < 99.95 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A share (0..=1) as `60.0%`, or `-` when there is none (a share of nothing).
pub fn percent(share: Option<f64>) -> String {
    match share {
        None => "-".into(),
        Some(0.0) => "0%".into(),
        // Small shares (fdprof's own cost) keep two decimals; a non-zero share never shows as 0.
        Some(s) if s < 0.0001 => "<0.01%".into(),
        Some(s) if s < 0.00995 => format!("{:.2}%", s * 100.0),
        Some(s) => format!("{:.1}%", s * 100.0),
    }
}

/// The machine's steal over a view, short: `steal 20.0 ms (0.5%)`, or `steal unknown` where
/// `/proc/stat` was not read.
pub fn steal(steal: Option<&crate::analysis::Steal>) -> String {
    match steal {
        Some(s) => format!("steal {} ({})", duration(s.steal_ns), percent(s.share)),
        None => "steal unknown".into(),
    }
}

/// An optional quantile, formatted with `fmt`, or `-`.
pub fn opt(v: Option<u64>, fmt: impl Fn(u64) -> String) -> String {
    v.map_or_else(|| "-".into(), fmt)
}

/// `n … p50 … p99 … p999 … max …` for a histogram, values formatted by `fmt`.
pub(crate) fn quantiles_line(h: &Histogram, fmt: impl Fn(u64) -> String) -> String {
    let Some(max) = h.max else {
        return "no samples".into();
    };
    format!(
        "n {}  p50 {}  p99 {}  p999 {}  max {}",
        h.count,
        opt(h.p50, &fmt),
        opt(h.p99, &fmt),
        opt(h.p999, &fmt),
        fmt(max)
    )
}

/// A log2 histogram printed the way bcc's `print_log2_hist` does, from the first to the last
/// non-empty bucket, the empty slots between them included:
///
/// ```text
///      bits          : count     distribution
///          0 -> 0    : 3990     |****************************************|
///          1 -> 1    : 6        |                                        |
/// ```
///
/// Each line is indented by `indent` spaces. An empty histogram gives one `(no samples)` line.
pub(crate) fn log2_hist_lines(h: &Histogram, unit: &str, indent: usize) -> Vec<String> {
    let pad = " ".repeat(indent);
    let (Some(first), Some(last)) = (h.buckets.first(), h.buckets.last()) else {
        return vec![format!("{pad}(no samples)")];
    };
    let peak = h.buckets.iter().map(|b| b.count).max().unwrap_or(1).max(1);
    let high_width = last.high.to_string().len().max(5);
    let range_width = 2 * high_width + 4;
    let mut lines = vec![format!(
        "{pad}{unit:>range_width$} : count     distribution"
    )];
    for k in slot(first.low)..=slot(last.low) {
        let (lo, hi) = slot_range(k);
        let n = h
            .buckets
            .iter()
            .find(|b| b.low == lo)
            .map_or(0, |b| b.count);
        let stars = (n.saturating_mul(BAR_WIDTH) / peak) as usize;
        lines.push(format!(
            "{pad}{lo:>high_width$} -> {hi:<high_width$} : {n:<8} |{:<width$}|",
            "*".repeat(stars),
            width = BAR_WIDTH as usize
        ));
    }
    lines
}

/// The log2 slot whose lowest value is `low`.
fn slot(low: u64) -> usize {
    (u64::BITS - low.leading_zeros()) as usize
}

/// A Unix time in ms as `2026-11-29 19:37:41 UTC`.
pub fn utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// A Unix time in ms as `20261129T193741Z` (ISO 8601, basic format): a file name's stamp,
/// which sorts as the times do.
pub fn utc_stamp(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{Unit, summary};
    use fdprof_recording::hist::Log2Hist;

    #[test]
    fn durations() {
        assert_eq!(duration(0), "0 ns");
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(1_500), "1.50 µs");
        assert_eq!(duration(12_340), "12.3 µs");
        assert_eq!(duration(123_400), "123 µs");
        assert_eq!(duration(999_999), "1.00 ms");
        assert_eq!(duration(4_560_000), "4.56 ms");
        assert_eq!(duration(10_000_000_000), "10.0 s");
        assert_eq!(duration_f(12.5), "12.5 ns");
        assert_eq!(duration_f(999.99), "1.00 µs");
    }

    #[test]
    fn percents() {
        let percent = |part, whole| percent(crate::analysis::share(part, whole));
        assert_eq!(percent(6, 10), "60.0%");
        assert_eq!(percent(1, 3), "33.3%");
        assert_eq!(percent(1, 0), "-");
        assert_eq!(percent(0, 10), "0%");
        assert_eq!(percent(2, 10_000), "0.02%");
        assert_eq!(percent(1, 1_000_000), "<0.01%");
        assert_eq!(percent(10, 10), "100.0%");
    }

    #[test]
    fn bcc_style_histogram() {
        let mut h = Log2Hist::default();
        for v in [0, 0, 0, 0, 2, 3, 5] {
            h.record(v);
        }
        let lines = log2_hist_lines(&summary(&h, Unit::Bits), "bits", 0);
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(
            lines[0].ends_with("bits : count     distribution"),
            "{}",
            lines[0]
        );
        assert_eq!(
            lines[1],
            format!("{:>5} -> {:<5} : {:<8} |{}|", 0, 0, 4, "*".repeat(40))
        );
        assert_eq!(
            lines[2],
            format!("{:>5} -> {:<5} : {:<8} |{}|", 1, 1, 0, " ".repeat(40))
        );
        assert_eq!(
            lines[3],
            format!("{:>5} -> {:<5} : {:<8} |{:<40}|", 2, 3, 2, "*".repeat(20))
        );
        assert_eq!(
            lines[4],
            format!("{:>5} -> {:<5} : {:<8} |{:<40}|", 4, 7, 1, "*".repeat(10))
        );
        assert_eq!(
            log2_hist_lines(&summary(&Log2Hist::default(), Unit::Bits), "bits", 2),
            vec!["  (no samples)"]
        );
    }

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_709_210_096_000), "2024-02-29 12:34:56 UTC");
        assert_eq!(utc_stamp(1_709_210_096_999), "20240229T123456Z");
    }
}
