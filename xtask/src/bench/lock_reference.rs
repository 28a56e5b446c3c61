//! The least a lock-wait measurement can do, as a reference for fdprof's: at
//! `contention_begin` the clock and one per-CPU array store, at `contention_end` the clock, one
//! per-CPU array lookup and one add per lock address. Hand-assembled and attached with raw
//! `bpf(2)` like the floor's empty programs. It measures every spinning wait on the machine;
//! during the bench's workload the target's `file_lock` is the lock with by far the most waits.

use anyhow::{Context, Result, bail};

use super::bpf::{attach_raw_tracepoint, bpf, load_raw_tracepoint, prog_info};

const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_LOOKUP_ELEM: i64 = 1;
const BPF_MAP_GET_NEXT_KEY: i64 = 4;
const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;

const MAP_LOOKUP: i32 = 1;
const MAP_UPDATE: i32 = 2;
const KTIME_GET_NS: i32 = 5;
const GET_CURRENT_PID_TGID: i32 = 14;
const GET_CURRENT_TASK: i32 = 35;
const PROBE_READ_KERNEL: i32 = 113;
/// `contention_begin` flag of a spinning waiter.
const LCB_F_SPIN: i32 = 1;
/// Locks the reference keeps apart.
const LOCKS: u32 = 4096;

/// One instruction: opcode, dst, src, offset, immediate.
fn insn(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut i = [0u8; 8];
    i[0] = op;
    i[1] = dst | src << 4;
    i[2..4].copy_from_slice(&off.to_le_bytes());
    i[4..8].copy_from_slice(&imm.to_le_bytes());
    i
}

const MOV_IMM: u8 = 0xb7;
const MOV_REG: u8 = 0xbf;
const ADD_IMM: u8 = 0x07;
const ADD_REG: u8 = 0x0f;
const SUB_REG: u8 = 0x1f;
const AND_IMM: u8 = 0x57;
const LDX_DW: u8 = 0x79;
const STX_DW: u8 = 0x7b;
const ST_W: u8 = 0x62;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const JEQ_IMM: u8 = 0x15;
const JNE_REG: u8 = 0x5d;
const JA: u8 = 0x05;

/// `dst = map` (a two-slot `ld_imm64` of the map's fd).
fn ld_map(dst: u8, fd: i32) -> [[u8; 8]; 2] {
    [insn(0x18, dst, 1, 0, fd), insn(0, 0, 0, 0, 0)]
}

/// Instructions with `goto` targets given as labels, resolved on `finish`.
struct Program {
    code: Vec<[u8; 8]>,
    /// (instruction index, label) of each jump.
    jumps: Vec<(usize, &'static str)>,
    labels: Vec<(&'static str, usize)>,
}

impl Program {
    fn new() -> Self {
        Self {
            code: Vec::new(),
            jumps: Vec::new(),
            labels: Vec::new(),
        }
    }
    fn op(&mut self, i: [u8; 8]) -> &mut Self {
        self.code.push(i);
        self
    }
    fn ld_map(&mut self, dst: u8, fd: i32) -> &mut Self {
        self.code.extend(ld_map(dst, fd));
        self
    }
    fn jump(&mut self, i: [u8; 8], label: &'static str) -> &mut Self {
        self.jumps.push((self.code.len(), label));
        self.code.push(i);
        self
    }
    /// `r6 = ctx; r7 = now`: the clock before anything else.
    fn clock_first(&mut self) -> &mut Self {
        self.op(insn(MOV_REG, 6, 1, 0, 0))
            .op(insn(CALL, 0, 0, 0, KTIME_GET_NS))
            .op(insn(MOV_REG, 7, 0, 0, 0))
    }
    /// `r0 = lookup(map, r10 + key)`.
    fn lookup(&mut self, map: i32, key: i32) -> &mut Self {
        self.ld_map(1, map)
            .op(insn(MOV_REG, 2, 10, 0, 0))
            .op(insn(ADD_IMM, 2, 0, 0, key))
            .op(insn(CALL, 0, 0, 0, MAP_LOOKUP))
    }
    fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.push((name, self.code.len()));
        self
    }
    fn finish(mut self) -> Vec<u8> {
        for (at, label) in &self.jumps {
            let target = self
                .labels
                .iter()
                .find(|(n, _)| n == label)
                .expect("label")
                .1;
            let off = (target as i64 - *at as i64 - 1) as i16;
            self.code[*at][2..4].copy_from_slice(&off.to_le_bytes());
        }
        self.code.concat()
    }
}

fn create_map(kind: u32, key: u32, value: u32, entries: u32) -> Result<i32> {
    let mut attr = [0u8; 128];
    for (i, v) in [kind, key, value, entries].iter().enumerate() {
        attr[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    bpf(BPF_MAP_CREATE, &mut attr).context("cannot create the reference's map")
}

/// What the reference's `contention_begin` does after its clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reference {
    /// One per-CPU array store: the least a wait measurement can do.
    Timestamps,
    /// Also the helper calls that find who waits and where, as fdprof's begin must to key a
    /// wait by task and call site: the current task's ids, the task, and a 40-byte read of
    /// kernel memory (fdprof reads the saved user registers).
    WithSite,
}

/// Registers the programs below use.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R6: u8 = 6;
const R7: u8 = 7;
const R8: u8 = 8;
const R10: u8 = 10;

/// `contention_begin`: now first (then, with the site, its helper calls); then, for a spinning
/// waiter, START = {lock, now}.
fn begin_program(kind: Reference, start: i32) -> Program {
    let mut begin = Program::new();
    begin.clock_first();
    if kind == Reference::WithSite {
        begin
            .op(insn(CALL, 0, 0, 0, GET_CURRENT_PID_TGID))
            .op(insn(CALL, 0, 0, 0, GET_CURRENT_TASK))
            .op(insn(MOV_REG, R3, R0, 0, 0))
            .op(insn(MOV_REG, R1, R10, 0, 0))
            .op(insn(ADD_IMM, R1, 0, 0, -64))
            .op(insn(MOV_IMM, R2, 0, 0, 40))
            .op(insn(CALL, 0, 0, 0, PROBE_READ_KERNEL));
    }
    begin
        .op(insn(LDX_DW, R1, R6, 8, 0))
        .op(insn(AND_IMM, R1, 0, 0, LCB_F_SPIN))
        .jump(insn(JEQ_IMM, R1, 0, 0, 0), "out")
        .op(insn(ST_W, R10, 0, -4, 0))
        .lookup(start, -4)
        .jump(insn(JEQ_IMM, R0, 0, 0, 0), "out")
        .op(insn(LDX_DW, R1, R6, 0, 0))
        .op(insn(STX_DW, R0, R1, 0, 0))
        .op(insn(STX_DW, R0, R7, 8, 0))
        .label("out")
        .op(insn(MOV_IMM, R0, 0, 0, 0))
        .op(insn(EXIT, 0, 0, 0, 0));
    begin
}

/// `contention_end`: now first; if START holds this lock, add now - start to WAITS[lock].
fn end_program(start: i32, waits: i32) -> Program {
    let mut end = Program::new();
    end.clock_first()
        .op(insn(ST_W, R10, 0, -4, 0))
        .lookup(start, -4)
        .jump(insn(JEQ_IMM, R0, 0, 0, 0), "out")
        .op(insn(MOV_REG, R8, R0, 0, 0))
        .op(insn(LDX_DW, R1, R6, 0, 0))
        .op(insn(LDX_DW, R2, R8, 0, 0))
        .jump(insn(JNE_REG, R1, R2, 0, 0), "out")
        .op(insn(LDX_DW, R3, R8, 8, 0))
        .op(insn(SUB_REG, R7, R3, 0, 0))
        .op(insn(MOV_IMM, R3, 0, 0, 0))
        .op(insn(STX_DW, R8, R3, 0, 0))
        .op(insn(STX_DW, R10, R1, -16, 0))
        .lookup(waits, -16)
        .jump(insn(JEQ_IMM, R0, 0, 0, 0), "insert")
        .op(insn(LDX_DW, R1, R0, 0, 0))
        .op(insn(ADD_IMM, R1, 0, 0, 1))
        .op(insn(STX_DW, R0, R1, 0, 0))
        .op(insn(LDX_DW, R1, R0, 8, 0))
        .op(insn(ADD_REG, R1, R7, 0, 0))
        .op(insn(STX_DW, R0, R1, 8, 0))
        .jump(insn(JA, 0, 0, 0, 0), "out")
        .label("insert")
        .op(insn(MOV_IMM, R1, 0, 0, 1))
        .op(insn(STX_DW, R10, R1, -32, 0))
        .op(insn(STX_DW, R10, R7, -24, 0))
        .ld_map(R1, waits)
        .op(insn(MOV_REG, R2, R10, 0, 0))
        .op(insn(ADD_IMM, R2, 0, 0, -16))
        .op(insn(MOV_REG, R3, R10, 0, 0))
        .op(insn(ADD_IMM, R3, 0, 0, -32))
        .op(insn(MOV_IMM, R4, 0, 0, 0))
        .op(insn(CALL, 0, 0, 0, MAP_UPDATE))
        .label("out")
        .op(insn(MOV_IMM, R0, 0, 0, 0))
        .op(insn(EXIT, 0, 0, 0, 0));
    end
}

/// The reference programs, attached while this lives (dropping it closes every fd).
pub(crate) struct LockReference {
    fds: Vec<i32>,
    waits: i32,
    /// The begin and end programs.
    programs: [i32; 2],
}

/// The waits on one lock the reference measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockWaits {
    pub count: u64,
    pub total_ns: u64,
}

impl LockReference {
    pub(crate) fn attach(kind: Reference) -> Result<Self> {
        let start = create_map(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 16, 1)?;
        let mut this = Self {
            fds: vec![start],
            waits: -1,
            programs: [-1; 2],
        };
        let waits = create_map(BPF_MAP_TYPE_PERCPU_HASH, 8, 16, LOCKS)?;
        this.fds.push(waits);
        this.waits = waits;
        // The end goes in first, so no begin is left without its end.
        for (code, name, hook, slot) in [
            (
                end_program(start, waits).finish(),
                &b"fdprof_ref_end"[..],
                "contention_end",
                1,
            ),
            (
                begin_program(kind, start).finish(),
                &b"fdprof_ref_beg"[..],
                "contention_begin",
                0,
            ),
        ] {
            let prog =
                load_raw_tracepoint(&code, name).context("cannot load the reference program")?;
            this.fds.push(prog);
            this.programs[slot] = prog;
            let hook = std::ffi::CString::new(hook)?;
            let link = attach_raw_tracepoint(&hook, prog)
                .with_context(|| format!("cannot attach the reference to {hook:?}"))?;
            this.fds.push(link);
        }
        Ok(this)
    }

    /// The lock with the most waits and its waits, summed over CPUs.
    pub(crate) fn busiest(&self) -> Result<Option<LockWaits>> {
        let cpus = possible_cpus()?;
        let mut best: Option<LockWaits> = None;
        let mut key = 0u64;
        let mut first = true;
        loop {
            let mut next = 0u64;
            let mut attr = [0u8; 128];
            attr[0..4].copy_from_slice(&(self.waits as u32).to_ne_bytes());
            let key_ptr = if first { 0 } else { &key as *const u64 as u64 };
            attr[8..16].copy_from_slice(&key_ptr.to_ne_bytes());
            attr[16..24].copy_from_slice(&(&mut next as *mut u64 as u64).to_ne_bytes());
            if bpf(BPF_MAP_GET_NEXT_KEY, &mut attr).is_err() {
                break;
            }
            first = false;
            key = next;
            let mut values = vec![0u64; 2 * cpus];
            let mut attr = [0u8; 128];
            attr[0..4].copy_from_slice(&(self.waits as u32).to_ne_bytes());
            attr[8..16].copy_from_slice(&(&key as *const u64 as u64).to_ne_bytes());
            attr[16..24].copy_from_slice(&(values.as_mut_ptr() as u64).to_ne_bytes());
            if bpf(BPF_MAP_LOOKUP_ELEM, &mut attr).is_err() {
                continue;
            }
            let w = LockWaits {
                count: values.chunks(2).map(|v| v[0]).sum(),
                total_ns: values.chunks(2).map(|v| v[1]).sum(),
            };
            if best.is_none_or(|b| w.count > b.count) {
                best = Some(w);
            }
        }
        Ok(best)
    }
}

impl LockReference {
    /// The begin and end programs' mean run time, ns a run, over the time run-time statistics
    /// were on ([`super::bpf::StatsWindow`]); `None` for a program that did not run then.
    pub(crate) fn run_times(&self) -> Result<[Option<f64>; 2]> {
        let mut out = [None; 2];
        for (slot, &prog) in self.programs.iter().enumerate() {
            let info = prog_info(prog).context("cannot read the reference program's statistics")?;
            let (time, runs) = (info.run_time_ns, info.run_cnt);
            out[slot] = (runs > 0).then(|| time as f64 / runs as f64);
        }
        Ok(out)
    }
}

/// `/sys/devices/system/cpu/possible`: per-CPU maps hold a value for each.
fn possible_cpus() -> Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut n = 0;
    for range in text.trim().split(',') {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let (a, b): (usize, usize) = (a.parse()?, b.parse()?);
        if b < a {
            bail!("cannot read /sys/devices/system/cpu/possible: {text:?}");
        }
        n = n.max(b + 1);
    }
    Ok(n)
}

impl Drop for LockReference {
    fn drop(&mut self) {
        for &fd in self.fds.iter().rev() {
            // SAFETY: fds the kernel gave us, closed once.
            unsafe { libc::close(fd) };
        }
    }
}
