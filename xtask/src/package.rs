//! fdprof installed the way system tools are: `cargo xtask install [--prefix P]`, `cargo xtask
//! uninstall [--prefix P]` and `cargo xtask deb` (a Debian package under `target/deb/`).
//!
//! Both take the files from one list ([`files`]): the release binary, the man pages and the
//! completions that `fdprof generate` makes from the clap definitions, and for the package the
//! daemon's unit, the dashboards and the docs. An install under a prefix writes a manifest of
//! the files and directories it created, so that a second install replaces the first and
//! uninstall leaves the prefix as it found it.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::run::{build_release, fdprof_release};
use crate::workspace::root;

/// Where the package's files go (Debian's paths) or an install's (under its prefix).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Prefix,
    Debian,
}

/// What a file holds.
enum Content {
    /// A copy of this file.
    Copy(PathBuf),
    /// These bytes.
    Bytes(Vec<u8>),
}

/// One file to install: its path relative to the prefix (or to `/`), its content and mode.
struct File {
    path: PathBuf,
    content: Content,
    mode: u32,
}

const MANIFEST: &str = "share/fdprof/install-manifest";
const SHELLS: [(&str, &str, &str); 3] = [
    (
        "bash",
        "share/bash-completion/completions/fdprof",
        "share/bash-completion/completions/fdprof",
    ),
    (
        "zsh",
        "share/zsh/site-functions/_fdprof",
        "share/zsh/vendor-completions/_fdprof",
    ),
    (
        "fish",
        "share/fish/vendor_completions.d/fdprof.fish",
        "share/fish/vendor_completions.d/fdprof.fish",
    ),
];

/// Runs the built fdprof (`generate …`), returning its standard output.
fn generate(args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new(fdprof_release())
        .arg("generate")
        .args(args)
        .output()
        .context("cannot run the built fdprof")?;
    if !out.status.success() {
        bail!(
            "fdprof generate {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// `gzip -9n`: what Debian wants for man pages and changelogs (no name or time stamp inside).
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .args(["-9n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot run gzip")?;
    child.stdin.take().unwrap().write_all(data)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("gzip failed ({})", out.status);
    }
    Ok(out.stdout)
}

/// Every file of an install or of the package, from the release build.
fn files(layout: Layout, scratch: &Path) -> Result<Vec<File>> {
    let usr = |p: &str| match layout {
        Layout::Prefix => PathBuf::from(p),
        Layout::Debian => Path::new("usr").join(p),
    };
    let mut files = Vec::new();
    let binary = scratch.join("fdprof");
    fs::copy(fdprof_release(), &binary).context("cannot copy the release binary")?;
    if layout == Layout::Debian {
        // Debian ships stripped binaries (the symbols are for a -dbgsym package).
        let status = Command::new("strip")
            .args(["--strip-unneeded", "--remove-section=.comment"])
            .arg(&binary)
            .status()
            .context("cannot run strip")?;
        if !status.success() {
            bail!("strip failed ({status})");
        }
    }
    files.push(File {
        path: usr("bin/fdprof"),
        content: Content::Copy(binary),
        mode: 0o755,
    });

    let man = scratch.join("man");
    fs::DirBuilder::new().mode(0o700).create(&man)?;
    generate(&["man", man.to_str().context("scratch path is not UTF-8")?])?;
    let mut pages: Vec<PathBuf> = fs::read_dir(&man)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    pages.sort();
    for page in pages {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        files.push(File {
            path: usr("share/man/man1").join(format!("{name}.gz")),
            content: Content::Bytes(gzip(&fs::read(&page)?)?),
            mode: 0o644,
        });
    }
    for (shell, prefix_path, debian_path) in SHELLS {
        files.push(File {
            path: match layout {
                Layout::Prefix => PathBuf::from(prefix_path),
                Layout::Debian => usr(debian_path),
            },
            content: Content::Bytes(generate(&["completions", shell])?),
            mode: 0o644,
        });
    }
    if layout == Layout::Debian {
        debian_only(&mut files)?;
    }
    Ok(files)
}

/// The package's other files: the daemon's unit (installed, not enabled), the dashboards, the
/// docs, and the copyright and changelog Debian requires.
fn debian_only(files: &mut Vec<File>) -> Result<()> {
    let root = root();
    files.push(File {
        path: "lib/systemd/system/fdprof.service".into(),
        content: Content::Copy(root.join("dashboards/fdprof-daemon.service")),
        mode: 0o644,
    });
    for rel in tree(&root, Path::new("dashboards"))? {
        if rel.extension().is_some_and(|e| e == "service") {
            continue;
        }
        files.push(File {
            path: Path::new("usr/share/fdprof").join(&rel),
            content: Content::Copy(root.join(&rel)),
            mode: 0o644,
        });
    }
    let doc = Path::new("usr/share/doc/fdprof");
    for rel in std::iter::once(PathBuf::from("README.md")).chain(tree(&root, Path::new("docs"))?) {
        files.push(File {
            path: doc.join(&rel),
            content: Content::Copy(root.join(&rel)),
            mode: 0o644,
        });
    }
    files.push(File {
        path: doc.join("copyright"),
        content: Content::Bytes(copyright().into_bytes()),
        mode: 0o644,
    });
    files.push(File {
        path: doc.join("changelog.gz"),
        content: Content::Bytes(gzip(changelog()?.as_bytes())?),
        mode: 0o644,
    });
    Ok(())
}

/// Every regular file under `root/dir`, as paths relative to `root`, sorted.
fn tree(root: &Path, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(root.join(dir)).with_context(|| format!("cannot list {dir:?}"))? {
        let entry = entry?;
        let rel = dir.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            out.extend(tree(root, &rel)?);
        } else if kind.is_file() {
            out.push(rel);
        }
    }
    out.sort();
    Ok(out)
}

const MAINTAINER: &str = "fdprof developers <fdprof@users.noreply.github.com>";

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn copyright() -> String {
    format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: fdprof\n\
         \n\
         Files: *\n\
         Copyright: 2026 {MAINTAINER}\n\
         License: MIT or Apache-2.0\n \
         On Debian systems the Apache License 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n"
    )
}

/// A native package's changelog: one entry for this version, dated by its commit.
fn changelog() -> Result<String> {
    let git = |args: &[&str]| command_line(Command::new("git").args(args).current_dir(root())).ok();
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let date = git(&["log", "-1", "--format=%aD"])
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "Tue, 01 Dec 2026 00:00:00 +0000".into());
    Ok(format!(
        "fdprof ({v}) unstable; urgency=medium\n\n  * Built from commit {commit}.\n\n -- {MAINTAINER}  {date}\n",
        v = version()
    ))
}

/// Creates `dir` and the parents it lacks (mode 0755), returning those it created, outermost
/// first.
fn make_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut d = dir;
    while fs::symlink_metadata(d).is_err() {
        missing.push(d.to_path_buf());
        d = d.parent().context("no existing parent directory")?;
    }
    if !fs::metadata(d)?.is_dir() {
        bail!("{} is not a directory", d.display());
    }
    missing.reverse();
    for m in &missing {
        fs::DirBuilder::new()
            .mode(0o755)
            .create(m)
            .with_context(|| format!("cannot create {}", m.display()))?;
        fs::set_permissions(m, fs::Permissions::from_mode(0o755))?;
    }
    Ok(missing)
}

/// Writes `file` under `base`: to a fresh temporary beside it, renamed over the target, which
/// may only be absent or a regular file (never written through a link).
fn put(base: &Path, file: &File) -> Result<Vec<PathBuf>> {
    let target = base.join(&file.path);
    let created = make_dirs(target.parent().unwrap())?;
    if let Ok(meta) = fs::symlink_metadata(&target)
        && !meta.file_type().is_file()
    {
        bail!(
            "{} exists and is not a regular file: refusing to replace it",
            target.display()
        );
    }
    let data = match &file.content {
        Content::Copy(from) => {
            fs::read(from).with_context(|| format!("cannot read {}", from.display()))?
        }
        Content::Bytes(b) => b.clone(),
    };
    let tmp = target.with_file_name(format!(
        ".{}.fdprof-install",
        target.file_name().unwrap().to_string_lossy()
    ));
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(&data)?;
    f.set_permissions(fs::Permissions::from_mode(file.mode))?;
    drop(f);
    fs::rename(&tmp, &target).with_context(|| format!("cannot write {}", target.display()))?;
    Ok(created)
}

/// A scratch directory under `target/`, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Result<Self> {
        let dir = root().join("target").join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `--prefix P` from the arguments (default `/usr/local`).
pub(crate) fn prefix_arg(prefix: Option<PathBuf>) -> Result<PathBuf> {
    let p = prefix.unwrap_or_else(|| "/usr/local".into());
    if !p.is_absolute() {
        bail!("--prefix must be an absolute path, not {}", p.display());
    }
    Ok(p)
}

/// `cargo xtask install`: build, then put the binary, man pages and completions under `prefix`,
/// replacing an earlier install there.
pub(crate) fn install(prefix: &Path) -> Result<()> {
    build_release()?;
    if prefix.join(MANIFEST).exists() {
        uninstall(prefix)?;
    }
    let scratch = Scratch::new("install")?;
    let files = files(Layout::Prefix, &scratch.0)?;
    let mut dirs = Vec::new();
    for f in &files {
        dirs.extend(put(prefix, f)?);
    }
    // The manifest's own directory may be new too; then it goes as well.
    let manifest = prefix.join(MANIFEST);
    dirs.extend(make_dirs(manifest.parent().unwrap())?);
    let mut text = String::new();
    for f in &files {
        text.push_str(&format!("file {}\n", f.path.display()));
    }
    for d in &dirs {
        text.push_str(&format!("dir {}\n", d.strip_prefix(prefix)?.display()));
    }
    put(
        prefix,
        &File {
            path: MANIFEST.into(),
            content: Content::Bytes(text.into_bytes()),
            mode: 0o644,
        },
    )?;
    println!(
        "installed {} files under {} ({}/bin/fdprof)",
        files.len(),
        prefix.display(),
        prefix.display()
    );
    Ok(())
}

/// `cargo xtask uninstall`: remove what the manifest under `prefix` lists, then the directories
/// the install created, once empty.
pub(crate) fn uninstall(prefix: &Path) -> Result<()> {
    let manifest = prefix.join(MANIFEST);
    let text = fs::read_to_string(&manifest).with_context(|| {
        format!(
            "fdprof is not installed under {} (no {MANIFEST})",
            prefix.display()
        )
    })?;
    let mut dirs = Vec::new();
    let mut removed = 0;
    for line in text.lines() {
        let (kind, rel) = line.split_once(' ').context("malformed install manifest")?;
        let rel = Path::new(rel);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            bail!(
                "install manifest names a path outside the prefix: {}",
                rel.display()
            );
        }
        match kind {
            "file" => {
                let path = prefix.join(rel);
                if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file()) {
                    fs::remove_file(&path)?;
                    removed += 1;
                }
            }
            "dir" => dirs.push(prefix.join(rel)),
            _ => bail!("malformed install manifest line: {line}"),
        }
    }
    fs::remove_file(&manifest)?;
    // Deepest first; a directory something else now uses stays.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let _ = fs::remove_dir(d);
    }
    println!("removed {removed} files from {}", prefix.display());
    Ok(())
}

/// `cargo xtask deb`: build `target/deb/fdprof_VERSION_ARCH.deb`, returning its path.
pub(crate) fn deb() -> Result<PathBuf> {
    build_release()?;
    let scratch = Scratch::new("deb-stage")?;
    let stage = scratch.0.join("root");
    let work = scratch.0.join("work");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&work)?;
    let files = files(Layout::Debian, &work)?;
    for f in &files {
        put(&stage, f)?;
    }
    let arch = command_line(Command::new("dpkg").arg("--print-architecture"))?;
    let depends = shlib_depends(&stage.join("usr/bin/fdprof"), &work)?;
    let installed_kb = files
        .iter()
        .map(|f| fs::metadata(stage.join(&f.path)).map_or(0, |m| m.len().div_ceil(1024)))
        .sum::<u64>();
    let control = format!(
        "Package: fdprof\n\
         Version: {v}\n\
         Architecture: {arch}\n\
         Maintainer: {MAINTAINER}\n\
         Installed-Size: {installed_kb}\n\
         Depends: {depends}\n\
         Recommends: prometheus\n\
         Suggests: linux-perf, golang-go\n\
         Section: devel\n\
         Priority: optional\n\
         Description: profiler of the Linux per-process file-descriptor table\n \
         fdprof measures how long threads wait on files->file_lock, in which fd-table\n \
         operation (alloc_fd, close, expand, dup2) and from which kernel and user\n \
         stacks, and how far alloc_fd scans its bitmaps, with eBPF programs attached to\n \
         the running kernel. It records, reports, draws flamegraphs, shows a live view\n \
         and serves Prometheus metrics, and ships the fd-table load generators of the\n \
         2015 LKML threads with their exact ground truth.\n",
        v = version()
    );
    put(
        &stage,
        &File {
            path: "DEBIAN/control".into(),
            content: Content::Bytes(control.into_bytes()),
            mode: 0o644,
        },
    )?;
    let mut sums = String::new();
    for f in &files {
        let md5 = command_line(Command::new("md5sum").arg(stage.join(&f.path)))?;
        let hash = md5.split_whitespace().next().unwrap_or_default();
        sums.push_str(&format!("{hash}  {}\n", f.path.display()));
    }
    put(
        &stage,
        &File {
            path: "DEBIAN/md5sums".into(),
            content: Content::Bytes(sums.into_bytes()),
            mode: 0o644,
        },
    )?;
    let out_dir = root().join("target/deb");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&out_dir)?;
    let deb = out_dir.join(format!("fdprof_{}_{arch}.deb", version()));
    crate::workspace::step(
        "dpkg-deb --build",
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&deb),
    )?;
    println!("{}", deb.display());
    Ok(deb)
}

/// The shared libraries' packages the binary needs, as `dpkg-shlibdeps` works them out.
fn shlib_depends(binary: &Path, work: &Path) -> Result<String> {
    // dpkg-shlibdeps wants to run in a source tree: a minimal debian/control is enough.
    let src = work.join("shlibs");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(src.join("debian"))?;
    fs::write(
        src.join("debian/control"),
        "Source: fdprof\n\nPackage: fdprof\nArchitecture: any\n",
    )?;
    let line = command_line(
        Command::new("dpkg-shlibdeps")
            .arg("-O")
            .arg(binary)
            .current_dir(&src),
    )?;
    line.strip_prefix("shlibs:Depends=")
        .map(str::to_string)
        .with_context(|| format!("unexpected dpkg-shlibdeps output: {line}"))
}

/// A command's one line of output.
fn command_line(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
