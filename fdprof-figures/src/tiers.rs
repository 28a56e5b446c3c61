//! When the fd syscalls were traced, in a recording of the daemon at rest (`--tier rest`):
//! its fd syscall, scan and table figures cover only these windows of full tracing, while its
//! lock waits cover the whole recording.

use serde::{Deserialize, Serialize};

/// The windows of full tracing within a recording, in time order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FullTracing {
    /// Time the fd syscalls were traced, of the recording's `duration_ns`.
    pub traced_ns: u64,
    /// Each window, as far as it falls within the recording; windows that touch are one.
    /// At most [`FullTracing::WINDOWS`] (a file that holds more is refused as it is read).
    #[serde(deserialize_with = "bounded_windows")]
    pub windows: Vec<TracedWindow>,
}

/// One window of full tracing, Unix time in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedWindow {
    pub from_unix_ms: u64,
    pub to_unix_ms: u64,
}

impl FullTracing {
    /// The most windows a recording keeps: past it, the earliest two are joined (their time
    /// traced still adds up in `traced_ns`).
    pub const WINDOWS: usize = 1024;

    /// Adds the windows of a span that follows this one in time.
    pub fn add_later(&mut self, later: &FullTracing) {
        self.traced_ns = self.traced_ns.saturating_add(later.traced_ns);
        for &w in &later.windows {
            match self.windows.last_mut() {
                Some(last) if w.from_unix_ms <= last.to_unix_ms => {
                    last.to_unix_ms = last.to_unix_ms.max(w.to_unix_ms);
                }
                _ => self.windows.push(w),
            }
        }
        while self.windows.len() > Self::WINDOWS {
            let first = self.windows.remove(0);
            self.windows[0].from_unix_ms = first.from_unix_ms;
        }
    }

    /// A span traced throughout: one window over all of it (none when it is empty).
    pub fn throughout(started_unix_ms: u64, duration_ns: u64) -> FullTracing {
        FullTracing {
            traced_ns: duration_ns,
            windows: (duration_ns > 0)
                .then_some(TracedWindow {
                    from_unix_ms: started_unix_ms,
                    to_unix_ms: started_unix_ms + duration_ns / 1_000_000,
                })
                .into_iter()
                .collect(),
        }
    }
}

/// Reads at most [`FullTracing::WINDOWS`] windows, failing at the first past it.
fn bounded_windows<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<TracedWindow>, D::Error> {
    struct Windows;
    impl<'de> serde::de::Visitor<'de> for Windows {
        type Value = Vec<TracedWindow>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(
                f,
                "at most {} windows of full tracing",
                FullTracing::WINDOWS
            )
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut windows = Vec::new();
            while let Some(w) = seq.next_element()? {
                if windows.len() == FullTracing::WINDOWS {
                    return Err(serde::de::Error::custom(format!(
                        "more than {} windows of full tracing",
                        FullTracing::WINDOWS
                    )));
                }
                windows.push(w);
            }
            Ok(windows)
        }
    }
    d.deserialize_seq(Windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(from: u64, to: u64) -> TracedWindow {
        TracedWindow {
            from_unix_ms: from,
            to_unix_ms: to,
        }
    }

    #[test]
    fn windows_that_touch_are_one_and_time_adds_up() {
        let mut a = FullTracing {
            traced_ns: 500_000_000,
            windows: vec![w(1000, 1500)],
        };
        a.add_later(&FullTracing {
            traced_ns: 1_000_000_000,
            windows: vec![w(1500, 2500)],
        });
        a.add_later(&FullTracing::default());
        a.add_later(&FullTracing {
            traced_ns: 100_000_000,
            windows: vec![w(4000, 4100)],
        });
        assert_eq!(a.traced_ns, 1_600_000_000);
        assert_eq!(a.windows, [w(1000, 2500), w(4000, 4100)]);
    }

    #[test]
    fn past_the_bound_the_earliest_join() {
        let mut a = FullTracing::default();
        for i in 0..FullTracing::WINDOWS as u64 + 3 {
            a.add_later(&FullTracing {
                traced_ns: 1,
                windows: vec![w(i * 10, i * 10 + 5)],
            });
        }
        assert_eq!(a.windows.len(), FullTracing::WINDOWS);
        assert_eq!(a.windows[0].from_unix_ms, 0);
        assert_eq!(a.windows[0].to_unix_ms, 35);
        assert_eq!(a.traced_ns, FullTracing::WINDOWS as u64 + 3);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<FullTracing>(&json).unwrap(), a);
        a.windows.push(w(99_999, 100_000));
        let json = serde_json::to_string(&a).unwrap();
        let refused = serde_json::from_str::<FullTracing>(&json).unwrap_err();
        assert!(
            refused.to_string().contains("more than 1024 windows"),
            "{refused}"
        );
    }
}
