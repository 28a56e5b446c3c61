//! Host side set-up: qemu and busybox-static from apt (installed only when missing), Debian's
//! kernel images (`apt-get download` into a kept cache, `./boot` unpacked, never installed),
//! and the static fdprof binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::workspace::root;

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

/// A kernel series the matrix covers, e.g. "5.10" (Debian 11's `linux-image-5.10.0-N-amd64`),
/// "6.1" (`linux-image-6.1.0-N-amd64`) or "6.12" (`linux-image-6.12.N+debM-amd64`).
pub(super) const SERIES: &[&str] = &["5.10", "6.1", "6.12"];

/// The series `--kernel all` (and so `cargo xtask test`) boots: all of them.
pub(super) const IN_ALL: &[&str] = SERIES;

/// Debian 11 (bullseye), where 5.10 is: read through apt options pointing at a sources list
/// and state of the project's own (under `target/vm/apt-bullseye/`), so that the host's apt
/// sources stay as they are.
const BULLSEYE: &str = "\
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main
";

/// The apt options that find `series`' packages: none for the host's own suite; for 5.10,
/// bullseye's lists, read (`apt-get update`) into a state directory of the project's own.
fn apt_options(series: &str) -> Result<Vec<String>> {
    if series != "5.10" {
        return Ok(Vec::new());
    }
    let dir = vm_dir().join("apt-bullseye");
    for sub in [
        "etc/sources.list.d",
        "lists/partial",
        "cache/archives/partial",
    ] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::write(dir.join("etc/sources.list"), BULLSEYE)?;
    let d = dir.display();
    let options: Vec<String> = [
        format!("Dir::Etc::SourceList={d}/etc/sources.list"),
        format!("Dir::Etc::SourceParts={d}/etc/sources.list.d"),
        format!("Dir::State::Lists={d}/lists"),
        format!("Dir::Cache={d}/cache"),
        // Nothing of bullseye is installed here: its packages are only downloaded.
        "Dir::State::status=/dev/null".to_string(),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_string(), o])
    .collect();
    let updated = timed(
        "apt-get update (bullseye's lists, into target/vm/apt-bullseye)",
        || {
            let status = Command::new("apt-get")
                .args(&options)
                .args(["-q", "update"])
                .status()
                .context("cannot run apt-get update")?;
            if !status.success() {
                bail!("apt-get update of bullseye's lists failed ({status})");
            }
            Ok(())
        },
    );
    if let Err(err) = updated {
        // Offline: the lists read last time (or none, and the cache's image is used).
        eprintln!("[vm-test] {err:#}");
    }
    Ok(options)
}

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

fn has_candidate(apt: &[String], package: &str) -> bool {
    output(
        Command::new("apt-cache")
            .args(apt)
            .args(["policy", package]),
    )
    .is_ok_and(|out| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix("Candidate:"))
            .is_some_and(|c| c.trim() != "(none)")
    })
}

/// Series booted at one image rather than the newest: 5.10 at Debian 11's 5.10.218, the last
/// image of bullseye with `__alloc_fd(files, start, end, flags)` and `__close_fd(files, fd)`,
/// the functions the 2015 threads name. Its next image (5.10.0-32, 5.10.223) and every later
/// one have `alloc_fd(start, end, flags)` and `close_fd(fd)`, as 5.11 has (read from their
/// BTF).
const PINNED: &[(&str, &str)] = &[("5.10", "linux-image-5.10.0-30-amd64-unsigned")];

/// The image package of `series`: its pinned one, else the newest downloadable, from apt's
/// lists.
fn discover(apt: &[String], series: &str) -> Result<String> {
    if let Some((_, package)) = PINNED.iter().find(|(s, _)| *s == series) {
        if has_candidate(apt, package) {
            return Ok(package.to_string());
        }
        bail!("apt-cache policy {package}: not downloadable from the lists read");
    }
    let pattern = format!("^linux-image-{}\\.", series.replace('.', "\\."));
    let list =
        output(
            Command::new("apt-cache")
                .args(apt)
                .args(["search", "--names-only", &pattern]),
        )?;
    let names = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string);
    // The newest few only: each look-up is an apt-cache run.
    for name in rank(series, names).into_iter().take(4) {
        if has_candidate(apt, &name) {
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
    let apt = apt_options(series)?;
    let package = package(series, &apt, &cache)?;
    eprintln!("[vm-test] kernel {series}: {package}");
    let deb = match cached_deb(&cache, &package) {
        Some(deb) => {
            eprintln!("[vm-test] cached: {}", deb.display());
            deb
        }
        None => timed(&format!("apt-get download {package}"), || {
            download(&apt, &package, &cache)
        })?,
    };
    let vmlinuz = unpacked_vmlinuz(&deb)?;
    let release = vmlinuz.file_name().unwrap().to_string_lossy()["vmlinuz-".len()..].to_string();
    Ok(Kernel {
        series,
        package,
        vmlinuz,
        release,
    })
}

/// The image package of `series`: the archive's newest, or offline the newest in the cache.
fn package(series: &str, apt: &[String], cache: &Path) -> Result<String> {
    match discover(apt, series) {
        Ok(p) => Ok(p),
        Err(err) => {
            // Offline: fall back to the newest image already in the cache.
            let cached = std::fs::read_dir(cache)?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".deb"))
                .filter_map(|n| n.split('_').next().map(str::to_string))
                .filter(|n| PINNED.iter().all(|(s, p)| *s != series || p == n));
            match rank(series, cached).into_iter().next() {
                Some(p) => {
                    eprintln!("[vm-test] {err:#}; using the cached {p}");
                    Ok(p)
                }
                None => Err(err),
            }
        }
    }
}

/// `apt-get download PACKAGE` into the cache: its `.deb` there.
fn download(apt: &[String], package: &str, cache: &Path) -> Result<PathBuf> {
    // Into a scratch directory first, so an interrupted download leaves no half file.
    let partial = cache.join("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)?;
    // apt fetches as the `_apt` user when it may write there (else it warns).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o777))?;
    let status = Command::new("apt-get")
        .args(apt)
        .args(["download", package])
        .current_dir(&partial)
        .status()
        .context("cannot run apt-get download")?;
    if !status.success() {
        bail!("apt-get download {package} failed ({status})");
    }
    let got = cached_deb(&partial, package)
        .with_context(|| format!("apt-get download left no {package}_*.deb"))?;
    let deb = cache.join(got.file_name().unwrap());
    std::fs::rename(&got, &deb)?;
    let _ = std::fs::remove_dir_all(&partial);
    Ok(deb)
}

/// The kernel image of `deb`, its `./boot` unpacked (once) under `target/vm/kernels/`.
fn unpacked_vmlinuz(deb: &Path) -> Result<PathBuf> {
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
                .arg(deb)
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
    std::fs::read_dir(dir.join("boot"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .with_context(|| format!("no boot/vmlinuz-* in {}", deb.display()))
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
        let bullseye = [
            "linux-image-5.10.0-30-amd64-unsigned",
            "linux-image-5.10.0-32-cloud-amd64-unsigned",
            "linux-image-5.10.0-32-amd64",
            "linux-image-5.10.0-32-amd64-unsigned",
            "linux-image-5.10.0-32-rt-amd64-unsigned",
        ]
        .map(String::from);
        assert_eq!(
            rank("5.10", bullseye),
            [
                "linux-image-5.10.0-32-amd64-unsigned",
                "linux-image-5.10.0-32-amd64",
                "linux-image-5.10.0-30-amd64-unsigned"
            ]
        );
    }
}
