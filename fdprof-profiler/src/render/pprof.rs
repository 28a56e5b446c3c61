//! A [`Profile`] as pprof's `perftools.profiles.Profile`: protobuf, gzipped, as `go tool
//! pprof`, Pyroscope and Parca read it.
//!
//! Lock waits use Go's mutex-profile sample types (`contentions/count`, `delay/nanoseconds`),
//! so readers take them for a lock profile; CPU samples use `samples/count`, `cpu/nanoseconds`.
//! A wait's operation and lock are the string labels `operation` and `lock`. Each distinct
//! frame is one location with one line (its function) in the mapping of its module and build
//! id.
//!
//! User locations are in file-offset space, the same in every process that maps the file: a
//! mapping's start is its file offset, and a location's address is the frame's offset in the
//! file, so `address - start + file_offset` is where the instruction lies in the file whose
//! build id the mapping names (what Parca, Pyroscope and `go tool pprof` symbolize from).
//! Kernel locations have address zero unless the profile kept addresses (`--raw-addrs`).

use std::collections::HashMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

use crate::analysis::{Profile, ProfileFrame, Space, ValueType};

// The messages of profile.proto that fdprof writes, with their public field numbers.

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PprofProfile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<PprofValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<PprofSample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<PprofMapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<PprofLocation>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<PprofFunction>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<PprofValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PprofValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PprofSample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<PprofLabel>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PprofLabel {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PprofMapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PprofLocation {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<PprofLine>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PprofLine {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct PprofFunction {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
}

/// The string table: index 0 is the empty string, as the format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Self {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.get("");
        s
    }

    fn get(&mut self, text: &str) -> i64 {
        if let Some(&i) = self.index.get(text) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(text.to_string());
        self.index.insert(text.to_string(), i);
        i
    }
}

/// A u64 figure as pprof's int64, saturating.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The mapping's file name for a frame's module, as perf names the kernel's.
fn mapping_name(frame: &ProfileFrame) -> Option<String> {
    match (frame.space, &frame.module) {
        (Space::Kernel, None) => Some("[kernel.kallsyms]".into()),
        (Space::Kernel, Some(m)) => Some(format!("[{m}]")),
        (Space::User, m) => m.clone(),
    }
}

/// A mapping: a module (with its build id), the span of its frames' file offsets, and whether
/// every one of its frames was named.
struct Span {
    id: u64,
    range: Option<(u64, u64)>,
    named: bool,
}

/// A mapping's span is rounded out to whole pages.
const PAGE: u64 = 4096;

type MappingKey<'a> = (String, Option<&'a fdprof_figures::BuildId>);

/// The frames as pprof locations, with the mappings and functions they name, numbered from 1
/// in the order first seen.
fn locations(
    profile: &Profile,
    strings: &mut Strings,
) -> (Vec<PprofMapping>, Vec<PprofFunction>, Vec<PprofLocation>) {
    let mut spans: HashMap<MappingKey, Span> = HashMap::new();
    let mut order: Vec<MappingKey> = Vec::new();
    let mut functions: Vec<PprofFunction> = Vec::new();
    let mut function_ids: HashMap<(&str, Option<&str>), u64> = HashMap::new();
    let mut locations = Vec::with_capacity(profile.frames.len());
    for (i, frame) in profile.frames.iter().enumerate() {
        let mapping_id = match mapping_name(frame) {
            None => 0,
            Some(name) => {
                let key = (name, frame.build_id.as_ref());
                let next = spans.len() as u64 + 1;
                let span = spans.entry(key.clone()).or_insert_with(|| {
                    order.push(key);
                    Span {
                        id: next,
                        range: None,
                        named: true,
                    }
                });
                span.named &= frame.is_named();
                if let Some(at) = frame.file_offset {
                    let (lo, hi) = span.range.unwrap_or((at, at));
                    span.range = Some((lo.min(at), hi.max(at)));
                }
                span.id
            }
        };
        // An unnamed frame with an address in its file is left unsymbolized (no line), as
        // readers expect of a frame they may name from the build id's symbols.
        let line = match (frame.is_named(), frame.file_offset) {
            (false, Some(_)) => Vec::new(),
            _ => {
                let key = (frame.function.as_str(), frame.module.as_deref());
                let function_id = *function_ids.entry(key).or_insert_with(|| {
                    let id = functions.len() as u64 + 1;
                    let name = strings.get(&frame.function);
                    functions.push(PprofFunction {
                        id,
                        name,
                        system_name: name,
                    });
                    id
                });
                vec![PprofLine { function_id }]
            }
        };
        locations.push(PprofLocation {
            id: i as u64 + 1,
            mapping_id,
            address: frame.file_offset.or(frame.address).unwrap_or(0),
            line,
        });
    }
    let mappings = order
        .into_iter()
        .map(|key| {
            let span = &spans[&key];
            let (start, limit) = span.range.map_or((0, 0), |(lo, hi)| {
                (lo / PAGE * PAGE, (hi / PAGE + 1).saturating_mul(PAGE))
            });
            PprofMapping {
                id: span.id,
                memory_start: start,
                memory_limit: limit,
                file_offset: start,
                filename: strings.get(&key.0),
                build_id: key.1.map_or(0, |id| strings.get(&id.to_string())),
                has_functions: span.named,
            }
        })
        .collect();
    (mappings, functions, locations)
}

/// The profile message (before encoding), for tests to look into.
pub(crate) fn message(profile: &Profile) -> PprofProfile {
    let mut strings = Strings::new();
    let value_type = |t: ValueType, s: &mut Strings| PprofValueType {
        r#type: s.get(t.name()),
        unit: s.get(t.unit().name()),
    };
    let sample_type: Vec<PprofValueType> = profile
        .value_types
        .iter()
        .map(|&t| value_type(t, &mut strings))
        .collect();
    let period_type = Some(value_type(profile.period_type, &mut strings));

    let (mappings, functions, locations) = locations(profile, &mut strings);

    let (operation_key, lock_key) = (strings.get("operation"), strings.get("lock"));
    let (container_key, pod_key) = (strings.get("container"), strings.get("pod_uid"));
    let target_key = strings.get("target");
    let sample = profile
        .samples
        .iter()
        .map(|s| PprofSample {
            location_id: s.frames.iter().map(|&f| f as u64 + 1).collect(),
            value: s.values.iter().map(|&v| int(v)).collect(),
            label: match &s.labels {
                None => Vec::new(),
                Some(l) => {
                    let mut labels = vec![
                        PprofLabel {
                            key: operation_key,
                            str: strings.get(l.operation),
                        },
                        PprofLabel {
                            key: lock_key,
                            str: strings.get(&l.lock),
                        },
                    ];
                    let known = [
                        (target_key, &l.target),
                        (container_key, &l.container),
                        (pod_key, &l.pod_uid),
                    ];
                    for (key, value) in known {
                        if let Some(v) = value {
                            labels.push(PprofLabel {
                                key,
                                str: strings.get(v),
                            });
                        }
                    }
                    labels
                }
            },
        })
        .collect();

    let header = &profile.header;
    let comment = comments(profile, &mut strings);
    // The time-weighted type is the one to show first (Go's mutex profile shows delay).
    let default_type = *profile.value_types.last().expect("two value types");
    PprofProfile {
        sample_type,
        sample,
        mapping: mappings,
        location: locations,
        function: functions,
        default_sample_type: strings.get(default_type.name()),
        comment,
        time_nanos: int(header.started_unix_ms.saturating_mul(1_000_000)),
        duration_nanos: int(header.duration_ns),
        period_type,
        period: int(profile.period),
        string_table: strings.table,
    }
}

/// What `go tool pprof -comments` shows: who and what was profiled, and what was lost.
fn comments(profile: &Profile, strings: &mut Strings) -> Vec<i64> {
    let header = &profile.header;
    let drops = &profile.drops;
    let dropped = if drops.known {
        format!("dropped: {} events", drops.total)
    } else {
        "dropped: unknown (the recording has no drop counters)".to_string()
    };
    vec![
        strings.get(&format!(
            "fdprof {} of {}; kernel {}",
            header.fdprof_version, header.target.description, header.kernel_release
        )),
        strings.get(&dropped),
    ]
}

/// The gzipped protobuf, as `go tool pprof` reads it.
pub fn pprof(profile: &Profile) -> Vec<u8> {
    let raw = message(profile).encode_to_vec();
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&raw).expect("writing to memory cannot fail");
    gz.finish().expect("writing to memory cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{self, ProfileKind, ProfileOptions};
    use crate::testdata;

    fn opts(kind: ProfileKind) -> ProfileOptions {
        ProfileOptions::all(kind)
    }

    fn decoded(bytes: &[u8]) -> PprofProfile {
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut raw).unwrap();
        PprofProfile::decode(raw.as_slice()).unwrap()
    }

    #[test]
    fn a_lock_profile_reads_back_as_written() {
        let rec = testdata::recording();
        let profile = analysis::profile(&rec, &opts(ProfileKind::Contention)).unwrap();
        let p = decoded(&pprof(&profile));
        assert_eq!(p, message(&profile));
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect();
        assert_eq!(types, [("contentions", "count"), ("delay", "nanoseconds")]);
        assert_eq!(s(p.default_sample_type), "delay");
        assert_eq!(p.duration_nanos, 10_000_000_000);
        assert_eq!(p.time_nanos, 1_709_210_096_000_000_000);
        let delay: i64 = p.sample.iter().map(|s| s.value[1]).sum();
        assert_eq!(delay, 11_000_000);
        assert!(p.location.iter().all(|l| l.address == 0));
        let labels: Vec<(&str, &str)> = p.sample[0]
            .label
            .iter()
            .map(|l| (s(l.key), s(l.str)))
            .collect();
        assert_eq!(labels, [("operation", "alloc"), ("lock", "file_lock")]);
        let files: Vec<&str> = p.mapping.iter().map(|m| s(m.filename)).collect();
        assert!(files.contains(&"[kernel.kallsyms]") && files.contains(&"libc.so.6"));
    }

    #[test]
    fn a_cpu_profile_has_cpu_types_and_period() {
        let rec = testdata::cpu_recording();
        let profile = analysis::profile(&rec, &opts(ProfileKind::Cpu)).unwrap();
        let p = message(&profile);
        let s = |i: i64| p.string_table[i as usize].as_str();
        let period = p.period_type.as_ref().unwrap();
        assert_eq!((s(period.r#type), s(period.unit)), ("cpu", "nanoseconds"));
        assert_eq!(p.period, 10_101_010);
        assert_eq!(s(p.sample_type[0].r#type), "samples");
        assert!(p.sample.iter().all(|s| s.label.is_empty()));
    }

    #[test]
    fn a_containers_waits_carry_its_labels() {
        use fdprof_figures::{Container, Identity, Runtime};
        use fdprof_recording::recording::ProcessRecord;
        let mut rec = testdata::recording();
        let id = "3f1e9b2c4d5a6f708192a3b4c5d6e7f80112233445566778899aabbccddeeff0";
        for site in &mut rec.contention {
            site.pid = Some(4242);
        }
        rec.processes = vec![ProcessRecord {
            pid: 4242,
            identity: Identity {
                container: Some(Container {
                    runtime: Runtime::Podman,
                    id: id.into(),
                }),
                pod_uid: Some("1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d".into()),
                ..Default::default()
            },
            ..Default::default()
        }];
        let profile = analysis::profile(&rec, &opts(ProfileKind::Contention)).unwrap();
        assert_eq!(profile.containers, [format!("podman {}", &id[..12])]);
        let p = decoded(&pprof(&profile));
        let s = |i: i64| p.string_table[i as usize].as_str();
        for sample in &p.sample {
            let labels: Vec<(&str, &str)> =
                sample.label.iter().map(|l| (s(l.key), s(l.str))).collect();
            assert!(labels.contains(&("container", id)), "{labels:?}");
            assert!(labels.contains(&("pod_uid", "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d")));
        }
        let speedscope: serde_json::Value =
            serde_json::from_slice(&crate::render::speedscope(&profile)).unwrap();
        assert!(
            speedscope["name"]
                .as_str()
                .unwrap()
                .ends_with(&format!("in container podman {}", &id[..12]))
        );
    }
}
