//! The data path runs one way: probe → collect → (symbolize) → model → analysis → render →
//! commands. No module may name one of a later stage: this reads every `crate::…` path in
//! `fdprof/src` and checks it against the stages each module may use. The recording format is
//! the `fdprof-recording` crate, below all of them: cargo keeps it from naming any of them.
//! (`crate::escape` and `crate::testdata` are that crate's, imported at fdprof's root.)

use std::collections::BTreeMap;
use std::path::Path;

/// Each top-level module and the modules it may use, besides itself and the test fixtures.
const MAY_USE: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("output", &["procfs", "error"]),
    ("procfs", &[]),
    ("privileges", &["procfs", "error", "escape"]),
    ("probe", &["privileges", "procfs", "error", "escape"]),
    ("collect", &["probe", "procfs", "error", "escape"]),
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
            "procfs",
            "error",
            "escape",
            "output",
        ],
    ),
    (
        "tui",
        &["analysis", "render", "model", "error", "escape", "output"],
    ),
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
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        if rel.starts_with("procfs") {
            continue;
        }
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

/// The model's files outside their tests: (module, text).
fn model_files() -> Vec<(String, String)> {
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
            (module, code)
        })
        .collect()
}

/// The model modules `code` (of a file in `module`) names: `crate::model::X` and `super::X`
/// (`model/` is one level: the format's directories are the `fdprof-recording` crate's).
fn model_uses(module: &str, code: &str, modules: &[String]) -> Vec<String> {
    let mut used = Vec::new();
    for prefix in ["crate::model::", "super::"] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            rest = &rest[at + prefix.len()..];
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
fn the_model_has_no_import_circle() {
    let files = model_files();
    let modules: Vec<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (module, code) in &files {
        let out = edges.entry(module.clone()).or_default();
        for used in model_uses(module, code, &modules) {
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
    let seen = model_uses("a", "use super::{build::X, merge};", &modules);
    assert_eq!(seen, ["build", "merge"]);
}

/// Each module of the library (`["service", "watcher"]`; a folder's `mod.rs` is the folder's
/// module) and the tokens of its code, comments, strings and `#[cfg(test)]` items left out, as
/// are the test files (`tests.rs`, `*_tests.rs`, `tests/`).
fn library_modules() -> Vec<(Vec<String>, Vec<String>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut modules = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap().with_extension("");
        let mut module: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_str().unwrap().to_string())
            .collect();
        let test = |m: &String| m == "tests" || m.ends_with("_tests");
        if module == ["main"] || module.iter().any(test) {
            continue;
        }
        if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
            module.pop();
        }
        let text = std::fs::read_to_string(&file).unwrap();
        modules.push((module, without_tests(tokens(&text))));
    }
    modules
}

/// Identifiers, `::` and single punctuation; comments, strings and chars skipped.
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // An escaped char: up to its closing quote.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && next == Some(':') {
            out.push("::".to_string());
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

/// `tokens` without the items marked `#[cfg(test)]`: tests may use anything.
fn without_tests(tokens: Vec<String>) -> Vec<String> {
    const MARK: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i..].starts_with(&MARK.map(String::from)) {
            // The item: up to its `;`, or to the `}` closing its first `{`.
            i += MARK.len();
            let mut depth = 0;
            while i < tokens.len() {
                match tokens[i].as_str() {
                    "{" => depth += 1,
                    "}" => depth -= 1,
                    ";" if depth == 0 => break,
                    _ => {}
                }
                i += 1;
                if depth == 0 && tokens[i - 1] == "}" {
                    break;
                }
            }
            continue;
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out
}

/// The paths `code` (of `module`) names from `crate::`, `super::` or `self::`, made absolute:
/// `use super::{a, b::C}` in `service/x.rs` names `service::a` and `service::b::C`.
fn named_paths(module: &[String], code: &[String]) -> Vec<Vec<String>> {
    fn path(code: &[String], i: &mut usize, mut at: Vec<String>, out: &mut Vec<Vec<String>>) {
        while let Some(token) = code.get(*i) {
            if token == "{" {
                *i += 1;
                while code.get(*i).is_some_and(|t| t != "}") {
                    path(code, i, at.clone(), out);
                    if code.get(*i).is_some_and(|t| t == ",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            if !token.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                break;
            }
            match token.as_str() {
                "crate" => at.clear(),
                "super" => {
                    at.pop();
                }
                "self" => {}
                name => at.push(name.to_string()),
            }
            *i += 1;
            if code.get(*i).is_some_and(|t| t == "::") {
                *i += 1;
            } else {
                break;
            }
        }
        out.push(at);
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < code.len() {
        let starts = matches!(code[i].as_str(), "crate" | "super" | "self")
            && code[i + 1] == "::"
            && (i == 0 || code[i - 1] != "::");
        if starts {
            path(code, &mut i, module.to_vec(), &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// Per folder (`[]` is `src/`), which of its modules uses which: a module uses a sibling when
/// it or anything inside it names the sibling or anything inside that. A module naming its
/// parent's own items is not counted (`super::Item` from a folder's file).
type Uses = BTreeMap<Vec<String>, BTreeMap<String, std::collections::BTreeSet<String>>>;

fn sibling_uses(modules: &[(Vec<String>, Vec<String>)]) -> Uses {
    let known: std::collections::BTreeSet<&[String]> =
        modules.iter().map(|(m, _)| m.as_slice()).collect();
    let mut uses = Uses::new();
    for (module, code) in modules {
        for named in named_paths(module, code) {
            let k = module
                .iter()
                .zip(&named)
                .take_while(|(a, b)| a == b)
                .count();
            if k == module.len() || k == named.len() || !known.contains(&named[..=k]) {
                continue;
            }
            uses.entry(module[..k].to_vec())
                .or_default()
                .entry(module[k].clone())
                .or_default()
                .insert(named[k].clone());
        }
    }
    uses
}

/// The import circles of each folder: its sets of modules that each reach all the others
/// (`folder: a, b, c`), smallest folder path first.
fn import_circles(uses: &Uses) -> Vec<String> {
    let mut circles = Vec::new();
    for (folder, edges) in uses {
        let reach = |from: &str| {
            let mut seen = std::collections::BTreeSet::new();
            let mut todo = vec![from.to_string()];
            while let Some(at) = todo.pop() {
                for next in edges.get(&at).into_iter().flatten() {
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<&String, _> = edges.keys().map(|m| (m, reach(m))).collect();
        let mut placed = std::collections::BTreeSet::new();
        for (module, reached) in &reaches {
            if placed.contains(*module) || !reached.contains(*module) {
                continue;
            }
            let circle: Vec<&String> = reaches
                .iter()
                .filter(|(other, theirs)| reached.contains(**other) && theirs.contains(*module))
                .map(|(other, _)| *other)
                .collect();
            placed.extend(circle.iter().map(|m| m.to_string()));
            let names: Vec<&str> = circle.iter().map(|m| m.as_str()).collect();
            circles.push(format!("{}/: {}", folder.join("/"), names.join(", ")));
        }
    }
    circles
}

#[test]
fn no_folder_has_an_import_circle() {
    let circles = import_circles(&sibling_uses(&library_modules()));
    assert!(
        circles.is_empty(),
        "modules of a folder that use each other, round a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_checker_sees_paths_and_circles() {
    let code = tokens(
        "use super::{a, b::{self, C}}; // crate::z\n let s = \"crate::z\"; crate::x::y::f();\n\
         #[cfg(test)] mod tests { use super::super::z; }",
    );
    let module: Vec<String> = ["f", "m"].map(String::from).to_vec();
    let named = named_paths(&module, &without_tests(code));
    let shown: Vec<String> = named.iter().map(|p| p.join("::")).collect();
    assert_eq!(shown, ["f::a", "f::b", "f::b::C", "x::y::f"]);
    let path = |p: &str| p.split('/').map(String::from).collect::<Vec<_>>();
    let modules = [
        (path("f/a"), tokens("use super::b::X;")),
        (path("f/b"), tokens("use crate::f::c;")),
        (path("f/c"), tokens("use super::{a, Item};")),
        (path("f/d"), tokens("use super::a;")),
        (path("f"), tokens("use self::d; use crate::g::h;")),
        (path("g/h"), tokens("fn x() { crate::f::d::y() }")),
        (path("g"), Vec::new()),
    ];
    assert_eq!(
        import_circles(&sibling_uses(&modules)),
        ["/: f, g", "f/: a, b, c"]
    );
}

/// Crates whose items are `pub(crate)` unless another crate uses them: the lint is what keeps
/// it so as the code changes (clippy runs with `-D warnings`).
#[test]
fn every_crate_root_warns_of_unreachable_pub() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for krate in [
        "fdprof/src/lib.rs",
        "fdprof-figures/src/lib.rs",
        "fdprof-recording/src/lib.rs",
        "fdprof-replay/src/lib.rs",
        "fdprof-workload/src/lib.rs",
        "xtask/src/main.rs",
    ] {
        let text = std::fs::read_to_string(root.join(krate)).unwrap();
        assert!(
            text.lines()
                .any(|l| l.trim() == "#![warn(unreachable_pub)]"),
            "{krate} does not warn of unreachable_pub"
        );
    }
}
