//! Each pane's rows, rendered at 100×30 and at 80×24.

use super::*;
use crate::draw::MIN_WIDTH;
use crate::state::{Pane, SortColumn};

const SIZES: [(u16, u16); 2] = [(100, 30), (80, 24)];

#[test]
fn header_names_target_kernel_probes_drops_and_cost() {
    for (w, h) in SIZES {
        let screen = render(&fed(), w, h);
        assert!(
            screen[0].starts_with(
                "fdprof top  interval 10.0 s  ? help  pid 4242 (opensock)  kernel 6.18.0-test"
            ),
            "{}",
            screen[0]
        );
        assert_eq!(
            screen[1].trim_end(),
            "probes: allocate tracepoint, fd_syscalls tp_btf, lock_tracepoints tp_btf"
        );
        // 3 drops; the collector's 30 ms of CPU over the 10 s interval.
        assert_eq!(
            screen[2].trim_end(),
            "drops 3 (figures are lower bounds)  fdprof: collector 0.30% CPU, programs -"
        );
        // The test recording's file_lock waits and table growth.
        assert!(
            screen[3].starts_with("diagnosis [shared-table] file_lock wait is 60% alloc"),
            "{}",
            screen[3]
        );
    }
}

#[test]
fn contention_rows_are_per_second_over_the_interval() {
    for (w, h) in SIZES {
        let screen = render(&fed(), w, h);
        assert_eq!(
            text_of(&screen, "operation"),
            "lock      operation   cont/s wait/CPU     avg     p50     p99     max of lock"
        );
        // 591 waits and 6 ms of wait in 10 s; p50/p99 the upper bound of 10 µs's bucket.
        assert_eq!(
            text_of(&screen, "file_lock alloc"),
            "file_lock alloc         59.1    0.06% 10.2 µs 16.4 µs 16.4 µs  100 µs   60.0%"
        );
        assert_eq!(
            text_of(&screen, "file_lock close"),
            "file_lock close         40.0    0.04% 10.0 µs 10.0 µs 10.0 µs 10.0 µs   40.0%"
        );
        assert_eq!(
            text_of(&screen, "spinlock  other"),
            "spinlock  other         1.00    0.01%  100 µs  100 µs  100 µs  100 µs  100.0%"
        );
    }
}

#[test]
fn the_sparkline_has_one_bar_per_interval() {
    let mut state = fed();
    let spark = text_of(&render(&state, 100, 30), "file_lock wait/s");
    // 10 ms of file_lock wait in 10 s, two intervals alike.
    assert_eq!(spark, "file_lock wait/s  0.10% ██");
    let mut quiet = interval_report();
    quiet.contention.file_lock_wait_ns = 0;
    state.on_update(update_with(2, quiet));
    let spark = text_of(&render(&state, 100, 30), "file_lock wait/s");
    assert_eq!(spark, "file_lock wait/s     0% ██");
}

#[test]
fn stacks_show_figures_and_function_names() {
    for (w, h) in SIZES {
        let screen = render(&fed(), w, h);
        assert!(screen[row_with(&screen, "stacks by total wait")].contains("fd table"));
        let first = row_with(&screen, "#1 file_lock alloc 59.1/s 0.06% max 100 µs");
        assert!(screen[first + 1].contains("k: … ← alloc_fd ← __sys_socket"));
        assert!(screen[first + 2].contains("u: __socket ← worker ← start_thread"));
        let second = row_with(&screen, "#2 file_lock close 40.0/s 0.04% max 10.0 µs");
        assert!(screen[second + 1].contains("k: … ← file_close_fd ← __x64_sys_close"));
        assert!(screen[second + 2].contains("u: __close ← worker"));
        assert!(row_with(&screen, "#3 spinlock other 1.00/s 0.01% max 100 µs") > second);
    }
}

#[test]
fn stacks_sort_by_the_chosen_column() {
    let mut state = fed();
    state.sort = SortColumn::Max;
    let screen = render(&state, 100, 30);
    assert!(screen[row_with(&screen, "stacks by max")].contains("stacks by max"));
    // By max: alloc and the spinlock (100 µs, by rank between them), then close (10 µs).
    let order: Vec<usize> = ["#1 ", "#3 ", "#2 "]
        .iter()
        .map(|n| row_with(&screen, n))
        .collect();
    assert!(order.is_sorted(), "{order:?}");
    state.sort = SortColumn::Count;
    let screen = render(&state, 100, 30);
    let order: Vec<usize> = ["#1 ", "#2 ", "#3 "]
        .iter()
        .map(|n| row_with(&screen, n))
        .collect();
    assert!(order.is_sorted(), "{order:?}");
}

#[test]
fn the_filter_keeps_stacks_with_a_matching_function() {
    let mut state = fed();
    state.filter = "CLOSE_fd".into();
    let screen = render(&state, 100, 30);
    assert!(screen[row_with(&screen, "filter: CLOSE_fd")].contains("stacks by total wait"));
    row_with(&screen, "#2 file_lock close");
    assert!(
        !screen
            .iter()
            .any(|r| r.contains("#1 ") || r.contains("#3 "))
    );
    state.filter = "nothing_like_it".into();
    row_with(&render(&state, 100, 30), "no stack matches the filter");
    state.editing = Some("worker".into());
    row_with(&render(&state, 100, 30), "filter: /worker_");
}

#[test]
fn fd_pane_shows_syscalls_scan_and_table() {
    for (w, h) in SIZES {
        let screen = render(&fed(), w, h);
        let lines = pane(&screen, "┌fd table");
        let fd = |needle: &str| text_of(&lines, needle);
        assert_eq!(fd("syscall "), "syscall    call/s alloc/s close/s");
        // 591 sockets, 400 closes (398 fds closed) in 10 s.
        assert_eq!(fd("socket"), "socket       59.1    59.1       0");
        assert_eq!(fd("close  "), "close        40.0       0    39.8");
        assert_eq!(fd("next_fd hit"), "next_fd hit 99.8%  below origin 1");
        assert_eq!(fd("table 64"), "table 64 → 1024 fds, 4 expansions");
        assert_eq!(fd("scan bits"), "scan bits p50 0 p99 0 max 4000");
        assert_eq!(fd("0-0"), "0-0      ████████████ 590");
        if h >= 30 {
            // The lone far scan keeps a block of its own.
            assert_eq!(fd("2048-4095"), "2048-4095   █            1");
        }
    }
}

#[test]
fn with_cpu_samples_the_fd_pane_says_where_the_cpu_went() {
    let report = analysis::report(&testdata::cpu_recording(), &ReportOptions::default());
    let mut state = State::default();
    state.on_update(update_with(0, report));
    let screen = render(&state, 100, 60);
    let lines = pane(&screen, "┌fd table · on CPU ↓");
    let fd = |needle: &str| text_of(&lines, needle);
    // 10 samples: 7 in alloc_fd (not spinning), 3 in user space.
    assert_eq!(fd("on CPU"), "on CPU: 10 samples (cpu-clock, 99 Hz)");
    assert_eq!(fd("fd paths"), "fd paths 70.0%  spinning there 0%");
    assert!(fd("alloc ").starts_with("alloc 70.0%"), "{}", fd("alloc "));
    assert_eq!(fd("alloc_fd").trim(), "70.0% alloc_fd");
    assert_eq!(fd("main").trim(), "30.0% main");
    // Without samples the pane is as before.
    let plain = render(&fed(), 100, 30);
    assert!(!plain.iter().any(|r| r.contains("on CPU")));
}

#[test]
fn events_newest_first_with_time_and_thread() {
    for (w, h) in SIZES {
        let screen = render(&fed(), w, h);
        let slow = row_with(
            &screen,
            "13.000s pid 4242 tid 4243  slow wait file_lock alloc 1.20 ms in alloc_fd",
        );
        let grew = row_with(
            &screen,
            "12.345s pid 4242 tid 4244  expansion 64 → 128 fds in 12.0 µs",
        );
        assert_eq!(grew, slow + 1);
        row_with(&screen, "events (2)");
    }
}

#[test]
fn help_lists_every_key() {
    let mut state = fed();
    state.help = true;
    for (w, h) in SIZES {
        let screen = render(&state, w, h);
        for (keys, what) in crate::draw::help::KEYS {
            row_with(&screen, &format!("{keys:<11} {what}"));
        }
    }
}

#[test]
fn cumulative_view_shows_the_cumulative_report() {
    let mut state = fed();
    state.view = crate::state::View::Cumulative;
    let screen = render(&state, 100, 30);
    assert!(screen[0].contains("cumulative 2.50 s"), "{}", screen[0]);
    row_with(&screen, "mutex     other");
}

#[test]
fn paused_screen_says_so_and_keeps_its_figures() {
    let mut state = fed();
    state.on_key(ch('p'));
    state.on_update(Update::Event(slow_wait(20_000_000_000, 5_000_000)));
    let screen = render(&state, 100, 30);
    assert!(
        screen[0].starts_with("fdprof top  PAUSED  interval"),
        "{}",
        screen[0]
    );
    row_with(&screen, "events (2)");
    assert!(!screen.iter().any(|r| r.contains("20.000s")));
}

#[test]
fn names_are_escaped() {
    let mut report = interval_report();
    report.top_stacks[0].user_stack[0].function = "evil\x1b[2J\u{202e}".into();
    report.header.target.description = "pid 1 (a\x07b)".into();
    let mut state = State::default();
    state.on_update(update_with(0, report));
    let screen = render(&state, 100, 30);
    row_with(&screen, "u: evil\\x1b[2J\\u{202e} ← worker");
    row_with(&screen, "pid 1 (a\\x07b)");
    assert!(!screen.concat().contains('\x1b'));
}

#[test]
fn before_the_first_interval_the_panes_wait() {
    let screen = render(&State::default(), 80, 24);
    assert!(screen[0].contains("waiting for the first interval"));
    row_with(&screen, "no slow waits or expansions yet");
}

#[test]
fn the_focused_pane_scrolls() {
    let mut state = fed();
    state.focus = Pane::Stacks;
    state.on_key(key(KeyCode::Down));
    let screen = render(&state, 100, 30);
    // The first line of the stacks pane is now #1's kernel stack.
    let title = row_with(&screen, "stacks by total wait");
    assert!(
        screen[title + 1].contains("k: … ← alloc_fd"),
        "{}",
        screen[title + 1]
    );
}

#[test]
fn too_small_a_terminal_says_so() {
    let screen = render(&fed(), 40, 10);
    assert_eq!(
        screen[0].trim_end(),
        "terminal too small: 40×10, fdprof top"
    );
    assert!(screen[1].starts_with("needs 60×16"));
    assert!(!screen.concat().contains("contention"));
}

#[test]
fn no_size_panics() {
    let mut states = vec![State::default(), fed()];
    let mut help = fed();
    help.help = true;
    help.filter = "x".into();
    states.push(help);
    for state in &states {
        for w in (1..=MIN_WIDTH + 45)
            .step_by(4)
            .chain([1, MIN_WIDTH - 1, MIN_WIDTH])
        {
            for h in 1..=32 {
                render(state, w, h);
            }
        }
    }
    render(&fed(), 1, 1);
    render(&fed(), 10, 3);
}

/// The inside of the bordered pane whose top border starts with `title`, one string a row.
fn pane(screen: &[String], title: &str) -> Vec<String> {
    let top = row_with(screen, title);
    let left = screen[top][..screen[top].find(title).unwrap()]
        .chars()
        .count();
    screen[top + 1..]
        .iter()
        .map(|row| {
            row.chars()
                .skip(left + 1)
                .take_while(|&c| c != '│')
                .collect::<String>()
        })
        .take_while(|row| !row.starts_with('─'))
        .collect()
}

#[test]
fn the_header_counts_the_target_threads_when_known() {
    let mut report = interval_report();
    report.header.target.threads = Some(2);
    let mut state = State::default();
    state.on_update(update_with(0, report));
    let screen = render(&state, 100, 30);
    assert!(
        screen[0].contains("pid 4242 (opensock)  2 threads  kernel"),
        "{}",
        screen[0]
    );
}

#[test]
fn long_lock_names_keep_every_figure_in_its_column_and_the_header_ends_in_an_ellipsis() {
    let mut report = interval_report();
    let long = "rcu_accelerate_cbs_unloc"; // 24 characters
    report.contention.by_lock_operation[2].lock.name = long.into();
    let mut state = State::default();
    state.on_update(update_with(0, report));
    let screen = render(&state, 90, 30);
    let head = &screen[row_with(&screen, "operation   cont/s")];
    let end_of = |row: &str, word: &str| row.find(word).unwrap() + word.len();
    let cont = end_of(head, "cont/s");
    let long_row = &screen[row_with(&screen, long)];
    let file_lock_row = &screen[row_with(&screen, "│file_lock ")];
    // The rates end under the head's `cont/s` in both rows.
    for row in [long_row, file_lock_row] {
        let before = &row[..cont];
        assert!(
            before.ends_with(|c: char| c.is_ascii_digit()),
            "{row}\n{head}"
        );
    }
    // The diagnosis line is longer than 90 columns: cut, with an ellipsis.
    assert!(screen[3].trim_end().ends_with('…'), "{}", screen[3]);
}

#[test]
fn the_header_says_what_w_came_to_escaped() {
    let mut state = fed();
    state.on_update(Update::Saved(Ok("fdprof-top-20261203T113800Z.data".into())));
    for (w, h) in SIZES {
        let screen = render(&state, w, h);
        assert!(
            screen[0].starts_with(
                "fdprof top  wrote fdprof-top-20261203T113800Z.data  interval 10.0 s  ? help"
            ),
            "{}",
            screen[0]
        );
    }
    // Before any interval too; a reason that names a path is escaped.
    let mut state = State::default();
    state.on_update(Update::Saved(Err(
        "cannot write a\x1bb: Permission denied".into()
    )));
    let screen = render(&state, 100, 30);
    assert!(
        screen[0].starts_with("fdprof top  cannot write a\\x1bb: Permission denied  waiting"),
        "{}",
        screen[0]
    );
    assert!(!screen.concat().contains('\x1b'));
}
