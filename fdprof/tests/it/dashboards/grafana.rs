//! The Grafana dashboard (dashboards/fdprof.json): its variables, units and datasource, its
//! queries over `$__rate_interval` filtered by the variables and naming only served metrics,
//! and a real Prometheus parsing every query.

use std::time::Duration;

use serde_json::Value;

use super::has_target_label;
use super::promql::selectors;
use crate::common::prometheus::{self, Prometheus};

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<Value> {
    fn collect(panels: &Value, out: &mut Vec<Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel.clone());
            collect(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    collect(&dashboard["panels"], &mut out);
    out
}

#[test]
fn dashboard_uses_its_variables_units_and_only_served_metrics() {
    let dashboard = prometheus::dashboard();
    assert_eq!(dashboard["uid"], "fdprof-fd-table");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);

    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let names: Vec<&str> = variables
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["datasource", "job", "instance", "target"]);
    assert_eq!(variables[0]["type"], "datasource");
    assert_eq!(variables[0]["query"], "prometheus");
    for var in &variables[1..] {
        let name = &var["name"];
        assert_eq!(var["type"], "query", "{name}");
        assert_eq!(var["multi"], true, "{name}");
        assert_eq!(var["includeAll"], true, "{name}");
        // label_values(SELECTOR, LABEL): LABEL is the variable's own, SELECTOR a served metric.
        let query = var["query"].as_str().unwrap();
        let (series, label) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(", "))
            .unwrap_or_else(|| panic!("{name}: {query} is not label_values(SELECTOR, LABEL)"));
        assert_eq!(label, name.as_str().unwrap(), "{query}");
        for selector in selectors(series) {
            has_target_label(&selector.metric);
        }
    }

    let datasource = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    let panels = panels(&dashboard);
    let mut expressions = 0;
    let mut ids = std::collections::BTreeSet::new();
    for panel in &panels {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id reused"
        );
        if panel["type"] == "row" {
            assert!(panel["targets"].is_null(), "{title}: a row with queries");
            continue;
        }
        assert_eq!(panel["datasource"], datasource, "{title}");
        let unit = panel["fieldConfig"]["defaults"]["unit"].as_str();
        assert!(unit.is_some_and(|u| !u.is_empty()), "{title}: no unit");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert_eq!(target["datasource"], datasource, "{title}");
            let expr = target["expr"].as_str().unwrap();
            check_expression(title, expr);
            expressions += 1;
        }
        if panel["type"] == "heatmap" {
            assert!(targets.iter().all(|t| t["format"] == "heatmap"), "{title}");
        }
    }
    assert!(expressions >= 12, "only {expressions} queries");
    assert_eq!(
        prometheus::dashboard_raw_expressions().len(),
        expressions,
        "dashboard_expressions() misses queries"
    );
}

/// Rates over `$__rate_interval` only, and every selector filtered by the variables.
fn check_expression(title: &str, expr: &str) {
    let ranges: Vec<&str> = expr
        .split('[')
        .skip(1)
        .map(|r| r.split(']').next().unwrap())
        .collect();
    assert!(
        ranges.iter().all(|r| *r == "$__rate_interval"),
        "{title}: {expr}: a range other than [$__rate_interval]"
    );
    let rates = expr.matches("rate(").count() + expr.matches("increase(").count();
    assert!(
        rates <= ranges.len(),
        "{title}: {expr}: a rate without a range"
    );
    let found = selectors(expr);
    assert!(!found.is_empty(), "{title}: {expr}: no metric");
    for selector in found {
        let matchers = &selector.matchers;
        for filter in [r#"job=~"$job""#, r#"instance=~"$instance""#] {
            assert!(matchers.contains(filter), "{title}: {expr}: no {filter}");
        }
        let target_filtered = matchers.contains(r#"target=~"$target""#);
        assert_eq!(
            target_filtered,
            has_target_label(&selector.metric),
            "{title}: {expr}: target filter on {}",
            selector.metric
        );
    }
}

#[test]
fn prometheus_scrapes_itself_parses_every_dashboard_query_and_is_gone_after() {
    let listen = prometheus::free_loopback_addr();
    let prometheus = Prometheus::start_on(listen, &[listen]);
    let pid = prometheus.pid();
    let up = prometheus.wait_for(r#"up{job="fdprof"}"#, Duration::from_secs(30), |r| {
        prometheus::sample_values(r) == [1.0]
    });
    assert_eq!(up[0]["metric"]["instance"], listen.to_string());
    // Hundreds of series: a reply long enough that Prometheus sends it chunked.
    let names = prometheus.query(r#"count by (__name__) ({job="fdprof"})"#);
    let names = names.as_array().unwrap();
    assert!(names.len() > 100, "only {} metric names", names.len());
    assert!(
        names
            .iter()
            .any(|n| n["metric"]["__name__"] == "prometheus_build_info")
    );
    // Prometheus answers these with an empty vector (it serves no fdprof metrics), but parses
    // and evaluates each: a syntax error fails the query.
    let expressions = prometheus::dashboard_expressions(".*");
    assert!(!expressions.is_empty());
    for expr in &expressions {
        assert!(!expr.contains('$'), "{expr}: a variable left unsubstituted");
        assert!(prometheus.query(expr).is_array(), "{expr}");
    }
    // A refused expression panics with Prometheus's own error.
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        prometheus.query("rate(up[5s]")
    }));
    assert!(refused.is_err(), "a malformed expression was accepted");

    drop(prometheus);
    // SAFETY: signal 0 only checks whether the PID exists.
    let alive = unsafe { libc::kill(pid as i32, 0) } == 0;
    assert!(!alive, "prometheus (pid {pid}) still runs after drop");
}
