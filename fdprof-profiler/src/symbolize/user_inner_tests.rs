//! The user symbolizer's own parts: its maps parser, its files and snapshots.

use super::*;

const MAPS: &str = "\
5581a0a00000-5581a0a28000 r--p 00000000 fd:01 1311       /usr/bin/fdprof
5581a0a28000-5581a0b9d000 r-xp 00028000 fd:01 1311       /usr/bin/fdprof
5581a0b9d000-5581a0bf5000 r--p 0019d000 fd:01 1311       /usr/bin/fdprof
5581a2000000-5581a2021000 rw-p 00000000 00:00 0          [heap]
7f1c00000000-7f1c00021000 rwxp 00000000 00:00 0 
7f1c3d828000-7f1c3d9bd000 r-xp 00028000 103:02 917533    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c3da00000-7f1c3da10000 r-xp 00001000 00:1f 42         /tmp/dir with spaces/lib x.so (deleted)
7ffd1a3f2000-7ffd1a3f4000 r-xp 00000000 00:00 0          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]
";

/// A real `[vdso]` frame: this process's own `clock_gettime` in its vDSO, found through
/// the dynamic linker, symbolized through the process's maps like a target's would be.
#[test]
fn vdso_frames_get_their_function_names() {
    // SAFETY: NUL-terminated names; RTLD_NOLOAD only looks up an object already loaded (the
    // dynamic linker registers the vDSO under this name).
    let addr = unsafe {
        let vdso = libc::dlopen(
            c"linux-vdso.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_NOLOAD,
        );
        assert!(!vdso.is_null(), "no vDSO loaded in this process");
        libc::dlsym(vdso, c"__vdso_clock_gettime".as_ptr()) as u64
    };
    assert_ne!(addr, 0, "the vDSO has no __vdso_clock_gettime");
    let mut u = UserSymbolizer::new();
    let f = u.resolve(std::process::id(), &[addr + 4], false);
    assert_eq!(f[0].module.as_deref(), Some("[vdso]"));
    assert!(
        f[0].function.contains("clock_gettime"),
        "a vDSO address named {:?}",
        f[0].function
    );
    assert_eq!(f[0].offset, 4);
}

#[test]
fn maps_parser_keeps_named_executable_mappings() {
    let m = parse_maps(MAPS);
    let paths: Vec<&str> = m.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/usr/bin/fdprof",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/tmp/dir with spaces/lib x.so",
            "[vdso]",
            "[vsyscall]",
        ]
    );
    assert_eq!(
        m[0],
        ExecMapping {
            start: 0x5581a0a28000,
            end: 0x5581a0b9d000,
            offset: 0x28000,
            dev: (0xfd, 1),
            inode: 1311,
            path: "/usr/bin/fdprof".into(),
            deleted: false,
        }
    );
    assert_eq!(m[1].dev, (0x103, 2));
    assert!(m[2].deleted && !m[1].deleted);
    assert_eq!(m[4].start, 0xffffffffff600000);
    assert!(parse_maps("garbage\n\n12-34 r-xp zz 00:00 0 /x\n").is_empty());
}

#[test]
fn a_file_first_seen_through_a_gone_process_is_opened_through_a_live_one() {
    let text = crate::procfs::maps("self").unwrap();
    let exe = parse_maps(&text).into_iter().find(|m| m.is_file()).unwrap();
    let mut u = UserSymbolizer::new();
    // As an `ldd` that mapped the file and exited before it was opened.
    let gone = u32::MAX - 7;
    let idx = u.file_for(gone, &exe);
    assert!(u.files[idx]._held.is_none());
    assert_eq!(u.files[idx].source, Some(in_its_root(gone, &exe.path)));
    let own = std::process::id();
    assert_eq!(u.file_for(own, &exe), idx, "one file, one entry");
    assert!(
        u.files[idx]._held.is_some(),
        "held through the live process"
    );
    // A hard link of it: the same file, named by the path its process mapped.
    let linked = ExecMapping {
        path: "/elsewhere/another-name".into(),
        ..exe.clone()
    };
    assert_eq!(u.file_for(own, &linked), idx);
    let (a, b) = (u.name_of(&exe.path), u.name_of(&linked.path));
    assert_ne!(a, b);
    assert_eq!(u.names[b as usize], "another-name");
    assert_eq!(u.name_of(&linked.path), b, "each name once");
}

#[test]
fn translation_through_a_snapshot_of_an_exited_process() {
    let mut u = UserSymbolizer::new();
    // A pid that cannot exist: only the injected snapshot is there.
    let pid = u32::MAX - 7;
    let maps: Vec<Mapping> = parse_maps(MAPS)
        .iter()
        .map(|m| Mapping {
            start: m.start,
            end: m.end,
            offset: m.offset,
            file: {
                let mut m = m.clone();
                m.deleted = true; // nothing is opened by path
                u.file_for(pid, &m)
            },
            module: u.name_of(&m.path),
        })
        .collect();
    u.procs.insert(
        pid,
        Snapshot {
            maps,
            taken: Instant::now(),
            start_time: None,
        },
    );
    assert!(!u.snapshot_maps(pid), "no such process");
    assert!(u.has_snapshot(pid), "last snapshot kept");
    let f = u.resolve(pid, &[0x7f1c3d828010, 0x7ffd1a3f2001, 0x1000], false);
    assert_eq!(f[0].function, UNKNOWN);
    assert_eq!(f[0].module.as_deref(), Some("libc.so.6"));
    assert_eq!(f[0].offset, 0x28010);
    assert_eq!(f[1].module.as_deref(), Some("[vdso]"));
    assert_eq!((f[2].module.as_deref(), f[2].offset), (None, 0));
    assert!(f.iter().all(|f| f.address.is_none()));
    let raw = u.resolve(pid, &[0x1000], true);
    assert_eq!(raw[0].address, Some(0x1000));
}

/// Gone processes are forgotten, and past the file budget everything is, so memory stays
/// bounded however many processes come and go; a live one is read again when next seen.
#[test]
fn trim_forgets_the_gone_and_bounds_the_files() {
    let me = std::process::id();
    let mut u = UserSymbolizer::new();
    assert!(u.snapshot_maps(me));
    assert!(u.has_snapshot(me));
    u.trim(|pid| pid == me, usize::MAX);
    assert!(u.has_snapshot(me), "a live process stays");
    u.trim(|_| false, usize::MAX);
    assert!(!u.has_snapshot(me), "a gone process is forgotten");
    assert!(u.snapshot_maps(me));
    assert!(!u.files.is_empty());
    u.trim(|_| true, 0);
    assert!(
        u.files.is_empty() && !u.has_snapshot(me),
        "over the budget: afresh"
    );
    // Resolving reads the process again.
    let frames = u.resolve(me, &[start_time_of_this_process as *const () as u64], false);
    assert_eq!(frames.len(), 1);
    assert!(u.has_snapshot(me));
}

/// The files of a program whose processes are gone go (their names too) once held
/// [`KEEP_UNMAPPED`] past their bound (here any size), while a live process keeps its snapshot
/// and its names; under the bound, nothing goes.
#[test]
fn files_no_process_maps_go_after_a_while() {
    let me = std::process::id();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let mut u = UserSymbolizer::new();
    u.unmapped_bytes = 1;
    assert!(u.snapshot_maps(me) && u.snapshot_maps(sleeper.id()));
    let files = u.files.len();
    assert!(u.names.iter().any(|n| n == "sleep"));
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let keep = |pid| pid == me;
    u.trim(keep, usize::MAX);
    assert_eq!(u.files.len(), files, "not before a while");
    u.unmapped_since = Some(Instant::now() - KEEP_UNMAPPED);
    u.trim(keep, usize::MAX);
    assert!(u.files.len() < files && !u.names.iter().any(|n| n == "sleep"));
    assert!(u.has_snapshot(me));
    let addr = start_time_of_this_process as *const () as u64;
    let frames = u.resolve(me, &[addr], false);
    assert!(
        frames[0].function.contains("start_time_of_this_process"),
        "{frames:?}"
    );
    u.trim(keep, usize::MAX);
    assert!(u.unmapped_since.is_none(), "every file held is mapped");
    let mut u = UserSymbolizer::new();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    assert!(u.snapshot_maps(me) && u.snapshot_maps(sleeper.id()));
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let files = u.files.len();
    u.trim(keep, usize::MAX);
    assert!(
        u.unmapped_since.is_none(),
        "a small file is not worth starting afresh"
    );
    assert_eq!(u.files.len(), files);
}

#[test]
fn start_time_of_this_process() {
    let own = process_start_time(std::process::id()).unwrap();
    assert!(own > 0);
    assert_eq!(process_start_time(1).map(|t| t <= own), Some(true));
    assert_eq!(process_start_time(u32::MAX - 7), None);
}

#[test]
fn is_send() {
    fn send<T: Send>() {}
    send::<UserSymbolizer>();
}
