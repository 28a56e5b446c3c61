//! The workspace's member crates, read from the root `Cargo.toml` so that a new crate is
//! checked as soon as it is a member, and the Rust files of each.

use std::path::{Path, PathBuf};

/// The workspace's root folder: the one above xtask's.
pub(super) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The member crates' folders, relative to the root, as `[workspace] members` lists them (a
/// `folder/*` glob is expanded to its crates).
pub(super) fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let mut crates = Vec::new();
    for member in listed_members(&manifest) {
        let Some(folder) = member.strip_suffix("/*") else {
            crates.push(member);
            continue;
        };
        for entry in std::fs::read_dir(root.join(folder)).unwrap() {
            let path = entry.unwrap().path();
            if path.join("Cargo.toml").is_file() {
                let name = path.file_name().unwrap().to_str().unwrap();
                crates.push(format!("{folder}/{name}"));
            }
        }
    }
    for krate in &crates {
        assert!(
            root.join(krate).join("Cargo.toml").is_file(),
            "workspace member {krate} has no Cargo.toml"
        );
    }
    crates.sort();
    crates
}

/// The strings of the `members` array of a manifest's `[workspace]` table.
pub(super) fn listed_members(manifest: &str) -> Vec<String> {
    let mut lines = manifest
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim());
    let mut in_workspace = false;
    let mut value = String::new();
    while let Some(line) = lines.next() {
        if line.starts_with('[') {
            in_workspace = line == "[workspace]";
            continue;
        }
        let assigned = line
            .strip_prefix("members")
            .and_then(|rest| rest.trim_start().strip_prefix('='));
        if let Some(start) = assigned
            && in_workspace
        {
            value = start.to_string();
            // The array may run over several lines.
            while !value.contains(']')
                && let Some(more) = lines.next()
            {
                value.push_str(more);
            }
            break;
        }
    }
    value
        .replace('\'', "\"")
        .split('"')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// One Rust file of a crate.
pub(super) struct Source {
    /// Where it is, relative to the crate's folder (`src/a/b.rs`, `tests/it/main.rs`).
    pub(super) path: PathBuf,
    /// As the reports show it: `crate/src/a/b.rs`.
    pub(super) shown: String,
    pub(super) text: String,
    /// Whether it is test code: under `tests/`, or a test file of `src/`.
    pub(super) test: bool,
}

/// The `.rs` files of the crate in folder `krate` (relative to `root`) under `src/` and
/// `tests/`, in path order.
pub(super) fn crate_sources(root: &Path, krate: &str) -> Vec<Source> {
    let dir = root.join(krate);
    let mut files = Vec::new();
    for top in ["src", "tests"] {
        rust_files(&dir.join(top), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let path = file.strip_prefix(&dir).unwrap().to_path_buf();
            let test = match path.strip_prefix("src") {
                Ok(in_src) => is_test_file(in_src),
                Err(_) => true,
            };
            Source {
                shown: format!("{krate}/{}", path.display()),
                text: std::fs::read_to_string(&file).unwrap(),
                path,
                test,
            }
        })
        .collect()
}

/// Whether a file of `src/` (its path there) is tests: `tests.rs`, `*_tests.rs`, or in a
/// `tests/` folder.
pub(super) fn is_test_file(in_src: &Path) -> bool {
    let stem = in_src.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let in_tests = in_src
        .parent()
        .is_some_and(|p| p.components().any(|c| c.as_os_str() == "tests"));
    in_tests || stem == "tests" || stem.ends_with("_tests")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
