//! The daemon's heap, kept close to what it holds. Thousands of short processes an interval
//! make rows that are built, merged and freed several times over, between allocations kept for
//! minutes (the kept intervals), and a report over every kept interval builds and frees tens
//! of MB; glibc keeps freed memory resident until it is told to give it back.

/// Returns the free pages of every arena to the kernel: after each interval (the collector's
/// rows), and after each request whose figures are made from many rows, on its own blocking
/// thread, whose arena would otherwise hold them until the next interval (about 14 MB after a
/// `/report.json` at 100,000 processes seen).
pub(super) fn give_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Blocks this size and larger are mapped of their own and unmapped when freed. glibc raises
/// the threshold to the largest block freed so far (up to 32 MiB): after one large report,
/// every later one is carved from the arenas, whose pages a trim returns only where no small
/// block that outlived it sits between them. A fixed threshold keeps the peaks out of the arenas.
const MMAP_THRESHOLD: i32 = 128 << 10;

/// Sets the allocator for a process that lives for months: large blocks always mapped apart.
pub(super) fn tune() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes the allocator's thresholds.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}
