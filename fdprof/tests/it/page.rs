//! The daemon's live page in a real browser: Debian's headless Chromium loads `/` (the
//! credential given once as `?token=`, then the cookie) from a daemon following opensock, runs
//! the page's script, and the DOM holds the file_lock alloc and close rows and an `<svg>`
//! flamegraph; a later load shows later counts; nothing is logged to the console; a target
//! named `<b>x</b>` shows as text. A screenshot is kept in the tests' directory.

use std::process::Command;
use std::time::Duration;

use crate::common::daemon::{Daemon, fdprof_as, poll, token};
use crate::common::*;
use serde_json::Value;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Chromium's run on `url`: its standard output and error. `--virtual-time-budget` lets the
/// page's fetches finish before the DOM is dumped or the screenshot taken.
fn chromium(url: &str, what: &[&str], run: &str) -> (String, String) {
    assert!(
        std::path::Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run `cargo xtask bootstrap`"
    );
    let profile = tmp(&format!("chromium-{run}"));
    let out = run_chromium(
        Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args([
                "--enable-logging=stderr",
                "--v=0",
                "--virtual-time-budget=1500",
            ])
            .args(what)
            .arg(url),
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run_chromium(cmd: &mut Command) -> std::process::Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The text of the `<dd>` after the `<dt>` named `term` in a dumped DOM.
fn fact<'a>(dom: &'a str, term: &str) -> &'a str {
    let after = dom
        .split_once(&format!("<dt>{term}</dt><dd>"))
        .unwrap_or_else(|| panic!("no {term} in:\n{dom}"))
        .1;
    after.split_once("</dd>").unwrap().0
}

/// The `src` of the flamegraph's frame in a dumped DOM, its entities decoded.
pub(crate) fn frame_src(dom: &str) -> String {
    let frame = dom
        .split_once("<iframe id=\"flamegraph\"")
        .unwrap_or_else(|| panic!("no flamegraph frame in:\n{dom}"))
        .1;
    let src = frame
        .split_once(" src=\"")
        .unwrap_or_else(|| panic!("no src on the flamegraph frame in:\n{dom}"))
        .1;
    src.split_once('"').unwrap().0.replace("&amp;", "&")
}

#[test]
fn the_live_page_fills_itself_in_a_real_browser() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-page";
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        comm,
        "<b>x</b>",
        "--interval",
        "500ms",
    ]);
    let load = start_workload_with(
        fdprof_as(comm),
        &["opensock", "-t", "2", "-n", "4000", "-d", "30s"],
    );
    daemon.wait_metric("fdprof_targets", 1.0);
    load.go();
    // Until intervals with file_lock waits under alloc and under close have ended.
    poll(Duration::from_secs(30), || {
        let (_, body) = daemon.get("/report.json");
        let r: Value = serde_json::from_str(&body).map_err(|_| body.clone())?;
        let rows = r["contention"]["by_lock_operation"].as_array().cloned();
        let waited = |op: &str| {
            rows.iter().flatten().any(|l| {
                l["lock_kind"] == "file_lock"
                    && l["operation"] == op
                    && l["count"].as_u64() > Some(0)
            })
        };
        (waited("alloc") && waited("close"))
            .then_some(())
            .ok_or(body)
    })
    .expect("file_lock waits under alloc and close in the daemon's figures");
    let url = format!("http://{}/?token={}", daemon.addr, token());

    let (dom, log) = chromium(&url, &["--dump-dom"], "first");
    assert!(dom.contains("<td>file_lock</td><td>alloc</td>"), "{dom}");
    assert!(dom.contains("<td>file_lock</td><td>close</td>"), "{dom}");
    // The flamegraph in a sandboxed frame of its own (its script zooms and searches there).
    let src = frame_src(&dom);
    assert!(src.starts_with("/flamegraph.svg?"), "{src}");
    let (code, svg) = daemon.get(&src);
    assert_eq!(code, 200, "{src}: {svg}");
    assert!(svg.contains("alloc_fd") && svg.contains("<script"), "{svg}");
    // The timeline: a mark an interval, each with a title a screen reader reads.
    let timeline = dom.split_once("id=\"timeline\"").unwrap().1;
    let timeline = timeline.split_once("</svg>").unwrap().0;
    assert!(
        timeline.matches("<g class=\"mark full\"><title>").count() >= 2,
        "{timeline}"
    );
    assert!(timeline.contains("file_lock wait"), "{timeline}");
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(
        console.is_empty(),
        "the page logged:\n{}",
        console.join("\n")
    );
    // The name is text: escaped in the DOM, never an element.
    assert!(dom.contains("&lt;b&gt;x&lt;/b&gt;"), "{dom}");
    assert!(!dom.contains("<b>x</b>"));
    let first = fact(&dom, "all lock waits").to_string();

    std::thread::sleep(Duration::from_secs(3));
    let (dom, _) = chromium(&url, &["--dump-dom"], "second");
    let second = fact(&dom, "all lock waits").to_string();
    assert_ne!(first, second, "two loads 3 s apart show the same counts");

    let shot = tmp("page.png");
    chromium(
        &url,
        &[
            "--window-size=1280,2000",
            &format!("--screenshot={}", shot.display()),
        ],
        "shot",
    );
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    eprintln!("screenshot: {}", shot.display());
    // Without the credential: 401, page and script alike.
    assert_eq!(daemon.get_anonymous("/").0, 401);
    assert_eq!(daemon.get_anonymous("/static/page.js").0, 401);
    load.finish();
    drop(daemon);
    assert_no_programs_left();
}

#[test]
fn the_page_links_the_flight_recorders_captures() {
    require_root();
    let _guard = kernel_lock();
    let dir = tmp("page-captures");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let comm = "fdpd-pagecap";
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--comm",
        comm,
        "--interval",
        "250ms",
        "--capture-on",
        "shared-table",
        "--capture-dir",
        dir.to_str().unwrap(),
        "--capture-window",
        "1s",
        "--capture-after",
        "500ms",
    ]);
    let load = start_workload_with(
        fdprof_as(comm),
        &["opensock", "-t", "2", "-n", "4000", "-d", "3s"],
    );
    daemon.wait_metric("fdprof_targets", 1.0);
    load.go();
    daemon.wait_line("INFO", "capture: wrote");
    let name = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with("-shared-table.data"))
        .expect("a capture");
    let url = format!("http://{}/?token={}", daemon.addr, token());
    let (dom, log) = chromium(&url, &["--dump-dom"], "captures");
    assert!(
        dom.contains(&format!("<a href=\"/captures/{name}\">{name}</a>")),
        "no link to {name} in:\n{dom}"
    );
    // Marked on the timeline where it was written, a link to it too.
    let timeline = dom.split_once("id=\"timeline\"").unwrap().1;
    assert!(
        timeline.contains(&format!(
            "<a href=\"/captures/{name}\" class=\"capture-link\"><line"
        )) && timeline.contains(&format!("<title>capture {name}, ")),
        "no mark of {name} on the timeline:\n{timeline}"
    );
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(
        console.is_empty(),
        "the page logged:\n{}",
        console.join("\n")
    );
    load.finish();
    drop(daemon);
    assert_no_programs_left();
}

/// The `<tbody>` of the table `id` in a dumped DOM.
fn tbody<'a>(dom: &'a str, id: &str) -> &'a str {
    let table = dom
        .split_once(&format!("<table id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no table {id} in:\n{dom}"))
        .1;
    let body = table.split_once("<tbody>").unwrap().1;
    body.split_once("</tbody>").unwrap().0
}

/// The runs of intervals with fd syscalls, `[from, to)` in Unix ms, once `want` of them have
/// ended with an interval without any after the last.
fn wait_for_bursts(daemon: &Daemon, want: usize) -> Vec<(u64, u64)> {
    poll(Duration::from_secs(60), || {
        let (_, body) = daemon.get("/api/v1/timeline");
        let t: Value = serde_json::from_str(&body).map_err(|_| body.clone())?;
        let points = t["points"].as_array().cloned().unwrap_or_default();
        let runs = crate::timeline::bursts(&points);
        let quiet = points.last().is_some_and(|p| p["fd_syscalls"] == 0);
        (quiet && runs.len() == want).then_some(runs).ok_or(body)
    })
    .unwrap_or_else(|t| panic!("no {want} bursts in the timeline: {t}"))
}

/// A load that runs, pauses and runs again (socket-close 3000, then 2000), then opensock with
/// two threads and, after a pause, with one: the page's timeline shows the bursts and gaps;
/// the page at `?from=…&to=…` shows a burst's sockets exactly and the gap's nothing; at
/// `?base_from=…&base_to=…&from=…&to=…` (opensock -t 2 as the base, -t 1 as the range) its
/// comparison's top row says the file_lock wait went down, its figures are each range's
/// report's, and the flamegraph is the differential one. Screenshots kept.
#[test]
fn the_timeline_selects_ranges_and_compares_them() {
    require_root();
    let _guard = kernel_lock();
    let comm = "fdpd-pagetl";
    let (ops_a, ops_b) = (3_000u64, 2_000u64);
    let workload = |args: &[&str]| start_workload_with(fdprof_as(comm), args);
    // All ready (their setup done) before the daemon sees them: only the bursts count.
    let a = workload(&["socket-close", "--ops", &ops_a.to_string()]);
    let b = workload(&["socket-close", "--ops", &ops_b.to_string()]);
    let two = workload(&["opensock", "-t", "2", "-n", "2000", "-d", "3s"]);
    let one = workload(&["opensock", "-t", "1", "-n", "2000", "-d", "3s"]);
    let daemon = Daemon::start(&["--tier", "full", "--comm", comm, "--interval", "1s"]);
    daemon.wait_metric("fdprof_targets", 4.0);
    let pause = || std::thread::sleep(Duration::from_millis(3_500));
    a.go();
    a.finish();
    pause();
    b.go();
    b.finish();
    pause();
    two.go();
    two.finish();
    pause();
    one.go();
    one.finish();
    let runs = wait_for_bursts(&daemon, 4);
    let url = |query: &str| format!("http://{}/?token={}&{query}", daemon.addr, token());

    // The whole timeline: four bursts, each mark titled.
    let (dom, log) = chromium(&url(""), &["--dump-dom"], "timeline");
    let timeline = dom.split_once("id=\"timeline\"").unwrap().1;
    let timeline = timeline.split_once("</svg>").unwrap().0;
    let marks = timeline.matches("<g class=\"mark full\"><title>").count();
    assert!(marks >= 14, "{marks} marks in:\n{timeline}");
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(
        console.is_empty(),
        "the page logged:\n{}",
        console.join("\n")
    );

    // A burst's range: its sockets, exactly; the gap after it: nothing.
    let (a0, a1) = runs[0];
    let (dom, _) = chromium(
        &url(&format!("from={a0}&to={a1}")),
        &["--dump-dom"],
        "burst",
    );
    assert!(
        tbody(&dom, "syscalls").contains(&format!("<tr><td>socket</td><td>{ops_a}</td>")),
        "{}",
        tbody(&dom, "syscalls")
    );
    assert!(dom.contains("<p id=\"range\">range "), "{dom}");
    let (gap0, gap1) = (runs[0].1, runs[1].0);
    let (dom, _) = chromium(
        &url(&format!("from={gap0}&to={gap1}")),
        &["--dump-dom"],
        "gap",
    );
    assert_eq!(tbody(&dom, "syscalls"), "", "the gap's fd syscalls");
    assert!(fact(&dom, "all lock waits").starts_with("0 waits"), "{dom}");

    // opensock -t 2 as the base, -t 1 as the range.
    let ((b0, b1), (r0, r1)) = (runs[2], runs[3]);
    let compared = format!("base_from={b0}&base_to={b1}&from={r0}&to={r1}");
    let (dom, _) = chromium(&url(&compared), &["--dump-dom"], "compare");
    let changes = tbody(&dom, "changes");
    let top = changes.split("</tr>").next().unwrap();
    assert!(
        top.starts_with("<tr><td>lock wait</td><td>file_lock ") && top.contains("class=\"down\""),
        "the top change is not a file_lock wait that went down:\n{changes}"
    );
    // The figures compared are each range's report's.
    let (code, body) = daemon.get(&format!("/api/v1/compare?{compared}"));
    assert_eq!(code, 200, "{body}");
    let comparison: Value = serde_json::from_str(&body).unwrap();
    let report = |from: u64, to: u64| -> Value {
        let (_, body) = daemon.get(&format!("/report.json?from={from}&to={to}"));
        serde_json::from_str(&body).unwrap()
    };
    let (base, new) = (report(b0, b1), report(r0, r1));
    let wait = |r: &Value, name: &str| -> u64 {
        r["contention"]["by_lock_operation"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| {
                format!(
                    "{} {}",
                    l["lock"].as_str().unwrap(),
                    l["operation"].as_str().unwrap()
                ) == name
            })
            .map(|l| l["total_wait_ns"].as_u64().unwrap())
            .sum()
    };
    let rows = comparison["rows"].as_array().unwrap();
    for row in rows.iter().filter(|r| r["section"] == "lock_wait") {
        let name = row["name"].as_str().unwrap();
        assert_eq!(row["base"].as_u64().unwrap(), wait(&base, name), "{row}");
        assert_eq!(row["new"].as_u64().unwrap(), wait(&new, name), "{row}");
    }
    assert!(rows[0]["change"].as_i64().unwrap() < 0, "{}", rows[0]);
    // The flamegraph against the base: the differential one.
    let src = frame_src(&dom);
    assert!(src.contains("base_from=") && src.contains("from="), "{src}");
    let (code, svg) = daemon.get(&src);
    assert_eq!(code, 200, "{src}: {svg}");
    assert!(
        svg.contains("differential"),
        "{}",
        &svg[..svg.len().min(2000)]
    );

    // The top of the page (the README's picture), the whole of it, and a range alone.
    let range_a = format!("from={a0}&to={a1}");
    for (name, query, size) in [
        ("page-timeline.png", compared.as_str(), "1280,1150"),
        ("page-whole.png", compared.as_str(), "1280,4200"),
        ("page-range.png", range_a.as_str(), "1280,2400"),
    ] {
        let shot = tmp(name);
        chromium(
            &url(query),
            &[
                &format!("--window-size={size}"),
                &format!("--screenshot={}", shot.display()),
            ],
            name,
        );
        assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
        eprintln!("screenshot: {}", shot.display());
    }
    drag_and_keys(&url(""), runs[0], ops_a);
    drop(daemon);
    assert_no_programs_left();
}

/// In Chromium driven as a person would: a drag over the first burst selects it (its sockets,
/// exactly, and the range in the page's URL); from the keyboard, Esc clears, ← selects the last
/// interval, `b` makes it the base, ← ← selects a range to compare with it.
fn drag_and_keys(url: &str, (a0, a1): (u64, u64), ops_a: u64) {
    let mut page = crate::common::cdp::Browser::open(url, tmp("chromium-driven"));
    page.wait_until(
        "points.length > 0 && document.querySelectorAll('#timeline g.mark').length > 0",
    );
    // Where a time is on the screen, as the timeline draws it.
    let x_of = |page: &mut crate::common::cdp::Browser, ms: u64| -> f64 {
        page.eval(&format!(
            "(() => {{ const b = $('timeline').getBoundingClientRect(); \
               return b.left + scale().x({ms}) / 1000 * b.width; }})()"
        ))
        .as_f64()
        .unwrap()
    };
    let y = page
        .eval("(() => { const b = $('timeline').getBoundingClientRect(); return b.top + b.height / 2; })()")
        .as_f64()
        .unwrap();
    // Inside the burst's first and last intervals.
    let (from, to) = (x_of(&mut page, a0 + 200), x_of(&mut page, a1 - 200));
    page.mouse("mousePressed", from, y, 0);
    page.mouse("mouseMoved", (from + to) / 2.0, y, 0);
    page.mouse("mouseReleased", to, y, 0);
    page.wait_until("location.search.includes('from=') && !location.search.includes('token=')");
    page.wait_until(&format!(
        "[...document.querySelectorAll('#syscalls tbody tr')].some((r) => \
           r.cells[0].textContent === 'socket' && r.cells[1].textContent === '{ops_a}')"
    ));
    let search = page.eval("location.search");
    assert!(search.as_str().unwrap().contains("&to="), "{search}");

    // The keyboard.
    page.eval("$('timeline').focus()");
    page.key("Escape", 27, 0);
    page.wait_until(
        "!location.search.includes('from=') && $('range').textContent.startsWith('showing')",
    );
    page.key("ArrowLeft", 37, 0);
    page.wait_until("location.search.includes('from=') && chosen.range !== null");
    page.key("b", 66, 0);
    page.wait_until("location.search.includes('base_from=') && chosen.range === null");
    page.key("ArrowLeft", 37, 0);
    page.key("ArrowLeft", 37, 8);
    page.wait_until("chosen.range !== null && chosen.base !== null && !$('comparison').hidden");
    // The flamegraph shows the difference; the comparison the page asked for was answered.
    page.wait_until("$('flamegraph').getAttribute('src').includes('base_from=')");
    page.wait_until(
        "(async () => (await fetch('/api/v1/compare?' + query({ base_from: chosen.base.from, \
           base_to: chosen.base.to }))).status === 200)()",
    );
    let range = page
        .eval("chosen.range.to - chosen.range.from")
        .as_f64()
        .unwrap();
    assert!(range > 0.0);
}
