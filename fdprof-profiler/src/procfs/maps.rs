//! The executable mappings of `/proc/PID/maps`: what the symbolizer names frames by and the
//! unwinder finds call-frame information in.

/// One executable mapping of `/proc/PID/maps`, file-backed (`path` absolute) or a kernel-provided
/// one such as `[vdso]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecMapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// `(major, minor)` of the device holding the file.
    pub dev: (u32, u32),
    pub inode: u64,
    /// Path as the kernel shows it, without the ` (deleted)` suffix.
    pub path: String,
    /// The file was unlinked after it was mapped.
    pub deleted: bool,
}

impl ExecMapping {
    pub(crate) fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }
}

/// The executable mappings listed in `/proc/PID/maps` text, in file order. Anonymous executable
/// memory (JIT code) has no name to give and is skipped.
pub(crate) fn parse_maps(text: &str) -> Vec<ExecMapping> {
    text.lines().filter_map(parse_maps_line).collect()
}

fn parse_maps_line(line: &str) -> Option<ExecMapping> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (f, r) = trimmed.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let dev = field();
    let inode = field();
    let path = rest.trim();

    if perms.as_bytes().get(2) != Some(&b'x') || path.is_empty() {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(p) => (p, true),
        None => (path, false),
    };
    Some(ExecMapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        ),
        inode: inode.parse().ok()?,
        path: path.to_string(),
        deleted,
    })
}
