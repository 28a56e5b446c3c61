//! Debug files for stripped binaries, looked for where gdb and perf look, in their order:
//! the build-id tree (`.build-id/ab/cdef….debug`) under the process's `/usr/lib/debug`, each
//! `--debug-dir` and the host's; then the `.gnu_debuglink` name next to the binary, in its
//! `.debug/` folder and under `/usr/lib/debug` plus the binary's folder (and under each
//! `--debug-dir`), with the link's CRC checked; then the binary's own MiniDebugInfo. A
//! debuginfod server, where one is given, comes last (`super::debuginfod`).
//!
//! The process's files are found through `/proc/PID/root`, so a container's debug packages
//! serve its binaries. A file found by build id must carry that build id; one found by
//! name must match the link's CRC.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};

use fdprof_figures::BuildId;

use super::elf_info::{ElfInfo, build_id_of};

/// MiniDebugInfo decompressed at most (Fedora's are a few MB).
const MAX_MINIDEBUGINFO: u64 = 256 << 20;

/// Where a mapped file's function names come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NameSource {
    /// Its own symbol table: not stripped.
    Symtab,
    /// A debug file in a build-id tree.
    BuildId,
    /// The debug file its `.gnu_debuglink` names.
    DebugLink,
    /// Its `.gnu_debugdata`.
    MiniDebugInfo,
    /// A debuginfod server (or its cache).
    Debuginfod,
    /// None of those: only its dynamic symbols (exported functions), if any.
    Dynsym,
}

impl NameSource {
    pub const ALL: [NameSource; 6] = [
        NameSource::Symtab,
        NameSource::BuildId,
        NameSource::DebugLink,
        NameSource::MiniDebugInfo,
        NameSource::Debuginfod,
        NameSource::Dynsym,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NameSource::Symtab => "own symbol table",
            NameSource::BuildId => "build-id directory",
            NameSource::DebugLink => "debug link",
            NameSource::MiniDebugInfo => "MiniDebugInfo",
            NameSource::Debuginfod => "debuginfod",
            NameSource::Dynsym => "dynamic symbols only",
        }
    }
}

/// A debug file found, held open (a memfd for MiniDebugInfo).
#[derive(Debug)]
pub(crate) struct DebugFile {
    pub file: File,
    pub source: NameSource,
}

/// The debug file of the binary `binary` (as process `root`'s mount namespace names it), whose
/// facts are `info`, among the local places; `dirs` are `--debug-dir`s (host paths).
pub(crate) fn find_local(
    root: &Path,
    binary: &Path,
    info: &ElfInfo,
    dirs: &[PathBuf],
) -> Option<DebugFile> {
    let trees = || {
        std::iter::once(root.join("usr/lib/debug"))
            .chain(dirs.iter().cloned())
            .chain(std::iter::once(PathBuf::from("/usr/lib/debug")))
    };
    if let Some(id) = &info.build_id {
        let rel = build_id_path(id);
        for tree in trees() {
            if let Some(file) = open_regular(&tree.join(&rel))
                && build_id_of(&file).as_ref() == Some(id)
            {
                return Some(DebugFile {
                    file,
                    source: NameSource::BuildId,
                });
            }
        }
    }
    let (name, crc) = info.debuglink.as_ref()?;
    let folder = binary.parent().unwrap_or(Path::new("/"));
    let relative = folder.strip_prefix("/").unwrap_or(folder);
    let mut candidates = vec![
        root.join(relative).join(name),
        root.join(relative).join(".debug").join(name),
        root.join("usr/lib/debug").join(relative).join(name),
    ];
    for dir in dirs {
        candidates.push(dir.join(relative).join(name));
        candidates.push(dir.join(name));
    }
    candidates.into_iter().find_map(|path| {
        let mut file = open_regular(&path)?;
        let matches = crc32_of(&mut file) == Some(*crc)
            // Never the binary itself (a link naming its own file).
            && info.build_id.as_ref().is_none_or(|id| {
                build_id_of(&file).as_ref().is_none_or(|other| other == id)
            });
        matches.then_some(DebugFile {
            file,
            source: NameSource::DebugLink,
        })
    })
}

/// The binary's MiniDebugInfo (`.gnu_debugdata`, xz), decompressed into a memfd (a file on no
/// filesystem): `None` when it has none, or it is bad or past the bound.
pub(crate) fn minidebuginfo(binary: &File) -> Option<DebugFile> {
    let xz = ElfInfo::debugdata(binary)?;
    let mut elf = Vec::new();
    let mut reader = std::io::BufReader::new(xz.as_slice());
    let mut bounded = BoundedWriter {
        out: &mut elf,
        left: MAX_MINIDEBUGINFO,
    };
    lzma_rs::xz_decompress(&mut reader, &mut bounded).ok()?;
    if !elf.starts_with(b"\x7fELF") {
        return None;
    }
    // SAFETY: a valid NUL-terminated name; the new fd is ours alone.
    let fd = unsafe { libc::memfd_create(c"fdprof-minidebuginfo".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(&elf).ok()?;
    Some(DebugFile {
        file,
        source: NameSource::MiniDebugInfo,
    })
}

/// A `Write` that fails past `left` bytes, so a bomb stops at the bound.
struct BoundedWriter<'a> {
    out: &'a mut Vec<u8>,
    left: u64,
}

impl Write for BoundedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() as u64 > self.left {
            return Err(std::io::Error::other("past the bound"));
        }
        self.left -= buf.len() as u64;
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Opens `path` for reading if it is a regular file (links followed: build-id trees are made
/// of them); never a FIFO or a device, which could block or have no end.
fn open_regular(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

/// The CRC-32 (zlib's) of the whole file, as `.gnu_debuglink` records it.
fn crc32_of(file: &mut File) -> Option<u32> {
    use std::io::Seek;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    file.rewind().ok()?;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(_) => return None,
        }
    }
    Some(hasher.finalize())
}

/// The build id's path in a build-id tree.
pub(crate) fn build_id_path(id: &BuildId) -> String {
    let hex = id.to_string();
    format!(".build-id/{}/{}.debug", &hex[..2], &hex[2..])
}
