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
        let image = crate::procfs::own::vdso_image()?;
        let len = image.len() as u64;
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
