//! The hand-checked vectors of docs/replay.md ("Test vectors"): the fds each model returns,
//! the words it reads, the lines it touches, and how the table grows.

use fdprof_replay::model::{self, Fdt};
use fdprof_replay::{Cost, Errno, Fastalloc, Limits, Mainline, Meter, Model, Version, Viro};

const LINEAR: Version = Version::Linear;
const FB61: Version = Version::Fb61;
const FB613: Version = Version::Fb613;

fn mainline(v: Version) -> Mainline {
    Mainline::new(v, Limits::default())
}

/// Allocates fds 0..n-1 into an empty table.
fn setup<M: Model>(mut t: M, n: u64) -> M {
    let mut m = Meter::default();
    for fd in 0..n {
        assert_eq!(t.alloc(0, false, &mut m), Ok(fd));
    }
    t
}

fn alloc<M: Model>(t: &mut M, start: u64) -> (u64, Cost) {
    let mut m = Meter::default();
    let fd = t.alloc(start, false, &mut m).expect("alloc");
    (fd, m.take())
}

fn close<M: Model>(t: &mut M, fd: u64) -> Cost {
    let mut m = Meter::default();
    t.release(fd, &mut m).expect("release");
    m.take()
}

fn dup2<M: Model>(t: &mut M, fd: u64) -> Cost {
    let mut m = Meter::default();
    t.install_at(fd, false, &mut m).expect("install_at");
    m.take()
}

/// (open words, full words, level words) read.
fn reads(c: &Cost) -> (u64, u64, u64) {
    (c.o_rd, c.f_rd, c.lk_rd)
}

#[test]
fn v1_lowest_free_after_a_close() {
    fn run<M: Model>(t: M, want: (u64, u64, u64)) {
        let mut t = setup(t, 3);
        let mut got = vec![alloc(&mut t, 0), alloc(&mut t, 0)];
        close(&mut t, 3);
        got.push(alloc(&mut t, 0));
        got.push(alloc(&mut t, 0));
        let fds: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(fds, [3, 4, 3, 5]);
        for (_, c) in &got {
            assert_eq!(reads(c), want);
        }
    }
    run(mainline(LINEAR), (1, 0, 0));
    run(mainline(FB61), (1, 1, 0));
    run(mainline(FB613), (1, 0, 0));
    run(Viro::new(Limits::default()), (1, 0, 0));
}

#[test]
fn v1c_what_a_close_writes() {
    // (open words read, full words read, words written)
    fn run<M: Model>(t: M, want: (u64, u64, u64)) {
        let mut t = setup(t, 5);
        let c = close(&mut t, 3);
        assert_eq!((c.o_rd, c.f_rd, c.wr), want);
        assert_eq!(c.dirty, if want.2 == 2 { 2 } else { 1 });
    }
    run(mainline(LINEAR), (0, 0, 1));
    run(mainline(FB61), (0, 0, 2));
    run(mainline(FB613), (0, 1, 1));
    run(Viro::new(Limits::default()), (0, 0, 1));
}

#[test]
fn v2_sequential_allocs_grow_by_doubling() {
    fn run<M: Model>(mut t: M, want: (u64, u64, u64)) -> M {
        for fd in 0..2048 {
            let before = t.fdt().max_fds;
            let (got, c) = alloc(&mut t, 0);
            assert_eq!(got, fd);
            // The alloc returning 64·2^k is the one that grows the table, to twice its size.
            let grew = fd >= 64 && fd.is_power_of_two();
            assert_eq!(
                t.fdt().max_fds,
                if grew { 2 * before } else { before },
                "fd {fd}"
            );
            // The multi-level bitmap, once it has levels (max_fds > 512), also reads the next
            // word when an alloc fills its word; see viro_sequential below.
            if t.fdt().max_fds <= 512 || fd % 64 != 63 {
                assert_eq!(reads(&c), want, "fd {fd}");
            }
        }
        assert_eq!(t.expansions(), [128, 256, 512, 1024, 2048]);
        t
    }
    run(mainline(LINEAR), (1, 0, 0));
    run(mainline(FB61), (1, 1, 0));
    run(mainline(FB613), (1, 0, 0));
    run(Viro::new(Limits::default()), (1, 0, 0));
}

#[test]
fn v2_viro_sequential_word_fills() {
    let mut t = setup(Viro::new(Limits::default()), 1000);
    // fd 1023 is the last bit of chunk 1 and of the 1024-fd table.
    let mut got = Vec::new();
    for _ in 1000..1100 {
        got.push(alloc(&mut t, 0));
    }
    let at = |fd: u64| got[(fd - 1000) as usize].1.o_rd;
    assert_eq!(at(1000), 1);
    assert_eq!(
        at(1023),
        9,
        "fills chunk 1: the hit, then the chunk's 8 words to set level 1"
    );
    assert_eq!(at(1087), 2, "fills its word: the hit, then the next word");
    assert_eq!(t.expansions(), [128, 256, 512, 1024, 2048]);
}

#[test]
fn v3_close_low_then_scan_to_the_top() {
    // Per alloc: (fd, (O, F, levels), lines)
    fn run<M: Model>(t: M, want: [(u64, (u64, u64, u64), u64); 2]) {
        let mut t = setup(t, 1000);
        close(&mut t, 3);
        let a = alloc(&mut t, 0);
        let b = alloc(&mut t, 0);
        assert_eq!((a.0, reads(&a.1)), (want[0].0, want[0].1));
        assert_eq!((b.0, reads(&b.1), b.1.lines), want[1]);
        assert_eq!(t.fdt().next_fd, 1001);
    }
    run(mainline(LINEAR), [(3, (1, 0, 0), 1), (1000, (16, 0, 0), 2)]);
    run(mainline(FB61), [(3, (1, 1, 0), 2), (1000, (1, 1, 0), 2)]);
    run(mainline(FB613), [(3, (1, 0, 0), 1), (1000, (2, 1, 0), 3)]);
    run(
        Viro::new(Limits::default()),
        [(3, (16, 0, 0), 1), (1000, (16, 0, 1), 3)],
    );
}

#[test]
fn v4_three_holes_in_8192() {
    fn run<M: Model>(t: M, want: [(u64, u64, u64); 3], lines_last: Option<u64>) {
        let mut t = setup(t, 8192);
        assert_eq!(t.fdt().max_fds, 8192);
        let mut got = Vec::new();
        for hole in [5000, 100, 7000] {
            close(&mut t, hole);
            let (fd, c) = alloc(&mut t, 0);
            assert_eq!(fd, hole);
            got.push(c);
        }
        let r: Vec<_> = got.iter().map(reads).collect();
        assert_eq!(r, want);
        if let Some(l) = lines_last {
            assert_eq!(got[2].lines, l);
        }
    }
    run(
        mainline(LINEAR),
        [(1, 0, 0), (1, 0, 0), (109, 0, 0)],
        Some(14),
    );
    run(mainline(FB61), [(1, 1, 0), (1, 1, 0), (1, 2, 0)], None);
    run(mainline(FB613), [(1, 0, 0), (1, 0, 0), (2, 2, 0)], None);
    run(
        Viro::new(Limits::default()),
        [(10, 0, 0), (15, 0, 0), (23, 0, 1)],
        None,
    );
}

#[test]
fn v5_start_above_next_fd_keeps_next_fd() {
    fn run<M: Model>(t: M, f: u64) {
        let mut t = setup(t, 200);
        close(&mut t, 10);
        close(&mut t, 70);
        let a = alloc(&mut t, 64);
        assert_eq!(a.0, 70);
        assert_eq!(t.fdt().next_fd, 10);
        let b = alloc(&mut t, 0);
        assert_eq!(b.0, 10);
        assert_eq!([reads(&a.1), reads(&b.1)], [(1, f, 0), (1, f, 0)]);
    }
    run(mainline(LINEAR), 0);
    run(mainline(FB61), 1);
    run(mainline(FB613), 0);
    run(Viro::new(Limits::default()), 0);
}

/// Linus' loop, K times: close(3); dup2(0, 3); dup(0). Alloc totals and lines.
fn linus<M: Model>(t: M, k: u64) -> (M, Cost) {
    let mut t = setup(t, 3);
    let mut total = Cost::default();
    for i in 1..=k {
        if i > 1 {
            close(&mut t, 3);
        }
        dup2(&mut t, 3);
        let (fd, c) = alloc(&mut t, 0);
        assert_eq!(fd, 3 + i);
        total.add(&c);
    }
    (t, total)
}

#[test]
fn v6_linus_loop_k100() {
    fn run<M: Model>(t: M, want: (u64, u64, u64), lines: u64) {
        let (t, c) = linus(t, 100);
        assert_eq!(t.fdt().max_fds, 128);
        assert_eq!((reads(&c), c.lines), (want, lines));
    }
    run(mainline(LINEAR), (141, 0, 0), 100);
    run(mainline(FB61), (100, 101, 0), 200);
    // One line more than the hand count: the alloc returning 63 fills word 0 and so writes
    // the full-words bitmap, whose line the fast path had not read.
    run(mainline(FB613), (141, 41, 0), 141);
    run(Viro::new(Limits::default()), (141, 0, 0), 100);
}

#[test]
fn v6_linus_loop_k2000() {
    fn run<M: Model>(t: M, want: (u64, u64, u64), lines: u64) {
        let (t, c) = linus(t, 2000);
        assert_eq!(t.fdt().max_fds, 2048);
        assert_eq!(t.expansions(), [128, 256, 512, 1024, 2048]);
        assert_eq!((reads(&c), c.lines), (want, lines));
    }
    run(mainline(LINEAR), (32_411, 0, 0), 4_940);
    run(mainline(FB61), (2_000, 2_005, 0), 4_000);
    run(mainline(FB613), (3_945, 1_945, 0), 5_433); // + the line of fd 63's full-bit write
    run(Viro::new(Limits::default()), (20_856, 0, 1_493), 4_984);
}

#[test]
fn v6_the_extra_fb613_line_is_the_full_bit_set_by_fd_63() {
    let mut t = setup(mainline(FB613), 3);
    for i in 1..=60 {
        if i > 1 {
            close(&mut t, 3);
        }
        dup2(&mut t, 3);
        let (fd, c) = alloc(&mut t, 0);
        let fills = fd == 63;
        assert_eq!(
            (reads(&c), c.lines, c.dirty),
            ((1, 0, 0), 1 + u64::from(fills), 1 + u64::from(fills))
        );
    }
}

/// fds 0..2^27-2 open (the last one free), then close(0); dup2(1, 0).
fn huge<M: Model>(template: M) -> M {
    let words = 1usize << 21;
    let mut open = vec![!0u64; words];
    open[words - 1] = !0 >> 1;
    let fdt =
        Fdt::from_bits(&open, &[], (1 << 27) - 1, 1 << 27, template.limits()).expect("snapshot");
    let mut t = template.with_fdt(fdt);
    close(&mut t, 0);
    dup2(&mut t, 0);
    t
}

fn big_limits() -> Limits {
    Limits::new(1 << 28, 1 << 28)
}

#[test]
fn v7_one_free_fd_at_the_top_of_2_27() {
    let last = (1 << 27) - 1;
    let mut t = huge(Mainline::new(LINEAR, big_limits()));
    let (fd, c) = alloc(&mut t, 0);
    assert_eq!((fd, c.o_rd, c.lines), (last, 2_097_152, 262_144));
    // The full-words bitmap: 32,768 words in 4,096 lines, then the open word (one more line).
    let mut t = huge(Mainline::new(FB61, big_limits()));
    let (fd, c) = alloc(&mut t, 0);
    assert_eq!((fd, reads(&c), c.lines), (last, (1, 32_768, 0), 4_097));
    let mut t = huge(Mainline::new(FB613, big_limits()));
    let (fd, c) = alloc(&mut t, 0);
    assert_eq!((fd, reads(&c), c.lines), (last, (2, 32_768, 0), 4_098));
    // Levels 0/1/2 read 24/24/8 words: two chunks of each of the lower levels, one of the top.
    let mut t = huge(Viro::new(big_limits()));
    assert_eq!(t.levels(), 2);
    let (fd, c) = alloc(&mut t, 0);
    assert_eq!((fd, reads(&c), c.lines), (last, (24, 0, 32), 5));
}

#[test]
fn v8_fork_scans_down_to_the_last_open_fd() {
    fn run<M: Model>(t: M) {
        let mut t = setup(t, 3);
        dup2(&mut t, 10_000_000);
        assert_eq!(t.fdt().max_fds, 16_777_216);
        close(&mut t, 10_000_000);
        let mut m = Meter::default();
        let child = model::fork(&t, &mut m);
        assert_eq!(m.take().o_rd, 262_144);
        assert_eq!((child.fdt().max_fds, child.fdt().next_fd), (64, 0));
        assert!((0..3).all(|fd| child.fdt().is_open(fd)));
        assert_eq!(t.fdt().max_fds, 16_777_216);
    }
    for v in [LINEAR, FB61, FB613] {
        run(Mainline::new(v, big_limits()));
    }
    run(Viro::new(big_limits()));
    // Within the default limits (2^20) the dup2 is refused and nothing grows: beyond the
    // rlimit EBADF, beyond nr_open EMFILE.
    let mut m = Meter::default();
    let mut t = setup(mainline(FB61), 3);
    assert_eq!(t.install_at(10_000_000, false, &mut m), Err(Errno::Ebadf));
    let mut t = setup(Mainline::new(FB61, Limits::new(1 << 30, 1 << 20)), 3);
    assert_eq!(t.install_at(10_000_000, false, &mut m), Err(Errno::Emfile));
    assert_eq!(t.fdt().max_fds, 64);
}

#[test]
fn v9_fastalloc_random_starts() {
    let mut t = setup(
        Fastalloc::new(FB61, Limits::default(), 0).scripted(vec![None; 101]),
        100,
    );
    for fd in [10, 50, 90] {
        close(&mut t, fd);
    }
    let mut got = Vec::new();
    for r in [60, 100, 20] {
        let mut m = Meter::default();
        let fd = t.alloc_from(0, r, false, &mut m).unwrap();
        got.push((fd, m.take().o_rd));
    }
    assert_eq!(t.fdt().next_fd, 10);
    let (fd, c) = alloc(&mut t, 0);
    got.push((fd, c.o_rd));
    assert_eq!(got, [(90, 2), (100, 1), (50, 1), (10, 1)]);
}

#[test]
fn v9b_fastalloc_falls_back_when_nothing_is_free_above_r() {
    let mut t = setup(
        Fastalloc::new(FB61, Limits::default(), 0).scripted(vec![None; 128]),
        128,
    );
    assert_eq!(t.fdt().max_fds, 128);
    close(&mut t, 5);
    let mut m = Meter::default();
    assert_eq!(t.alloc_from(0, 70, false, &mut m), Ok(5));
    let c = m.take();
    assert_eq!(
        (c.o_rd, c.f_rd),
        (2, 1),
        "one word to the limit, then the base allocator"
    );
    assert_eq!(t.fdt().next_fd, 6);
}
