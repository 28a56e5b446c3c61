//! Where each mapped file's function names come from, settled when it is first seen (while a
//! process maps it, so its debug files are found through that process's root), and for a
//! file a debuginfod server is asked for, changed once the answer is in.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use fdprof_figures::BuildId;

use super::debug_file::{self, DebugFile, NameSource};
use super::debuginfod::{Config, Debuginfod, Lookup};
use super::elf_info::ElfInfo;

/// Where names are looked for, as the command line or the daemon's config gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugOptions {
    /// `--debug-dir`s: build-id trees or folders of debug files (an artifact store).
    pub dirs: Vec<PathBuf>,
    /// `--debuginfod`: the servers' URLs, whitespace-separated; `None` reads
    /// `DEBUGINFOD_URLS`, and an empty list fetches nothing.
    pub debuginfod: Option<String>,
    /// Where fetched debug files are kept, and the bound on their bytes.
    pub cache: PathBuf,
    pub cache_size: u64,
    /// How long the end of a recording waits for fetches under way.
    pub wait: Duration,
}

impl Default for DebugOptions {
    fn default() -> Self {
        Self {
            dirs: Vec::new(),
            debuginfod: None,
            cache: PathBuf::from(super::debuginfod::DEFAULT_CACHE_DIR),
            cache_size: super::debuginfod::DEFAULT_CACHE_MAX_BYTES,
            wait: Duration::ZERO,
        }
    }
}

impl DebugOptions {
    /// The sources, a debuginfod client started where URLs are given (its cache made, 0700).
    /// Errors are one line: a bad URL, a cache directory that cannot be made safely.
    pub fn sources(&self) -> Result<DebugSources> {
        for dir in &self.dirs {
            if !dir.is_dir() {
                bail!("--debug-dir {}: not a directory", dir.display());
            }
        }
        let config = Config::from_flag_or_env(
            self.debuginfod.as_deref(),
            Some(self.cache.clone()),
            Some(self.cache_size),
        )?;
        let debuginfod = match config {
            Some(config) => Some(Debuginfod::start(config).context("debuginfod")?),
            None => None,
        };
        Ok(DebugSources {
            dirs: self.dirs.clone(),
            debuginfod,
            wait: self.wait,
        })
    }
}

/// Where names are looked for beyond the mapped files themselves.
#[derive(Clone, Default)]
pub struct DebugSources {
    /// `--debug-dir`s: build-id trees or folders of debug files (an artifact store).
    pub dirs: Vec<PathBuf>,
    /// A debuginfod client, where URLs were given.
    pub debuginfod: Option<Arc<Debuginfod>>,
    /// How long the end of a recording waits for fetches under way.
    pub wait: Duration,
}

impl std::fmt::Debug for DebugSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugSources")
            .field("dirs", &self.dirs)
            .field("debuginfod", &self.debuginfod.is_some())
            .finish()
    }
}

/// How a file is symbolized.
#[derive(Debug)]
pub(crate) enum How {
    /// By file offset, from the file itself: its symbol table, or only its dynamic symbols
    /// when nothing better was found (`source` says which).
    Own(NameSource),
    /// By address, from a debug file.
    Debug { debug: DebugFile, path: PathBuf },
    /// Its own dynamic symbols until a debuginfod server is asked: when its frames are first
    /// symbolized (a file no stack runs through is never fetched).
    Unasked,
    /// Its own dynamic symbols while a debuginfod server is asked (since `generation`).
    Waiting { generation: u64 },
}

/// A mapped file's build id, segments and how it is symbolized.
#[derive(Debug)]
pub(crate) struct Names {
    pub build_id: Option<BuildId>,
    info: ElfInfo,
    pub how: How,
}

impl Names {
    /// Settles how the file at `path` (opened by fdprof: `/proc/self/fd/N` or the path in its
    /// process's root), which process `pid` maps as `mapped`, is symbolized. `None` when it is
    /// not an ELF file.
    pub(crate) fn settle(
        path: &Path,
        pid: u32,
        mapped: &str,
        sources: &DebugSources,
    ) -> Option<Self> {
        let binary = File::open(path).ok()?;
        let info = ElfInfo::read(&binary)?;
        let build_id = info.build_id.clone();
        let how = if info.has_symtab {
            How::Own(NameSource::Symtab)
        } else {
            let root = crate::procfs::in_root(pid, Path::new("/"));
            let found = debug_file::find_local(&root, Path::new(mapped), &info, &sources.dirs)
                .or_else(|| {
                    info.debugdata
                        .then(|| debug_file::minidebuginfo(&binary))
                        .flatten()
                });
            match (found, &sources.debuginfod, &build_id) {
                (Some(debug), _, _) => debug_how(debug),
                (None, Some(_), Some(_)) => How::Unasked,
                _ => How::Own(NameSource::Dynsym),
            }
        };
        Some(Self {
            build_id,
            info,
            how,
        })
    }

    /// Asks debuginfod for a file not asked for yet, and again for one waiting once a fetch
    /// has finished since it last asked; true when its debug file came (its frames name
    /// differently from now on).
    pub(crate) fn poll(&mut self, sources: &DebugSources) -> bool {
        let (Some(d), Some(id)) = (&sources.debuginfod, &self.build_id) else {
            return false;
        };
        // Read before asking: a fetch that ends meanwhile moves it past what is kept.
        let now = d.generation();
        let ask = match self.how {
            How::Unasked => true,
            How::Waiting { generation } => generation != now,
            _ => false,
        };
        if !ask {
            return false;
        }
        self.how = match d.lookup(id.bytes()) {
            Lookup::Ready(file) => debug_how(DebugFile {
                file,
                source: NameSource::Debuginfod,
            }),
            Lookup::Pending => How::Waiting { generation: now },
            Lookup::Failed => How::Own(NameSource::Dynsym),
        };
        matches!(self.how, How::Debug { .. })
    }

    /// The address a file offset loads to.
    pub(crate) fn address_of(&self, file_offset: u64) -> Option<u64> {
        self.info.address_of(file_offset)
    }

    /// Where the names come from now.
    pub(crate) fn source(&self) -> NameSource {
        match &self.how {
            How::Own(source) => *source,
            How::Debug { debug, .. } => debug.source,
            How::Unasked | How::Waiting { .. } => NameSource::Dynsym,
        }
    }
}

fn debug_how(debug: DebugFile) -> How {
    let path = crate::procfs::own::fd_path(debug.file.as_raw_fd());
    How::Debug { debug, path }
}

/// What a recording says of its user frames' names: the files named by each source, those
/// with dynamic symbols only, the debuginfod fetches and what they came to.
pub(crate) fn note(
    by: &std::collections::BTreeMap<NameSource, usize>,
    waiting: usize,
    sources: &DebugSources,
) -> Option<String> {
    if by.is_empty() {
        return None;
    }
    let named: Vec<String> = by
        .iter()
        .filter(|(s, _)| **s != NameSource::Dynsym)
        .map(|(s, n)| format!("{n} by {}", s.name()))
        .collect();
    let mut note = format!(
        "user frames' names: mapped files named {}",
        named.join(", ")
    );
    if let Some(&bare) = by.get(&NameSource::Dynsym) {
        note += &format!(
            "; {bare} stripped with no debug file found (dynamic symbols only: their unnamed \
             frames carry the build id and file offset)"
        );
    }
    if !sources.dirs.is_empty() {
        let dirs: Vec<String> = sources
            .dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        note += &format!("; --debug-dir {}", dirs.join(" "));
    }
    if let Some(d) = &sources.debuginfod {
        let c = d.counts();
        let urls: Vec<String> = d.config().urls.iter().map(|u| u.to_string()).collect();
        note += &format!(
            "; debuginfod {}: {} fetched ({} bytes), {} from the cache, {} not found, {} failed, \
             {} refused, {waiting} still fetching when written",
            urls.join(" "),
            c.fetched,
            c.fetched_bytes,
            c.cache_hits,
            c.not_found,
            c.failed,
            c.refused
        );
    }
    Some(note)
}
