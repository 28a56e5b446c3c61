//! An ELF file's build id: what names a binary to a symbol server (debuginfod's
//! `/buildid/ID/`), to a fleet engine (a pprof mapping's `build_id`) and to `--debug-dir`'s
//! `.build-id/` tree, whatever the file is called where it runs.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// The bytes of an `NT_GNU_BUILD_ID` note (20 for the linkers' SHA-1, 16 for MD5 or UUID),
/// written as lowercase hex. Shared, as every frame of a file carries it.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BuildId(Arc<[u8]>);

impl BuildId {
    /// Longer notes are not build ids any linker writes (and bound what a document may claim).
    pub const MAX_BYTES: usize = 64;

    /// `None` for an empty note or one past [`BuildId::MAX_BYTES`].
    pub fn new(bytes: &[u8]) -> Option<Self> {
        (!bytes.is_empty() && bytes.len() <= Self::MAX_BYTES).then(|| Self(bytes.into()))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuildId({self})")
    }
}

impl FromStr for BuildId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("not a build id (1 to 64 bytes in hex): {:?}", short(s));
        if !s.len().is_multiple_of(2) || s.len() > 2 * Self::MAX_BYTES {
            return Err(bad());
        }
        let bytes: Option<Vec<u8>> = (0..s.len())
            .step_by(2)
            .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect();
        bytes.and_then(|b| Self::new(&b)).ok_or_else(bad)
    }
}

/// The start of a long claim, for an error message.
fn short(s: &str) -> &str {
    s.char_indices().nth(24).map_or(s, |(i, _)| &s[..i])
}

impl Serialize for BuildId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BuildId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_both_ways_and_bounded() {
        let id = BuildId::new(&[0xde, 0xad, 0x01]).unwrap();
        assert_eq!(id.to_string(), "dead01");
        assert_eq!("DEAD01".parse::<BuildId>().unwrap(), id);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"dead01\"");
        assert_eq!(serde_json::from_str::<BuildId>(&json).unwrap(), id);
        for bad in ["", "abc", "zz", &"ab".repeat(65), "é1"] {
            assert!(bad.parse::<BuildId>().is_err(), "{bad:?} taken");
        }
        assert!(BuildId::new(&[]).is_none());
    }
}
