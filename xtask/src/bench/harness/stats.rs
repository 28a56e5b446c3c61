//! Medians and ranges of a bench's rounds.

/// The middle value (the upper one of an even count); sorts `v`.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The middle value, the mean of the two middle ones for an even count.
pub(crate) fn mean_median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The largest value, 0 for none.
pub(crate) fn highest(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// The smallest and the largest value (infinity and 0 for none).
pub(crate) fn range(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::INFINITY, f64::min), highest(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 3.0);
        assert_eq!(mean_median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(mean_median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(range(&[0.9, 1.1, 1.0]), (0.9, 1.1));
        assert_eq!(highest(&[]), 0.0);
    }
}
