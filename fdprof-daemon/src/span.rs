//! The kept intervals a request reads: `seconds=N` (the last N seconds), `from=…&to=…` (Unix
//! time in ms, the unit intervals carry: every kept interval that overlaps the range), or,
//! without either, every interval kept.

use axum::http::StatusCode;

use super::app::{bad, quoted};
use super::history::{Span, SpanError};
use fdprof_profiler::render::human::utc;

/// The span the parameters ask for; `kept_seconds` is what "every interval kept" means now.
pub(super) fn parse(
    seconds: Option<&str>,
    from: Option<&str>,
    to: Option<&str>,
    kept_seconds: u64,
) -> Result<Span, (StatusCode, String)> {
    let ms = |name: &str, v: &str| {
        v.parse::<u64>().map_err(|_| {
            bad(format!(
                "{name} is a Unix time in milliseconds, not {}",
                quoted(v)
            ))
        })
    };
    match (seconds, from, to) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            Err(bad("give seconds, or from and to, not both"))
        }
        (Some(s), None, None) => s
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .map(|seconds| Span::Last { seconds })
            .ok_or_else(|| {
                bad(format!(
                    "seconds must be a whole number > 0, not {}",
                    quoted(s)
                ))
            }),
        (None, Some(from), Some(to)) => {
            let (from_ms, to_ms) = (ms("from", from)?, ms("to", to)?);
            if from_ms >= to_ms {
                return Err(bad(format!("from ({from_ms}) must be before to ({to_ms})")));
            }
            Ok(Span::Range { from_ms, to_ms })
        }
        (None, Some(_), None) | (None, None, Some(_)) => {
            Err(bad("from and to go together (Unix times in milliseconds)"))
        }
        (None, None, None) => Ok(Span::Last {
            seconds: kept_seconds.max(1),
        }),
    }
}

/// The answer to a span without figures: 503 before the first interval, 404 for a range
/// outside the kept intervals (naming the range kept).
pub(super) fn refused(span: Span, e: SpanError) -> (StatusCode, String) {
    match e {
        SpanError::NoneYet => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no interval has ended yet\n".into(),
        ),
        SpanError::Outside {
            kept_from_ms,
            kept_to_ms,
        } => {
            let asked = match span {
                Span::Range { from_ms, to_ms } => format!("{} to {}", utc(from_ms), utc(to_ms)),
                Span::Last { seconds } => format!("the last {seconds} s"),
            };
            (
                StatusCode::NOT_FOUND,
                format!(
                    "no kept interval in {asked}: the daemon keeps {} to {} \
                     (from={kept_from_ms}&to={kept_to_ms})\n",
                    utc(kept_from_ms),
                    utc(kept_to_ms)
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_parsed_and_bad_ones_refused_in_a_line() {
        let ok = |s, f, t| parse(s, f, t, 300).unwrap();
        let err = |s, f, t| parse(s, f, t, 300).unwrap_err().1;
        assert_eq!(ok(None, None, None), Span::Last { seconds: 300 });
        assert_eq!(ok(Some("10"), None, None), Span::Last { seconds: 10 });
        assert_eq!(
            ok(None, Some("1000"), Some("2000")),
            Span::Range {
                from_ms: 1000,
                to_ms: 2000
            }
        );
        assert!(err(Some("10"), Some("1"), None).contains("not both"));
        assert!(err(None, Some("1"), None).contains("go together"));
        assert!(err(None, Some("2000"), Some("1000")).contains("before"));
        assert!(err(None, Some("-1"), Some("1000")).contains("\"-1\""));
        assert!(err(Some("0"), None, None).contains("> 0"));
        let outside = refused(
            Span::Range {
                from_ms: 1_000,
                to_ms: 2_000,
            },
            SpanError::Outside {
                kept_from_ms: 1_764_000_000_000,
                kept_to_ms: 1_764_000_300_000,
            },
        );
        assert_eq!(outside.0, StatusCode::NOT_FOUND);
        assert_eq!(outside.1.lines().count(), 1, "{}", outside.1);
        assert!(
            outside.1.contains("1970-01-01 00:00:01 UTC"),
            "{}",
            outside.1
        );
    }
}
