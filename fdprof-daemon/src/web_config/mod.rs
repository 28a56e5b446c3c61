//! `--web-config-file`: Prometheus exporter-toolkit's web configuration, its format and its
//! meaning: TLS with client certificates verified (and their SANs held to a list), bcrypt basic
//! auth, security headers. The file and every file it names are looked at every
//! [`WATCH_EVERY`]: when one changes all are read again, so a certificate rotates without a
//! restart; a bad new one keeps the config being served, with one logged line.

mod basic_auth;
pub mod file;
mod tls;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub(crate) use basic_auth::BasicAuth;
use file::Settings;

use crate::files::{self, Access};
use crate::log;

/// How often the files are looked at for a change.
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(2);

/// A web config as it is served.
pub(crate) struct Loaded {
    pub settings: Settings,
    /// The TLS server its files make, when it has `tls_server_config`.
    pub tls: Option<TlsAcceptor>,
    pub users: BasicAuth,
    /// Added to every answer.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Loaded {
    /// Whether a client certificate that verified is a credential: it is whenever the config
    /// verifies them.
    pub(crate) fn verifies_clients(&self) -> bool {
        self.settings
            .tls
            .as_ref()
            .is_some_and(|t| t.client_auth != file::ClientAuth::None)
    }
}

/// The web config being served, and the file it came from.
pub(crate) struct Live {
    path: PathBuf,
    current: RwLock<Arc<Loaded>>,
}

impl Live {
    /// Reads `path` and every file it names; one line if any is wrong.
    pub(crate) fn open(path: PathBuf) -> Result<Arc<Live>, String> {
        let loaded = load(&path)?;
        Ok(Arc::new(Live {
            path,
            current: RwLock::new(Arc::new(loaded)),
        }))
    }

    pub(crate) fn current(&self) -> Arc<Loaded> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the files again whenever one changes, for the daemon's life (the task is the
    /// caller's to abort).
    pub(crate) fn watch(self: Arc<Self>) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut seen = stamps(&self.path, &self.current().settings);
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let me = self.clone();
                let Ok((now, read)) = tokio::task::spawn_blocking(move || {
                    let now = stamps(&me.path, &me.current().settings);
                    (now, load(&me.path))
                })
                .await
                else {
                    continue;
                };
                if now == seen {
                    continue;
                }
                seen = now;
                match read {
                    Ok(loaded) => {
                        seen = stamps(&self.path, &loaded.settings);
                        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
                        log::info(&format!("web config reloaded from {}", self.path.display()));
                    }
                    Err(e) => log::error(&format!(
                        "web config not reloaded, the one being served stays: {e}"
                    )),
                }
            }
        })
    }
}

/// Reads the web config at `path` and the files it names.
fn load(path: &Path) -> Result<Loaded, String> {
    let shown = fdprof_recording::escape::name(&path.display().to_string()).into_owned();
    // It may hold password hashes: a secret's rule.
    let text = files::read_text(path, Access::OwnerOnly, file::FILE_MAX)
        .map_err(|e| format!("bad web config {shown}: {e}"))?;
    let settings = file::parse(&text, path).map_err(|e| format!("web config {shown}: {e}"))?;
    let tls = match &settings.tls {
        Some(t) => Some(TlsAcceptor::from(tls::server_config(t)?)),
        None => None,
    };
    let headers = settings
        .headers
        .iter()
        .filter_map(|(k, v)| {
            Some((
                HeaderName::try_from(k).ok()?,
                HeaderValue::try_from(v).ok()?,
            ))
        })
        .collect();
    Ok(Loaded {
        users: BasicAuth::new(&settings.basic_auth_users),
        tls,
        headers,
        settings,
    })
}

/// What says a file changed: device, inode, size and modification time of the web config and
/// of each file it names (a Secret's update swaps the files a symlink names: a new inode).
type Stamp = Option<(u64, u64, u64, i64, i64)>;

fn stamps(path: &Path, settings: &Settings) -> Vec<Stamp> {
    let mut paths = vec![path.to_path_buf()];
    if let Some(t) = &settings.tls {
        paths.push(t.cert_file.clone());
        paths.push(t.key_file.clone());
        paths.extend(t.client_ca_file.clone());
    }
    paths
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
        })
        .collect()
}
