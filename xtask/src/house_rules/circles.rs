//! Import circles between the files of one crate: two sibling modules of a folder that use
//! each other, directly or round a longer loop, through `crate::`, `super::` or `self::` paths.
//! The module tree is read from the file paths under `src/` (`a/b.rs` and `a/b/mod.rs` are
//! module `a::b`, `lib.rs` or `main.rs` the root).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::lexer::{tokens, without_tests};
use super::sources::Source;

/// Each module of a crate's library (`["service", "watcher"]`, `[]` for the root) and the tokens
/// of its code, comments, strings and `#[cfg(test)]` items left out, as are the test files. A
/// crate with a `lib.rs` has its tree there (`main.rs` is then a binary of its own, as are the
/// programs of `src/bin/`, left out).
pub(super) fn library_modules(sources: &[Source]) -> Vec<(Vec<String>, Vec<String>)> {
    let has_lib = sources.iter().any(|s| s.path == Path::new("src/lib.rs"));
    sources
        .iter()
        .filter_map(|source| {
            let in_src = source.path.strip_prefix("src").ok()?;
            let binary = in_src.starts_with("bin") || (has_lib && in_src == Path::new("main.rs"));
            if source.test || binary {
                return None;
            }
            let code = without_tests(tokens(&source.text));
            Some((module_path(in_src), code))
        })
        .collect()
}

/// The module a file of `src/` is (its path there).
fn module_path(in_src: &Path) -> Vec<String> {
    let mut module: Vec<String> = in_src
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_str().unwrap().to_string())
        .collect();
    let root = module == ["lib"] || module == ["main"];
    if root || module.last().is_some_and(|m| m == "mod") {
        module.pop();
    }
    module
}

/// The paths `code` (of `module`) names from `crate::`, `super::` or `self::`, made absolute:
/// `use super::{a, b::C}` in `service/x.rs` names `service::a` and `service::b::C`.
pub(super) fn named_paths(module: &[String], code: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < code.len() {
        let before = |back: usize| i.checked_sub(back).map(|at| code[at].as_str());
        // Not the tail of a longer path, nor a visibility: `pub(in crate::a)`.
        let starts = matches!(code[i].as_str(), "crate" | "super" | "self")
            && code[i + 1] == "::"
            && before(1) != Some("::")
            && !(before(1) == Some("in") && before(2) == Some("("));
        if starts {
            path(code, &mut i, module.to_vec(), &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// The path (or, in braces, paths) starting at token `i`, from module `at`, into `out`.
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

/// Per folder (`[]` is `src/`), which of its modules uses which: a module uses a sibling when
/// it or anything inside it names the sibling or anything inside that. A module naming its
/// parent's own items is not counted (`super::Item` from a folder's file).
pub(super) type Uses = BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>>;

pub(super) fn sibling_uses(modules: &[(Vec<String>, Vec<String>)]) -> Uses {
    let known: BTreeSet<&[String]> = modules.iter().map(|(m, _)| m.as_slice()).collect();
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
/// (`src/folder/: a, b, c`), smallest folder path first.
pub(super) fn import_circles(uses: &Uses) -> Vec<String> {
    let mut circles = Vec::new();
    for (folder, edges) in uses {
        let reach = |from: &str| {
            let mut seen = BTreeSet::new();
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
        let mut placed = BTreeSet::new();
        for (module, reached) in &reaches {
            if placed.contains(*module) || !reached.contains(*module) {
                continue;
            }
            let circle: Vec<&str> = reaches
                .iter()
                .filter(|(other, theirs)| reached.contains(**other) && theirs.contains(*module))
                .map(|(other, _)| other.as_str())
                .collect();
            placed.extend(circle.iter().map(|m| m.to_string()));
            let shown: Vec<&str> = std::iter::once("src")
                .chain(folder.iter().map(String::as_str))
                .collect();
            circles.push(format!("{}/: {}", shown.join("/"), circle.join(", ")));
        }
    }
    circles
}
