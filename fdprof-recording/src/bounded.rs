//! The bounds of what fdprof writes, enforced while a recording is deserialized: each bounded
//! sequence, map and string of the model names one of the functions below in
//! `#[serde(deserialize_with)]`, which fails at the first element past the bound, so a hostile
//! file costs no more than the bounds (and [`super::read::MAX_BYTES`]) allow.
//!
//! serde_json hands a string over whole, so a string's bound is checked once it is read; the file
//! size bounds that.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use fdprof_common::{counters::drop, fnops::op, syscalls::N_SYSCALLS};
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Slots of a log2 histogram: values are u64, so `log2_slot` gives 0..=64.
pub const SLOTS: usize = 65;
/// Frames of one stack: PERF_MAX_STACK_DEPTH, the addresses an entry of the STACKS map holds.
pub const FRAMES: usize = 127;
/// Contention sites: entries of the CONTENTION map (`fdprof-ebpf/src/contention.rs`); a site
/// is one or more of them.
pub const SITES: usize = 16384;
/// fd syscalls: one row per entry of `FD_SYSCALLS` at most.
pub const SYSCALLS: usize = N_SYSCALLS as usize;
/// fd-table functions: the probed operations and `other` (`fnops::op::OPERATIONS`).
pub const FUNCTIONS: usize = op::COUNT as usize + 1;
/// BPF programs: fdprof's eBPF object has 38 plus a fentry/fexit pair per fd syscall (110);
/// room to grow.
pub const PROGRAMS: usize = 160;
/// Drop counters: every (probe, reason) pair, plus a recursion-miss counter per program.
pub const DROPS: usize = (drop::PROBES * drop::COUNT) as usize + PROGRAMS;
/// Probe roles in `modes`: 8 today (6 function roles, 2 tracepoint families).
pub const MODES: usize = 32;
/// Notes: a few per role at most.
pub const NOTES: usize = 64;
/// Samples of a series: a million intervals (11.6 days at 1 s; the file's size bounds it first).
pub const SAMPLES: usize = 1_000_000;
/// Wait rows of one sample: one per (lock, operation), named locks past the first few hundred
/// folded into their kind's rows (`series::grouped_waits`).
pub const SAMPLE_WAITS: usize = 512;
/// Rows of per-thread counters: the threads of most task-clock, the rest folded into one
/// ([`crate::counters::bound_rows`]).
pub const COUNTER_ROWS: usize = 256;
/// Counters of a recording, and readings of one thread: one per `CounterName`, room to grow.
pub const COUNTERS: usize = 32;
/// Words of a command line: execve takes at most 6 MiB of strings and pointers, at least 9
/// bytes a word.
pub const ARG_WORDS: usize = 1 << 20;

/// Names from fdprof's tables and the kernel's (locks, operations, syscalls, probes, programs,
/// modes, comm, kernel release): KSYM_NAME_LEN.
pub const NAME_BYTES: usize = 512;
/// Function names: kernel ones are at most KSYM_NAME_LEN (512) bytes; user ones are demangled
/// ELF symbols, which have no fixed limit, so 128 times that.
pub const FUNCTION_BYTES: usize = 64 << 10;
/// Module (mapped file) names: PATH_MAX.
pub const PATH_BYTES: usize = 4096;
/// One word of a command line: MAX_ARG_STRLEN.
pub const ARG_BYTES: usize = 128 << 10;
/// Sentences: notes (which quote kernel errors), mode descriptions, the scan origin.
pub const TEXT_BYTES: usize = 64 << 10;

/// Tables of an fd trace (`record --trace` traces one process), and the runs of open fds a
/// table's snapshot has.
pub const TRACE_TABLES: usize = 4096;
pub const TRACE_RUNS: usize = 1 << 20;
/// Rows of an fd trace: `record --trace-limit` keeps at most 5,000,000 operations.
pub const TRACE_ROWS: u64 = 5_000_000;
/// The largest fd table a trace's snapshot may describe, in fds: 2^27, the table of Al Viro's
/// worst case and the largest `replay` builds a model of (`replay --synthetic --fds` stops there
/// too). The kernel allows up to `fs.nr_open`, at most 2^31 - 64, but a process with a table
/// of 2^27 already holds 1 GiB of file pointers; `record` writes what the kernel had, and a
/// larger table is refused here rather than replayed in part.
pub const TRACE_MAX_FDS: u32 = 1 << 27;

pub fn trace_rows<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let rows = u64::deserialize(d)?;
    if rows > TRACE_ROWS {
        return Err(de::Error::custom(format_args!(
            "an fd trace of {rows} rows (fdprof writes at most {TRACE_ROWS})"
        )));
    }
    Ok(rows)
}

pub fn trace_max_fds<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let fds = u32::deserialize(d)?;
    if fds > TRACE_MAX_FDS {
        return Err(de::Error::custom(format_args!(
            "a table snapshot of {fds} fds (fdprof reads tables of at most {TRACE_MAX_FDS})"
        )));
    }
    Ok(fds)
}

pub fn trace_tables<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, TRACE_TABLES, "fd trace tables")
}

pub fn trace_runs<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, TRACE_RUNS, "runs of a table snapshot")
}

pub fn slots<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    seq(d, PhantomData, SLOTS, "slots in a histogram")
}

pub fn frames<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, FRAMES, "frames in a stack")
}

pub fn sites<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, SITES, "contention sites")
}

pub fn cpu_sites<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, SITES, "on-CPU stacks")
}

pub fn counter_rows<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, COUNTER_ROWS, "counter rows")
}

pub fn counter_events<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, COUNTERS, "counters")
}

/// The pids of a `-p` list: at most as many as a target set holds.
pub fn pids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u32>, D::Error> {
    seq(d, PhantomData, 65536, "pids")
}

pub fn processes<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    // One per (process, syscall) row at most.
    let rows = fdprof_common::process::PROCESS_ROWS as usize;
    seq(d, PhantomData, rows, "processes")
}

pub fn syscalls<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, SYSCALLS, "syscalls")
}

pub fn functions<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, FUNCTIONS, "fd-table functions")
}

pub fn programs<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, PROGRAMS, "programs")
}

pub fn drops<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, DROPS, "drop counters")
}

pub fn samples<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, SAMPLES, "series samples")
}

pub fn sample_waits<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    seq(d, PhantomData, SAMPLE_WAITS, "wait rows in a sample")
}

pub fn notes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    seq(d, Str(TEXT_BYTES, "note"), NOTES, "notes")
}

pub fn command<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    seq(
        d,
        Str(ARG_BYTES, "command-line word"),
        ARG_WORDS,
        "command-line words",
    )
}

/// The cgroups of a `--cgroup` list: paths, at most as many as the kernel follows.
pub fn cgroups<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    seq(
        d,
        Str(PATH_BYTES, "cgroup path"),
        fdprof_common::targets::MAX_CGROUPS as usize,
        "cgroups",
    )
}

/// Role → mode.
pub fn modes<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    d.deserialize_map(ModesVisitor)
}

pub fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Str(NAME_BYTES, "name").deserialize(d)
}

pub fn opt_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_option(OptStr(Str(NAME_BYTES, "name")))
}

pub fn function<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Str(FUNCTION_BYTES, "function name").deserialize(d)
}

pub fn module<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_option(OptStr(Str(PATH_BYTES, "module name")))
}

pub fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_option(OptStr(Str(TEXT_BYTES, "text")))
}

pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Str(TEXT_BYTES, "text").deserialize(d)
}

/// At most `max` elements, each read by `elem`; `what` names them in the error.
fn seq<'de, D, S>(d: D, elem: S, max: usize, what: &'static str) -> Result<Vec<S::Value>, D::Error>
where
    D: Deserializer<'de>,
    S: DeserializeSeed<'de> + Copy,
{
    d.deserialize_seq(SeqVisitor { elem, max, what })
}

struct SeqVisitor<S> {
    elem: S,
    max: usize,
    what: &'static str,
}

impl<'de, S: DeserializeSeed<'de> + Copy> Visitor<'de> for SeqVisitor<S> {
    type Value = Vec<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of at most {} {}", self.max, self.what)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // No pre-allocation from a size hint: only what is actually there.
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.elem)? {
            if out.len() == self.max {
                return Err(de::Error::custom(format_args!(
                    "more than {} {} (fdprof writes at most {})",
                    self.max, self.what, self.max
                )));
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// A string of at most `.0` bytes, named `.1` in the error.
#[derive(Clone, Copy)]
struct Str(usize, &'static str);

impl<'de> DeserializeSeed<'de> for Str {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Str {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a {} of at most {} bytes", self.1, self.0)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<String, E> {
        if s.len() > self.0 {
            return Err(E::custom(format_args!(
                "a {} of {} bytes (fdprof writes at most {})",
                self.1,
                s.len(),
                self.0
            )));
        }
        Ok(s.to_owned())
    }
}

#[derive(Clone, Copy)]
struct OptStr(Str);

impl<'de> Visitor<'de> for OptStr {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

struct ModesVisitor;

impl<'de> Visitor<'de> for ModesVisitor {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a map of at most {MODES} probe roles to modes")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        let mut entries = 0;
        while let Some((role, mode)) =
            map.next_entry_seed(Str(NAME_BYTES, "role"), Str(TEXT_BYTES, "mode"))?
        {
            entries += 1;
            if entries > MODES {
                return Err(de::Error::custom(format_args!(
                    "more than {MODES} probe roles (fdprof writes at most {MODES})"
                )));
            }
            out.insert(role, mode);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Probe {
        #[serde(default, deserialize_with = "super::slots")]
        slots: Vec<u64>,
        #[serde(default, deserialize_with = "super::module")]
        module: Option<String>,
        #[serde(default, deserialize_with = "super::modes")]
        modes: std::collections::BTreeMap<String, String>,
    }

    fn err(json: &str) -> String {
        serde_json::from_str::<Probe>(json).unwrap_err().to_string()
    }

    #[test]
    fn sequences_stop_at_their_bound() {
        let ok = format!("{{\"slots\": [{}]}}", vec!["7"; 65].join(","));
        assert_eq!(serde_json::from_str::<Probe>(&ok).unwrap().slots.len(), 65);
        // The error comes at the 66th element, not at the end of a longer list.
        let long = format!("{{\"slots\": [{}", vec!["7"; 66].join(","));
        let msg = err(&long);
        assert!(
            msg.starts_with(
                "more than 65 slots in a histogram (fdprof writes at most 65) at line 1 column"
            ),
            "{msg}"
        );
        let modes: Vec<String> = (0..33).map(|i| format!("\"r{i}\": \"m\"")).collect();
        let ok: Probe =
            serde_json::from_str(&format!("{{\"modes\": {{{}}}}}", modes[1..].join(","))).unwrap();
        assert_eq!(ok.modes.len(), 32);
        let msg = err(&format!("{{\"modes\": {{{}}}}}", modes.join(",")));
        assert!(msg.starts_with("more than 32 probe roles"), "{msg}");
    }

    #[test]
    fn strings_stop_at_their_bound() {
        let path = "a".repeat(4096);
        let p: Probe = serde_json::from_str(&format!("{{\"module\": \"{path}\"}}")).unwrap();
        assert_eq!(p.module.as_deref(), Some(path.as_str()));
        let msg = err(&format!("{{\"module\": \"{path}b\"}}"));
        assert!(
            msg.starts_with("a module name of 4097 bytes (fdprof writes at most 4096)"),
            "{msg}"
        );
        let p: Probe = serde_json::from_str("{\"module\": null}").unwrap();
        assert_eq!(p.module, None);
        assert!(err("{\"module\": 5}").starts_with("invalid type: integer `5`"));
    }
}
