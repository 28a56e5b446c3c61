//! Debian's headless Chromium driven over the DevTools protocol, for what a dumped DOM cannot
//! show: a drag, a key pressed. A minimal WebSocket client (RFC 6455: masked text frames out,
//! unmasked frames in, continuations joined) on the page's debugging socket; the browser and
//! its profile directory go when it is dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";

pub struct Browser {
    child: Child,
    socket: TcpStream,
    next_id: u64,
    _profile: PathBuf,
}

impl Browser {
    /// Chromium on `url`, with a window of 1280×1000, once its page can be driven.
    pub fn open(url: &str, profile: PathBuf) -> Browser {
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .args(["--remote-debugging-port=0", "--window-size=1280,1000"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {CHROMIUM}: {e}"));
        let port = wait_for(|| {
            let text = std::fs::read_to_string(profile.join("DevToolsActivePort")).ok()?;
            text.lines().next()?.parse::<u16>().ok()
        });
        // The page's own socket, from the list of targets.
        let path = wait_for(|| {
            let list: Value = serde_json::from_str(&http_get(port, "/json/list")?).ok()?;
            let page = list.as_array()?.iter().find(|t| t["type"] == "page")?;
            let ws = page["webSocketDebuggerUrl"].as_str()?;
            Some(ws.split_once(&format!(":{port}"))?.1.to_string())
        });
        let mut socket = TcpStream::connect(("127.0.0.1", port)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            socket,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: ZmRwcm9mLXRlc3Qta2V5IQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        Browser {
            child,
            socket,
            next_id: 1,
            _profile: profile,
        }
    }

    /// Sends `method` with `params` and waits for its answer's `result`.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"id": id, "method": method, "params": params}).to_string();
        self.send(message.as_bytes());
        loop {
            let answer: Value = serde_json::from_slice(&self.receive()).unwrap();
            if answer["id"] == id {
                assert!(answer["error"].is_null(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// The value of the JavaScript `expression` in the page (promises awaited).
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r["exceptionDetails"].is_null(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is true (an exception, as before the script has run,
    /// counts as not yet).
    pub fn wait_until(&mut self, expression: &str) {
        let started = Instant::now();
        loop {
            let r = self.call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            );
            if r["exceptionDetails"].is_null() && r["result"]["value"] == Value::Bool(true) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "never true: {expression}: {r}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A left-button mouse event (`mousePressed`, `mouseMoved`, `mouseReleased`) at `(x, y)`;
    /// `modifiers` 8 is shift.
    pub fn mouse(&mut self, kind: &str, x: f64, y: f64, modifiers: u32) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": kind, "x": x, "y": y, "button": "left", "buttons": 1,
                   "clickCount": 1, "modifiers": modifiers}),
        );
    }

    /// A key pressed and let go: `key` as the DOM names it, its Windows key code.
    pub fn key(&mut self, key: &str, code: u32, modifiers: u32) {
        for kind in ["rawKeyDown", "keyUp"] {
            self.call(
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": key, "windowsVirtualKeyCode": code,
                       "modifiers": modifiers}),
            );
        }
    }

    fn send(&mut self, payload: &[u8]) {
        let mask = [0x5a, 0x17, 0xc3, 0x81];
        let mut frame = vec![0x81u8];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xffff => {
                frame.push(0x80 | 126);
                frame.extend((n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend((n as u64).to_be_bytes());
            }
        }
        frame.extend(mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.socket.write_all(&frame).unwrap();
    }

    /// The next whole message (its fragments joined).
    fn receive(&mut self) -> Vec<u8> {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.socket.read_exact(&mut head).unwrap();
            let len = match head[1] & 0x7f {
                126 => {
                    let mut n = [0u8; 2];
                    self.socket.read_exact(&mut n).unwrap();
                    u16::from_be_bytes(n) as usize
                }
                127 => {
                    let mut n = [0u8; 8];
                    self.socket.read_exact(&mut n).unwrap();
                    u64::from_be_bytes(n) as usize
                }
                n => n as usize,
            };
            assert!(len < 64 << 20, "a frame of {len} bytes");
            let mut payload = vec![0u8; len];
            self.socket.read_exact(&mut payload).unwrap();
            match head[0] & 0x0f {
                // Ping: answered by nobody here; Chromium does not send them to its clients.
                0x9 | 0xa => continue,
                _ => message.extend(payload),
            }
            if head[0] & 0x80 != 0 {
                return message;
            }
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "Chromium's debugging port never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A plain GET on Chromium's debugging port: the body, read to its Content-Length (the port
/// keeps the connection open whatever the request asks).
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).ok()?;
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))?
        .trim()
        .parse()
        .ok()?;
    let mut body = vec![0u8; len.min(1 << 20)];
    s.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}
