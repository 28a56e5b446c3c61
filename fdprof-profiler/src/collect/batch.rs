//! Whole per-CPU arrays in one `BPF_MAP_LOOKUP_BATCH` call. Reading them an element at a time
//! took some 3,000 `bpf()` calls per snapshot (one per histogram slot), about a quarter of what
//! `fdprof top` cost at a 1 s interval. aya does not expose batch operations, so this is the raw
//! call (stable uapi, `struct bpf_attr`'s `batch` member, Linux 5.6+).

use std::os::fd::RawFd;

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// Every element of the per-CPU array of `u64` behind `fd`, `len` elements long, on `cpus`
/// possible CPUs: element `i`'s value on CPU `c` at `i * cpus + c`. `None` when the kernel
/// refuses the call (the caller then reads element by element).
pub(crate) fn per_cpu_u64s(fd: RawFd, len: u32, cpus: usize) -> Option<Vec<u64>> {
    let mut keys = vec![0u32; len as usize];
    let mut values = vec![0u64; len as usize * cpus];
    let mut out_batch = 0u32;
    let mut attr = [0u64; 6];
    // in_batch: null, from the first element.
    attr[1] = &mut out_batch as *mut u32 as u64;
    attr[2] = keys.as_mut_ptr() as u64;
    attr[3] = values.as_mut_ptr() as u64;
    // count, then map_fd; elem_flags and flags stay 0.
    attr[4] = u64::from(len) | (fd as u64) << 32;
    // SAFETY: `attr` is a valid `bpf_attr` prefix; keys and values hold `count` elements of
    // the map's key size and `count * cpus` of its 8-byte values, as the kernel writes them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_BATCH,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    // The kernel writes back how many it read; ENOENT says the array ended there, as it must.
    let read = (attr[4] & 0xffff_ffff) as u32;
    let ended = rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT);
    // Array keys come back in order, so a full read is element i at key i.
    (ended && read == len && keys.iter().enumerate().all(|(i, &k)| k == i as u32)).then_some(values)
}

#[cfg(test)]
mod tests {
    use std::os::fd::{FromRawFd, OwnedFd};

    use super::*;

    fn bpf(cmd: libc::c_long, attr: &mut [u64]) -> i64 {
        // SAFETY: each caller passes a valid `bpf_attr` prefix for `cmd`.
        unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr)) }
    }

    /// A real per-CPU array (the kernel's, not a model of it), filled element by element, reads
    /// back the same in one batch.
    #[test]
    fn a_batch_reads_every_element_on_every_cpu() {
        // SAFETY: no preconditions.
        assert!(
            unsafe { libc::geteuid() } == 0,
            "this test creates a BPF map: run the tests as root"
        );
        const BPF_MAP_CREATE: libc::c_long = 0;
        const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
        const PERCPU_ARRAY: u64 = 6;
        let (len, cpus) = (300u32, aya::util::nr_cpus().unwrap());
        // map_type, key_size | value_size, max_entries.
        let mut create = [PERCPU_ARRAY | 4 << 32, 8 | u64::from(len) << 32, 0, 0, 0, 0];
        let fd = bpf(BPF_MAP_CREATE, &mut create);
        assert!(
            fd >= 0,
            "cannot create a map: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a new fd of our own.
        let map = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let value = |i: u32, c: usize| u64::from(i) * 1000 + c as u64 + 1;
        for i in (0..len).step_by(7) {
            let mut key = i;
            let mut values: Vec<u64> = (0..cpus).map(|c| value(i, c)).collect();
            let mut update = [
                fd as u64,
                &mut key as *mut u32 as u64,
                values.as_mut_ptr() as u64,
                0,
            ];
            assert_eq!(bpf(BPF_MAP_UPDATE_ELEM, &mut update), 0);
        }
        let all = per_cpu_u64s(fd as RawFd, len, cpus).expect("the batch read");
        for i in 0..len {
            for c in 0..cpus {
                let want = if i % 7 == 0 { value(i, c) } else { 0 };
                assert_eq!(all[i as usize * cpus + c], want, "element {i} on CPU {c}");
            }
        }
        // Asking for more than the array holds is a short read, refused.
        assert_eq!(per_cpu_u64s(fd as RawFd, len + 1, cpus), None);
        drop(map);
    }
}
