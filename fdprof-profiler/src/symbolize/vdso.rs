//! The vDSO has no file to read symbols from, but every process of one ABI on this kernel maps
//! the same image, fdprof included. A copy of fdprof's own image in a memfd (a file on no
//! filesystem, so nothing is written anywhere) lets `[vdso]` frames be symbolized like those of
//! any ELF file.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;

/// fdprof's own vDSO image.
#[derive(Debug)]
pub(super) struct Vdso {
    file: File,
    /// The image's length: a process whose `[vdso]` mapping has another length (another ABI)
    /// maps another image.
    pub len: u64,
}

impl Vdso {
    /// A copy of the image this process maps; `None` when there is none or it cannot be read.
    pub(super) fn own() -> Option<Self> {
        // SAFETY: no preconditions; 0 when the kernel passed no vDSO.
        let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
        if base == 0 {
            return None;
        }
        let maps = crate::procfs::maps("self")?;
        let len = mapping_len(&maps, base)?;
        // SAFETY: the mapping [base, base + len) is this process's vDSO, readable for its life.
        let image = unsafe { std::slice::from_raw_parts(base as *const u8, len as usize) };
        // SAFETY: a valid NUL-terminated name; the new fd is ours alone.
        let fd = unsafe { libc::memfd_create(c"fdprof-vdso".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(image).ok()?;
        Some(Self { file, len })
    }

    /// Where blazesym reads the image.
    pub(super) fn path(&self) -> PathBuf {
        crate::procfs::own::fd_path(self.file.as_raw_fd())
    }

    /// The open image, to keep readable through [`Vdso::path`].
    pub(super) fn into_file(self) -> File {
        self.file
    }
}

/// The length of the `[vdso]` mapping that starts at `base`, from `/proc/self/maps` text (a line
/// `START-END perms offset dev inode [vdso]`, addresses in hex). Read here, not with the
/// symbolizer's parser, which uses this module.
fn mapping_len(maps: &str, base: u64) -> Option<u64> {
    maps.lines().find_map(|line| {
        let (range, _) = line.split_once(' ')?;
        let (start, end) = range.split_once('-')?;
        let start = u64::from_str_radix(start, 16).ok()?;
        let end = u64::from_str_radix(end, 16).ok()?;
        (start == base && line.trim_end().ends_with(" [vdso]")).then(|| end - start)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vdso_mapping_is_found_by_its_start() {
        let maps = "7f0000000000-7f0000001000 r-xp 00000000 08:01 42 /usr/lib/libc.so.6\n\
                    7ffd1a3f2000-7ffd1a3f4000 r-xp 00000000 00:00 0          [vdso]\n";
        assert_eq!(mapping_len(maps, 0x7ffd1a3f2000), Some(0x2000));
        assert_eq!(mapping_len(maps, 0x7f0000000000), None);
    }
}
