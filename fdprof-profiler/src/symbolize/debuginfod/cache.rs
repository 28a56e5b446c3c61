//! The on-disk cache: `{dir}/{hex build id}.debug`, written by root, read by root.
//!
//! The directory must be a real directory (not a symlink) owned by us, mode 0700. Files are
//! created with `O_CREAT|O_EXCL|O_NOFOLLOW` (0600) under a temporary name, validated as the ELF
//! file of the requested build id, and only then renamed into place; cached files are opened with
//! `O_NOFOLLOW` and used only if they are regular files we own. Nothing is written through a
//! path this process did not create.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use anyhow::{Context, bail};
use object::{Object, ObjectSection};

/// Temporary files are `{TEMP_PREFIX}{pid}-{seq}-{hex}`: the pid tells a crashed process's
/// leftovers from a live one's download.
const TEMP_PREFIX: &str = ".fdprof-tmp-";
const SUFFIX: &str = ".debug";

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[derive(Debug)]
pub(super) struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    /// One eviction at a time: two would remove more than needed.
    evicting: Mutex<()>,
}

/// What the cache holds for one build id.
#[derive(Debug)]
pub(super) enum Cached {
    /// The debug file, opened and positioned at its start.
    Hit(File),
    Missing,
    /// Something unusable was there (a symlink, a foreign or invalid file): removed.
    Bad(String),
}

/// Why a downloaded file was not installed.
#[derive(Debug)]
pub(super) enum InstallError {
    /// Not the ELF debug file of the build id asked for.
    Refused(String),
    /// The cache itself failed (disk full, rename).
    Io(String),
}

/// A file being downloaded: removed on drop unless it was installed.
#[derive(Debug)]
pub(super) struct TempFile {
    path: PathBuf,
    pub(super) file: File,
    installed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.installed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

impl Cache {
    /// Creates the directory (0700, its missing parents 0755) or checks the existing one, then
    /// removes the temporary files that crashed processes left.
    pub(super) fn open(dir: &Path, max_bytes: u64) -> anyhow::Result<Cache> {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("creating the debuginfod cache {}", dir.display()));
            }
        }
        check_dir(dir)?;
        let cache = Cache {
            dir: dir.to_path_buf(),
            max_bytes,
            evicting: Mutex::new(()),
        };
        cache.remove_stale_temps();
        Ok(cache)
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(super) fn path_of(&self, build_id: &[u8]) -> PathBuf {
        self.dir.join(format!("{}{SUFFIX}", hex(build_id)))
    }

    /// Opens the cached file of `build_id`, checking its build id when `validate` (and then
    /// touching it, so eviction sees it as recently used). Never follows a symlink and never
    /// blocks on a planted FIFO.
    pub(super) fn open_cached(&self, build_id: &[u8], validate: bool) -> Cached {
        let path = self.path_of(build_id);
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path);
        let mut file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Cached::Missing,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return self.discard(&path, "a symbolic link");
            }
            Err(e) => return self.discard(&path, &e.to_string()),
        };
        match file.metadata() {
            Ok(md) if md.is_file() && md.uid() == euid() => {}
            Ok(_) => return self.discard(&path, "not a regular file of ours"),
            Err(e) => return self.discard(&path, &e.to_string()),
        }
        if validate {
            if let Err(why) = validate_elf(&mut file, build_id) {
                return self.discard(&path, &why);
            }
            // Best effort: a file whose time cannot be set is only evicted earlier.
            let _ = file.set_modified(SystemTime::now());
        }
        match file.seek(SeekFrom::Start(0)) {
            Ok(_) => Cached::Hit(file),
            Err(e) => Cached::Bad(format!("debuginfod cache {}: {e}", path.display())),
        }
    }

    /// Removes an unusable entry (unlinking a symlink removes the link, not its target).
    fn discard(&self, path: &Path, why: &str) -> Cached {
        let _ = fs::remove_file(path);
        Cached::Bad(format!(
            "debuginfod cache {}: {why}; removed",
            path.display()
        ))
    }

    /// A new, empty temporary file for the download of `build_id`.
    pub(super) fn create_temp(&self, build_id: &[u8]) -> io::Result<TempFile> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{TEMP_PREFIX}{}-{seq}-{}",
            std::process::id(),
            hex(build_id)
        );
        let path = self.dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        Ok(TempFile {
            path,
            file,
            installed: false,
        })
    }

    /// Validates a finished download and renames it into place. Returns its size.
    pub(super) fn install(&self, mut temp: TempFile, build_id: &[u8]) -> Result<u64, InstallError> {
        validate_elf(&mut temp.file, build_id).map_err(InstallError::Refused)?;
        let size = temp
            .file
            .metadata()
            .map_err(|e| InstallError::Io(e.to_string()))?
            .len();
        fs::rename(&temp.path, self.path_of(build_id))
            .map_err(|e| InstallError::Io(e.to_string()))?;
        temp.installed = true;
        Ok(size)
    }

    /// Removes the oldest (by mtime) debug files until the rest fit in the bound. Returns the
    /// bytes the cache then holds.
    pub(super) fn evict(&self) -> u64 {
        let _one = self.evicting.lock().unwrap_or_else(|e| e.into_inner());
        let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return 0;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().ends_with(SUFFIX) {
                continue;
            }
            // DirEntry::metadata does not follow symlinks: only our regular files count.
            match entry.metadata() {
                Ok(md) if md.is_file() => {
                    let mtime = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    files.push((mtime, md.len(), entry.path()));
                }
                _ => {}
            }
        }
        files.sort();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        for (_, size, path) in files {
            if total <= self.max_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= size;
            }
        }
        total
    }

    /// Temporary files whose process is gone (or is this one, from an earlier instance).
    fn remove_stale_temps(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else {
                continue;
            };
            let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            let alive =
                |pid: u32| pid != std::process::id() && Path::new(&format!("/proc/{pid}")).exists();
            if !pid.is_some_and(alive) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// The cache directory must be a real directory owned by us; it is then made 0700. Checked on
/// an `O_NOFOLLOW` descriptor, so a symlink swapped in between check and chmod is no danger.
fn check_dir(dir: &Path) -> anyhow::Result<()> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir);
    let handle = match opened {
        Ok(f) => f,
        // With O_DIRECTORY, Linux answers ENOTDIR (not ELOOP) for a symlink.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            let link = fs::symlink_metadata(dir).is_ok_and(|md| md.file_type().is_symlink());
            let what = if link {
                "a symbolic link"
            } else {
                "not a directory"
            };
            bail!("debuginfod cache {} is {what}: refused", dir.display())
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("opening the debuginfod cache {}", dir.display()));
        }
    };
    let md = handle.metadata()?;
    if !md.is_dir() || md.uid() != euid() {
        bail!(
            "debuginfod cache {} is not a directory owned by uid {}: refused",
            dir.display(),
            euid()
        );
    }
    handle
        .set_permissions(fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 0700 {}", dir.display()))
}

/// Checks that `file` is a complete ELF file whose GNU build id is `build_id`; the reason when
/// not. Reads only the headers and the notes, not the whole file.
pub(super) fn validate_elf(file: &mut File, build_id: &[u8]) -> Result<(), String> {
    let mut magic = [0u8; 4];
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    if file.read_exact(&mut magic).is_err() || magic != *b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let data = object::ReadCache::new(&*file);
    let elf = object::File::parse(&data).map_err(|e| format!("not a valid ELF file: {e}"))?;
    // A file cut short may still parse (the section headers of some layouts come early): every
    // section with file contents must lie within the file.
    for section in elf.sections() {
        if let Some((offset, size)) = section.file_range()
            && offset.checked_add(size).is_none_or(|end| end > len)
        {
            return Err("truncated ELF file".into());
        }
    }
    match elf.build_id() {
        Ok(Some(id)) if id == build_id => Ok(()),
        Ok(Some(id)) => Err(format!("its build id is {}", hex(id))),
        Ok(None) => Err("no build id".into()),
        Err(e) => Err(format!("unreadable build id: {e}")),
    }
}
