//! What a command `top` launched printed while the screen owned the terminal: read as it comes,
//! so the command never blocks on a full pipe, the last [`KEEP`] bytes kept, and shown, escaped,
//! once the terminal is restored.

use std::collections::VecDeque;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most of the output kept: its end, where an error message would be.
const KEEP: usize = 64 * 1024;
/// How long the end waits for output still in the pipe.
const DRAIN: Duration = Duration::from_millis(500);

#[derive(Default)]
struct Tail {
    bytes: VecDeque<u8>,
    total: u64,
    /// The pipe reached its end (every writer closed it).
    ended: bool,
}

pub(crate) struct CommandOutput {
    tail: Arc<Mutex<Tail>>,
}

impl CommandOutput {
    /// Reads `pipe` on a thread of its own. The thread is never joined: a process the command
    /// left behind may keep the pipe open past fdprof's end.
    pub(crate) fn start(pipe: OwnedFd) -> Self {
        let tail = Arc::new(Mutex::new(Tail::default()));
        let shared = tail.clone();
        std::thread::spawn(move || {
            let mut pipe = std::fs::File::from(pipe);
            let mut buf = [0u8; 8192];
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let mut tail = shared.lock().unwrap_or_else(|e| e.into_inner());
                tail.total += n as u64;
                tail.bytes.extend(&buf[..n]);
                let over = tail.bytes.len().saturating_sub(KEEP);
                tail.bytes.drain(..over);
            }
            shared.lock().unwrap_or_else(|e| e.into_inner()).ended = true;
        });
        Self { tail }
    }

    /// The text to print once the screen is gone: nothing when the command printed nothing.
    pub(crate) fn finish(self) -> Option<String> {
        let started = Instant::now();
        while !self.lock().ended && started.elapsed() < DRAIN {
            std::thread::sleep(Duration::from_millis(10));
        }
        let tail = self.lock();
        if tail.total == 0 {
            return None;
        }
        let (front, back) = tail.bytes.as_slices();
        let text = String::from_utf8_lossy(&[front, back].concat()).into_owned();
        let what = match tail.total as usize > tail.bytes.len() {
            true => format!("its last {} of {} bytes", tail.bytes.len(), tail.total),
            false => "all of it".to_string(),
        };
        let mut out = format!("fdprof: the command's output while the screen was up ({what}):\n");
        out += &fdprof_recording::escape::text(&text);
        if !out.ends_with('\n') {
            out.push('\n');
        }
        Some(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(|e| e.into_inner())
    }
}
