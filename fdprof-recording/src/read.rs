//! Reading a recording: any input gives the recording or one line of error naming the input and
//! what is wrong with it, never a panic, a hang or unbounded memory.
//!
//! The input is a regular file (a FIFO, device or directory is refused without being read) or
//! `-`, standard input, of at most [`MAX_BYTES`]. It is parsed twice, never into a
//! `serde_json::Value`: first only `format` and `version`, described whatever JSON they hold, so
//! a foreign or newer file is named as such; then the typed model, whose lists and strings stop
//! at the bounds of what fdprof writes ([`super::bounded`]); then what its claims would take
//! once expanded, against one budget ([`super::budget`]).

use std::fmt;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::recording::{FORMAT, Recording, VERSION};

/// The largest recording read: 64 MiB. `record` writes at most 16384 contention sites (the
/// CONTENTION map's entries, which also split a site by wait bucket), ~330 bytes each plus ~120
/// per stack frame: 16384 sites with 20 frames (kernel and user stack together) come to 45 MB.
/// Full 127 + 127-frame stacks at all of them would be 0.5 GB, more than `report` could hold in
/// the 1 GiB it must run in; a file of 64 MiB is reported and drawn in well under that
/// (`fdprof/tests/it/reader_fuzz/`).
pub const MAX_BYTES: u64 = 64 << 20;

/// Reads the recording at `path` (`-`: standard input).
pub fn read(path: &Path) -> Result<Recording> {
    read_sized(path).map(|(rec, _)| rec)
}

/// Reads the recording at `path` (`-`: standard input), and the bytes it took: what an export
/// may make of it is stated against them.
pub fn read_sized(path: &Path) -> Result<(Recording, u64)> {
    let (data, name) = if path == Path::new("-") {
        let name = "standard input".to_string();
        let data = read_to_end(std::io::stdin().lock(), 0, &name)?;
        (data, name)
    } else {
        let name = path.display().to_string();
        (read_file(path, &name)?, name)
    };
    Ok((parse(&data, &name)?, data.len() as u64))
}

/// Parses a recording held in memory; `name` names it in errors.
pub fn parse(data: &[u8], name: &str) -> Result<Recording> {
    if data.iter().all(u8::is_ascii_whitespace) {
        bail!("{name} is empty, not an fdprof recording");
    }
    check_header(data, name)?;
    let rec = serde_json::from_slice(data)
        .map_err(|e| anyhow!("{name} is a corrupt fdprof recording: {}", json_error(&e)))?;
    // Before anything is expanded: what its claims would take.
    super::budget::check(&rec, None, name).map_err(|e| anyhow!(e))?;
    Ok(rec)
}

fn read_file(path: &Path, name: &str) -> Result<Vec<u8>> {
    // O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting for one.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("cannot read {name}"))?;
    // The type and size of the file opened, not of whatever the path names by now.
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read {name}"))?;
    let kind = meta.file_type();
    let not_file = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    };
    if let Some(kind) = not_file {
        bail!("{name} is {kind}, not a recording file");
    }
    if meta.len() > MAX_BYTES {
        bail!("{name} is {} bytes, {}", meta.len(), too_big());
    }
    read_to_end(file, meta.len(), name)
}

/// Reads at most [`MAX_BYTES`]: a file may grow after its size was checked.
fn read_to_end(input: impl Read, size: u64, name: &str) -> Result<Vec<u8>> {
    let mut data = Vec::with_capacity(size as usize);
    input
        .take(MAX_BYTES + 1)
        .read_to_end(&mut data)
        .with_context(|| format!("cannot read {name}"))?;
    if data.len() as u64 > MAX_BYTES {
        bail!("{name} holds {}", too_big());
    }
    Ok(data)
}

fn too_big() -> String {
    format!(
        "more than the largest recording fdprof reads ({} MiB)",
        MAX_BYTES >> 20
    )
}

/// Fails unless the document is an object whose `format` and `version` are fdprof's.
fn check_header(data: &[u8], name: &str) -> Result<()> {
    let header: Header = serde_json::from_slice(data).map_err(|e| {
        if e.is_data() {
            anyhow!("{name} is not an fdprof recording ({})", json_error(&e))
        } else {
            anyhow!(
                "{name} is not a complete fdprof recording (truncated or corrupt: {})",
                json_error(&e)
            )
        }
    })?;
    match header.format {
        Some(Json::Str(ref s, false)) if s == FORMAT => {}
        None => bail!("{name} is not an fdprof recording (it has no \"format\" field)"),
        Some(other) => {
            bail!("{name} is not an fdprof recording (its format is {other}, not \"{FORMAT}\")")
        }
    }
    match header.version {
        Some(Json::Unsigned(v)) if v == u64::from(VERSION) => Ok(()),
        // Version 1 kept each role's attachment only as text: nothing to read it back from.
        Some(Json::Unsigned(v)) if v < u64::from(VERSION) => bail!(
            "{name}: recording format version {v} was written by an older fdprof; this fdprof \
             reads version {VERSION}: record it again"
        ),
        None => bail!("{name} has no format version; this fdprof reads version {VERSION}"),
        Some(other) => bail!(
            "{name}: recording format version {other} is not one this fdprof reads (it reads \
             version {VERSION})"
        ),
    }
}

/// serde_json's message, cut short and on one line, with its line and column.
fn json_error(e: &serde_json::Error) -> String {
    const MAX_CHARS: usize = 200;
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    let message = text.strip_suffix(&position).unwrap_or(&text);
    let mut out = String::new();
    for c in message.chars().take(MAX_CHARS) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if message.chars().count() > MAX_CHARS {
        out.push('…');
    }
    if e.line() > 0 {
        out.push_str(&position);
    }
    out
}

/// The two fields that say what a document is; every other field is skipped unread.
struct Header {
    format: Option<Json>,
    version: Option<Json>,
}

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(HeaderVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Header;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Header, A::Error> {
        let mut header = Header {
            format: None,
            version: None,
        };
        while let Some(key) = map.next_key::<HeaderKey>()? {
            match key {
                HeaderKey::Format => header.format = Some(map.next_value()?),
                HeaderKey::Version => header.version = Some(map.next_value()?),
                HeaderKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(header)
    }
}

enum HeaderKey {
    Format,
    Version,
    Other,
}

impl<'de> Deserialize<'de> for HeaderKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = HeaderKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<HeaderKey, E> {
                Ok(match s {
                    "format" => HeaderKey::Format,
                    "version" => HeaderKey::Version,
                    _ => HeaderKey::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Any JSON value, kept only as far as a message needs it: a string's first
/// [`Json::STR_CHARS`] characters (and whether there were more), nothing of arrays and objects.
#[derive(Debug, PartialEq)]
enum Json {
    Unsigned(u64),
    Negative(i64),
    /// A number with a fraction or exponent, or an integer beyond 64 bits.
    Float(f64),
    Str(String, bool),
    Bool(bool),
    Null,
    Array,
    Object,
}

impl Json {
    const STR_CHARS: usize = 40;
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Json::Unsigned(n) => write!(f, "{n}"),
            Json::Negative(n) => write!(f, "{n} (a negative number)"),
            // serde_json reads integers beyond 64 bits as floats: write them out in full.
            Json::Float(x) if x.fract() == 0.0 && x.abs() >= 2f64.powi(63) && x.is_finite() => {
                write!(f, "{x:.0} (an integer beyond 64 bits)")
            }
            Json::Float(x) => write!(f, "{x:?} (not an integer)"),
            Json::Str(s, cut) => {
                write!(f, "{s:?}")?;
                if *cut {
                    f.write_str("…")?;
                }
                f.write_str(" (a string)")
            }
            Json::Bool(b) => write!(f, "{b} (a boolean)"),
            Json::Null => f.write_str("null"),
            Json::Array => f.write_str("[…] (an array)"),
            Json::Object => f.write_str("{…} (an object)"),
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Unsigned(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(match u64::try_from(v) {
            Ok(v) => Json::Unsigned(v),
            Err(_) => Json::Negative(v),
        })
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        let mut chars = v.chars();
        let kept: String = chars.by_ref().take(Json::STR_CHARS).collect();
        Ok(Json::Str(kept, chars.next().is_some()))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Json::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Json::Object)
    }
}

impl Recording {
    /// Reads a recording (`-`: standard input), with one clear line of error for anything
    /// that is not a complete recording within the bounds of what fdprof writes
    /// ([`read`]).
    pub fn read(path: &Path) -> Result<Self> {
        read(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary file, removed on drop.
    struct Temp(std::path::PathBuf);

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn file(bytes: &[u8]) -> Temp {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("fdprof-read-{}-{n}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        Temp(path)
    }

    fn err_of(path: &Path) -> String {
        format!("{:#}", read(path).unwrap_err())
    }

    #[test]
    fn non_regular_files_are_refused_unread() {
        assert_eq!(
            err_of(Path::new("/dev/zero")),
            "/dev/zero is a character device, not a recording file"
        );
        let dir = std::env::temp_dir();
        assert_eq!(
            err_of(&dir),
            format!("{} is a directory, not a recording file", dir.display())
        );
        // A FIFO with no writer: opening it must not wait for one.
        let fifo = std::env::temp_dir().join(format!("fdprof-read-{}.fifo", std::process::id()));
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let msg = err_of(&fifo);
        std::fs::remove_file(&fifo).unwrap();
        assert_eq!(
            msg,
            format!("{} is a FIFO, not a recording file", fifo.display())
        );
    }

    #[test]
    fn oversize_files_are_refused_unread() {
        let big = file(b"");
        let f = std::fs::File::options().write(true).open(&big.0).unwrap();
        f.set_len(MAX_BYTES + 1).unwrap();
        let msg = err_of(&big.0);
        assert!(
            msg.ends_with(&format!(
                "is {} bytes, more than the largest recording fdprof reads (64 MiB)",
                MAX_BYTES + 1
            )),
            "{msg}"
        );
    }

    #[test]
    fn empty_truncated_and_foreign_documents() {
        assert!(err_of(&file(b" \n").0).ends_with("is empty, not an fdprof recording"));
        let msg = err_of(&file(b"{\"format\": \"fdprof-recording\", \"vers").0);
        assert!(
            msg.contains("is not a complete fdprof recording (truncated or corrupt: EOF while"),
            "{msg}"
        );
        let msg = err_of(&file(b"[1, 2]").0);
        assert!(
            msg.contains(
                "is not an fdprof recording (invalid type: sequence, expected a JSON object"
            ),
            "{msg}"
        );
        let msg = err_of(&file(b"{\"version\": 1}").0);
        assert!(
            msg.ends_with("is not an fdprof recording (it has no \"format\" field)"),
            "{msg}"
        );
        let msg = err_of(&file(b"{\"format\": \"perf-data\", \"version\": 1}").0);
        assert!(
            msg.ends_with(
                "is not an fdprof recording (its format is \"perf-data\" (a string), not \
                 \"fdprof-recording\")"
            ),
            "{msg}"
        );
        let msg = err_of(&file(b"{\"format\": [[[\"fdprof-recording\"]]], \"version\": 1}").0);
        assert!(msg.contains("its format is […] (an array)"), "{msg}");
    }

    #[test]
    fn long_strings_in_messages_are_cut_and_escaped() {
        let format = format!("\"{}\\n\\u001b[31m\"", "x".repeat(100));
        let msg = err_of(&file(format!("{{\"format\": {format}}}").as_bytes()).0);
        assert!(
            msg.ends_with(&format!(
                "(its format is \"{}\"… (a string), not \"fdprof-recording\")",
                "x".repeat(40)
            )),
            "{msg}"
        );
        let value = format!("\"\\u001b[31m{}\"", "y".repeat(300));
        let doc =
            format!("{{\"format\": \"fdprof-recording\", \"version\": 2, \"target\": {value}}}");
        let msg = err_of(&file(doc.as_bytes()).0);
        assert!(!msg.contains('\u{1b}') && !msg.contains('\n'), "{msg}");
        assert!(msg.len() < 400, "{msg}");
        assert!(
            msg.contains("is a corrupt fdprof recording: invalid type: string"),
            "{msg}"
        );
    }
}
