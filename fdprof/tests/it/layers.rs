//! What cargo cannot check of the layers. The crates keep the big ones (the profiler library
//! `fdprof-profiler` below the daemon `fdprof-daemon`, the terminal view `fdprof-top` and the
//! binary's commands; the recording format `fdprof-recording` below all of them). Inside the
//! library the data path runs one way: probe → collect → (symbolize) → model → analysis →
//! render. No module may name one of a later stage: this reads every `crate::…` path in
//! `fdprof-profiler/src` and checks it against the stages each module may use. And `/proc` is
//! read only through the library's `procfs` module, in every crate of the product.
//! (`crate::escape` and `crate::testdata` are the recording crate's, imported at the root.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The library's source folder.
fn library_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fdprof-profiler/src")
}

/// Each top-level module and the modules it may use, besides itself and the test fixtures.
const MAY_USE: &[(&str, &[&str])] = &[
    ("error", &[]),
    // A bound in an error is written as the figures write a duration.
    ("duration", &["render"]),
    ("size", &[]),
    ("output", &["procfs", "error"]),
    ("procfs", &[]),
    ("privileges", &["procfs", "error", "escape"]),
    ("probe", &["privileges", "procfs", "error", "escape"]),
    ("collect", &["probe", "unwind", "procfs", "error", "escape"]),
    ("unwind", &["procfs", "error"]),
    ("symbolize", &["procfs", "error", "escape"]),
    (
        "model",
        &["collect", "symbolize", "probe", "error", "escape"],
    ),
    (
        "live",
        &[
            "model",
            "collect",
            "symbolize",
            "probe",
            "procfs",
            "error",
            "escape",
        ],
    ),
    ("analysis", &["model", "error", "escape"]),
    ("render", &["analysis", "model", "probe", "error", "escape"]),
];

/// The top-level modules named by `crate::NAME` in `text`.
fn crate_paths(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        found.push(&rest[..end]);
    }
    found
}

/// The source files under `dir` but the unit tests' own (`tests.rs`, `*_tests.rs`, `tests/`),
/// which build fixtures and read what they check with anything.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if stem == "tests" || stem.ends_with("_tests") {
            continue;
        }
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_uses_a_later_stage() {
    let src = library_src();
    let rules: BTreeMap<&str, &[&str]> = MAY_USE.iter().copied().collect();
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let module = first.trim_end_matches(".rs");
        if module == "lib" {
            continue;
        }
        let allowed = rules
            .get(module)
            .unwrap_or_else(|| panic!("{module} has no place in MAY_USE"));
        let text = std::fs::read_to_string(file).unwrap();
        for used in crate_paths(&text) {
            // `crate::VERSION` is a constant of lib.rs, which depends on nothing.
            if used != module && !matches!(used, "testdata" | "VERSION") && !allowed.contains(&used)
            {
                wrong.push(format!("{} uses crate::{used}", rel.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the data path:\n{}",
        wrong.join("\n")
    );
}

/// The places in `text` (outside its unit tests) where a file under `/proc` is opened, read,
/// listed or followed by a path spelt there.
fn proc_reads(text: &str) -> Vec<String> {
    let code = text
        .split("\n#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or(text);
    let calls = [
        "open(",
        "read_to_string(",
        "read_dir(",
        "read_link(",
        "metadata(",
    ];
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for call in calls {
            for (at, _) in line.match_indices(call) {
                let arg = line[at + call.len()..].trim_start();
                let arg = arg.strip_prefix("format!(").unwrap_or(arg);
                let arg = arg.strip_prefix("&format!(").unwrap_or(arg);
                if arg.starts_with("\"/proc") {
                    found.push(format!("line {}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn proc_is_read_through_procfs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in ["fdprof", "fdprof-profiler", "fdprof-daemon", "fdprof-top"] {
        sources(&root.join(krate).join("src"), &mut files);
    }
    let procfs = library_src().join("procfs");
    let mut wrong = Vec::new();
    for file in &files {
        if file.starts_with(&procfs) {
            continue;
        }
        let rel = file.strip_prefix(&root).unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        for place in proc_reads(&text) {
            wrong.push(format!("{} {place}", rel.display()));
        }
    }
    assert!(
        wrong.is_empty(),
        "/proc read outside procfs/:\n{}",
        wrong.join("\n")
    );
    let sample = "let a = std::fs::read_to_string(format!(\"/proc/{pid}/fdinfo/{fd}\"));\n\
                  let b = File::open(\"/proc/kcore\");\n\
                  let c = std::fs::read_dir(\"/sys/fs/cgroup\");\n\
                  let d = thing.context(\"cannot open /proc/kcore\");";
    assert_eq!(proc_reads(sample).len(), 2, "{:?}", proc_reads(sample));
}

#[test]
fn the_checker_sees_paths() {
    assert_eq!(
        crate_paths("use crate::model::Recording; x(crate::render::text)"),
        ["model", "render"]
    );
}
