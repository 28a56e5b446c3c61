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
    let flamegraph = dom.split_once("id=\"flamegraph\"").unwrap().1;
    assert!(flamegraph.contains("<svg"), "no flamegraph in:\n{dom}");
    assert!(flamegraph.contains("alloc_fd"), "{flamegraph}");
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
