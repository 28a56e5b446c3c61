//! A mapped file's call-frame information: the ELF sections framehop reads (`.eh_frame` and
//! its index, `.debug_frame` where the file has one) and the segments that place them in a
//! process. Read once per file (device and inode), section by section: a 500 MB binary costs
//! its unwind sections, not its size.

use std::fs::File;
use std::ops::{Deref, Range};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use object::{Object, ObjectSection, ObjectSegment, ReadCache, ReadRef};

/// Bytes of unwind sections read from one file at most: a larger file's frames end the walk
/// (`no unwind info`) instead of holding the unwinder's memory.
const MAX_SECTION_BYTES: u64 = 256 << 20;

/// Section bytes shared by every process that maps the file.
#[derive(Clone, Debug)]
pub(crate) struct Bytes(Arc<[u8]>);

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

#[derive(Debug, Default)]
pub(crate) struct Section {
    svma: Option<Range<u64>>,
    data: Option<Bytes>,
}

/// What framehop needs of one ELF file.
#[derive(Debug, Default)]
pub(crate) struct UnwindInfo {
    text: Section,
    got: Section,
    eh_frame: Section,
    eh_frame_hdr: Section,
    debug_frame: Section,
    /// `PT_LOAD` segments: (file offset, size in the file, address).
    segments: Vec<(u64, u64, u64)>,
    /// Bytes held.
    pub(crate) bytes: u64,
}

impl UnwindInfo {
    /// From the file `file`.
    pub(crate) fn from_file(file: File) -> Result<Self> {
        let cache = ReadCache::new(file);
        Self::parse(&cache)
    }

    /// From an image in memory (the vDSO).
    pub(crate) fn from_image(image: &[u8]) -> Result<Self> {
        Self::parse(image)
    }

    fn parse<'d, R: ReadRef<'d>>(data: R) -> Result<Self> {
        let obj = object::File::parse(data).context("not an ELF file")?;
        let mut info = UnwindInfo::default();
        for seg in obj.segments() {
            let (offset, size) = seg.file_range();
            info.segments.push((offset, size, seg.address()));
        }
        let mut section = |name: &str, with_data: bool| -> Result<Section> {
            let Some(s) = obj.section_by_name(name) else {
                return Ok(Section::default());
            };
            let svma = Some(s.address()..s.address() + s.size());
            if !with_data {
                return Ok(Section { svma, data: None });
            }
            if info.bytes + s.size() > MAX_SECTION_BYTES {
                bail!("unwind sections past {MAX_SECTION_BYTES} bytes");
            }
            let data = s.data().with_context(|| format!("cannot read {name}"))?;
            info.bytes += data.len() as u64;
            Ok(Section {
                svma,
                data: Some(Bytes(Arc::from(data))),
            })
        };
        let text = section(".text", false)?;
        let got = section(".got", false)?;
        let eh_frame = section(".eh_frame", true)?;
        let eh_frame_hdr = section(".eh_frame_hdr", true)?;
        let debug_frame = section(".debug_frame", true)?;
        info.text = text;
        info.got = got;
        info.eh_frame = eh_frame;
        info.eh_frame_hdr = eh_frame_hdr;
        info.debug_frame = debug_frame;
        Ok(info)
    }

    /// The load bias of a mapping of this file at `start` from file offset `offset`: what is
    /// added to an address the file states to give the process's address.
    pub(crate) fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        let &(seg_offset, _, seg_addr) = self
            .segments
            .iter()
            .find(|&&(o, size, _)| o <= offset && offset < o + size.max(1))?;
        Some(start.wrapping_sub(seg_addr + (offset - seg_offset)))
    }

    /// This file placed in a process, as framehop reads it.
    pub(crate) fn module(
        &self,
        name: &str,
        range: Range<u64>,
        bias: u64,
    ) -> framehop::Module<Bytes> {
        framehop::Module::new(name.to_string(), range, bias, Sections(self))
    }
}

struct Sections<'a>(&'a UnwindInfo);

impl framehop::ModuleSectionInfo<Bytes> for Sections<'_> {
    fn base_svma(&self) -> u64 {
        0
    }

    fn section_svma_range(&mut self, name: &[u8]) -> Option<Range<u64>> {
        self.section(name)?.svma.clone()
    }

    fn section_data(&mut self, name: &[u8]) -> Option<Bytes> {
        self.section(name)?.data.clone()
    }
}

impl Sections<'_> {
    fn section(&self, name: &[u8]) -> Option<&Section> {
        let i = self.0;
        Some(match name {
            b".text" => &i.text,
            b".got" => &i.got,
            b".eh_frame" => &i.eh_frame,
            b".eh_frame_hdr" => &i.eh_frame_hdr,
            b".debug_frame" => &i.debug_frame,
            _ => return None,
        })
    }
}
