//! Which model a replay runs: named by the driver ([`mod@crate::replay`]) and by the results it
//! reports ([`crate::report`]), so it lives apart from both.

use serde::{Deserialize, Serialize};

use crate::mainline::Version;

/// The models a trace can be replayed under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ModelKind {
    Mainline(Version),
    Viro,
    /// Every allocation with start 0 flagged `O_FD_FASTALLOC`, over the `base` allocator.
    Fastalloc {
        base: Version,
        seed: u64,
    },
}
