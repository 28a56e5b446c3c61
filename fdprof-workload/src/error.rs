//! Bad usage: an option value the run cannot work with, found before anything is measured. The
//! command line exits with code 2 for it (as for a clap error); every other error exits 1.

use std::fmt;

/// A run refused for its options; the message names the option and what would work.
#[derive(Debug)]
pub struct UsageError {
    pub message: String,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UsageError {}

/// Builds an [`anyhow::Error`] holding a [`UsageError`].
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError {
        message: message.into(),
    }
    .into()
}
