//! The guest's initramfs: a `newc` cpio archive written here (device nodes need no root this
//! way), compressed with the host's `gzip`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

/// A cpio archive in the kernel's `newc` format, built in memory.
#[derive(Default)]
pub(super) struct Cpio {
    data: Vec<u8>,
    next_ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, body: &[u8], rdev: (u32, u32)) {
        self.next_ino += 1;
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let name_len = name.len() + 1;
        let fields = [
            self.next_ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: reproducible archives
            u32::try_from(body.len()).expect("initramfs member over 4 GiB"),
            0, // dev major
            0, // dev minor
            rdev.0,
            rdev.1,
            u32::try_from(name_len).unwrap(),
            0, // check
        ];
        self.data.extend_from_slice(b"070701");
        for f in fields {
            self.data.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.data.extend_from_slice(name.as_bytes());
        self.data.push(0);
        self.pad();
        self.data.extend_from_slice(body);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.data.len().is_multiple_of(4) {
            self.data.push(0);
        }
    }

    pub(super) fn dir(&mut self, name: &str) {
        self.entry(name, S_IFDIR | 0o755, &[], (0, 0));
    }

    pub(super) fn file(&mut self, name: &str, perm: u32, body: &[u8]) {
        self.entry(name, S_IFREG | perm, body, (0, 0));
    }

    pub(super) fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, S_IFLNK | 0o777, target.as_bytes(), (0, 0));
    }

    pub(super) fn char_dev(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, S_IFCHR | perm, &[], (major, minor));
    }

    /// Ends the archive and returns its bytes.
    pub(super) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.data
    }
}

/// The guest's root: busybox, fdprof, the chain program (`unwound` steps), the generated
/// `/init`, and the mount points.
pub(super) fn build(
    busybox: &Path,
    (fdprof, chain): (&Path, &Path),
    init: &str,
    out: &Path,
) -> Result<()> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let mut cpio = Cpio::default();
    for dir in [
        "bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "proc", "sys", "tmp", "root", "etc",
    ] {
        cpio.dir(dir);
    }
    cpio.char_dev("dev/console", 0o600, 5, 1);
    cpio.char_dev("dev/null", 0o666, 1, 3);
    cpio.file("bin/busybox", 0o755, &read(busybox)?);
    cpio.symlink("bin/sh", "busybox");
    cpio.file("bin/fdprof", 0o755, &read(fdprof)?);
    cpio.file("bin/chain", 0o755, &read(chain)?);
    cpio.file("init", 0o755, init.as_bytes());
    let archive = cpio.finish();

    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut gzip = Command::new("gzip")
        .args(["-1", "-n", "-c"])
        .stdin(Stdio::piped())
        .stdout(file)
        .spawn()
        .context("cannot run gzip")?;
    gzip.stdin
        .take()
        .unwrap()
        .write_all(&archive)
        .context("writing to gzip")?;
    let status = gzip.wait()?;
    if !status.success() {
        bail!("gzip failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_layout() {
        let mut cpio = Cpio::default();
        cpio.file("init", 0o755, b"#!/bin/sh\n");
        let data = cpio.finish();
        assert_eq!(&data[..6], b"070701");
        // mode field (second) and file size field (seventh)
        assert_eq!(&data[14..22], format!("{:08x}", S_IFREG | 0o755).as_bytes());
        assert_eq!(&data[54..62], b"0000000a");
        assert!(data.len().is_multiple_of(4));
        assert!(data.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
