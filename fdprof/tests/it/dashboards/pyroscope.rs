//! Grafana Alloy's configs for Pyroscope, the local one (dashboards/pyroscope.alloy) and the
//! cluster's (deploy/scrape/pyroscope-kubernetes.alloy): Alloy's shape, scraping the daemon's
//! profiles.

use super::{PROFILE_PATHS, workspace_file};

/// A block of Alloy's configuration syntax: its attributes and inner blocks, by name (`name
/// "label"` for labelled ones).
#[derive(Debug, Default)]
struct AlloyBlock {
    attributes: std::collections::BTreeMap<String, String>,
    blocks: Vec<(String, AlloyBlock)>,
}

impl AlloyBlock {
    fn block(&self, name: &str) -> &AlloyBlock {
        self.blocks
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b)
            .unwrap_or_else(|| panic!("no block {name} in {self:?}"))
    }
}

/// Reads Alloy's syntax as the file here writes it: one attribute (`key = value`, a list may
/// span lines) or block brace per line, `//` comments.
fn read_alloy(text: &str) -> AlloyBlock {
    let mut stack = vec![(String::new(), AlloyBlock::default())];
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.split("//").next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        if !pending.is_empty() || (line.contains('=') && line.ends_with('[')) {
            pending.push_str(line);
            if pending.matches('[').count() == pending.matches(']').count() {
                let (key, value) = pending.split_once('=').unwrap();
                let top = &mut stack.last_mut().unwrap().1;
                top.attributes
                    .insert(key.trim().into(), value.trim().into());
                pending.clear();
            }
        } else if let Some(name) = line.strip_suffix('{') {
            stack.push((name.trim().to_string(), AlloyBlock::default()));
        } else if line == "}" {
            let (name, block) = stack.pop().unwrap();
            stack.last_mut().unwrap().1.blocks.push((name, block));
        } else {
            let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{line}"));
            let top = &mut stack.last_mut().unwrap().1;
            top.attributes
                .insert(key.trim().into(), value.trim().into());
        }
    }
    assert_eq!(stack.len(), 1, "unbalanced braces");
    stack.pop().unwrap().1
}

/// An Alloy config (`path` from the workspace's root) against the shape of Alloy's
/// `pyroscope.scrape` component: a scrape of the daemon forwarding to the `pyroscope.write`
/// `write` defined beside it, with the daemon's token, the two profiles at the daemon's paths
/// as delta profiles, Go's runtime ones off. Returns the file's blocks.
fn alloy_scrape(path: &str, write: &str) -> AlloyBlock {
    let root = read_alloy(&std::fs::read_to_string(workspace_file(path)).unwrap());
    let scrape = root.block("pyroscope.scrape \"fdprof\"");
    assert_eq!(
        scrape.attributes["forward_to"],
        format!("[pyroscope.write.{write}.receiver]")
    );
    root.block(&format!("pyroscope.write \"{write}\""))
        .block("endpoint");
    assert!(scrape.attributes.contains_key("bearer_token_file"));
    let profiles = scrape.block("profiling_config");
    for (name, path) in [("profile.mutex", 0), ("profile.process_cpu", 1)] {
        let p = &profiles.block(name).attributes;
        assert_eq!(p["enabled"], "true", "{name}");
        assert_eq!(p["delta"], "true", "{name}");
        assert_eq!(p["path"], format!("\"{}\"", PROFILE_PATHS[path]), "{name}");
    }
    for off in ["memory", "block", "goroutine", "fgprof"] {
        let p = &profiles.block(&format!("profile.{off}")).attributes;
        assert_eq!(p["enabled"], "false", "{off}");
    }
    root
}

#[test]
fn the_pyroscope_config_has_alloys_shape_and_the_daemons_paths() {
    let root = alloy_scrape("dashboards/pyroscope.alloy", "local");
    let scrape = root.block("pyroscope.scrape \"fdprof\"");
    assert!(scrape.attributes["targets"].contains("\"__address__\" = \"127.0.0.1:9464\""));
}

/// The cluster's Alloy config: the same profiles, from the pods of deploy/kubernetes/ found
/// through the Kubernetes API and kept by their port's name.
#[test]
fn the_kubernetes_alloy_config_scrapes_the_daemonsets_pods() {
    let root = alloy_scrape("deploy/scrape/pyroscope-kubernetes.alloy", "cluster");
    let scrape = root.block("pyroscope.scrape \"fdprof\"");
    assert_eq!(
        scrape.attributes["targets"],
        "discovery.relabel.fdprof.output"
    );
    let discovery = root.block("discovery.kubernetes \"fdprof\"");
    assert_eq!(discovery.attributes["role"], "\"pod\"");
    assert_eq!(
        discovery.block("selectors").attributes["label"],
        "\"app.kubernetes.io/name=fdprof\""
    );
    let relabel = root.block("discovery.relabel \"fdprof\"");
    assert_eq!(
        relabel.attributes["targets"],
        "discovery.kubernetes.fdprof.targets"
    );
    let keep = relabel.block("rule");
    assert_eq!(keep.attributes["action"], "\"keep\"");
    assert_eq!(keep.attributes["regex"], "\"http\"");
}
