//! The data path runs one way: probe → collect → (symbolize) → model → analysis → render →
//! commands. No module may name one of a later stage: this reads every `crate::…` path in
//! `fdprof/src` and checks it against the stages each module may use.

use std::collections::BTreeMap;
use std::path::Path;

/// Each top-level module and the modules it may use, besides itself and the test fixtures.
const MAY_USE: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("escape", &[]),
    ("output", &["error"]),
    ("procfs", &[]),
    ("privileges", &["error", "escape"]),
    ("probe", &["error", "escape"]),
    ("collect", &["probe", "procfs", "error", "escape"]),
    ("symbolize", &["procfs", "error", "escape"]),
    (
        "model",
        &["collect", "symbolize", "probe", "error", "escape", "output"],
    ),
    (
        "live",
        &["model", "collect", "symbolize", "probe", "error", "escape"],
    ),
    ("analysis", &["model", "error", "escape"]),
    ("render", &["analysis", "model", "probe", "error", "escape"]),
    (
        "commands",
        &[
            "service",
            "live",
            "tui",
            "render",
            "analysis",
            "model",
            "symbolize",
            "collect",
            "probe",
            "privileges",
            "procfs",
            "output",
            "error",
            "escape",
        ],
    ),
    (
        "service",
        &[
            "live",
            "render",
            "analysis",
            "model",
            "symbolize",
            "collect",
            "probe",
            "error",
            "escape",
            "output",
        ],
    ),
    (
        "tui",
        &["analysis", "render", "model", "error", "escape", "output"],
    ),
    ("testdata", &["model", "collect"]),
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

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_uses_a_later_stage() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
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
        if matches!(module, "lib" | "main") {
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

#[test]
fn the_checker_sees_paths() {
    assert_eq!(
        crate_paths("use crate::model::Recording; x(crate::render::text)"),
        ["model", "render"]
    );
}
