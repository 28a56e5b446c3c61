//! Folded stacks (the input format of inferno and FlameGraph), weighted by wait time.
//!
//! One line per distinct stack: `op;user_outer;…;user_inner;kernel_outer;…;kernel_inner wait_ns`.
//! The root frame is the fd-table operation, so the graph splits by operation; the lock slow path
//! is the leaf. A stack that was not captured is one `[unknown]` frame in its place.

use std::collections::BTreeMap;
use std::fmt;

use super::aggregate::{FILE_LOCK, frame_label};
use crate::model::recording::{ContentionSite, Frame, Recording};

/// Which operations to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OpFilter {
    /// Waits while allocating an fd (`alloc_fd`).
    Alloc,
    /// Waits while closing an fd (`file_close_fd`, `close_fd`).
    Close,
    /// Every operation, including `expand`, `dup2`, … and `other`.
    #[default]
    All,
}

impl OpFilter {
    pub fn as_str(self) -> &'static str {
        match self {
            OpFilter::Alloc => "alloc",
            OpFilter::Close => "close",
            OpFilter::All => "all",
        }
    }

    pub fn matches(self, operation: &str) -> bool {
        match self {
            OpFilter::All => true,
            op => op.as_str() == operation,
        }
    }
}

impl fmt::Display for OpFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which locks to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LockFilter {
    /// Only the target's own `files->file_lock`.
    #[default]
    #[value(name = "file_lock", alias = "file-lock")]
    FileLock,
    /// Every lock class recorded (other spinlocks, mutexes, rwsems).
    All,
}

impl LockFilter {
    pub fn as_str(self) -> &'static str {
        match self {
            LockFilter::FileLock => FILE_LOCK,
            LockFilter::All => "all",
        }
    }

    pub fn matches(self, lock: &str) -> bool {
        match self {
            LockFilter::All => true,
            LockFilter::FileLock => lock == FILE_LOCK,
        }
    }
}

impl fmt::Display for LockFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlamegraphOptions {
    pub op: OpFilter,
    pub lock: LockFilter,
    /// Keep offsets in frame names (`alloc_fd+0x1f`); otherwise frames are function names and
    /// stacks that differ only in offsets merge.
    pub offsets: bool,
}

impl FlamegraphOptions {
    pub fn matches(&self, site: &ContentionSite) -> bool {
        self.op.matches(&site.operation) && self.lock.matches(&site.lock)
    }

    /// `op=alloc, lock=file_lock`, for titles and messages.
    pub fn describe_filter(&self) -> String {
        format!("op={}, lock={}", self.op, self.lock)
    }
}

/// The folded stacks of the waits that pass the filter, sorted, identical stacks merged, one
/// `stack wait_ns` line each (newline-terminated). Empty when nothing matches.
pub fn folded(rec: &Recording, opts: &FlamegraphOptions) -> String {
    let mut out = String::new();
    for (stack, wait_ns) in folded_stacks(rec, opts) {
        out.push_str(&stack);
        out.push(' ');
        out.push_str(&wait_ns.to_string());
        out.push('\n');
    }
    out
}

/// The folded stacks as (stack, total wait ns), sorted by stack; zero-wait stacks are left out.
pub fn folded_stacks(rec: &Recording, opts: &FlamegraphOptions) -> BTreeMap<String, u64> {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for site in rec.contention.iter().filter(|s| opts.matches(s)) {
        if site.total_wait_ns == 0 {
            continue;
        }
        let mut stack = clean(&site.operation);
        push_reversed(&mut stack, &site.user_stack, opts.offsets);
        push_reversed(&mut stack, &site.kernel_stack, opts.offsets);
        let wait = lines.entry(stack).or_default();
        *wait = wait.saturating_add(site.total_wait_ns);
    }
    lines
}

/// Appends `;frame` for each frame, outermost first (the stack is innermost first).
fn push_reversed(stack: &mut String, frames: &[Frame], offsets: bool) {
    if frames.is_empty() {
        stack.push_str(";[unknown]");
        return;
    }
    for f in frames.iter().rev() {
        stack.push(';');
        stack.push_str(&clean(&frame_label(f, offsets)));
    }
}

/// A frame name safe in a folded line: no `;` (the separator), no line breaks, never empty,
/// and not ending in a space and a number, which readers of folded stacks (inferno,
/// FlameGraph) take for a second count column: that space becomes `_`.
fn clean(name: &str) -> String {
    let mut s: String = name
        .trim()
        .chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' | '\t' => ' ',
            c => c,
        })
        .collect();
    if let Some(space) = s.rfind(' ')
        && s[space + 1..]
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.')
    {
        s.replace_range(space..=space, "_");
    }
    if s.is_empty() { "[unknown]".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized() {
        assert_eq!(clean("foo<[u8; 8]>"), "foo<[u8: 8]>");
        assert_eq!(clean("  "), "[unknown]");
        assert_eq!(clean("a\nb"), "a b");
        assert_eq!(
            clean("operator new(unsigned long)"),
            "operator new(unsigned long)"
        );
        assert_eq!(clean("f 5"), "f_5");
        assert_eq!(clean("f 1.5"), "f_1.5");
    }

    #[test]
    fn filters() {
        assert!(OpFilter::All.matches("expand"));
        assert!(OpFilter::Alloc.matches("alloc"));
        assert!(!OpFilter::Alloc.matches("close"));
        assert!(LockFilter::FileLock.matches("file_lock"));
        assert!(!LockFilter::FileLock.matches("spinlock"));
        assert!(LockFilter::All.matches("mutex"));
    }

    #[test]
    fn clap_names() {
        use clap::ValueEnum;
        assert!(LockFilter::from_str("file_lock", false).is_ok());
        assert!(LockFilter::from_str("file-lock", false).is_ok());
        assert_eq!(OpFilter::from_str("close", false), Ok(OpFilter::Close));
    }
}
