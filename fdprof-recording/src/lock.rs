//! A lock's name as recordings keep it, and as the figures show it; fdprof's `model::lock_names`
//! tells it.

use fdprof_common::contention::LockKind;
use fdprof_figures::NamedBy;
use serde::{Deserialize, Serialize};

use super::bounded;

/// A lock's name where fdprof could tell more than its kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LockName {
    #[serde(deserialize_with = "bounded::name")]
    pub name: String,
    pub named_by: NamedBy,
}

/// The lock as the figures show it: `name` (escaped: it may come from a file) when there is
/// one, else the kind.
pub fn figure(kind: LockKind, name: Option<&LockName>) -> fdprof_figures::Lock {
    match name {
        Some(n) => fdprof_figures::Lock {
            name: crate::escape::name(&n.name).into_owned(),
            kind,
            named_by: n.named_by,
        },
        None => fdprof_figures::Lock::of_kind(kind),
    }
}
