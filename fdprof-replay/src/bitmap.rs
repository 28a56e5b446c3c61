//! Bit operations on `u64` word arrays, with the word loads a search issues charged to a meter.

use crate::cost::{Array, Meter};

/// The kernel's `find_next_zero_bit(words, size, off)`: the first clear bit in `[off, size)`, or
/// `size`. Charges one read per word fetched (none when `off >= size`).
#[inline(always)]
pub fn find_next_zero_bit(words: &[u64], size: u64, off: u64, array: Array, m: &mut Meter) -> u64 {
    if off >= size {
        return size;
    }
    let first = off / 64;
    let t = !words[first as usize] & (!0u64 << (off % 64));
    if t != 0 {
        m.read(array, first, first);
        return (first * 64 + u64::from(t.trailing_zeros())).min(size);
    }
    scan_on(words, size, first, array, m)
}

/// The search past a first word with no clear bit.
#[inline(never)]
fn scan_on(words: &[u64], size: u64, first: u64, array: Array, m: &mut Meter) -> u64 {
    let end = size.div_ceil(64);
    let j = first + 1 + full_run(&words[(first + 1) as usize..end as usize]);
    if j >= end {
        m.read(array, first, end - 1);
        return size;
    }
    m.read(array, first, j);
    (j * 64 + u64::from((!words[j as usize]).trailing_zeros())).min(size)
}

/// How many words at the front of `words` are all ones (whole blocks first: the long scans of
/// big tables are most of a replay's time).
#[inline]
fn full_run(words: &[u64]) -> u64 {
    let mut n = 0;
    for block in words.chunks_exact(8) {
        if block.iter().fold(!0u64, |a, &w| a & w) != !0 {
            break;
        }
        n += 8;
    }
    (n + words[n..].iter().take_while(|&&w| w == !0).count()) as u64
}

/// The same search without charging anything (for the accounting's "lowest free fd").
pub fn first_zero_from(words: &[u64], size: u64, off: u64) -> u64 {
    let mut i = off / 64;
    if off >= size {
        return size;
    }
    let mut t = !words[i as usize] & (!0u64 << (off % 64));
    while t == 0 {
        if (i + 1) * 64 >= size {
            return size;
        }
        i += 1;
        t = !words[i as usize];
    }
    (i * 64 + u64::from(t.trailing_zeros())).min(size)
}

#[inline]
pub fn test(words: &[u64], bit: u64) -> bool {
    words
        .get((bit / 64) as usize)
        .is_some_and(|w| w & (1 << (bit % 64)) != 0)
}

/// Sets `bit`; true if it changed.
#[inline]
pub fn set(words: &mut [u64], bit: u64) -> bool {
    let w = &mut words[(bit / 64) as usize];
    let old = *w;
    *w |= 1 << (bit % 64);
    old != *w
}

/// Clears `bit`; true if it changed.
#[inline]
pub fn clear(words: &mut [u64], bit: u64) -> bool {
    let w = &mut words[(bit / 64) as usize];
    let old = *w;
    *w &= !(1 << (bit % 64));
    old != *w
}

/// Sets bits `lo..=hi` (within `words`).
pub fn set_range(words: &mut [u64], lo: u64, hi: u64) {
    for i in lo / 64..=hi / 64 {
        let from = if i == lo / 64 { lo % 64 } else { 0 };
        let to = if i == hi / 64 { hi % 64 } else { 63 };
        words[i as usize] |= (!0u64 >> (63 - to)) & (!0u64 << from);
    }
}

/// The set bits of `words` in `[lo, hi]`, ascending.
pub fn set_bits(words: &[u64], lo: u64, hi: u64) -> impl Iterator<Item = u64> + '_ {
    let last_word = (hi / 64).min((words.len() as u64).saturating_sub(1));
    (lo / 64..=last_word)
        .take_while(move |_| !words.is_empty() && lo <= hi)
        .flat_map(move |i| {
            let mut w = words[i as usize];
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = u64::from(w.trailing_zeros());
                w &= w - 1;
                Some(i * 64 + b)
            })
        })
        .filter(move |&b| b >= lo && b <= hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_counts_the_words_it_fetches() {
        let words = [!0u64, !0, 0b1011];
        let mut m = Meter::default();
        assert_eq!(find_next_zero_bit(&words, 192, 3, Array::Open, &mut m), 130);
        assert_eq!(m.take().o_rd, 3);
        assert_eq!(
            find_next_zero_bit(&words, 192, 192, Array::Open, &mut m),
            192
        );
        assert_eq!(m.take().o_rd, 0);
        assert_eq!(find_next_zero_bit(&words, 128, 0, Array::Open, &mut m), 128);
        assert_eq!(m.take().o_rd, 2);
        assert_eq!(first_zero_from(&words, 192, 0), 130);
    }

    #[test]
    fn set_range_sets_exactly_the_range() {
        let mut words = [0u64; 3];
        set_range(&mut words, 62, 129);
        assert_eq!(
            set_bits(&words, 0, 191).collect::<Vec<_>>(),
            (62..=129).collect::<Vec<_>>()
        );
        set_range(&mut words, 5, 5);
        assert_eq!(words[0], 0b11 << 62 | 1 << 5);
    }

    #[test]
    fn set_bits_lists_a_range() {
        let words = [0b101u64, 1 << 63];
        assert_eq!(
            set_bits(&words, 0, 200).collect::<Vec<_>>(),
            vec![0, 2, 127]
        );
        assert_eq!(set_bits(&words, 1, 126).collect::<Vec<_>>(), vec![2]);
        assert_eq!(set_bits(&[], 0, 10).count(), 0);
    }
}
