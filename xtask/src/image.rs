//! `cargo xtask image`: fdprof as an OCI image, built offline with Debian's podman: `FROM
//! scratch`, the static fdprof binary (the one the qemu guests run) and the empty directories a
//! read-only root needs to be mounted over, nothing else. Entrypoint `fdprof`, `daemon -a` by
//! default, run as the user [`UID`]:[`UID`] (no name: the image has no /etc/passwd); the
//! binary carries the capabilities it needs as file capabilities ([`FILE_CAPS`], the
//! `security.capability` xattr), which podman's COPY keeps and `podman save` writes into the
//! layer (a PAX `SCHILY.xattr` record): both are checked after the build. Labelled and
//! annotated with the version and source revision. Tagged `localhost/fdprof:VERSION` in root's
//! podman storage and saved as an OCI archive under `target/image/` for pushing to a registry
//! of one's own (docs/deploy.md).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::workspace::root;

pub(crate) const PODMAN: &str = "/usr/bin/podman";
/// The image's user and group (the DaemonSet's runAsUser, runAsGroup and fsGroup).
pub(crate) const UID: u32 = 65532;
/// The file capabilities of /usr/bin/fdprof, as `setcap` takes them: what `daemon -a` needs as
/// a user other than root (docs/deploy.md says why each). `=p`: permitted at exec, as far as the
/// container's bounding set (the pod's `capabilities.add`) allows, and made effective by fdprof
/// itself at start; with the effective bit the kernel would refuse the exec outright wherever
/// the pod adds one of them not, instead of fdprof naming what is missing.
pub(crate) const FILE_CAPS: &str =
    "cap_dac_read_search,cap_sys_ptrace,cap_sys_resource,cap_syslog,cap_perfmon,cap_bpf=p";
const SETCAP: &str = "/usr/sbin/setcap";
const GETCAP: &str = "/usr/sbin/getcap";

/// What `build` made.
pub(crate) struct Image {
    /// `localhost/fdprof:VERSION`.
    pub name: String,
    pub version: String,
    pub archive: PathBuf,
}

fn image_dir() -> PathBuf {
    root().join("target/image")
}

/// The crate's version, as the binary reports it (`fdprof 0.1.0 (git …)`).
fn version_of(bin: &Path) -> Result<(String, String)> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let version = text
        .split_whitespace()
        .nth(1)
        .filter(|v| {
            v.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-+".contains(c))
        })
        .with_context(|| format!("unexpected `fdprof --version` output: {text:?}"))?;
    Ok((version.to_string(), text))
}

/// The source revision (full commit id, `-dirty` when the tree has changes).
fn revision() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(root())
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    }
}

/// The commit's time, as the image's creation time: the same sources give the same image.
fn commit_time() -> Option<String> {
    let out = Command::new("git")
        .current_dir(root())
        .args(["log", "-1", "--format=%ct"])
        .output()
        .ok()?;
    let t = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!t.is_empty() && t.chars().all(|c| c.is_ascii_digit())).then_some(t)
}

/// The build context: the root file system to copy in, and the Containerfile.
fn context(bin: &Path, dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let rootfs = dir.join("rootfs");
    let mkdir = |path: &str, mode: u32| -> Result<()> {
        let p = rootfs.join(path);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(&p)
            .with_context(|| format!("creating {}", p.display()))?;
        fs::set_permissions(&p, fs::Permissions::from_mode(mode))?;
        Ok(())
    };
    // Mount points: a read-only root gets /proc, /sys and /dev from the runtime, and writable
    // /run/fdprof (the generated token) and /tmp only where the pod mounts them.
    // Parents first, each with its own mode (a recursive create gives them the leaf's): the
    // image's user must be able to reach /run/fdprof and /tmp through them.
    for (path, mode) in [
        ("usr", 0o755),
        ("usr/bin", 0o755),
        ("run", 0o755),
        ("var", 0o755),
        ("var/lib", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("run/fdprof", 0o700),
        ("tmp", 0o1777),
        ("var/lib/fdprof", 0o700),
    ] {
        mkdir(path, mode)?;
    }
    let dest = rootfs.join("usr/bin/fdprof");
    fs::copy(bin, &dest).with_context(|| format!("copying {}", bin.display()))?;
    fs::set_permissions(&dest, fs::Permissions::from_mode(0o755))?;
    step("setcap", Command::new(SETCAP).arg(FILE_CAPS).arg(&dest))?;
    fs::write(
        dir.join("Containerfile"),
        format!(
            "FROM scratch\n\
             COPY rootfs/ /\n\
             USER {UID}:{UID}\n\
             ENTRYPOINT [\"/usr/bin/fdprof\"]\n\
             CMD [\"daemon\", \"--all\"]\n"
        ),
    )?;
    Ok(())
}

/// Builds the image from the static binary, tags it and saves it as an OCI archive.
pub(crate) fn build() -> Result<Image> {
    if !Path::new(PODMAN).is_file() || !Path::new(SETCAP).is_file() {
        crate::bootstrap::apt_get(&["install", "-y", "podman", "runc", "libcap2-bin"])?;
    }
    let bin = crate::static_fdprof::build_static()?;
    let (version, _) = version_of(&bin)?;
    let revision = revision();
    let dir = image_dir();
    context(&bin, &dir.join("context"))?;
    let name = format!("localhost/fdprof:{version}");
    let mut cmd = Command::new(PODMAN);
    cmd.args(["build", "--format", "oci", "--no-cache", "--pull=never"])
        .args(["--tag", &name]);
    for (key, value) in [
        ("org.opencontainers.image.title", "fdprof"),
        (
            "org.opencontainers.image.description",
            "fdprof: profiler of the Linux fd table (alloc_fd, close, file_lock)",
        ),
        ("org.opencontainers.image.version", version.as_str()),
        ("org.opencontainers.image.revision", revision.as_str()),
        // The user-space code's (Cargo.toml); the eBPF programs declare GPL to the kernel.
        ("org.opencontainers.image.licenses", "MIT OR Apache-2.0"),
    ] {
        let kv = format!("{key}={value}");
        cmd.args(["--label", &kv, "--annotation", &kv]);
    }
    if let Some(t) = commit_time() {
        cmd.args(["--timestamp", &t]);
    }
    cmd.arg(dir.join("context"));
    step("podman build", &mut cmd)?;
    let archive = dir.join(format!("fdprof-{version}.oci.tar"));
    let _ = fs::remove_file(&archive);
    step(
        "podman save (OCI archive)",
        Command::new(PODMAN)
            .args(["save", "--format", "oci-archive", "-o"])
            .arg(&archive)
            .arg(&name),
    )?;
    let image = Image {
        name,
        version,
        archive,
    };
    caps_kept(&image)?;
    Ok(image)
}

/// The capabilities `getcap` reads on `file`, as it prints them (`cap_…=p`).
fn caps_of(file: &Path) -> Result<String> {
    let out = Command::new(GETCAP)
        .arg(file)
        .output()
        .with_context(|| format!("cannot run {GETCAP}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .trim()
        .rsplit_once(' ')
        .map(|(_, caps)| caps.to_string())
        .unwrap_or_default())
}

/// Checks that /usr/bin/fdprof carries its file capabilities in the stored image (mounted) and
/// in the saved archive (its layer unpacked with GNU tar's `--xattrs`), as set on the context.
fn caps_kept(image: &Image) -> Result<()> {
    let want = caps_of(&image_dir().join("context/rootfs/usr/bin/fdprof"))?;
    if want.is_empty() {
        bail!("setcap left no capabilities on the build context's fdprof");
    }
    let out = Command::new(PODMAN)
        .args(["image", "mount", &image.name])
        .output()?;
    let mounted = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let stored = caps_of(&mounted.join("usr/bin/fdprof"));
    let _ = Command::new(PODMAN)
        .args(["image", "unmount", &image.name])
        .output();
    let stored = stored?;
    let unpacked = image_dir().join("unpacked");
    let _ = fs::remove_dir_all(&unpacked);
    fs::create_dir_all(&unpacked)?;
    step(
        "unpack the OCI archive",
        Command::new("tar")
            .arg("-xf")
            .arg(&image.archive)
            .arg("-C")
            .arg(&unpacked),
    )?;
    let index: serde_json::Value = serde_json::from_slice(&fs::read(unpacked.join("index.json"))?)?;
    let blob = |digest: &serde_json::Value| {
        let digest = digest.as_str().unwrap_or_default();
        unpacked
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(blob(&index["manifests"][0]["digest"]))?)?;
    let layer = blob(&manifest["layers"][0]["digest"]);
    let root = unpacked.join("layer");
    fs::create_dir_all(&root)?;
    step(
        "unpack its layer with xattrs",
        Command::new("tar")
            .args(["--xattrs", "--xattrs-include=security.capability", "-xf"])
            .arg(&layer)
            .arg("-C")
            .arg(&root)
            .arg("usr/bin/fdprof"),
    )?;
    let archived = caps_of(&root.join("usr/bin/fdprof"))?;
    let _ = fs::remove_dir_all(&unpacked);
    if stored != want || archived != want {
        bail!(
            "/usr/bin/fdprof's file capabilities: {want:?} set, {stored:?} in the stored image, \
             {archived:?} in the OCI archive"
        );
    }
    eprintln!("==> /usr/bin/fdprof's file capabilities, stored and archived: {want}");
    Ok(())
}

fn step(what: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("==> {what}: {cmd:?}");
    let status = cmd.status().with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// The image's size as podman stores it, bytes.
fn size(name: &str) -> Result<u64> {
    let out = Command::new(PODMAN)
        .args(["image", "inspect", "--format", "{{.Size}}", name])
        .output()?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .with_context(|| format!("podman image inspect {name}: no size"))
}

/// `podman run IMAGE --version` the way this host runs containers (runc, cgroupfs, no ulimits
/// raised): the entrypoint is fdprof, and it prints the version built.
pub(crate) fn smoke(image: &Image) -> Result<String> {
    let dir = image_dir().join("run");
    fs::create_dir_all(&dir)?;
    let conf = dir.join("containers.conf");
    fs::write(&conf, "[containers]\ndefault_ulimits = []\n")?;
    let out = Command::new(PODMAN)
        .env("CONTAINERS_CONF", &conf)
        .args([
            "run",
            "--rm",
            "--runtime",
            "runc",
            "--cgroup-manager",
            "cgroupfs",
        ])
        .args(["--network", "none", "--read-only", "--cap-drop", "all"])
        .arg(&image.name)
        .arg("--version")
        .output()
        .context("cannot run podman")?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || text.split_whitespace().nth(1) != Some(image.version.as_str()) {
        bail!(
            "podman run {} --version printed {text:?} ({}): {}",
            image.name,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(text)
}

/// `cargo xtask image`.
pub(crate) fn run() -> Result<()> {
    let image = build()?;
    let version = smoke(&image)?;
    let bytes = size(&image.name)?;
    println!(
        "image {}: {:.1} MB; `podman run {0} --version`: {version}; OCI archive {}",
        image.name,
        bytes as f64 / 1e6,
        image.archive.display()
    );
    Ok(())
}
