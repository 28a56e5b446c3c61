//! Prometheus's files: the scrape config (dashboards/prometheus.yml) checked by promtool, and
//! the alerting rules (dashboards/alerts.yml) checked and unit-tested by promtool and fired by a
//! real Prometheus scraping a daemon under load.

use std::time::Duration;

use serde_json::Value;

use super::promql::selectors;
use super::{is_served, promtool, workspace_file};
use crate::common;
use crate::common::prometheus::{self, Prometheus};

#[test]
fn promtool_accepts_the_scrape_config() {
    let config = std::fs::read_to_string(workspace_file("dashboards/prometheus.yml")).unwrap();
    // promtool checks that the token file exists: point it at the tests' own.
    let token = "credentials_file: /etc/prometheus/fdprof.token\n";
    assert!(config.contains(token), "the scrape config sends no token");
    let copy = common::tmp("prometheus.yml");
    let ours = format!(
        "credentials_file: {}\n",
        common::daemon::token_file().display()
    );
    std::fs::write(&copy, config.replace(token, &ours)).unwrap();
    let dir = copy.parent().unwrap();
    promtool(dir, &["check", "config", "prometheus.yml"]);
}

#[test]
fn promtool_checks_and_tests_the_alerting_rules() {
    let dir = workspace_file("dashboards");
    promtool(&dir, &["check", "rules", "alerts.yml"]);
    promtool(&dir, &["test", "rules", "alerts_test.yml"]);
}

/// Debian's Prometheus loads alerts.yml, its file_lock threshold lowered, scrapes a daemon
/// following opensock -t 2, and the contention alert fires for that target; every rule names
/// only series the daemon serves (or `up`).
#[test]
fn the_contention_alert_fires_in_a_real_prometheus() {
    common::require_root();
    let _guard = common::kernel_lock();
    let comm = "fdpd-alerts";
    let daemon =
        common::daemon::Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "500ms"]);
    let load = common::start_workload_with(
        common::daemon::fdprof_as(comm),
        // Long enough for two scrapes and an evaluation; the 5-minute rate outlives it.
        &["opensock", "-t", "2", "-n", "4000", "-d", "15s"],
    );
    daemon.wait_metric("fdprof_targets", 1.0);
    let rules = std::fs::read_to_string(workspace_file("dashboards/alerts.yml")).unwrap();
    let threshold = "\n          > 0.05\n        for: 5m\n";
    assert!(
        rules.contains(threshold),
        "the contention rule changed shape"
    );
    let lowered = common::tmp("alerts.yml");
    std::fs::write(
        &lowered,
        rules.replacen(threshold, "\n          > 0\n        for: 0s\n", 1),
    )
    .unwrap();
    // Scraping before the load starts: a slow start would see less of it.
    let prometheus = Prometheus::start_with_rules(&[daemon.addr], &lowered);
    prometheus.wait_for("up", Duration::from_secs(60), |r| {
        prometheus::sample_values(r) == [1.0]
    });
    load.go();
    let firing = common::daemon::poll(Duration::from_secs(90), || {
        let (_, body) =
            prometheus::http_get(prometheus.addr(), "/api/v1/alerts").map_err(|e| e.to_string())?;
        let alerts: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        alerts["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| {
                a["labels"]["alertname"] == "FdprofFileLockContention"
                    && a["labels"]["target"] == comm
                    && a["state"] == "firing"
            })
            .cloned()
            .ok_or(body)
    });
    let alert = firing.unwrap_or_else(|last| panic!("no firing contention alert: {last}"));
    assert_eq!(alert["labels"]["severity"], "warning");

    let (_, body) = prometheus::http_get(prometheus.addr(), "/api/v1/rules").unwrap();
    let groups: Value = serde_json::from_str(&body).unwrap();
    let queries: Vec<&str> = groups["data"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["query"].as_str().unwrap())
        .collect();
    assert_eq!(queries.len(), 6, "{body}");
    for query in queries {
        for s in selectors(query) {
            assert!(
                s.metric == "up" || is_served(&s.metric),
                "{query}: {} is not served",
                s.metric
            );
        }
    }
    drop(prometheus);
    load.finish();
    drop(daemon);
    common::assert_no_programs_left();
}
