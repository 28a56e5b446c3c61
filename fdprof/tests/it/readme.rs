//! The README's commands are the ones that run: every `fdprof …` line of its usage block names a
//! subcommand whose `--help` lists each flag the line gives, and `doctor`, which needs no
//! target, runs as written. The same for the full list in docs/usage.md.

use crate::common::*;

/// The lines of the first code block after `heading` that run fdprof: its words up to the
/// comment, without `sudo`.
fn commands(file: &str, heading: &str) -> Vec<Vec<String>> {
    let text =
        std::fs::read_to_string(format!("{}/../{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let after = text
        .split_once(heading)
        .unwrap_or_else(|| panic!("{file}: no {heading}"))
        .1;
    let block = after.split("```").nth(1).unwrap();
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .filter_map(|l| l.strip_prefix("sudo ").or(Some(l)))
        .filter(|l| l.starts_with("fdprof "))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// The flags a command line gives (`[--json]` counts, `--` ends them).
fn flags(words: &[String]) -> Vec<String> {
    words
        .iter()
        .map(|w| w.trim_matches(|c| c == '[' || c == ']'))
        .take_while(|w| *w != "--")
        .filter(|w| w.starts_with('-'))
        .map(|w| w.split('=').next().unwrap().to_string())
        .collect()
}

fn check(file: &str, heading: &str) {
    let lines = commands(file, heading);
    assert!(lines.len() >= 10, "{file}: only {} commands", lines.len());
    for words in lines {
        let sub = &words[1];
        let out = run(fdprof().args([sub.as_str(), "--help"]));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{file}: fdprof {sub} --help failed");
        for flag in flags(&words) {
            // Long flags as `--flag`, short ones as `-f,` in clap's help.
            let listed = help
                .split_whitespace()
                .any(|w| w.trim_end_matches(',') == flag);
            assert!(
                listed,
                "{file}: `{}`: {flag} is not a flag of {sub}",
                words.join(" ")
            );
        }
    }
}

#[test]
fn the_readmes_commands_exist_with_their_flags() {
    check("README.md", "## Use\n");
}

#[test]
fn the_usage_pages_commands_exist_with_their_flags() {
    check("docs/usage.md", "## Commands\n");
}

#[test]
fn doctor_runs_as_the_readme_writes_it() {
    require_root();
    let _guard = kernel_lock();
    let out = run(fdprof().arg("doctor"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_programs_left();
}
