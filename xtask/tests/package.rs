//! fdprof installed as a system tool, for real (root): `cargo xtask install --prefix` into a
//! fresh directory and back out, and the Debian package built, checked by lintian, installed
//! with apt-get, used through sudo, and purged. The package test installs into this machine's
//! /usr (and purges an fdprof package already installed there).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Every visible subcommand: each has a man page and is offered by completion.
const SUBCOMMANDS: [&str; 9] = [
    "doctor",
    "record",
    "report",
    "flamegraph",
    "export",
    "top",
    "daemon",
    "workload",
    "replay",
];

/// The lintian warnings the package keeps, each with why (tag, reason). None: lintian 2.116 on
/// Debian 12 warns of nothing in it; a new warning fails the test until it is fixed or
/// explained here.
const KEPT_WARNINGS: &[(&str, &str)] = &[];

fn xtask(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo xtask {}: {}\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every path under `dir`, relative to it.
fn listing(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            out.insert(e.path().strip_prefix(dir).unwrap().to_path_buf());
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            }
        }
    }
    out
}

#[test]
fn install_under_a_prefix_then_uninstall_leaves_it_empty() {
    let prefix = std::env::temp_dir().join(format!("fdprof-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    std::fs::create_dir(&prefix).unwrap();
    let p = prefix.to_str().unwrap();

    xtask(&["install", "--prefix", p]);
    let first = listing(&prefix);
    let version = run(Command::new(prefix.join("bin/fdprof")).arg("--version"));
    assert!(version.starts_with("fdprof 0.1.0 (git "), "{version}");
    for f in [
        "share/man/man1/fdprof.1.gz",
        "share/man/man1/fdprof-record.1.gz",
        "share/man/man1/fdprof-daemon.1.gz",
        "share/bash-completion/completions/fdprof",
        "share/zsh/site-functions/_fdprof",
        "share/fish/vendor_completions.d/fdprof.fish",
    ] {
        assert!(first.contains(Path::new(f)), "{f} not installed: {first:?}");
    }
    assert!(
        !first
            .iter()
            .any(|f| f.to_string_lossy().contains("man1/fdprof-generate")),
        "the hidden generate command has no page"
    );

    // A second install replaces the first: the same files, nothing left over.
    xtask(&["install", "--prefix", p]);
    assert_eq!(listing(&prefix), first);

    xtask(&["uninstall", "--prefix", p]);
    assert_eq!(listing(&prefix), BTreeSet::new());
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["uninstall", "--prefix", p])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not installed under"), "{err}");
    std::fs::remove_dir(&prefix).unwrap();
}

#[test]
fn debian_package_installs_works_through_sudo_and_purges_clean() {
    let out = xtask(&["deb"]);
    let deb = PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap()
            .trim(),
    );
    let target = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../target"));
    assert!(
        deb.is_file() && deb.starts_with(target.canonicalize().unwrap()),
        "{deb:?}"
    );

    // The control fields: the workspace's version, the libraries it links, what it recommends.
    let field = |name: &str| run(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(name));
    assert_eq!(field("Version").trim(), env!("CARGO_PKG_VERSION"));
    assert!(field("Depends").contains("libc6"), "{}", field("Depends"));
    assert!(field("Recommends").contains("prometheus"));

    // lintian: it runs, finds no error, and every warning it gives is one explained here.
    let lint = Command::new("lintian")
        .args(["--fail-on", "error", "--tag-display-limit", "0"])
        .arg(&deb)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&lint.stdout);
    eprintln!("lintian:\n{said}{}", String::from_utf8_lossy(&lint.stderr));
    assert!(
        lint.status.success(),
        "lintian failed ({}):\n{said}",
        lint.status
    );
    let errors: Vec<&str> = said.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian errors:\n{}", errors.join("\n"));
    let unexplained: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("W:"))
        .filter(|l| !KEPT_WARNINGS.iter().any(|(tag, _)| l.contains(tag)))
        .collect();
    assert!(
        unexplained.is_empty(),
        "lintian warnings not explained in KEPT_WARNINGS:\n{}",
        unexplained.join("\n")
    );

    let _ = Command::new("dpkg").args(["--purge", "fdprof"]).output();
    run(Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .arg(&deb)
        .env("DEBIAN_FRONTEND", "noninteractive"));
    let files: Vec<PathBuf> = run(Command::new("dpkg").args(["-L", "fdprof"]))
        .lines()
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .collect();
    assert!(files.contains(&PathBuf::from("/usr/bin/fdprof")));
    assert!(files.contains(&PathBuf::from("/lib/systemd/system/fdprof.service")));
    assert!(files.contains(&PathBuf::from("/usr/share/fdprof/dashboards/fdprof.json")));
    assert!(!files.iter().any(|f| f.starts_with("/etc")), "{files:?}");

    // Disabled: nothing under /etc names it (no unit enabled, no config).
    let in_etc = run(Command::new("find").args(["/etc", "-name", "fdprof*"]));
    assert!(in_etc.trim().is_empty(), "under /etc: {in_etc}");

    // Through sudo, with nothing of this environment: sudo's own PATH finds /usr/bin/fdprof.
    let sudo = |args: &[&str]| run(Command::new("sudo").args(args).env_clear());
    assert_eq!(
        sudo(&["sh", "-c", "command -v fdprof"]).trim(),
        "/usr/bin/fdprof",
        "sudo finds another fdprof first (one in /usr/local/bin from `cargo xtask install`?)"
    );
    let version = sudo(&["fdprof", "--version"]);
    assert!(version.starts_with("fdprof 0.1.0 (git "), "{version}");
    let doctor = sudo(&["fdprof", "doctor"]);
    assert!(
        doctor.starts_with(&format!(
            "fdprof          {}",
            &version["fdprof ".len()..].trim()
        )),
        "{doctor}"
    );
    assert!(doctor.contains("kernel "), "{doctor}");

    let pages: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.starts_with("/usr/share/man/man1"))
        .collect();
    for sub in SUBCOMMANDS {
        let page = PathBuf::from(format!("/usr/share/man/man1/fdprof-{sub}.1.gz"));
        assert!(pages.contains(&&page), "no man page for {sub}: {pages:?}");
    }
    for page in pages {
        let text = run(Command::new("man")
            .arg("-l")
            .arg(page)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "80"));
        let name = page.file_name().unwrap().to_string_lossy();
        let cmd = name.trim_end_matches(".1.gz");
        assert!(
            text.contains("NAME") && text.contains(cmd) && text.contains("SYNOPSIS"),
            "{name}:\n{text}"
        );
    }

    // What bash offers after `fdprof <word>`: every visible subcommand, none hidden.
    let complete = |word: &str| -> BTreeSet<String> {
        let script = format!(
            "source /usr/share/bash-completion/completions/fdprof; \
             COMP_WORDS=(fdprof '{word}'); COMP_CWORD=1; COMP_LINE='fdprof {word}'; \
             COMP_POINT=${{#COMP_LINE}}; _fdprof fdprof '{word}' fdprof; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        run(Command::new("bash").args(["--norc", "-c", &script]))
            .lines()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(complete("rec"), BTreeSet::from(["record".to_string()]));
    let all = complete("");
    for sub in SUBCOMMANDS {
        assert!(all.contains(sub), "{sub} not offered: {all:?}");
    }
    assert!(!all.contains("generate"), "{all:?}");

    run(Command::new("dpkg").args(["--purge", "fdprof"]));
    let left: Vec<&PathBuf> = files.iter().filter(|f| f.exists()).collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    assert!(
        !Command::new("dpkg")
            .args(["-s", "fdprof"])
            .output()
            .unwrap()
            .status
            .success()
    );
}
