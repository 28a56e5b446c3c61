//! The machine's CPU times from `/proc/stat`, read at the start and the end of a recording: the
//! steal time between them is what the hypervisor took from this VM's vCPUs. A spinning waiter
//! whose vCPU (or whose lock holder's vCPU) is preempted waits until the host runs it again.

/// Steal and total time in clock ticks (`USER_HZ`), of the machine and of each CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub all: Ticks,
    pub per_cpu: Vec<Ticks>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ticks {
    pub steal: u64,
    /// Every field of the line added: user, nice, system, idle, iowait, irq, softirq, steal
    /// (guest time is already inside user and nice).
    pub total: u64,
}

/// The steal of a recording, in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Steal {
    pub steal_ns: u64,
    pub total_ns: u64,
    pub cpus: u32,
    /// The CPU that lost the most: its steal and its total time.
    pub max_cpu_steal_ns: u64,
    pub max_cpu_total_ns: u64,
}

impl CpuTimes {
    /// `/proc/stat` now; `None` where it cannot be read.
    pub fn read() -> Option<Self> {
        Self::parse(&crate::procfs::stat()?)
    }

    pub(crate) fn parse(stat: &str) -> Option<Self> {
        let mut times = CpuTimes::default();
        let mut seen_all = false;
        for line in stat.lines() {
            let mut fields = line.split_ascii_whitespace();
            let Some(name) = fields.next().filter(|n| n.starts_with("cpu")) else {
                continue;
            };
            let values: Vec<u64> = fields.take(8).map_while(|v| v.parse().ok()).collect();
            let ticks = Ticks {
                steal: values.get(7).copied().unwrap_or(0),
                total: values.iter().sum(),
            };
            if name == "cpu" {
                times.all = ticks;
                seen_all = true;
            } else {
                times.per_cpu.push(ticks);
            }
        }
        seen_all.then_some(times)
    }

    /// What happened from `earlier` to `self`, in ns (`tick_ns` per tick). CPUs are matched by
    /// position: `/proc/stat` lists the online ones, so one taken offline between the two
    /// reads shifts the rest, and then the per-CPU maximum is left out.
    pub fn since(&self, earlier: &CpuTimes, tick_ns: u64) -> Steal {
        let ns = |later: u64, before: u64| later.saturating_sub(before).saturating_mul(tick_ns);
        let mut steal = Steal {
            steal_ns: ns(self.all.steal, earlier.all.steal),
            total_ns: ns(self.all.total, earlier.all.total),
            cpus: self.per_cpu.len() as u32,
            ..Steal::default()
        };
        if self.per_cpu.len() == earlier.per_cpu.len() {
            for (now, then) in self.per_cpu.iter().zip(&earlier.per_cpu) {
                let cpu_steal = ns(now.steal, then.steal);
                if cpu_steal > steal.max_cpu_steal_ns || steal.max_cpu_total_ns == 0 {
                    steal.max_cpu_steal_ns = cpu_steal;
                    steal.max_cpu_total_ns = ns(now.total, then.total);
                }
            }
        }
        steal
    }
}

/// The machine's CPU times at both ends of a span (a snapshot's: from attach, or from the
/// earlier snapshot of a delta, to the moment it was taken).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Span {
    pub start: CpuTimes,
    pub end: CpuTimes,
}

impl Span {
    /// The steal over the span, in ns.
    pub(crate) fn steal(&self) -> Steal {
        self.end.since(&self.start, tick_ns())
    }

    /// From the end of `earlier` to the end of `self` (spans of one profiler, both from
    /// attach or `earlier` before `self`).
    pub(crate) fn after(&self, earlier: &Span) -> Span {
        Span {
            start: earlier.end.clone(),
            end: self.end.clone(),
        }
    }
}

/// The length of a `/proc/stat` tick in ns (`USER_HZ`, nearly always 100 a second).
pub fn tick_ns() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        1_000_000_000 / hz as u64
    } else {
        10_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_between_two_reads() {
        let before = CpuTimes::parse(
            "cpu  100 0 50 800 0 0 0 50 0 0\ncpu0 50 0 25 400 0 0 0 10 0 0\n\
             cpu1 50 0 25 400 0 0 0 40 0 0\nintr 1 2 3\n",
        )
        .unwrap();
        let after = CpuTimes::parse(
            "cpu  200 0 60 900 0 0 0 90 0 0\ncpu0 90 0 30 460 0 0 0 20 0 0\n\
             cpu1 110 0 30 440 0 0 0 70 0 0\n",
        )
        .unwrap();
        let s = after.since(&before, 10_000_000);
        assert_eq!(s.steal_ns, 40 * 10_000_000);
        assert_eq!(s.total_ns, (1250 - 1000) * 10_000_000);
        assert_eq!(s.cpus, 2);
        assert_eq!(s.max_cpu_steal_ns, 30 * 10_000_000, "cpu1 lost the most");
        assert_eq!(s.max_cpu_total_ns, (1250 - 1000 - 115) * 10_000_000);
        assert_eq!(CpuTimes::parse("intr 1\n"), None);
        let attach = Span {
            start: before.clone(),
            end: before.clone(),
        };
        let now = Span {
            start: before.clone(),
            end: after.clone(),
        };
        assert_eq!(now.after(&attach), now, "from attach: the whole span");
        assert_eq!(
            now.after(&now).steal().steal_ns,
            0,
            "an empty span steals nothing"
        );
    }

    #[test]
    fn this_machine() {
        let t = CpuTimes::read().expect("/proc/stat");
        assert!(t.all.total > 0 && !t.per_cpu.is_empty());
        assert!(tick_ns() > 0);
    }
}
