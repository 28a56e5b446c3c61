//! dashboards/: the Grafana dashboard's queries are checked against the metrics `fdprof daemon`
//! serves and parsed by a real Prometheus; the scrape config by the real promtool.

use crate::common;

use std::process::Command;
use std::time::Duration;

use crate::common::prometheus::{self, Prometheus};
use serde_json::Value;

/// Every series the daemon serves, as PromQL names it (counters with `_total`, histograms by
/// their `_bucket`, `_sum` and `_count` series), and whether it has a `target` label.
const SERIES: &[(&str, bool)] = &[
    ("fdprof_fd_allocations_total", true),
    ("fdprof_fd_closes_total", true),
    ("fdprof_lock_contentions_total", true),
    ("fdprof_lock_wait_seconds_bucket", true),
    ("fdprof_lock_wait_seconds_sum", true),
    ("fdprof_lock_wait_seconds_count", true),
    ("fdprof_lock_wait_source", true),
    ("fdprof_alloc_scan_bits_bucket", true),
    ("fdprof_alloc_scan_bits_sum", true),
    ("fdprof_alloc_scan_bits_count", true),
    ("fdprof_fd_table_size", true),
    ("fdprof_fd_table_expansions_total", true),
    ("fdprof_events_dropped_total", false),
    ("fdprof_program_run_seconds_total", false),
    ("fdprof_build_info", false),
    ("fdprof_targets", false),
    ("fdprof_collector_cpu_seconds_total", false),
];

/// PromQL words that are neither functions (those are followed by `(`) nor metric names:
/// aggregations (`sum by (le) (...)`: not followed by `(`), modifiers and operators.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
];

/// A metric name in an expression and the label matchers that follow it (`{...}`, or "").
#[derive(Debug)]
struct Selector {
    metric: String,
    matchers: String,
}

/// The metric selectors of a PromQL expression: identifiers that are not functions, keywords,
/// label lists of `by (...)`-like clauses, strings, numbers or range durations.
fn selectors(expr: &str) -> Vec<Selector> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i = skip_past(&chars, i + 1, '"');
        } else if c == '[' {
            i = skip_past(&chars, i + 1, ']');
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().position(|c| !c.is_whitespace());
            let next_char = next.map(|n| chars[i + n]);
            if KEYWORDS.contains(&word.as_str()) {
                if matches!(word.as_str(), "by" | "without" | "on" | "ignoring") {
                    i = skip_past(&chars, i, ')');
                }
            } else if next_char == Some('(') {
                // A function or aggregation.
            } else {
                let mut matchers = String::new();
                if next_char == Some('{') {
                    let open = i + next.unwrap();
                    let close = skip_past(&chars, open + 1, '}');
                    matchers = chars[open + 1..close - 1].iter().collect();
                    i = close;
                }
                out.push(Selector {
                    metric: word,
                    matchers,
                });
            }
        } else if c == '{' {
            panic!("{expr}: a selector without a metric name");
        } else {
            i += 1;
        }
    }
    out
}

/// The index after the next `end` from `from` (skipping quoted strings).
fn skip_past(chars: &[char], from: usize, end: char) -> usize {
    let mut i = from;
    while i < chars.len() {
        if chars[i] == end {
            return i + 1;
        }
        if chars[i] == '"' && end != '"' {
            i = skip_past(chars, i + 1, '"');
        } else {
            i += 1;
        }
    }
    panic!(
        "unterminated {end:?} in {}",
        chars.iter().collect::<String>()
    );
}

fn has_target_label(metric: &str) -> bool {
    SERIES
        .iter()
        .find(|(name, _)| *name == metric)
        .unwrap_or_else(|| panic!("{metric} is not a metric fdprof daemon serves"))
        .1
}

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
fn the_selector_reader_finds_metrics_and_their_matchers() {
    let found = selectors(
        r#"histogram_quantile(0.99, sum by (le, x) (rate(m_bucket{a=~"$b", c="}"}[$__rate_interval]))) / on (d) n + 2"#,
    );
    let names: Vec<(&str, &str)> = found
        .iter()
        .map(|s| (s.metric.as_str(), s.matchers.as_str()))
        .collect();
    assert_eq!(names, [("m_bucket", r#"a=~"$b", c="}""#), ("n", "")]);
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
fn promtool_accepts_the_scrape_config() {
    let config = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dashboards/prometheus.yml"
    ))
    .unwrap();
    // promtool checks that the token file exists: point it at the tests' own.
    let token = "credentials_file: /etc/prometheus/fdprof.token\n";
    assert!(config.contains(token), "the scrape config sends no token");
    let copy = common::tmp("prometheus.yml");
    let ours = format!(
        "credentials_file: {}\n",
        common::daemon::token_file().display()
    );
    std::fs::write(&copy, config.replace(token, &ours)).unwrap();
    let out = common::run(
        Command::new("promtool")
            .arg("check")
            .arg("config")
            .arg(&copy),
    );
    assert!(
        out.status.success(),
        "promtool check config failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
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

#[test]
fn systemd_accepts_the_example_unit() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dashboards/fdprof-daemon.service"
    ))
    .unwrap();
    let exec = "ExecStart=/usr/bin/fdprof daemon --comm nginx\n";
    assert!(unit.contains(exec) && unit.contains("Restart=on-failure\n"));
    // systemd-analyze also checks that the command exists: point it at the fdprof just built.
    let copy = common::tmp("fdprof-daemon.service");
    let built = format!(
        "ExecStart={} daemon --comm nginx\n",
        env!("CARGO_BIN_EXE_fdprof")
    );
    std::fs::write(&copy, unit.replace(exec, &built)).unwrap();
    let out = common::run(Command::new("systemd-analyze").arg("verify").arg(&copy));
    // It ignores unknown keys and bad values with a warning and still exits 0: no output at all.
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.is_empty(),
        "systemd-analyze verify ({}):\n{said}",
        out.status
    );
}

fn alerts_path() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dashboards/alerts.yml"
    ))
}

#[test]
fn promtool_checks_and_tests_the_alerting_rules() {
    let dir = alerts_path().parent().unwrap().to_path_buf();
    for args in [
        vec!["check", "rules", "alerts.yml"],
        vec!["test", "rules", "alerts_test.yml"],
    ] {
        let out = common::run(Command::new("promtool").args(&args).current_dir(&dir));
        assert!(
            out.status.success(),
            "promtool {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
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
    let rules = std::fs::read_to_string(alerts_path()).unwrap();
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
                s.metric == "up" || SERIES.iter().any(|(name, _)| *name == s.metric),
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

/// Paths the daemon serves profiles at (Go's net/http/pprof convention).
const PROFILE_PATHS: [&str; 2] = ["/debug/pprof/mutex", "/debug/pprof/profile"];

/// A Parca config read by a YAML parser (Python's, Debian's python3-yaml) and checked against
/// the shape of Parca's config: object storage, one scrape job of the daemon with its token, and
/// the two profiles at the daemon's paths as delta profiles, Go's runtime ones off. Returns the
/// job.
fn parca_job(path: &str) -> Value {
    let config = common::yaml(std::path::Path::new(path));
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
    let job = parca_job(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dashboards/parca.yaml"
    ));
    assert_eq!(job["static_configs"][0]["targets"][0], "127.0.0.1:9464");
}

/// The cluster's Parca config: the same profiles, from the pods of deploy/kubernetes/ found
/// through the Kubernetes API (their namespace, their label, their port's name).
#[test]
fn the_kubernetes_parca_config_scrapes_the_daemonsets_pods() {
    let job = parca_job(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/scrape/parca-kubernetes.yaml"
    ));
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
    let ds = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/kubernetes/daemonset.yaml"
    ))
    .unwrap();
    assert!(ds.contains("app.kubernetes.io/name: fdprof") && ds.contains("- name: http"));
}

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

/// An Alloy config against the shape of Alloy's `pyroscope.scrape` component: a scrape of the
/// daemon forwarding to the `pyroscope.write` `write` defined beside it, with the daemon's
/// token, the two profiles at the daemon's paths as delta profiles, Go's runtime ones off.
/// Returns the file's blocks.
fn alloy_scrape(path: &str, write: &str) -> AlloyBlock {
    let root = read_alloy(&std::fs::read_to_string(path).unwrap());
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
    let root = alloy_scrape(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../dashboards/pyroscope.alloy"),
        "local",
    );
    let scrape = root.block("pyroscope.scrape \"fdprof\"");
    assert!(scrape.attributes["targets"].contains("\"__address__\" = \"127.0.0.1:9464\""));
}

/// The cluster's Alloy config: the same profiles, from the pods of deploy/kubernetes/ found
/// through the Kubernetes API and kept by their port's name.
#[test]
fn the_kubernetes_alloy_config_scrapes_the_daemonsets_pods() {
    let root = alloy_scrape(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/scrape/pyroscope-kubernetes.alloy"
        ),
        "cluster",
    );
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
