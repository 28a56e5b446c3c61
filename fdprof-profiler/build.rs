//! Hands the commit being built to `--version`. The eBPF programs are not built here: the
//! library embeds the objects committed in `ebpf/` (rebuilt by `cargo xtask ebpf`), so that
//! building fdprof needs only cargo.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap();
    println!("cargo:rustc-env=FDPROF_GIT_COMMIT={}", git_commit(root));
}

/// The commit being built, for `--version`, or `unknown` outside a git checkout (a source
/// tarball). The build reruns when HEAD or the branch it names moves.
fn git_commit(root: &Path) -> String {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    // Only files that exist: cargo reruns a build script whose watched file is missing every
    // time (a clone without packed-refs, a branch whose ref is packed and not loose).
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && root.join(&path).exists()
        {
            println!("cargo:rerun-if-changed={}", root.join(path).display());
        }
    }
    commit
}
