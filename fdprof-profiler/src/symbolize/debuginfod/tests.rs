//! The client against a real `debuginfod` (elfutils) and against loopback listeners that answer
//! badly, with ELF files built here (`cc`, `objcopy`) under a random build id per run. Only
//! loopback addresses are ever contacted.

mod fixtures;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fixtures::*;

use super::*;
#[test]
fn fetches_through_debuginfod_into_a_private_cache() {
    let tmp = TempDir::new();
    let build_id = random_bytes(20);
    let debug = build_elf(&tmp.join("src"), &build_id);
    let server = start_debuginfod(&tmp, &tmp.join("src"), &build_id);
    let cache_dir = tmp.join("var/cache/debuginfod");
    let d = Debuginfod::start(config(vec![loopback(server.port)], cache_dir.clone())).unwrap();

    assert!(matches!(d.lookup(&build_id), Lookup::Pending));
    assert!(
        matches!(d.lookup(&build_id), Lookup::Pending),
        "one fetch per build id"
    );
    wait(&d);
    assert_eq!(d.generation(), 1);
    let mut file = ready(d.lookup(&build_id));
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).unwrap();
    assert_eq!(
        bytes,
        fs::read(&debug).unwrap(),
        "the debug file, as served"
    );
    assert_eq!(build_id_of(ready(d.lookup(&build_id))), build_id);

    let counts = d.counts();
    assert_eq!(
        (counts.fetched, counts.fetched_bytes),
        (1, bytes.len() as u64)
    );
    assert_eq!((counts.not_found, counts.failed, counts.refused), (0, 0, 0));
    assert_eq!(counts.cache_bytes, bytes.len() as u64);
    let cached = cache_dir.join(format!("{}.debug", cache::hex(&build_id)));
    assert_eq!(
        fs::metadata(&cached).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    assert_eq!(
        fs::metadata(&cache_dir).unwrap().permissions().mode() & 0o7777,
        0o700
    );
    assert_eq!(
        fs::read_dir(&cache_dir).unwrap().count(),
        1,
        "no temporary file left"
    );
    assert!(d.take_new_failures().is_empty());
}

#[test]
fn the_cache_answers_with_the_server_stopped() {
    let tmp = TempDir::new();
    let build_id = random_bytes(20);
    build_elf(&tmp.join("src"), &build_id);
    let server = start_debuginfod(&tmp, &tmp.join("src"), &build_id);
    let config = config(vec![loopback(server.port)], tmp.join("cache"));
    let first = Debuginfod::start(config.clone()).unwrap();
    assert!(matches!(first.lookup(&build_id), Lookup::Pending));
    wait(&first);
    assert_eq!(first.counts().fetched, 1);
    drop(first);
    drop(server);

    let second = Debuginfod::start(config).unwrap();
    assert_eq!(build_id_of(ready(second.lookup(&build_id))), build_id);
    assert_eq!(second.generation(), 0, "no fetch");
    let counts = second.counts();
    assert_eq!(
        (counts.fetched, counts.cache_hits, counts.failed),
        (0, 1, 0)
    );
    assert!(second.take_new_failures().is_empty());
}

#[test]
fn a_server_that_never_answers_fails_within_the_timeout() {
    let tmp = TempDir::new();
    let silent = canned(|_, _, stop| {
        let start = Instant::now();
        while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut config = config(vec![loopback(silent.port)], tmp.join("cache"));
    config.fetch_timeout = Duration::from_secs(2);
    let d = Debuginfod::start(config).unwrap();
    let build_id = random_bytes(20);

    assert!(matches!(d.lookup(&build_id), Lookup::Pending));
    assert!(
        d.wait_idle(Instant::now() + Duration::from_secs(10)),
        "not idle within 10 s"
    );
    assert!(matches!(d.lookup(&build_id), Lookup::Failed));
    assert_eq!(d.generation(), 1, "a failed fetch is not retried at once");
    let counts = d.counts();
    assert_eq!((counts.failed, counts.fetched, counts.not_found), (1, 0, 0));
    let failures = d.take_new_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    let expected = format!(
        "debuginfod http://127.0.0.1:{}: timed out after 2 s",
        silent.port
    );
    assert_eq!(failures[0], expected);
    assert!(d.take_new_failures().is_empty(), "said once");
}

/// Each bad answer is refused within the size bound and leaves nothing in the cache.
#[test]
fn bad_answers_are_refused() {
    let tmp = TempDir::new();
    let build_id = random_bytes(20);
    let good = fs::read(build_elf(&tmp.join("good"), &build_id)).unwrap();
    let other = fs::read(build_elf(&tmp.join("other"), &random_bytes(20))).unwrap();
    let html = b"<html><body>Sign in to continue</body></html>".to_vec();
    let cases: Vec<(&str, Canned)> = vec![
        ("an HTML page", canned(ok_with_length(html))),
        ("the wrong build id", canned(ok_with_length(other))),
        (
            "a truncated ELF file",
            canned(ok_with_length(good[..good.len() / 2].to_vec())),
        ),
        (
            "a 3 GB Content-Length",
            canned(zeros_after(
                "HTTP/1.1 200 OK\r\nContent-Length: 3000000000\r\n\r\n",
            )),
        ),
        (
            "an endless body",
            canned(zeros_after("HTTP/1.1 200 OK\r\n\r\n")),
        ),
        (
            "an endless chunked body",
            canned(zeros_after(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            )),
        ),
    ];
    for (i, (what, server)) in cases.iter().enumerate() {
        let cache_dir = tmp.join(&format!("cache-{i}"));
        let mut config = config(vec![loopback(server.port)], cache_dir.clone());
        config.cache_max_bytes = 1 << 20;
        let d = Debuginfod::start(config).unwrap();
        assert!(matches!(d.lookup(&build_id), Lookup::Pending), "{what}");
        wait(&d);
        assert!(matches!(d.lookup(&build_id), Lookup::Failed), "{what}");
        let counts = d.counts();
        assert_eq!(
            (counts.refused, counts.fetched, counts.failed),
            (1, 0, 0),
            "{what}"
        );
        assert_eq!(
            fs::read_dir(&cache_dir).unwrap().count(),
            0,
            "{what}: left in the cache"
        );
        let failures = d.take_new_failures();
        assert!(
            failures.len() == 1 && failures[0].contains("refused"),
            "{what}: {failures:?}"
        );
    }
}

#[test]
fn follows_redirects_and_reads_chunked_bodies() {
    let tmp = TempDir::new();
    let build_id = random_bytes(20);
    let good = fs::read(build_elf(&tmp.join("src"), &build_id)).unwrap();
    let body = good.clone();
    let chunked = canned(move |_, stream, _| {
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for piece in body.chunks(1000) {
            let _ = write!(stream, "{:x};ext=1\r\n", piece.len());
            let _ = stream.write_all(piece);
            let _ = stream.write_all(b"\r\n");
        }
        let _ = stream.write_all(b"0\r\nX-Trailer: 1\r\n\r\n");
    });
    let port = chunked.port;
    let redirect = canned(move |head, stream, _| {
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let location = format!("http://127.0.0.1:{port}/mirror{path}");
        answer(
            stream,
            &format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"),
            b"",
        );
    });
    // The first server knows nothing: the second is asked next.
    let nothing = canned(not_found());
    let urls = vec![loopback(nothing.port), loopback(redirect.port)];
    let d = Debuginfod::start(config(urls, tmp.join("cache"))).unwrap();
    assert!(matches!(d.lookup(&build_id), Lookup::Pending));
    wait(&d);
    let mut bytes = Vec::new();
    ready(d.lookup(&build_id)).read_to_end(&mut bytes).unwrap();
    assert_eq!(bytes, good);
    assert_eq!((d.counts().fetched, d.counts().not_found), (1, 0));
}

#[test]
fn every_server_answering_404_is_not_found() {
    let tmp = TempDir::new();
    let (a, b) = (canned(not_found()), canned(not_found()));
    let d = Debuginfod::start(config(
        vec![loopback(a.port), loopback(b.port)],
        tmp.join("cache"),
    ))
    .unwrap();
    let build_id = random_bytes(20);
    assert!(matches!(d.lookup(&build_id), Lookup::Pending));
    wait(&d);
    assert!(matches!(d.lookup(&build_id), Lookup::Failed));
    let counts = d.counts();
    assert_eq!((counts.not_found, counts.failed, counts.refused), (1, 0, 0));
    assert!(
        d.take_new_failures().is_empty(),
        "404 is no failure to report"
    );
}

#[test]
fn a_refused_connection_is_reported_once() {
    let tmp = TempDir::new();
    let port = free_port();
    let d = Debuginfod::start(config(vec![loopback(port)], tmp.join("cache"))).unwrap();
    for _ in 0..2 {
        assert!(matches!(d.lookup(&random_bytes(20)), Lookup::Pending));
    }
    wait(&d);
    assert_eq!(d.counts().failed, 2);
    let failures = d.take_new_failures();
    assert_eq!(
        failures,
        [format!(
            "debuginfod http://127.0.0.1:{port}: connection refused"
        )]
    );
}

#[test]
fn https_failures_are_one_line() {
    let tmp = TempDir::new();
    let closes = canned(|_, _, _| {});
    let url = Url::parse(&format!("https://127.0.0.1:{}", closes.port)).unwrap();
    let d = Debuginfod::start(config(vec![url], tmp.join("cache"))).unwrap();
    assert!(matches!(d.lookup(&random_bytes(20)), Lookup::Pending));
    wait(&d);
    assert_eq!(d.counts().failed, 1);
    let failures = d.take_new_failures();
    assert!(
        failures.len() == 1 && !failures[0].contains('\n'),
        "{failures:?}"
    );
}

#[test]
fn the_oldest_files_are_evicted_past_the_bound() {
    let tmp = TempDir::new();
    let (id_a, id_b) = (random_bytes(20), random_bytes(20));
    let a = fs::read(build_elf(&tmp.join("a"), &id_a)).unwrap();
    let b = fs::read(build_elf(&tmp.join("b"), &id_b)).unwrap();
    let (hex_a, hex_b) = (cache::hex(&id_a), cache::hex(&id_b));
    let server = canned(move |head, stream, _| {
        let body = if head.contains(&hex_a) { &a } else { &b };
        answer(
            stream,
            &format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()),
            body,
        );
    });
    let cache_dir = tmp.join("cache");
    let size_b = fs::metadata(tmp.join("b/prog.debug")).unwrap().len();
    let mut config = config(vec![loopback(server.port)], cache_dir.clone());
    config.cache_max_bytes = size_b.max(fs::metadata(tmp.join("a/prog.debug")).unwrap().len()) + 1;
    let d = Debuginfod::start(config).unwrap();
    d.lookup(&id_a);
    wait(&d);
    std::thread::sleep(Duration::from_millis(20));
    d.lookup(&id_b);
    wait(&d);
    let names: Vec<_> = fs::read_dir(&cache_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [std::ffi::OsString::from(format!("{hex_b}.debug"))]);
    assert_eq!((d.counts().fetched, d.counts().cache_bytes), (2, size_b));
}

#[test]
fn a_symlinked_cache_dir_is_refused() {
    let tmp = TempDir::new();
    let target = tmp.join("elsewhere");
    fs::create_dir(&target).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&target, tmp.join("cache")).unwrap();
    let err = Debuginfod::start(config(vec![loopback(1)], tmp.join("cache"))).unwrap_err();
    assert!(format!("{err:#}").contains("symbolic link"), "{err:#}");
    assert_eq!(
        fs::metadata(&target).unwrap().permissions().mode() & 0o7777,
        0o755,
        "not chmodded"
    );

    // A directory someone else owns is refused too (the tests run as root, who can chown).
    let foreign = tmp.join("foreign");
    fs::create_dir(&foreign).unwrap();
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    let err = Debuginfod::start(config(vec![loopback(1)], foreign)).unwrap_err();
    assert!(format!("{err:#}").contains("owned by"), "{err:#}");
}

#[test]
fn a_planted_symlink_in_the_cache_is_not_followed() {
    let tmp = TempDir::new();
    let build_id = random_bytes(20);
    let debug = build_elf(&tmp.join("src"), &build_id);
    let before = fs::read(&debug).unwrap();
    let cache_dir = tmp.join("cache");
    let server = canned(not_found());
    let d = Debuginfod::start(config(vec![loopback(server.port)], cache_dir.clone())).unwrap();
    let planted = cache_dir.join(format!("{}.debug", cache::hex(&build_id)));
    std::os::unix::fs::symlink(&debug, &planted).unwrap();

    assert!(
        matches!(d.lookup(&build_id), Lookup::Pending),
        "the link is not used"
    );
    assert!(
        fs::symlink_metadata(&planted).is_err(),
        "the link is removed"
    );
    assert_eq!(fs::read(&debug).unwrap(), before, "its target is untouched");
    let failures = d.take_new_failures();
    assert!(
        failures.len() == 1 && failures[0].contains("symbolic link"),
        "{failures:?}"
    );
    wait(&d);
    assert_eq!(d.counts().cache_hits, 0);
}

#[test]
fn stale_temporary_files_are_removed_at_start() {
    let tmp = TempDir::new();
    let cache_dir = tmp.join("cache");
    fs::create_dir(&cache_dir).unwrap();
    let stale = cache_dir.join(".fdprof-tmp-999999999-0-abcd");
    let live = cache_dir.join(".fdprof-tmp-1-0-abcd");
    fs::write(&stale, b"x").unwrap();
    fs::write(&live, b"x").unwrap();
    let _d = Debuginfod::start(config(vec![loopback(1)], cache_dir)).unwrap();
    assert!(
        !stale.exists(),
        "a dead process's temporary file is removed"
    );
    assert!(live.exists(), "a live process's download is left alone");
}

#[test]
fn config_reads_whitespace_separated_urls() {
    let urls = Config::parse_urls(
        " http://127.0.0.1:8002\n\thttps://debuginfod.example/sub/  http://[::1]:9/ ",
    )
    .unwrap();
    let shown: Vec<String> = urls.iter().map(Url::to_string).collect();
    assert_eq!(
        shown,
        [
            "http://127.0.0.1:8002",
            "https://debuginfod.example/sub",
            "http://[::1]:9"
        ]
    );
    assert_eq!(
        (urls[1].scheme, urls[1].port, urls[1].path.as_str()),
        (Scheme::Https, 443, "/sub")
    );
    assert_eq!((urls[2].host.as_str(), urls[2].port), ("::1", 9));
    assert_eq!(
        urls[1].join("/buildid/ab/debuginfo").path,
        "/sub/buildid/ab/debuginfo"
    );

    let config =
        Config::from_flag_or_env(Some("http://127.0.0.1:1"), Some("/tmp/c".into()), Some(5))
            .unwrap()
            .unwrap();
    assert_eq!(
        (config.cache_dir, config.cache_max_bytes),
        (PathBuf::from("/tmp/c"), 5)
    );
    assert_eq!(config.fetch_timeout, DEFAULT_FETCH_TIMEOUT);
    let defaults = Config::from_flag_or_env(Some("http://h"), None, None)
        .unwrap()
        .unwrap();
    assert_eq!(defaults.cache_dir, PathBuf::from(DEFAULT_CACHE_DIR));
    assert_eq!(defaults.cache_max_bytes, 2 << 30);

    for empty in ["", "  \n\t "] {
        assert!(
            Config::from_flag_or_env(Some(empty), None, None)
                .unwrap()
                .is_none()
        );
    }
    for bad in [
        "ftp://x",
        "http://",
        "http://h:99999",
        "http://h:x",
        "file:///tmp",
        "http://u@h/",
        "h:80",
    ] {
        let err =
            Config::from_flag_or_env(Some(&format!("http://ok {bad}")), None, None).unwrap_err();
        let message = format!("{err:#}");
        assert!(
            message.contains(bad) && !message.contains('\n'),
            "{bad}: {message}"
        );
    }
}

#[test]
fn redirect_locations_resolve() {
    let base = Url::parse("http://127.0.0.1:8002/a").unwrap();
    assert_eq!(
        base.resolve("/b/c?x=1").unwrap().to_string(),
        "http://127.0.0.1:8002/b/c?x=1"
    );
    assert_eq!(
        base.resolve("https://h/d/").unwrap().to_string(),
        "https://h/d/"
    );
    assert!(base.resolve("ftp://h/").is_err());
    assert!(base.resolve("relative").is_err());
}

#[test]
fn fetches_over_https() {
    let tmp = TempDir::new();
    let body = b"debug file bytes".to_vec();
    let (server, client) = tls_canned(&tmp, body.clone());
    let mut limits = Limits {
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        max_body: 1 << 20,
        tls: Some(client),
    };
    let url = Url::parse(&format!(
        "https://127.0.0.1:{}/buildid/ab/debuginfo",
        server.port
    ))
    .unwrap();
    let mut got = Vec::new();
    assert_eq!(
        http::get(&url, &limits, &mut got).unwrap(),
        body.len() as u64
    );
    assert_eq!(got, body);

    // The same server is not trusted with the system's roots.
    limits.tls = None;
    match http::get(&url, &limits, &mut Vec::new()) {
        Err(HttpError::Failed { detail, .. }) => {
            assert!(detail.contains("certificate"), "{detail}")
        }
        other => panic!("expected a certificate failure, got {other:?}"),
    }
}
