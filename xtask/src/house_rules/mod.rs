//! The workspace's house rules, each a test run on every member crate of the root `Cargo.toml`
//! (a new crate is checked as soon as it is a member): no source file over 650 lines, no
//! function over 80 (tests aside), no import circle between the files of a crate, and every
//! crate root warning of `unreachable_pub`. A failing test lists every offender, one a line.

mod circles;
mod function_length;
mod lexer;
mod sources;

use std::path::{Path, PathBuf};

use function_length::{Long, MOST_LINES, declared, long_functions};
use sources::{Source, crate_sources, members, workspace_root};

/// The most lines a source file may have.
const MOST_FILE_LINES: usize = 650;

/// Files allowed to be longer, as `crate/path` (e.g. `fdprof/src/x.rs`), each with a comment
/// saying why (none: split them instead).
const LONG_FILES_ALLOWED: &[&str] = &[];

/// Functions allowed to be longer, as `crate/path::name` (none: split them instead).
const LONG_FUNCTIONS_ALLOWED: &[&str] = &[];

/// Every member crate (its folder) and its Rust files.
fn workspace() -> Vec<(String, Vec<Source>)> {
    let root = workspace_root();
    members(&root)
        .into_iter()
        .map(|krate| {
            let sources = crate_sources(&root, &krate);
            (krate, sources)
        })
        .collect()
}

/// Fails listing the offenders, if there are any.
fn report(rule: &str, offenders: &[String]) {
    assert!(
        offenders.is_empty(),
        "{rule} ({}):\n{}",
        offenders.len(),
        offenders.join("\n")
    );
}

#[test]
fn no_source_file_is_longer_than_650_lines() {
    let mut offenders = Vec::new();
    for (_, sources) in workspace() {
        for source in sources {
            let lines = source.text.lines().count();
            if lines > MOST_FILE_LINES && !LONG_FILES_ALLOWED.contains(&source.shown.as_str()) {
                offenders.push(format!("{} ({lines} lines)", source.shown));
            }
        }
    }
    report(
        &format!("source files over {MOST_FILE_LINES} lines (split them)"),
        &offenders,
    );
}

#[test]
fn no_function_is_longer_than_80_lines() {
    let mut offenders = Vec::new();
    for (_, sources) in workspace() {
        for source in sources.iter().filter(|s| !s.test) {
            for Long { name, line, lines } in long_functions(&source.text) {
                let id = format!("{}::{name}", source.shown);
                if !LONG_FUNCTIONS_ALLOWED.contains(&id.as_str()) {
                    offenders.push(format!("{}:{line} {name} ({lines} lines)", source.shown));
                }
            }
        }
    }
    report(
        &format!("functions over {MOST_LINES} lines (split them)"),
        &offenders,
    );
}

#[test]
fn no_folder_has_an_import_circle() {
    let mut offenders = Vec::new();
    for (krate, sources) in workspace() {
        let modules = circles::library_modules(&sources);
        for circle in circles::import_circles(&circles::sibling_uses(&modules)) {
            offenders.push(format!("{krate} {circle}"));
        }
    }
    report(
        "modules of a folder that use each other, round a circle",
        &offenders,
    );
}

/// Items are `pub(crate)` unless another crate uses them: the lint is what keeps them so as
/// the code changes (clippy runs with `-D warnings`).
#[test]
fn every_crate_root_warns_of_unreachable_pub() {
    let mut offenders = Vec::new();
    for (krate, sources) in workspace() {
        let root = ["src/lib.rs", "src/main.rs"]
            .into_iter()
            .find_map(|root| sources.iter().find(|s| s.path == Path::new(root)));
        match root {
            None => offenders.push(format!("{krate}: no src/lib.rs nor src/main.rs")),
            Some(root) if !warns_of_unreachable_pub(&root.text) => {
                offenders.push(format!("{} has no #![warn(unreachable_pub)]", root.shown));
            }
            Some(_) => {}
        }
    }
    report("crate roots not warning of unreachable_pub", &offenders);
}

fn warns_of_unreachable_pub(text: &str) -> bool {
    text.lines()
        .any(|l| l.trim() == "#![warn(unreachable_pub)]")
}

#[test]
fn the_counter_sees_functions() {
    use lexer::code_only;
    let body = "    let x = 1;\n".repeat(MOST_LINES);
    let text = format!(
        "pub(crate) async fn long() {{\n{body}}}\nfn short() {{ '{{'; \"}}\"; }}\n\
         // fn commented() {{\n#[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}    }}\n}}\n\
         fn sized(x: [u8; 4]) {{\n    let s = r#\"}}\"#;\n{body}}}\n"
    );
    let long = |name: &str, line, lines| Long {
        name: name.to_string(),
        line,
        lines,
    };
    // After `long`, `short`, the comment and the test module (MOST_LINES + 5 lines).
    let sized_line = (MOST_LINES + 2) + 2 + (MOST_LINES + 5) + 1;
    assert_eq!(
        long_functions(&text),
        [
            long("long", 1, MOST_LINES + 2),
            long("sized", sized_line, MOST_LINES + 3),
        ]
    );
    assert_eq!(declared("pub(super) const fn f<T>(x: T)"), Some("f"));
    assert_eq!(declared("pub(in crate::a) fn g()"), Some("g"));
    assert_eq!(declared("let f = fn_ptr;"), None);
    assert_eq!(code_only("r#\"{\"#; b'{'; 'a"), "      ; b   ;  a");
    assert_eq!(
        code_only("'\\''; /* /* */ } */ x"),
        format!("    ;{}x", " ".repeat(15))
    );
}

#[test]
fn the_circle_checker_sees_paths_and_circles() {
    use circles::{import_circles, library_modules, named_paths, sibling_uses};
    use lexer::{tokens, without_tests};
    let code = tokens(
        "use super::{a, b::{self, C}}; // crate::z\n let s = \"crate::z\"; crate::x::y::f();\n\
         pub(in crate::w) fn v() {}\n#[cfg(test)] mod tests { use super::super::z; }",
    );
    let module: Vec<String> = ["f", "m"].map(String::from).to_vec();
    let named = named_paths(&module, &without_tests(code));
    let shown: Vec<String> = named.iter().map(|p| p.join("::")).collect();
    assert_eq!(shown, ["f::a", "f::b", "f::b::C", "x::y::f"]);
    let source = |path: &str, text: &str| Source {
        path: PathBuf::from(path),
        shown: format!("c/{path}"),
        text: text.to_string(),
        test: sources::is_test_file(PathBuf::from(path).strip_prefix("src").unwrap()),
    };
    let sources = [
        source("src/f/a.rs", "use super::b::X;"),
        source("src/f/b.rs", "use crate::f::c;"),
        source("src/f/c.rs", "use super::{a, Item};"),
        source("src/f/d/mod.rs", "use super::a;"),
        source("src/f/tests.rs", "use super::d;"),
        source("src/f.rs", "use self::d; use crate::g::h;"),
        source("src/g/h.rs", "fn x() { crate::f::d::y() }"),
        source("src/g/mod.rs", ""),
        source("src/lib.rs", "mod f; mod g;"),
        source("src/main.rs", "use crate::g::h; fn main() {}"),
        source("src/bin/tool.rs", "mod x; use crate::x::f;"),
    ];
    let modules = library_modules(&sources);
    assert_eq!(modules.len(), 8, "{modules:?}");
    assert_eq!(
        import_circles(&sibling_uses(&modules)),
        ["src/: f, g", "src/f/: a, b, c"]
    );
}

#[test]
fn the_workspace_reader_sees_members_and_tests() {
    use sources::{is_test_file, listed_members};
    let manifest = "[package]\nmembers = [\"not\"]\n[workspace]\nresolver = \"3\"\n\
                    default-members = [\"a\"]\nmembers = [\n  \"a\", # the first\n  'b/c',\n]\n\
                    [workspace.package]\nmembers = [\"not\"]\n";
    assert_eq!(listed_members(manifest), ["a", "b/c"]);
    for (path, test) in [
        ("tests.rs", true),
        ("a/tests.rs", true),
        ("a/b_tests.rs", true),
        ("a/tests/b.rs", true),
        ("a/contests.rs", false),
        ("a/testsuite.rs", false),
        ("lib.rs", false),
    ] {
        assert_eq!(is_test_file(PathBuf::from(path).as_path()), test, "{path}");
    }
    let krates = members(&workspace_root());
    assert!(krates.iter().any(|k| k == "xtask"), "{krates:?}");
}
