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
pub struct Vdso {
    file: File,
    /// The image's length: a process whose `[vdso]` mapping has another length (another ABI)
    /// maps another image.
    pub len: u64,
}

impl Vdso {
    /// A copy of the image this process maps; `None` when there is none or it cannot be read.
    pub fn own() -> Option<Self> {
        // SAFETY: no preconditions; 0 when the kernel passed no vDSO.
        let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
        if base == 0 {
            return None;
        }
        let maps = crate::procfs::maps("self")?;
        let len = super::user::parse_maps(&maps)
            .into_iter()
            .find(|m| m.path == "[vdso]" && m.start == base)
            .map(|m| m.end - m.start)?;
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
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// The open image, to keep readable through [`Vdso::path`].
    pub fn into_file(self) -> File {
        self.file
    }
}
