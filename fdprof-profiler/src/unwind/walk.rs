//! One copy's walk: framehop from the copy's registers, reading only the copied bytes; every
//! return address must lie in an executable mapping, and a walk that cannot go on ends in a
//! marker frame that says why.

use fdprof_common::copies::{MAX_FRAMES, WalkEnd};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{Error, MayAllocateDuringUnwind, Unwinder as _};

use super::process::Process;

/// A copy of the top of a user stack, with the registers its walk starts from.
pub(crate) struct Copy<'a> {
    pub(crate) ip: u64,
    pub(crate) sp: u64,
    pub(crate) bp: u64,
    pub(crate) bytes: &'a [u8],
}

pub(crate) type Cache = CacheX86_64<MayAllocateDuringUnwind>;

/// The stack's addresses, innermost first, and why the walk stopped short (`None`: it reached
/// the thread's start).
pub(crate) fn walk(
    process: &Process,
    copy: &Copy,
    cache: &mut Cache,
) -> (Vec<u64>, Option<WalkEnd>) {
    let sp = copy.sp;
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        let at = addr.checked_sub(sp).ok_or(())? as usize;
        let word = copy.bytes.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
    };
    let regs = UnwindRegsX86_64::new(copy.ip, copy.sp, copy.bp);
    let mut frames = process
        .unwinder
        .iter_frames(copy.ip, regs, cache, &mut read_stack);
    let mut out = Vec::new();
    let end = loop {
        match frames.next() {
            Ok(Some(frame)) => {
                let addr = frame.address();
                if !out.is_empty() && !process.is_code(addr) {
                    break Some(WalkEnd::UnknownCode);
                }
                if out.len() == MAX_FRAMES {
                    break Some(WalkEnd::TooDeep);
                }
                out.push(addr);
            }
            Ok(None) => break None,
            Err(Error::CouldNotReadStack(_)) => break Some(WalkEnd::CopyTooShort),
            Err(_) => break Some(WalkEnd::NoUnwindInfo),
        }
    };
    (out, end)
}
