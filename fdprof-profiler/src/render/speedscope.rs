//! A [`Profile`] in speedscope's file format (its `file-format-schema.json`): the frames shared,
//! one "sampled" profile per value type (waits and wait time, or samples and CPU time).
//!
//! speedscope has no labels: a wait's operation and lock become its two root frames
//! (`alloc` › `file_lock` › user frames › kernel frames), so the graph splits as flamegraphs do.

use serde::Serialize;

use crate::analysis::{Profile, ValueUnit};

pub(crate) const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<Sampled>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<Frame<'a>>,
}

#[derive(Serialize, Clone, Copy, PartialEq, Eq, Hash)]
struct Frame<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<&'a str>,
    /// Unnamed user frames: the file's build id and the offset in it, which name the frame
    /// wherever the file's symbols are (speedscope shows neither; the schema allows them).
    #[serde(skip_serializing_if = "Option::is_none")]
    build_id: Option<&'a fdprof_figures::BuildId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_offset: Option<u64>,
}

impl<'a> Frame<'a> {
    fn label(name: &'a str) -> Self {
        Self {
            name,
            file: None,
            build_id: None,
            file_offset: None,
        }
    }
}

#[derive(Serialize)]
struct Sampled {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    /// Frame indices, root first.
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

fn unit(u: ValueUnit) -> &'static str {
    match u {
        ValueUnit::Count => "none",
        ValueUnit::Nanoseconds => "nanoseconds",
    }
}

/// The speedscope JSON document.
pub fn speedscope(profile: &Profile) -> Vec<u8> {
    // speedscope merges frames by index: one per function and file (and offset, unnamed).
    let mut frames: Vec<Frame<'_>> = Vec::new();
    let mut index: std::collections::HashMap<Frame<'_>, usize> = Default::default();
    let of_profile: Vec<usize> = profile
        .frames
        .iter()
        .map(|f| {
            let unnamed = !f.is_named();
            let frame = Frame {
                name: &f.function,
                file: f.module.as_deref(),
                build_id: f.build_id.as_ref().filter(|_| unnamed),
                file_offset: f.file_offset.filter(|_| unnamed),
            };
            *index.entry(frame).or_insert_with_key(|frame| {
                frames.push(*frame);
                frames.len() - 1
            })
        })
        .collect();
    // Root pseudo-frames for the labels, one per distinct name.
    let mut label_frames: std::collections::HashMap<&str, usize> = Default::default();
    let mut label_frame = |name: &'static str, frames: &mut Vec<Frame<'_>>| -> usize {
        *label_frames.entry(name).or_insert_with(|| {
            frames.push(Frame::label(name));
            frames.len() - 1
        })
    };
    let mut lock_frames: std::collections::HashMap<&str, usize> = Default::default();
    let stacks: Vec<Vec<usize>> = profile
        .samples
        .iter()
        .map(|s| {
            let mut stack = Vec::with_capacity(s.frames.len() + 2);
            if let Some(l) = &s.labels {
                stack.push(label_frame(l.operation, &mut frames));
                let lock = *lock_frames.entry(l.lock.as_str()).or_insert_with(|| {
                    frames.push(Frame::label(&l.lock));
                    frames.len() - 1
                });
                stack.push(lock);
            }
            stack.extend(s.frames.iter().rev().map(|&f| of_profile[f]));
            stack
        })
        .collect();
    let header = &profile.header;
    let profiles = profile
        .value_types
        .iter()
        .enumerate()
        .map(|(i, t)| Sampled {
            kind: "sampled",
            name: format!("{} ({})", t.name(), header.target.description),
            unit: unit(t.unit()),
            start_value: 0,
            end_value: profile.totals[i],
            samples: stacks.clone(),
            weights: profile.samples.iter().map(|s| s.values[i]).collect(),
        })
        .collect();
    let file = File {
        schema: SCHEMA,
        shared: Shared { frames },
        name: match profile.containers.as_slice() {
            [one] => format!("fdprof: {} in container {one}", header.target.description),
            _ => format!("fdprof: {}", header.target.description),
        },
        // The time-weighted profile first on screen.
        active_profile_index: profile.value_types.len() - 1,
        exporter: format!("fdprof {}", env!("CARGO_PKG_VERSION")),
        profiles,
    };
    serde_json::to_vec(&file).expect("plain data serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{self, LockFilter, OpFilter, ProfileKind, ProfileOptions};
    use crate::testdata;

    #[test]
    fn waits_root_at_their_operation_and_lock() {
        let rec = testdata::recording();
        let opts = ProfileOptions {
            kind: ProfileKind::Contention,
            op: OpFilter::All,
            lock: LockFilter::All,
            raw_addrs: false,
            per_process: false,
        };
        let profile = analysis::profile(&rec, &opts).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&speedscope(&profile)).unwrap();
        assert_eq!(doc["$schema"], SCHEMA);
        let frames = doc["shared"]["frames"].as_array().unwrap();
        let name = |i: &serde_json::Value| frames[i.as_u64().unwrap() as usize]["name"].clone();
        let profiles = doc["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 2);
        assert_eq!(profiles[1]["unit"], "nanoseconds");
        assert_eq!(profiles[0]["unit"], "none");
        assert_eq!(profiles[1]["endValue"], 11_000_000);
        let first = profiles[1]["samples"][0].as_array().unwrap();
        assert_eq!(name(&first[0]), "alloc");
        assert_eq!(name(&first[1]), "file_lock");
        assert_eq!(
            name(first.last().unwrap()),
            "__pv_queued_spin_lock_slowpath"
        );
        assert_eq!(profiles[1]["weights"][0], 6_000_000);
    }
}
