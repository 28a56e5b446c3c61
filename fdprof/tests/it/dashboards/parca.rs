//! Parca's configs, the local one (dashboards/parca.yaml) and the cluster's
//! (deploy/scrape/parca-kubernetes.yaml): Parca's shape, scraping the daemon's profiles.

use serde_json::Value;

use super::{PROFILE_PATHS, workspace_file};
use crate::common;

/// A Parca config (`path` from the workspace's root) read by a YAML parser (Python's, Debian's
/// python3-yaml) and checked against the shape of Parca's config: object storage, one scrape job
/// of the daemon with its token, and the two profiles at the daemon's paths as delta profiles,
/// Go's runtime ones off. Returns the job.
fn parca_job(path: &str) -> Value {
    let config = common::yaml(&workspace_file(path));
    assert_eq!(config["object_storage"]["bucket"]["type"], "FILESYSTEM");
    let jobs = config["scrape_configs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job["authorization"]["type"], "Bearer");
    assert!(job["authorization"]["credentials_file"].is_string());
    let profiles = job["profiling_config"]["pprof_config"].as_object().unwrap();
    let enabled: Vec<&str> = profiles
        .values()
        .filter(|p| p["enabled"] == true)
        .map(|p| {
            assert_eq!(p["delta"], true, "{p}");
            p["path"].as_str().unwrap()
        })
        .collect();
    assert_eq!(enabled, PROFILE_PATHS);
    assert_eq!(profiles["mutex"]["path"], PROFILE_PATHS[0]);
    assert_eq!(profiles["process_cpu"]["path"], PROFILE_PATHS[1]);
    for off in ["memory", "block", "goroutine"] {
        assert_eq!(profiles[off]["enabled"], false, "{off}");
    }
    job.clone()
}

#[test]
fn the_parca_config_has_parcas_shape_and_the_daemons_paths() {
    let job = parca_job("dashboards/parca.yaml");
    assert_eq!(job["static_configs"][0]["targets"][0], "127.0.0.1:9464");
}

/// The cluster's Parca config: the same profiles, from the pods of deploy/kubernetes/ found
/// through the Kubernetes API (their namespace, their label, their port's name).
#[test]
fn the_kubernetes_parca_config_scrapes_the_daemonsets_pods() {
    let job = parca_job("deploy/scrape/parca-kubernetes.yaml");
    let sd = &job["kubernetes_sd_configs"][0];
    assert_eq!(sd["role"], "pod");
    assert_eq!(sd["namespaces"]["names"][0], "fdprof");
    let keeps: Vec<(&str, &str)> = job["relabel_configs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["action"] == "keep")
        .map(|r| {
            (
                r["source_labels"][0].as_str().unwrap(),
                r["regex"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keeps,
        [
            (
                "__meta_kubernetes_pod_label_app_kubernetes_io_name",
                "fdprof"
            ),
            ("__meta_kubernetes_pod_container_port_name", "http"),
        ]
    );
    let ds = std::fs::read_to_string(workspace_file("deploy/kubernetes/daemonset.yaml")).unwrap();
    assert!(ds.contains("app.kubernetes.io/name: fdprof") && ds.contains("- name: http"));
}
