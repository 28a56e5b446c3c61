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

/// The recording format: what a recording file holds and how it is read back. These files
/// name no collector or symbolizer code and none of the model's builders, so the format can be
/// read on its own; the conversions live with the builders (`convert`, `sample`, `lock_names`,
/// `trace/build`).
const FORMAT: &[&str] = &[
    "recording",
    "hist",
    "bounded",
    "lock",
    "counters",
    "series",
    "read",
    "budget",
    "trace",
];
/// The builder in a format's directory.
const NOT_FORMAT: &[&str] = &["trace/build.rs"];

/// The model's files outside their tests: (module, file name, text).
fn model_files() -> Vec<(String, String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model");
    let mut files = Vec::new();
    sources(&dir, &mut files);
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&dir).unwrap();
            let module = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_str()
                .unwrap()
                .trim_end_matches(".rs")
                .to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            // Code only: tests may build fixtures with anything, comments name what they like.
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            (module, rel.display().to_string(), code)
        })
        .collect()
}

/// The model modules `code` (of a file in `module`) names: `crate::model::X`, and `super::X`
/// from a top-level file of the model (within `trace/`, `super::super::X`).
fn model_uses(module: &str, file: &str, code: &str, modules: &[String]) -> Vec<String> {
    let mut used = Vec::new();
    let nested = file.contains('/');
    for prefix in ["crate::model::", "super::super::", "super::"] {
        if prefix == "super::" && nested || prefix == "super::super::" && !nested {
            continue;
        }
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            // `super::super::X` is not also `super::X`.
            let before = &rest[..at];
            rest = &rest[at + prefix.len()..];
            if prefix == "super::" && before.ends_with("super::") {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name != module && modules.contains(&name) && !used.contains(&name) {
                used.push(name);
            }
            // `use super::{a, b::C}`: each name in the braces.
            if rest.starts_with('{') {
                let inner = &rest[1..rest.find('}').unwrap_or(rest.len())];
                for part in inner.split(',') {
                    let name = part
                        .trim()
                        .split("::")
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    if name != module && modules.contains(&name) && !used.contains(&name) {
                        used.push(name);
                    }
                }
            }
        }
    }
    used
}

#[test]
fn the_recording_format_names_no_builder() {
    let files = model_files();
    let modules: Vec<String> = files.iter().map(|(m, _, _)| m.clone()).collect();
    let mut wrong = Vec::new();
    for (module, file, code) in &files {
        if !FORMAT.contains(&module.as_str()) || NOT_FORMAT.contains(&file.as_str()) {
            continue;
        }
        for stage in ["collect", "symbolize", "live", "probe"] {
            if crate_paths(code).contains(&stage) {
                wrong.push(format!("{file} uses crate::{stage}"));
            }
        }
        for used in model_uses(module, file, code, &modules) {
            if !FORMAT.contains(&used.as_str()) {
                wrong.push(format!("{file} uses model::{used}, a builder"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the format reaches past itself:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_model_has_no_import_circle() {
    let files = model_files();
    let modules: Vec<String> = files.iter().map(|(m, _, _)| m.clone()).collect();
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (module, file, code) in &files {
        let out = edges.entry(module.clone()).or_default();
        for used in model_uses(module, file, code, &modules) {
            if !out.contains(&used) {
                out.push(used);
            }
        }
    }
    // Depth-first, reporting the first circle found from each module.
    fn visit(
        at: &str,
        edges: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut circle = path[i..].to_vec();
            circle.push(at.to_string());
            return Some(circle);
        }
        if done.iter().any(|d| d == at) {
            return None;
        }
        path.push(at.to_string());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.push(at.to_string());
        None
    }
    let mut done = Vec::new();
    for module in edges.keys() {
        let circle = visit(module, &edges, &mut Vec::new(), &mut done);
        assert!(
            circle.is_none(),
            "an import circle in model/: {}",
            circle.unwrap().join(" -> ")
        );
    }
    // The checker sees what it must.
    let seen = model_uses("a", "a.rs", "use super::{recording::X, series};", &modules);
    assert_eq!(seen, ["recording", "series"]);
}
