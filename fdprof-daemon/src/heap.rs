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
