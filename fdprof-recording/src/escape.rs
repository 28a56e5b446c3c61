//! Names fdprof did not choose (a target's comm and command line, paths, symbols, anything read
//! back from a recording) are printed with their control characters escaped: no name can move a
//! terminal's cursor, retitle its window, clear its screen, break a report's lines or make an
//! SVG ill-formed. Bidirectional-text overrides are escaped too, so no name can reorder what is
//! printed around it.

use std::borrow::Cow;
use std::fmt::Write as _;

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escaped(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| needs_escape(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !needs_escape(c) || keep(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// One name, every control character escaped (`\x1b`, `\x0a`, `\u{202e}`).
pub fn name(s: &str) -> Cow<'_, str> {
    escaped(s, |_| false)
}

/// A whole text fdprof laid out itself (a report): its line breaks stay, every other control
/// character is escaped. The last guard before a terminal, for any field a corrupt recording
/// could carry.
pub fn text(s: &str) -> Cow<'_, str> {
    escaped(s, |c| c == '\n')
}

/// A value whose readers must tell every name apart (a Prometheus label): a backslash that
/// starts what reads as one of [`name`]'s escapes (`\x`, `\u{`) is doubled before the control
/// characters are escaped, so a name holding the four characters `\x1b` never reads as one
/// holding an ESC, while every other name (backslashes included) reads back as it is. Line
/// feeds are left to the format's own escape.
pub fn unambiguous(s: &str) -> Cow<'_, str> {
    if !(s.contains("\\x") || s.contains("\\u{")) {
        return text(s);
    }
    let doubled = s.replace("\\x", "\\\\x").replace("\\u{", "\\\\u{");
    Cow::Owned(text(&doubled).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(name("\x1b]0;pwn\x07\x1b[2J"), "\\x1b]0;pwn\\x07\\x1b[2J");
        assert_eq!(name("a\nb\tc\u{7f}\u{9b}"), "a\\x0ab\\x09c\\x7f\\x9b");
        assert_eq!(name("evil\u{202e}txt"), "evil\\u{202e}txt");
        assert!(matches!(name("alloc_fd"), Cow::Borrowed("alloc_fd")));
        assert_eq!(name("µs ≥ 1"), "µs ≥ 1");
        assert_eq!(text("line\x1b[2J\nnext\n"), "line\\x1b[2J\nnext\n");
    }

    #[test]
    fn an_escape_typed_in_a_name_is_not_an_escape() {
        let (real, typed) = ("a\x1bb", "a\\x1bb");
        assert_eq!(unambiguous(real), "a\\x1bb");
        assert_eq!(unambiguous(typed), "a\\\\x1bb");
        assert_ne!(unambiguous(real), unambiguous(typed));
        assert!(matches!(unambiguous("nginx"), Cow::Borrowed("nginx")));
        assert_eq!(
            unambiguous("ev\"il\\ comm"),
            "ev\"il\\ comm",
            "read back as it is"
        );
        assert_eq!(unambiguous("\\u{202e}"), "\\\\u{202e}");
        assert_eq!(unambiguous("\u{202e}"), "\\u{202e}");
    }
}
