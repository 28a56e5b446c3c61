//! Host side set-up: qemu and busybox-static from apt (installed only when missing), Debian's
//! kernel images (`apt-get download` into a kept cache, `./boot` unpacked, never installed),
//! and the static fdprof binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::run::root;

pub(super) const QEMU: &str = "qemu-system-x86_64";
pub(super) const BUSYBOX: &str = "/bin/busybox";

/// Host packages and a file each provides.
const HOST_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86", "/usr/bin/qemu-system-x86_64"),
    ("busybox-static", BUSYBOX),
];

pub(super) fn timed<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    eprintln!("[vm-test] {what} ...");
    let start = Instant::now();
    let value = f()?;
    eprintln!(
        "[vm-test] {what}: done in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    Ok(value)
}

pub(super) fn vm_dir() -> PathBuf {
    root().join("target/vm")
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// Installed packages whose names match a `dpkg-query` pattern.
fn installed_like(pattern: &str) -> Vec<String> {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${Status}\\n", pattern])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.ends_with("install ok installed"))
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

use crate::bootstrap::apt_get;

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Installs qemu and busybox-static when missing (`apt-get update` first only then).
pub(super) fn host_packages() -> Result<()> {
    let missing: Vec<&str> = HOST_PACKAGES
        .iter()
        .filter(|(pkg, file)| !installed(pkg) || !Path::new(file).exists())
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        eprintln!(
            "[vm-test] host packages present: {}",
            HOST_PACKAGES
                .iter()
                .map(|(p, _)| *p)
                .collect::<Vec<_>>()
                .join(", ")
        );
    } else {
        timed(&format!("apt-get install {}", missing.join(" ")), || {
            apt_get(&["update"])?;
            // Debian's qemu may conflict with a newer qemu-utils (or similar) installed from
            // elsewhere; apt then removes it. Put such packages back at Debian's version so
            // their tools stay available, and say so.
            let before = installed_like("qemu*");
            let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
            args.extend_from_slice(&missing);
            apt_get(&args)?;
            let now = installed_like("qemu*");
            let removed: Vec<&str> = before
                .iter()
                .filter(|p| !now.contains(p))
                .map(String::as_str)
                .collect();
            if !removed.is_empty() {
                eprintln!(
                    "[vm-test] apt removed {} (conflicting versions); reinstalling Debian's",
                    removed.join(" ")
                );
                let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
                args.extend_from_slice(&removed);
                if let Err(err) = apt_get(&args) {
                    eprintln!("[vm-test] warning: {err:#}");
                }
            }
            Ok(())
        })?;
    }
    for tool in ["gzip", "dpkg-deb", "tar", QEMU] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool} >/dev/null")])
            .status()
            .map_or(true, |s| !s.success())
        {
            bail!("`{tool}` not found on the host");
        }
    }
    Ok(())
}

/// A kernel series the matrix covers, e.g. "6.1" (Debian's `linux-image-6.1.0-N-amd64`) or
/// "6.12" (`linux-image-6.12.N+debM-amd64`).
pub(super) const SERIES: &[&str] = &["6.1", "6.12"];

/// A kernel image package of `series`, generic amd64 flavour (not cloud, rt or dbg), signed or
/// unsigned. Returns its sort key (the numbers of its version) and whether it is unsigned.
fn parse_package(series: &str, name: &str) -> Option<(Vec<u64>, bool)> {
    let rest = name.strip_prefix("linux-image-")?;
    let (rest, unsigned) = match rest.strip_suffix("-unsigned") {
        Some(r) => (r, true),
        None => (rest, false),
    };
    let version = rest.strip_suffix("-amd64")?;
    let tail = version.strip_prefix(series)?.strip_prefix('.')?;
    // "0-57" (6.1 ABI numbering) or "117+deb12" (6.12 numbering).
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let ok = match tail.split_once('-') {
        Some((a, b)) => digits(a) && digits(b),
        None => match tail.split_once("+deb") {
            Some((a, b)) => digits(a) && digits(b),
            None => false,
        },
    };
    if !ok {
        return None;
    }
    let key = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    Some((key, unsigned))
}

/// Orders package names newest first, unsigned before signed for the same version.
fn rank(series: &str, names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut found: Vec<(Vec<u64>, bool, String)> = names
        .into_iter()
        .filter_map(|n| parse_package(series, &n).map(|(k, u)| (k, u, n)))
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    found.dedup_by(|a, b| a.2 == b.2);
    found.into_iter().map(|(_, _, n)| n).collect()
}

fn has_candidate(package: &str) -> bool {
    output(Command::new("apt-cache").args(["policy", package])).is_ok_and(|out| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix("Candidate:"))
            .is_some_and(|c| c.trim() != "(none)")
    })
}

/// The newest downloadable image package of `series`, from apt's lists.
fn discover(series: &str) -> Result<String> {
    let pattern = format!("^linux-image-{}\\.", series.replace('.', "\\."));
    let list = output(Command::new("apt-cache").args(["search", "--names-only", &pattern]))?;
    let names = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string);
    // The newest few only: each look-up is an apt-cache run.
    for name in rank(series, names).into_iter().take(4) {
        if has_candidate(&name) {
            return Ok(name);
        }
    }
    bail!("apt-cache search {pattern} found no downloadable generic amd64 kernel image")
}

/// A `.deb` of `package` in the cache (`apt-get download` names them `PKG_VERSION_ARCH.deb`).
fn cached_deb(cache: &Path, package: &str) -> Option<PathBuf> {
    std::fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".deb") && n.split('_').next() == Some(package))
        })
        .max()
}

/// A kernel ready to boot.
pub(super) struct Kernel {
    pub series: &'static str,
    pub package: String,
    pub vmlinuz: PathBuf,
    /// From the image's file name, e.g. "6.1.0-57-amd64".
    pub release: String,
}

/// Finds, downloads (once) and unpacks the image of `series`.
pub(super) fn kernel(series: &'static str) -> Result<Kernel> {
    let cache = vm_dir().join("cache");
    std::fs::create_dir_all(&cache)?;
    let package = match discover(series) {
        Ok(p) => p,
        Err(err) => {
            // Offline: fall back to the newest image already in the cache.
            let cached = std::fs::read_dir(&cache)?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".deb"))
                .filter_map(|n| n.split('_').next().map(str::to_string));
            match rank(series, cached).into_iter().next() {
                Some(p) => {
                    eprintln!("[vm-test] {err:#}; using the cached {p}");
                    p
                }
                None => return Err(err),
            }
        }
    };
    eprintln!("[vm-test] kernel {series}: {package}");
    let deb = match cached_deb(&cache, &package) {
        Some(deb) => {
            eprintln!("[vm-test] cached: {}", deb.display());
            deb
        }
        None => timed(&format!("apt-get download {package}"), || {
            // Into a scratch directory first, so an interrupted download leaves no half file.
            let partial = cache.join("partial");
            let _ = std::fs::remove_dir_all(&partial);
            std::fs::create_dir_all(&partial)?;
            // apt fetches as the `_apt` user when it may write there (else it warns).
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o777))?;
            let status = Command::new("apt-get")
                .args(["download", &package])
                .current_dir(&partial)
                .status()
                .context("cannot run apt-get download")?;
            if !status.success() {
                bail!("apt-get download {package} failed ({status})");
            }
            let got = cached_deb(&partial, &package)
                .with_context(|| format!("apt-get download left no {package}_*.deb"))?;
            let deb = cache.join(got.file_name().unwrap());
            std::fs::rename(&got, &deb)?;
            let _ = std::fs::remove_dir_all(&partial);
            Ok(deb)
        })?,
    };

    let stem = deb.file_stem().unwrap().to_string_lossy().into_owned();
    let dir = vm_dir().join("kernels").join(&stem);
    if !dir.join("boot").is_dir() {
        timed(&format!("unpack ./boot of {stem}"), || {
            let tmp = dir.with_extension("partial");
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&tmp)?;
            // `dpkg -x`, limited to ./boot: the modules are not needed.
            let script = "dpkg-deb --fsys-tarfile \"$1\" | tar -x -C \"$2\" ./boot";
            let status = Command::new("sh")
                .args(["-c", script, "sh"])
                .arg(&deb)
                .arg(&tmp)
                .status()?;
            if !status.success() {
                bail!("unpacking ./boot from {} failed ({status})", deb.display());
            }
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::rename(&tmp, &dir)?;
            Ok(())
        })?;
    }
    let vmlinuz = std::fs::read_dir(dir.join("boot"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .with_context(|| format!("no boot/vmlinuz-* in {}", deb.display()))?;
    let release = vmlinuz.file_name().unwrap().to_string_lossy()["vmlinuz-".len()..].to_string();
    Ok(Kernel {
        series,
        package,
        vmlinuz,
        release,
    })
}

/// Builds fdprof statically linked (its eBPF objects embedded) into its own target directory,
/// so the normal build is not invalidated, and checks that it needs no loader.
pub(super) fn static_fdprof() -> Result<PathBuf> {
    let target_dir = vm_dir().join("build");
    let target = "x86_64-unknown-linux-gnu";
    timed("build static fdprof (release)", || {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(root())
            .args(["build", "--release", "-p", "fdprof", "--target", target])
            .arg("--target-dir")
            .arg(&target_dir)
            // RUSTFLAGS replaces .cargo/config.toml's target rustflags: repeat them.
            .env(
                "RUSTFLAGS",
                "-C target-feature=+crt-static -C force-frame-pointers=yes",
            )
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .context("cannot run cargo build")?;
        if !status.success() {
            bail!("static build of fdprof failed ({status})");
        }
        Ok(())
    })?;
    let bin = target_dir.join(target).join("release/fdprof");
    if !super::initramfs::elf_is_static(&bin)? {
        bail!(
            "{} needs a dynamic loader; it must be static",
            bin.display()
        );
    }
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_generic_images_newest_first() {
        let names = [
            "linux-image-6.1.0-9-amd64",
            "linux-image-6.1.0-57-amd64",
            "linux-image-6.1.0-57-amd64-unsigned",
            "linux-image-6.1.0-57-amd64-dbg",
            "linux-image-6.1.0-57-cloud-amd64",
            "linux-image-6.1.0-57-rt-amd64-unsigned",
            "linux-image-6.12.117+deb12-amd64",
            "linux-image-amd64",
        ]
        .map(String::from);
        assert_eq!(
            rank("6.1", names.clone()),
            [
                "linux-image-6.1.0-57-amd64-unsigned",
                "linux-image-6.1.0-57-amd64",
                "linux-image-6.1.0-9-amd64"
            ]
        );
        let more = [
            "linux-image-6.12.99+deb12-amd64-unsigned",
            "linux-image-6.12.117+deb12-cloud-amd64",
            "linux-image-6.12-amd64",
            "linux-image-6.12.117+deb12-amd64",
        ]
        .map(String::from);
        assert_eq!(
            rank("6.12", more),
            [
                "linux-image-6.12.117+deb12-amd64",
                "linux-image-6.12.99+deb12-amd64-unsigned"
            ]
        );
        assert!(rank("6.12", names).len() == 1);
    }
}
