//! No function in `fdprof/src` outside tests is longer than 80 lines: a long function is one
//! to split. This reads the sources with a small lexer (strings, characters and comments
//! skipped, braces counted), so a function hidden in a macro call is counted like any other.
//! Test modules (`#[cfg(test)] mod`) and `*tests.rs` files are left out.

use std::path::{Path, PathBuf};

/// The most lines a function may span, from its `fn` line to its closing brace.
const MOST_LINES: usize = 80;

/// Functions allowed to be longer, as `path::name` (none: split them instead).
const ALLOWED: &[&str] = &[];

/// The source with strings, characters and comments blanked to spaces (newlines kept), so
/// braces and keywords are only the code's.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }))
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            loop {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break j;
                    }
                } else {
                    j += 1;
                }
            }
        } else if let Some(len) = raw_string(rest) {
            len
        } else if rest[0] == b'"' || rest.starts_with(b"b\"") {
            let mut j = if rest[0] == b'"' { 1 } else { 2 };
            while rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if rest[0] == b'\'' {
            // A character ('x', '\n', '\u{..}') rather than a lifetime ('a).
            match rest.get(1..) {
                Some([b'\\', ..]) => rest[2..].iter().position(|&c| c == b'\'').unwrap() + 3,
                Some(s) => {
                    let ch = std::str::from_utf8(&s[..s.len().min(4)])
                        .or_else(|e| std::str::from_utf8(&s[..e.valid_up_to()]))
                        .unwrap()
                        .chars()
                        .next()
                        .map_or(1, char::len_utf8);
                    if s.get(ch) == Some(&b'\'') { ch + 2 } else { 1 }
                }
                None => 1,
            }
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &rest[..end]);
        i += end;
    }
    String::from_utf8_lossy(&out).into_owned()
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

/// The name of the function a line of code declares, if it declares one.
fn declared(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w == "fn" {
            let name = words.next()?;
            let end = name
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(name.len());
            return Some(&name[..end]).filter(|n| !n.is_empty());
        }
        let qualifier = w.starts_with("pub")
            || matches!(
                w,
                "async" | "const" | "unsafe" | "extern" | "\"C\"" | "default"
            );
        if !qualifier {
            return None;
        }
    }
    None
}

/// The line of the brace closing the block opened on or after line `from` (its `{` the first
/// one there), or `None` where a `;` ends the item first (a declaration without body).
fn block_end(lines: &[&str], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut opened = false;
    for (n, line) in lines.iter().enumerate().skip(from) {
        for c in line.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' if depth == 0 => return None,
                '}' => {
                    depth -= 1;
                    if opened && depth == 0 {
                        return Some(n);
                    }
                }
                ';' if !opened => return None,
                _ => {}
            }
        }
    }
    None
}

/// Every function in `text` longer than [`MOST_LINES`], as (name, lines), test modules left
/// out.
fn long_functions(text: &str) -> Vec<(String, usize)> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut long = Vec::new();
    let mut n = 0;
    while n < lines.len() {
        let line = lines[n].trim();
        if line.starts_with("#[cfg(test)]") {
            // The item it marks (a test module or function) is skipped whole.
            let mut item = n + 1;
            while lines.get(item).is_some_and(|l| l.trim().starts_with("#[")) {
                item += 1;
            }
            n = block_end(&lines, item).map_or(item, |end| end + 1);
            continue;
        }
        if let Some(name) = declared(line)
            && let Some(end) = block_end(&lines, n)
        {
            let length = end - n + 1;
            if length > MOST_LINES {
                long.push((name.to_string(), length));
            }
        }
        n += 1;
    }
    long
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !path.to_str().unwrap().ends_with("tests.rs")
        {
            out.push(path);
        }
    }
}

#[test]
fn no_function_is_longer_than_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut offenders = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap().display().to_string();
        for (name, lines) in long_functions(&std::fs::read_to_string(file).unwrap()) {
            let id = format!("{rel}::{name}");
            if !ALLOWED.contains(&id.as_str()) {
                offenders.push(format!("{id}: {lines} lines"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "functions over {MOST_LINES} lines (split them):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_counter_sees_functions() {
    let body = "    let x = 1;\n".repeat(MOST_LINES);
    let text = format!(
        "pub(crate) async fn long() {{\n{body}}}\nfn short() {{ '{{'; \"}}\"; }}\n\
         // fn commented() {{\n#[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}    }}\n}}\n"
    );
    assert_eq!(
        long_functions(&text),
        [("long".to_string(), MOST_LINES + 2)]
    );
    assert_eq!(declared("pub(super) const fn f<T>(x: T)"), Some("f"));
    assert_eq!(declared("let f = fn_ptr;"), None);
    assert_eq!(code_only("r#\"{\"#; b'{'; 'a"), "      ; b   ;  a");
}
