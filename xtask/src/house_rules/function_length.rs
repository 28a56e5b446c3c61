//! The functions of a source file and how many lines each spans. This reads the code (strings,
//! characters and comments blanked, braces counted), so a function hidden in a macro call is
//! counted like any other; the items marked `#[cfg(test)]` are left out.

use super::lexer::code_only;

/// The most lines a function may span, from its `fn` line to its closing brace.
pub(super) const MOST_LINES: usize = 80;

/// A function longer than [`MOST_LINES`]: its name, the line of its `fn` (from 1) and how many
/// lines it spans.
#[derive(Debug, PartialEq)]
pub(super) struct Long {
    pub(super) name: String,
    pub(super) line: usize,
    pub(super) lines: usize,
}

/// The name of the function a line of code declares, if it declares one.
pub(super) fn declared(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "fn" {
            let name = words.next()?;
            let end = name
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(name.len());
            return Some(&name[..end]).filter(|n| !n.is_empty());
        }
        // `pub(in crate::a)` is split at its space.
        if w.starts_with("pub(") && !w.contains(')') {
            words.find(|w| w.contains(')'))?;
            continue;
        }
        let qualifier = w.starts_with("pub")
            || matches!(w, "async" | "const" | "unsafe" | "extern" | "default");
        if !qualifier {
            return None;
        }
    }
    None
}

/// The line of the brace closing the block opened on or after line `from` (its `{` the first
/// one there), or `None` where a `;` ends the item first (a declaration without body). A `;`
/// in brackets or parentheses (`[u8; 4]`) ends nothing.
fn block_end(lines: &[&str], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut nested = 0usize;
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
                '(' | '[' if !opened => nested += 1,
                ')' | ']' if !opened => nested = nested.saturating_sub(1),
                ';' if !opened && nested == 0 => return None,
                _ => {}
            }
        }
    }
    None
}

/// Every function in `text` longer than [`MOST_LINES`], the items marked `#[cfg(test)]` left
/// out.
pub(super) fn long_functions(text: &str) -> Vec<Long> {
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
            && end - n + 1 > MOST_LINES
        {
            long.push(Long {
                name: name.to_string(),
                line: n + 1,
                lines: end - n + 1,
            });
        }
        n += 1;
    }
    long
}
