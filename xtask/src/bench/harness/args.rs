//! A bench's options, read from the arguments after its name.

use anyhow::{Context, Result, bail};

/// `--rounds N` among a benchmark's arguments, else `default`.
pub(crate) fn rounds_arg(args: &[String], default: usize) -> Result<usize> {
    args.iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(default), |s| s.parse())
        .context("--rounds takes a number")
}

/// `--minutes N` among a benchmark's arguments (a whole number > 0), else 1.
pub(crate) fn minutes_arg(args: &[String]) -> Result<u64> {
    whole_arg(args, "--minutes", 1, "minutes")
}

/// `NAME N` among a benchmark's arguments (a whole number > 0), else `default`; `unit` says
/// what N counts.
pub(crate) fn whole_arg(args: &[String], name: &str, default: u64, unit: &str) -> Result<u64> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => match args.get(i + 1).map(|s| s.parse()) {
            Some(Ok(n)) if n > 0 => Ok(n),
            _ => bail!("{name} takes a whole number of {unit} > 0"),
        },
    }
}

/// `NAME VALUE`'s value, if given.
pub(crate) fn value_arg<'a>(args: &'a [String], name: &str) -> Result<Option<&'a str>> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => Ok(Some(
            args.get(i + 1)
                .with_context(|| format!("{name} takes a value"))?,
        )),
    }
}

/// `NAME A,B,…`'s items, if given; `usage` is the error when the list is missing.
pub(crate) fn list_arg<'a>(
    args: &'a [String],
    name: &str,
    usage: &'static str,
) -> Result<Option<Vec<&'a str>>> {
    let Some(i) = args.iter().position(|a| a == name) else {
        return Ok(None);
    };
    Ok(Some(args.get(i + 1).context(usage)?.split(',').collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn minutes_default_and_bad_values() {
        assert_eq!(minutes_arg(&[]).unwrap(), 1);
        assert_eq!(minutes_arg(&args(&["--minutes", "10"])).unwrap(), 10);
        assert!(minutes_arg(&args(&["--minutes", "0"])).is_err());
        assert!(minutes_arg(&args(&["--minutes"])).is_err());
    }

    #[test]
    fn rounds_values_and_lists() {
        assert_eq!(rounds_arg(&args(&["--rounds", "7"]), 5).unwrap(), 7);
        assert_eq!(rounds_arg(&[], 5).unwrap(), 5);
        assert!(rounds_arg(&args(&["--rounds", "x"]), 5).is_err());
        assert_eq!(
            value_arg(&args(&["--to", "10"]), "--to").unwrap(),
            Some("10")
        );
        assert!(value_arg(&args(&["--to"]), "--to").is_err());
        let only = args(&["--only", "a,b"]);
        assert_eq!(
            list_arg(&only, "--only", "usage").unwrap(),
            Some(vec!["a", "b"])
        );
        assert_eq!(list_arg(&[], "--only", "usage").unwrap(), None);
    }
}
