//! One frame of a recorded stack.

use serde::{Deserialize, Serialize};

use super::bounded;

/// One stack frame. `address` is present only when recorded with `--raw-addrs` (KASLR).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    #[serde(deserialize_with = "bounded::function")]
    pub function: String,
    /// Offset into the function, in bytes.
    pub offset: u64,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded::module"
    )]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<u64>,
    /// User frames in a mapped file: the file's build id, where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<fdprof_figures::BuildId>,
    /// User frames in a mapped file: the address's offset in that file. With the build id, it
    /// names the frame later, wherever the file's symbols are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_offset: Option<u64>,
}

impl Frame {
    /// Whether a symbol named the frame.
    pub fn is_named(&self) -> bool {
        let name = self.function.trim();
        !(name.is_empty() || name == "[unknown]")
    }

    /// What names an unnamed frame later: its file's build id and its offset in the file;
    /// nothing for a named frame.
    pub fn unnamed_object(&self) -> (Option<fdprof_figures::BuildId>, Option<u64>) {
        match self.is_named() {
            true => (None, None),
            false => (self.build_id.clone(), self.file_offset),
        }
    }
}
