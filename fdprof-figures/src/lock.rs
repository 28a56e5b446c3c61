//! Which lock a wait was for, named as precisely as the kernel and the stacks allow.

use fdprof_common::contention::LockKind;
use serde::{Deserialize, Serialize};

/// A lock, as every table, event and metric names it. In JSON its fields sit in the object
/// that holds it: `"lock": "task_rq_lock", "lock_kind": "spinlock", "lock_named_by": "caller"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lock {
    /// `file_lock` (the target's own), a static lock's symbol (`tasklist_lock`), a recognised
    /// kind (`rq_lock`, `mmap_lock`, `siglock`, `file_lock (other table)`), the first caller
    /// below the lock functions (`task_rq_lock`), else the kind (`spinlock`).
    #[serde(rename = "lock")]
    pub name: String,
    /// What the tracepoint's flags say it is; `file_lock` for the target's own.
    #[serde(rename = "lock_kind")]
    pub kind: LockKind,
    #[serde(rename = "lock_named_by")]
    pub named_by: NamedBy,
}

/// How a lock got its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NamedBy {
    /// The target's own `files->file_lock`, told by its address.
    Target,
    /// A static lock: its kernel symbol.
    Symbol,
    /// Its kind, from the waiting task (`mmap_lock`, `siglock`) or from the lock functions on
    /// its stack (`rq_lock`).
    Kind,
    /// The first function below the lock functions on the waiter's kernel stack.
    Caller,
    /// Nothing better: the kind the tracepoint's flags give.
    Flags,
}

impl Lock {
    /// The target's own `file_lock`.
    pub fn file_lock() -> Self {
        Self::of_kind(LockKind::FileLock)
    }

    /// A lock known only by its kind (`FileLock`: the target's own).
    pub fn of_kind(kind: LockKind) -> Self {
        Self {
            name: kind.name().to_string(),
            kind,
            named_by: if kind == LockKind::FileLock {
                NamedBy::Target
            } else {
                NamedBy::Flags
            },
        }
    }

    /// As the lock column shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this is the target's own `file_lock`.
    pub fn is_file_lock(&self) -> bool {
        self.kind == LockKind::FileLock
    }
}

/// The target's `file_lock` first, then by name.
impl Ord for Lock {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (!self.is_file_lock(), &self.name, self.kind, self.named_by).cmp(&(
            !other.is_file_lock(),
            &other.name,
            other.kind,
            other.named_by,
        ))
    }
}

impl PartialOrd for Lock {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Default for Lock {
    fn default() -> Self {
        Self::of_kind(LockKind::Other)
    }
}

impl std::fmt::Display for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}
