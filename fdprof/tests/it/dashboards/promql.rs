//! Which metrics a PromQL expression names, and with which label matchers: enough of PromQL's
//! syntax to tell metric names from functions, keywords, label lists, strings and numbers.

/// PromQL words that are neither functions (those are followed by `(`) nor metric names:
/// aggregations (`sum by (le) (...)`: not followed by `(`), modifiers and operators.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
];

/// A metric name in an expression and the label matchers that follow it (`{...}`, or "").
#[derive(Debug)]
pub(super) struct Selector {
    pub(super) metric: String,
    pub(super) matchers: String,
}

/// The metric selectors of a PromQL expression: identifiers that are not functions, keywords,
/// label lists of `by (...)`-like clauses, strings, numbers or range durations.
pub(super) fn selectors(expr: &str) -> Vec<Selector> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i = skip_past(&chars, i + 1, '"');
        } else if c == '[' {
            i = skip_past(&chars, i + 1, ']');
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().position(|c| !c.is_whitespace());
            let next_char = next.map(|n| chars[i + n]);
            if KEYWORDS.contains(&word.as_str()) {
                if matches!(word.as_str(), "by" | "without" | "on" | "ignoring") {
                    i = skip_past(&chars, i, ')');
                }
            } else if next_char == Some('(') {
                // A function or aggregation.
            } else {
                let mut matchers = String::new();
                if next_char == Some('{') {
                    let open = i + next.unwrap();
                    let close = skip_past(&chars, open + 1, '}');
                    matchers = chars[open + 1..close - 1].iter().collect();
                    i = close;
                }
                out.push(Selector {
                    metric: word,
                    matchers,
                });
            }
        } else if c == '{' {
            panic!("{expr}: a selector without a metric name");
        } else {
            i += 1;
        }
    }
    out
}

/// The index after the next `end` from `from` (skipping quoted strings).
fn skip_past(chars: &[char], from: usize, end: char) -> usize {
    let mut i = from;
    while i < chars.len() {
        if chars[i] == end {
            return i + 1;
        }
        if chars[i] == '"' && end != '"' {
            i = skip_past(chars, i + 1, '"');
        } else {
            i += 1;
        }
    }
    panic!(
        "unterminated {end:?} in {}",
        chars.iter().collect::<String>()
    );
}

#[test]
fn the_selector_reader_finds_metrics_and_their_matchers() {
    let found = selectors(
        r#"histogram_quantile(0.99, sum by (le, x) (rate(m_bucket{a=~"$b", c="}"}[$__rate_interval]))) / on (d) n + 2"#,
    );
    let names: Vec<(&str, &str)> = found
        .iter()
        .map(|s| (s.metric.as_str(), s.matchers.as_str()))
        .collect();
    assert_eq!(names, [("m_bucket", r#"a=~"$b", c="}""#), ("n", "")]);
}
