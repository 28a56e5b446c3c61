//! The OTLP side of the tests: the official Python `opentelemetry-proto` package (and `grpcio`,
//! for a receiver), installed into a virtualenv of their own under the target dir once, and
//! `otlp/decode.py`, which reads requests with it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The packages, pinned: the profiles signal is still `v1development`.
const PACKAGES: [&str; 2] = ["opentelemetry-proto==1.45.2", "grpcio==1.85.4"];

/// The virtualenv's python, made once (the tests that ask at the same time wait for it).
pub fn python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(make_venv).clone()
}

fn make_venv() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("otlp-venv");
    let bin = venv.join("bin/python");
    let ready = venv.join(".installed");
    if !ready.exists() {
        let made = Command::new("/usr/bin/python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}): cargo xtask bootstrap"));
        assert!(
            made.success(),
            "python3 -m venv failed: install python3-venv"
        );
        let installed = Command::new(venv.join("bin/pip"))
            .args(["install", "--disable-pip-version-check"])
            .args(PACKAGES)
            .status()
            .unwrap();
        assert!(installed.success(), "pip install {PACKAGES:?} failed");
        std::fs::write(&ready, "").unwrap();
    }
    bin
}

/// What `otlp/decode.py` makes of `requests`, added up.
pub fn decode(requests: &[&Path]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/otlp/decode.py");
    let out = Command::new(python())
        .arg(script)
        .args(requests)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "decode.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
