//! Size arguments: `4096`, `512M`, `2G`.

/// A size: a whole number of bytes, or of KiB, MiB, GiB or TiB with K, M, G or T (as `perf
/// record --max-size` takes it).
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'B' => 0,
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{t:?}: the suffix is one of B, K, M, G or T")),
            };
            (&t[..at], shift)
        }
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{t:?} is not a size such as 4096, 512M or 2G"))
}

#[cfg(test)]
mod tests {
    use super::parse as parse_size;

    #[test]
    fn sizes_take_perfs_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("7B"), Ok(7));
        for bad in ["", "M", "1.5G", "-1", "2X", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
