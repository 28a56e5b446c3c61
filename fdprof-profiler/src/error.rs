//! Errors that end the program with a specific exit code and one clear line.

use std::fmt;

/// Exit code for bad usage or missing privileges (like `perf`'s "permission" failures).
pub const EXIT_USAGE: u8 = 2;

/// Exit code for a command that was found but cannot be run, as shells use it.
pub(crate) const EXIT_CANNOT_EXECUTE: u8 = 126;

/// Exit code for a command that does not exist, as shells use it.
pub(crate) const EXIT_NOT_FOUND: u8 = 127;

/// An error that carries the exit code the process should end with.
#[derive(Debug)]
pub struct Fatal {
    pub code: u8,
    pub(crate) message: String,
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Fatal {}

/// Builds an [`anyhow::Error`] that makes `main` exit with `code`.
pub fn fatal(code: u8, message: impl Into<String>) -> anyhow::Error {
    Fatal {
        code,
        message: message.into(),
    }
    .into()
}
