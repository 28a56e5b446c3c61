//! Duration arguments (`-d`): `5s`, `500ms`, `1m`, `1.5s`, `2h`; a bare number is seconds.

use std::time::Duration;

/// Parses a duration such as `5s`, `500ms`, `1m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
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
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}` (use ms, s, m or h)"
            ));
        }
    };
    if !(seconds > 0.0 && seconds.is_finite()) {
        return Err(format!("`{text}`: the duration must be positive"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("s").is_err());
    }
}
