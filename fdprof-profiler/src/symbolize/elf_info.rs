//! What a mapped ELF file says about where its names are: its build id, its `.gnu_debuglink`,
//! whether it kept its symbol table, whether it carries MiniDebugInfo, and its loaded segments
//! (a debug file's symbols are at the addresses the segments load to, not at file offsets).

use std::fs::File;

use fdprof_figures::BuildId;
use object::{Object, ObjectSection, ObjectSegment, ReadCache};

/// Sections read at most (a `.gnu_debugdata` is a few MB at most).
const MAX_DEBUGDATA: u64 = 64 << 20;

/// One `PT_LOAD` segment: where it lies in the file and the address it loads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    pub offset: u64,
    pub size: u64,
    pub address: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ElfInfo {
    pub build_id: Option<BuildId>,
    /// The `.gnu_debuglink`: the debug file's name and the CRC-32 of its bytes.
    pub debuglink: Option<(String, u32)>,
    /// A `.symtab` with symbols: the file names its own functions (not stripped).
    pub has_symtab: bool,
    /// A `.gnu_debugdata` section (MiniDebugInfo: an xz-compressed ELF of function symbols).
    pub debugdata: bool,
    pub loads: Vec<Load>,
}

impl ElfInfo {
    /// The file's facts; `None` when it is not an ELF file or cannot be read.
    pub(crate) fn read(file: &File) -> Option<Self> {
        let cache = ReadCache::new(file);
        let obj = object::File::parse(&cache).ok()?;
        let debuglink = obj.gnu_debuglink().ok().flatten().and_then(|(name, crc)| {
            let name = std::str::from_utf8(name).ok()?;
            // A file name, never a path: it is joined to directories below.
            (!name.is_empty() && !name.contains('/') && name != "..")
                .then(|| (name.to_string(), crc))
        });
        Some(Self {
            build_id: obj.build_id().ok().flatten().and_then(BuildId::new),
            debuglink,
            has_symtab: obj.section_by_name(".symtab").is_some_and(|s| s.size() > 0),
            debugdata: obj.section_by_name(".gnu_debugdata").is_some(),
            loads: obj
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    Load {
                        offset,
                        size,
                        address: s.address(),
                    }
                })
                .filter(|l| l.size > 0)
                .collect(),
        })
    }

    /// The address a file offset loads to (what a debug file's symbols are keyed by).
    pub(crate) fn address_of(&self, file_offset: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| (l.offset..l.offset + l.size).contains(&file_offset))
            .map(|l| file_offset - l.offset + l.address)
    }

    /// The `.gnu_debugdata` section's bytes (xz), within a bound.
    pub(crate) fn debugdata(file: &File) -> Option<Vec<u8>> {
        let cache = ReadCache::new(file);
        let obj = object::File::parse(&cache).ok()?;
        let section = obj.section_by_name(".gnu_debugdata")?;
        (section.size() <= MAX_DEBUGDATA)
            .then(|| section.data().ok().map(<[u8]>::to_vec))
            .flatten()
    }
}

/// The build id of an ELF file, to check a debug file found by name is the one for the binary.
pub(crate) fn build_id_of(file: &File) -> Option<BuildId> {
    let cache = ReadCache::new(file);
    let obj = object::File::parse(&cache).ok()?;
    obj.build_id().ok().flatten().and_then(BuildId::new)
}
