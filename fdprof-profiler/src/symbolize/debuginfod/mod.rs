//! A debuginfod client with an on-disk cache: debug files of stripped binaries by build id.
//!
//! Symbolization runs on hot paths (the live view, the daemon's per-interval work), so
//! [`Debuginfod::lookup`] never touches the network: it answers from the cache or queues one
//! fetch for a background thread and says [`Lookup::Pending`]. Callers retry their pending
//! lookups when [`Debuginfod::generation`] moves.
//!
//! Protocol (elfutils): `GET {url}/buildid/{hex}/debuginfo` answers the ELF debug file, 404 when
//! the server does not know the build id. Servers are tried in order until one answers. A
//! download is bounded by the cache size and the fetch timeout, and only a complete ELF file of
//! the requested build id is kept (see [`cache`]).

mod cache;
mod http;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use cache::{Cache, Cached, InstallError};
use http::{HttpError, Limits};
pub use http::{Scheme, Url};

pub const DEFAULT_CACHE_DIR: &str = "/var/cache/fdprof/debuginfod";
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 2 << 30;
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The environment variable elfutils' clients read the server list from.
pub const URLS_ENV: &str = "DEBUGINFOD_URLS";
/// Connecting takes at most this long (or the fetch timeout, if shorter).
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A fetch that failed (or found nothing) is not tried again sooner.
const RETRY_AFTER: Duration = Duration::from_secs(600);
/// Concurrent fetches at most.
const FETCH_THREADS: usize = 2;
/// GNU build ids are 20 bytes (SHA-1) but may be any length; longer than this is garbage.
const MAX_BUILD_ID: usize = 64;

#[derive(Debug, Clone)]
pub struct Config {
    /// Tried in order.
    pub urls: Vec<Url>,
    pub cache_dir: PathBuf,
    /// The cache's size bound, and so also one download's.
    pub cache_max_bytes: u64,
    /// One server's whole fetch, redirects included.
    pub fetch_timeout: Duration,
}

impl Config {
    /// `urls` with the default cache and timeout.
    pub fn new(urls: Vec<Url>) -> Config {
        Config {
            urls,
            cache_dir: PathBuf::from(DEFAULT_CACHE_DIR),
            cache_max_bytes: DEFAULT_CACHE_MAX_BYTES,
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
        }
    }

    /// Whitespace-separated http:// and https:// URLs, as in `DEBUGINFOD_URLS`.
    pub fn parse_urls(text: &str) -> anyhow::Result<Vec<Url>> {
        text.split_whitespace().map(Url::parse).collect()
    }

    /// The URLs from `flag` if given (an empty flag turns debuginfod off), else from
    /// `DEBUGINFOD_URLS`. `Ok(None)` when that gives no URL: nothing is ever fetched then.
    pub fn from_flag_or_env(
        flag: Option<&str>,
        cache_dir: Option<PathBuf>,
        cache_max_bytes: Option<u64>,
    ) -> anyhow::Result<Option<Config>> {
        let urls = match flag {
            Some(text) => Self::parse_urls(text)?,
            None => match std::env::var(URLS_ENV) {
                Ok(text) => Self::parse_urls(&text).map_err(|e| anyhow!("{URLS_ENV}: {e}"))?,
                Err(std::env::VarError::NotPresent) => Vec::new(),
                Err(e) => bail!("{URLS_ENV}: {e}"),
            },
        };
        if urls.is_empty() {
            return Ok(None);
        }
        let mut config = Config::new(urls);
        if let Some(dir) = cache_dir {
            config.cache_dir = dir;
        }
        if let Some(max) = cache_max_bytes {
            if max == 0 {
                bail!("the debuginfod cache size must be more than 0 bytes");
            }
            config.cache_max_bytes = max;
        }
        Ok(Some(config))
    }
}

/// What [`Debuginfod::lookup`] has for a build id now.
#[derive(Debug)]
pub enum Lookup {
    /// The debug file, opened at its start.
    Ready(File),
    /// A fetch is queued or running: ask again when the generation moves.
    Pending,
    /// No server had it (or fetching failed), and it is not due to be tried again yet.
    Failed,
}

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Debug files downloaded and cached.
    pub fetched: u64,
    /// Lookups answered from the on-disk cache.
    pub cache_hits: u64,
    /// Fetches that every server answered 404.
    pub not_found: u64,
    /// Fetches that failed: network errors, timeouts, HTTP errors.
    pub failed: u64,
    /// Fetches whose download was refused: too large, not ELF, the wrong build id.
    pub refused: u64,
    pub fetched_bytes: u64,
    /// Bytes in the cache after the last eviction.
    pub cache_bytes: u64,
}

/// The client: share it through the `Arc` [`Debuginfod::start`] returns. Dropping the last one
/// lets the fetch threads end (after the fetch they may be in).
#[derive(Debug)]
pub struct Debuginfod {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: Config,
    cache: Cache,
    state: Mutex<State>,
    /// Signalled when a fetch is queued (or on shutdown).
    work: Condvar,
    /// Signalled when a fetch finishes.
    done: Condvar,
    generation: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Vec<u8>, Entry>,
    queue: VecDeque<Vec<u8>>,
    running: usize,
    counts: Counts,
    /// Build ids whose cached file was checked (or written) by this process.
    validated: HashSet<Vec<u8>>,
    /// Kinds of failure already reported, and the messages not yet taken.
    reported: HashSet<String>,
    new_failures: Vec<String>,
    stop: bool,
}

#[derive(Debug, Clone, Copy)]
enum Entry {
    Pending,
    /// Fetched into the cache (a miss then means it was evicted since).
    Done,
    Failed {
        retry_at: Instant,
    },
}

/// How one fetch of a build id ended, over all servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    NotFound,
    Failed,
    Refused,
    Fetched(u64),
}

impl Debuginfod {
    /// Creates (or checks) the cache directory and starts the fetch threads.
    pub fn start(config: Config) -> anyhow::Result<Arc<Self>> {
        let cache = Cache::open(&config.cache_dir, config.cache_max_bytes)?;
        let state = State {
            counts: Counts {
                cache_bytes: cache.evict(),
                ..Counts::default()
            },
            ..State::default()
        };
        let this = Arc::new(Debuginfod {
            shared: Arc::new(Shared {
                config,
                cache,
                state: Mutex::new(state),
                work: Condvar::new(),
                done: Condvar::new(),
                generation: AtomicU64::new(0),
            }),
        });
        for i in 0..FETCH_THREADS {
            let shared = Arc::clone(&this.shared);
            // On an error `this` drops, which stops the threads already started.
            std::thread::Builder::new()
                .name(format!("debuginfod-{i}"))
                .spawn(move || shared.fetch_loop())
                .context("starting a debuginfod fetch thread")?;
        }
        Ok(this)
    }

    /// Never blocks on the network: the cached debug file, or one fetch queued for it.
    pub fn lookup(&self, build_id: &[u8]) -> Lookup {
        if build_id.is_empty() || build_id.len() > MAX_BUILD_ID {
            return Lookup::Failed;
        }
        if let Some(file) = self.open_cached(build_id) {
            return Lookup::Ready(file);
        }
        let mut state = self.shared.lock();
        match state.entries.get(build_id).copied() {
            Some(Entry::Pending) => return Lookup::Pending,
            Some(Entry::Failed { retry_at }) if Instant::now() < retry_at => return Lookup::Failed,
            Some(Entry::Done) => {
                // Installed between our miss and the lock, or evicted since: look once more.
                drop(state);
                if let Some(file) = self.open_cached(build_id) {
                    return Lookup::Ready(file);
                }
                state = self.shared.lock();
            }
            _ => {}
        }
        state.entries.insert(build_id.to_vec(), Entry::Pending);
        state.queue.push_back(build_id.to_vec());
        self.shared.work.notify_one();
        Lookup::Pending
    }

    /// The cached file, validated once per process; an unusable entry is removed and reported.
    fn open_cached(&self, build_id: &[u8]) -> Option<File> {
        let validated = self.shared.lock().validated.contains(build_id);
        let cached = self.shared.cache.open_cached(build_id, !validated);
        let mut state = self.shared.lock();
        match cached {
            Cached::Hit(file) => {
                state.validated.insert(build_id.to_vec());
                state.counts.cache_hits += 1;
                Some(file)
            }
            Cached::Missing => None,
            Cached::Bad(message) => {
                state.validated.remove(build_id);
                state.report("cache".into(), message);
                None
            }
        }
    }

    /// Blocks until no fetch is queued or running (true), or until `deadline` (false).
    pub fn wait_idle(&self, deadline: Instant) -> bool {
        let mut state = self.shared.lock();
        while !state.queue.is_empty() || state.running > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .shared
                .done
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Moves each time a fetch finishes, either way.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    pub fn counts(&self) -> Counts {
        self.shared.lock().counts
    }

    /// The first failure of each kind (per server), each returned once, as a one-line message.
    pub fn take_new_failures(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.lock().new_failures)
    }

    pub fn config(&self) -> &Config {
        &self.shared.config
    }
}

impl Drop for Debuginfod {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_all();
    }
}

impl State {
    /// Keeps `message` for [`Debuginfod::take_new_failures`] if its kind is new.
    fn report(&mut self, kind: String, message: String) {
        if self.reported.insert(kind) {
            self.new_failures.push(message);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere leaves the state consistent (every update is one step).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One fetch thread: takes queued build ids until the client is dropped.
    fn fetch_loop(&self) {
        loop {
            let build_id = {
                let mut state = self.lock();
                loop {
                    if state.stop {
                        return;
                    }
                    if let Some(id) = state.queue.pop_front() {
                        state.running += 1;
                        break id;
                    }
                    state = self.work.wait(state).unwrap_or_else(|e| e.into_inner());
                }
            };
            let fetched =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.fetch(&build_id)));
            let outcome = fetched.unwrap_or(Outcome::Failed);
            self.finish(build_id, outcome);
        }
    }

    fn finish(&self, build_id: Vec<u8>, outcome: Outcome) {
        // Evicting scans the directory: not under the lock lookups take.
        let cache_bytes = matches!(outcome, Outcome::Fetched(_)).then(|| self.cache.evict());
        let retry_at = Instant::now() + RETRY_AFTER;
        let mut state = self.lock();
        let counts = &mut state.counts;
        let entry = match outcome {
            Outcome::Fetched(bytes) => {
                counts.fetched += 1;
                counts.fetched_bytes += bytes;
                Entry::Done
            }
            Outcome::NotFound => {
                counts.not_found += 1;
                Entry::Failed { retry_at }
            }
            Outcome::Failed => {
                counts.failed += 1;
                Entry::Failed { retry_at }
            }
            Outcome::Refused => {
                counts.refused += 1;
                Entry::Failed { retry_at }
            }
        };
        if let Some(bytes) = cache_bytes {
            counts.cache_bytes = bytes;
            state.validated.insert(build_id.clone());
        }
        state.entries.insert(build_id, entry);
        state.running -= 1;
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.done.notify_all();
    }

    /// Asks each server in turn. The worst of the misses is the outcome: a refused download
    /// over a failure over "not found".
    fn fetch(&self, build_id: &[u8]) -> Outcome {
        let mut outcome = Outcome::NotFound;
        for url in &self.config.urls {
            match self.fetch_from(url, build_id) {
                Outcome::Fetched(bytes) => return Outcome::Fetched(bytes),
                miss => outcome = outcome.max(miss),
            }
        }
        outcome
    }

    /// One server: downloads into a temporary file, validates it and installs it.
    fn fetch_from(&self, url: &Url, build_id: &[u8]) -> Outcome {
        let hex = cache::hex(build_id);
        let mut temp = match self.cache.create_temp(build_id) {
            Ok(temp) => temp,
            Err(e) => {
                let dir = self.cache.dir().display();
                self.report("cache-write".into(), format!("debuginfod cache {dir}: {e}"));
                return Outcome::Failed;
            }
        };
        let limits = Limits {
            timeout: self.config.fetch_timeout,
            connect_timeout: self.config.fetch_timeout.min(MAX_CONNECT_TIMEOUT),
            max_body: self.config.cache_max_bytes,
            tls: None,
        };
        let target = url.join(&format!("/buildid/{hex}/debuginfo"));
        let refused = |why: String| {
            let message = format!("debuginfod {url}: refused the debug file of {hex}: {why}");
            self.report(format!("{url} refused"), message);
            Outcome::Refused
        };
        match http::get(&target, &limits, &mut temp.file) {
            Ok(_) => match self.cache.install(temp, build_id) {
                Ok(bytes) => Outcome::Fetched(bytes),
                Err(InstallError::Refused(why)) => refused(why),
                Err(InstallError::Io(e)) => {
                    let dir = self.cache.dir().display();
                    self.report("cache-write".into(), format!("debuginfod cache {dir}: {e}"));
                    Outcome::Failed
                }
            },
            Err(HttpError::NotFound) => Outcome::NotFound,
            Err(HttpError::TooLarge(bound)) => {
                refused(format!("larger than the bound of {bound} bytes"))
            }
            Err(HttpError::Failed { kind, detail }) => {
                self.report(
                    format!("{url} {kind}"),
                    format!("debuginfod {url}: {detail}"),
                );
                Outcome::Failed
            }
        }
    }

    fn report(&self, kind: String, message: String) {
        self.lock().report(kind, message);
    }
}
