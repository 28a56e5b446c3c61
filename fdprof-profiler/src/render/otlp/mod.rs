//! A [`Profile`] as OpenTelemetry's profiles signal (OTLP `v1development`): one
//! `ExportProfilesServiceRequest`, its dictionary shared by one profile per value type (the
//! format has one sample type a profile): lock waits as `contentions/count` and
//! `delay/nanoseconds`, the shape of Go's mutex profile; on-CPU samples as `samples/count` and
//! `cpu/nanoseconds`.
//!
//! Every table of the dictionary starts with its zero entry, as the format requires. A frame is
//! one location with one line (its function) in the mapping of its module; a mapping carries its
//! build id as the semantic conventions' `process.executable.build_id.gnu` attribute (the
//! message has no field for it). A wait's operation and lock, its target, container and pod are
//! sample attributes.

mod proto;

use std::collections::HashMap;

use prost::Message;

use crate::analysis::{Profile, ProfileFrame, Space, WaitLabels};
use proto::{
    AnyValue, ExportProfilesServiceRequest, Function, InstrumentationScope, KeyValue,
    KeyValueAndUnit, Line, Link, Location, Mapping, ProfilesDictionary, Resource, ResourceProfiles,
    Sample, ScopeProfiles, Stack, Value,
};

/// Who sends: the resource every profile of a request is of.
#[derive(Debug, Clone, Default)]
pub struct Sender {
    /// `host.name`.
    pub host_name: String,
    /// `host.id`, from `/etc/machine-id` where there is one.
    pub host_id: Option<String>,
}

impl Sender {
    /// This host: its name (`/proc/sys/kernel/hostname`) and machine id (`/etc/machine-id`).
    pub fn this_host() -> Self {
        let read = |path: &str| {
            let text = std::fs::read_to_string(path).ok()?;
            let text = text.trim();
            (!text.is_empty() && text.len() <= 255).then(|| text.to_string())
        };
        Self {
            host_name: read("/proc/sys/kernel/hostname").unwrap_or_default(),
            host_id: read("/etc/machine-id"),
        }
    }
}

/// The dictionary as it is built: each table with its index.
struct Dictionary {
    d: ProfilesDictionary,
    strings: HashMap<String, i32>,
    attributes: HashMap<(i32, String), i32>,
    stacks: HashMap<Vec<i32>, i32>,
}

impl Dictionary {
    fn new() -> Self {
        let mut d = Self {
            d: ProfilesDictionary {
                mapping_table: vec![Mapping::default()],
                location_table: vec![Location::default()],
                function_table: vec![Function::default()],
                link_table: vec![Link::default()],
                string_table: Vec::new(),
                attribute_table: vec![KeyValueAndUnit::default()],
                stack_table: vec![Stack::default()],
            },
            strings: HashMap::new(),
            attributes: HashMap::new(),
            stacks: HashMap::new(),
        };
        d.string("");
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    /// A string attribute `key` = `value`.
    fn attribute(&mut self, key: &str, value: &str) -> i32 {
        self.attribute_of(key, Value::String(value.to_string()))
    }

    fn attribute_of(&mut self, key: &str, value: Value) -> i32 {
        let key = self.string(key);
        let seen = (key, format!("{value:?}"));
        if let Some(&i) = self.attributes.get(&seen) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(KeyValueAndUnit {
            key_strindex: key,
            value: Some(AnyValue { value: Some(value) }),
            unit_strindex: 0,
        });
        self.attributes.insert(seen, i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, i);
        i
    }

    /// A wait's attributes: its operation and lock, and its target, container, pod and
    /// process where known.
    fn wait_attributes(&mut self, l: &WaitLabels) -> Vec<i32> {
        let mut attributes = vec![
            self.attribute("fdprof.operation", l.operation),
            self.attribute("fdprof.lock", &l.lock),
        ];
        let known = [
            ("fdprof.target", &l.target),
            ("container.id", &l.container),
            ("k8s.pod.uid", &l.pod_uid),
        ];
        for (key, value) in known {
            if let Some(v) = value {
                attributes.push(self.attribute(key, v));
            }
        }
        if let Some((pid, comm)) = &l.process {
            attributes.push(self.attribute_of("process.pid", Value::Int(i64::from(*pid))));
            // A process whose name was not read has none.
            if !comm.is_empty() {
                attributes.push(self.attribute("process.executable.name", comm));
            }
        }
        attributes
    }
}

fn string_value(s: &str) -> AnyValue {
    AnyValue {
        value: Some(Value::String(s.to_string())),
    }
}

fn key_value(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(string_value(value)),
    }
}

/// The mapping's file name for a frame's module, as perf names the kernel's.
fn mapping_name(frame: &ProfileFrame) -> Option<String> {
    match (frame.space, &frame.module) {
        (Space::Kernel, None) => Some("[kernel.kallsyms]".into()),
        (Space::Kernel, Some(m)) => Some(format!("[{m}]")),
        (Space::User, m) => m.clone(),
    }
}

/// The frames as locations (index `i + 1` for frame `i`), with their mappings and functions.
fn locations(profile: &Profile, d: &mut Dictionary) {
    let mut mappings: HashMap<(String, Option<String>), i32> = HashMap::new();
    let mut functions: HashMap<(&str, Option<&str>), i32> = HashMap::new();
    for frame in &profile.frames {
        let mapping_index = match mapping_name(frame) {
            None => 0,
            Some(name) => {
                let build_id = frame.build_id.as_ref().map(|b| b.to_string());
                let next = d.d.mapping_table.len() as i32;
                *mappings
                    .entry((name.clone(), build_id.clone()))
                    .or_insert_with(|| {
                        let filename_strindex = d.string(&name);
                        let attribute_indices = build_id
                            .iter()
                            .map(|id| d.attribute("process.executable.build_id.gnu", id))
                            .collect();
                        d.d.mapping_table.push(Mapping {
                            filename_strindex,
                            attribute_indices,
                            ..Default::default()
                        });
                        next
                    })
            }
        };
        // An unnamed frame with an address in its file is left without a line, for a reader
        // to name from the build id's symbols.
        let lines = match (frame.is_named(), frame.file_offset) {
            (false, Some(_)) => Vec::new(),
            _ => {
                let key = (frame.function.as_str(), frame.module.as_deref());
                let next = d.d.function_table.len() as i32;
                let function_index = *functions.entry(key).or_insert_with(|| {
                    let name = d.string(&frame.function);
                    d.d.function_table.push(Function {
                        name_strindex: name,
                        system_name_strindex: name,
                        ..Default::default()
                    });
                    next
                });
                vec![Line {
                    function_index,
                    ..Default::default()
                }]
            }
        };
        d.d.location_table.push(Location {
            mapping_index,
            address: frame.file_offset.or(frame.address).unwrap_or(0),
            lines,
            attribute_indices: Vec::new(),
        });
    }
}

/// A u64 figure as the format's int64, saturating.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The request (before encoding), for tests to look into.
pub(crate) fn request(profile: &Profile, sender: &Sender) -> ExportProfilesServiceRequest {
    let mut d = Dictionary::new();
    locations(profile, &mut d);
    // Each sample's stack and attributes, shared by the profiles of every value type.
    let samples: Vec<(i32, Vec<i32>)> = profile
        .samples
        .iter()
        .map(|s| {
            let stack = d.stack(s.frames.iter().map(|&f| f as i32 + 1).collect());
            let attributes = s
                .labels
                .as_ref()
                .map_or_else(Vec::new, |l| d.wait_attributes(l));
            (stack, attributes)
        })
        .collect();
    let header = &profile.header;
    let period_type = Some(proto::ValueType {
        type_strindex: d.string(profile.period_type.name()),
        unit_strindex: d.string(profile.period_type.unit().name()),
    });
    let profiles = profile
        .value_types
        .iter()
        .enumerate()
        .map(|(i, t)| proto::Profile {
            sample_type: Some(proto::ValueType {
                type_strindex: d.string(t.name()),
                unit_strindex: d.string(t.unit().name()),
            }),
            samples: samples
                .iter()
                .zip(&profile.samples)
                .map(|((stack, attributes), s)| Sample {
                    stack_index: *stack,
                    attribute_indices: attributes.clone(),
                    link_index: 0,
                    values: vec![int(s.values[i])],
                })
                .collect(),
            time_unix_nano: header.started_unix_ms.saturating_mul(1_000_000),
            duration_nano: header.duration_ns,
            period_type: period_type.clone(),
            period: int(profile.period),
            ..Default::default()
        })
        .collect();
    let mut resource = vec![key_value("host.name", &sender.host_name)];
    if let Some(id) = &sender.host_id {
        resource.push(key_value("host.id", id));
    }
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: resource,
                dropped_attributes_count: 0,
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "fdprof".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(d.d),
    }
}

/// The request as protobuf: what `fdprof export --format otlp` writes and the daemon sends.
pub fn otlp(profile: &Profile, sender: &Sender) -> Vec<u8> {
    request(profile, sender).encode_to_vec()
}

/// A receiver's `ExportProfilesServiceResponse`: the profiles it rejected and its message
/// (none and empty when it took them all).
pub fn partial_success(answer: &[u8]) -> Result<(u64, String), prost::DecodeError> {
    let partial = proto::ExportProfilesServiceResponse::decode(answer)?.partial_success;
    Ok(partial.map_or((0, String::new()), |p| {
        (p.rejected_profiles.max(0) as u64, p.error_message)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{self, ProfileKind, ProfileOptions};
    use crate::testdata;

    fn opts(kind: ProfileKind) -> ProfileOptions {
        ProfileOptions::all(kind)
    }

    /// A lock profile reads back as written: two profiles (count, delay) over one dictionary
    /// whose tables start with their zero entries, the delay adding up to the recording's.
    #[test]
    fn a_lock_profile_reads_back_as_written() {
        let rec = testdata::recording();
        let profile = analysis::profile(&rec, &opts(ProfileKind::Contention)).unwrap();
        let sender = Sender {
            host_name: "h".into(),
            host_id: Some("m".into()),
        };
        let bytes = otlp(&profile, &sender);
        let req = ExportProfilesServiceRequest::decode(&bytes[..]).unwrap();
        assert_eq!(req, request(&profile, &sender));
        let d = req.dictionary.as_ref().unwrap();
        let s = |i: i32| d.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        assert_eq!(d.mapping_table[0], Mapping::default());
        assert_eq!(d.stack_table[0], Stack::default());
        let profiles = &req.resource_profiles[0].scope_profiles[0].profiles;
        let types: Vec<(&str, &str)> = profiles
            .iter()
            .map(|p| p.sample_type.as_ref().unwrap())
            .map(|t| (s(t.type_strindex), s(t.unit_strindex)))
            .collect();
        assert_eq!(types, [("contentions", "count"), ("delay", "nanoseconds")]);
        let delay: i64 = profiles[1].samples.iter().map(|x| x.values[0]).sum();
        assert_eq!(delay, 11_000_000);
        let attributes: Vec<(&str, String)> = profiles[1].samples[0]
            .attribute_indices
            .iter()
            .map(|&i| &d.attribute_table[i as usize])
            .map(|a| (s(a.key_strindex), format!("{:?}", a.value)))
            .collect();
        assert_eq!(attributes[0].0, "fdprof.operation");
        assert!(attributes[0].1.contains("alloc"));
    }

    /// Per process, each wait names its process, and the totals stay the recording's.
    #[test]
    fn per_process_waits_name_their_process() {
        let rec = testdata::recording();
        let opts = ProfileOptions {
            per_process: true,
            ..opts(ProfileKind::Contention)
        };
        let profile = analysis::profile(&rec, &opts).unwrap();
        let req = request(&profile, &Sender::default());
        let d = req.dictionary.as_ref().unwrap();
        let profiles = &req.resource_profiles[0].scope_profiles[0].profiles;
        let delay: i64 = profiles[1].samples.iter().map(|x| x.values[0]).sum();
        assert_eq!(delay, 11_000_000);
        let pid = d.string_table.iter().position(|k| k == "process.pid");
        let pids: Vec<&AnyValue> = profiles[1]
            .samples
            .iter()
            .flat_map(|x| &x.attribute_indices)
            .map(|&i| &d.attribute_table[i as usize])
            .filter(|a| Some(a.key_strindex as usize) == pid)
            .filter_map(|a| a.value.as_ref())
            .collect();
        assert!(!pids.is_empty(), "{profiles:?}");
        assert!(
            pids.iter()
                .all(|v| matches!(v.value, Some(Value::Int(p)) if p > 0))
        );
    }
}
