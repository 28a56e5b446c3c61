//! Just enough of a Rust lexer for the house rules: the code without its strings, characters
//! and comments, and that code as tokens.

/// The source with strings, characters and comments blanked to spaces (newlines kept), so
/// braces, keywords and paths are only the code's, on their own lines.
pub(super) fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let Some(end) = skipped(rest) else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        out.extend(
            rest[..end]
                .iter()
                .map(|&c| if c == b'\n' { b'\n' } else { b' ' }),
        );
        i += end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The length of the comment, string or character at the start of `rest`, if one is there.
fn skipped(rest: &[u8]) -> Option<usize> {
    if rest.starts_with(b"//") {
        return Some(rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len()));
    }
    if rest.starts_with(b"/*") {
        return Some(block_comment(rest));
    }
    if let Some(len) = raw_string(rest) {
        return Some(len);
    }
    if rest[0] == b'"' || rest.starts_with(b"b\"") {
        let mut j = if rest[0] == b'"' { 1 } else { 2 };
        while j < rest.len() && rest[j] != b'"' {
            j += if rest[j] == b'\\' { 2 } else { 1 };
        }
        return Some((j + 1).min(rest.len()));
    }
    if rest[0] == b'\'' {
        return Some(character(rest));
    }
    None
}

/// The length of the (nested) block comment at the start of `rest`.
fn block_comment(rest: &[u8]) -> usize {
    let mut depth = 0;
    let mut j = 0;
    while j < rest.len() {
        if rest[j..].starts_with(b"/*") {
            depth += 1;
            j += 2;
        } else if rest[j..].starts_with(b"*/") {
            depth -= 1;
            j += 2;
            if depth == 0 {
                return j;
            }
        } else {
            j += 1;
        }
    }
    rest.len()
}

/// The length of the character at the start of `rest` ('x', '\n', '\u{..}'), or 1 for the
/// quote of a lifetime ('a).
fn character(rest: &[u8]) -> usize {
    match rest.get(1..) {
        Some([b'\\', tail @ ..]) => tail
            .iter()
            .skip(1)
            .position(|&c| c == b'\'')
            .map_or(rest.len(), |at| at + 4),
        Some(s) if !s.is_empty() => {
            let head = &s[..s.len().min(4)];
            let valid = std::str::from_utf8(head)
                .unwrap_or_else(|e| std::str::from_utf8(&head[..e.valid_up_to()]).unwrap());
            let ch = valid.chars().next().map_or(1, char::len_utf8);
            if s.get(ch) == Some(&b'\'') { ch + 2 } else { 1 }
        }
        _ => 1,
    }
}

/// The length of a raw string (`r"…"`, `r#"…"#`, `br#"…"#`) at the start of `s`.
fn raw_string(s: &[u8]) -> Option<usize> {
    let after_b = if s.starts_with(b"br") { 2 } else { 1 };
    if !(s.starts_with(b"r#") || s.starts_with(b"r\"") || s.starts_with(b"br")) {
        return None;
    }
    let hashes = s[after_b..].iter().take_while(|&&c| c == b'#').count();
    let open = after_b + hashes;
    if s.get(open) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = &s[open + 1..];
    let at = body.windows(close.len()).position(|w| w == close)?;
    Some(open + 1 + at + close.len())
}

/// The code's identifiers, `::` and single punctuation; comments, strings and chars skipped.
pub(super) fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = code_only(text).chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

/// `tokens` without the items marked `#[cfg(test)]`: tests may use anything.
pub(super) fn without_tests(tokens: Vec<String>) -> Vec<String> {
    const MARK: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i..].starts_with(&MARK.map(String::from)) {
            // The item: up to its `;`, or to the `}` closing its first `{`.
            i += MARK.len();
            let mut depth = 0;
            while i < tokens.len() {
                match tokens[i].as_str() {
                    "{" => depth += 1,
                    "}" => depth -= 1,
                    ";" if depth == 0 => break,
                    _ => {}
                }
                i += 1;
                if depth == 0 && tokens[i - 1] == "}" {
                    break;
                }
            }
            continue;
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out
}
