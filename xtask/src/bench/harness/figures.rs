//! The two-column tables of figures the benches print: a name left-aligned, its value
//! right-aligned (a value wider than its column is printed whole), and the rows of a series of
//! resident-memory samples.

use std::fmt::Display;

/// A table of figures being printed, one a line.
pub(crate) struct FigureTable {
    name: usize,
    value: usize,
}

impl FigureTable {
    /// Prints the header (`figure`, `value`) with the columns' widths.
    pub(crate) fn start(name: usize, value: usize) -> Self {
        println!("{:<name$} {:>value$}", "figure", "value");
        Self { name, value }
    }

    pub(crate) fn row(&self, name: &str, value: impl Display) {
        println!("{}", self.line(name, value));
    }

    fn line(&self, name: &str, value: impl Display) -> String {
        let (n, v) = (self.name, self.value);
        format!("{name:<n$} {:>v$}", value.to_string())
    }

    /// Rows for VmRSS samples, (seconds from the start, kB): the first, the last and the
    /// largest.
    pub(crate) fn rss_rows(&self, samples: &[(f64, u64)]) {
        let (first, last) = (samples[0], samples[samples.len() - 1]);
        let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
        self.row(&format!("start (at {:.0} s)", first.0), kb(first.1));
        self.row(&format!("end (at {:.0} s)", last.0), kb(last.1));
        self.row("max", kb(max));
    }
}

fn kb(n: u64) -> String {
    format!("{n} kB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_align_as_a_number_and_its_unit_would() {
        let table = FigureTable {
            name: 28,
            value: 12,
        };
        assert_eq!(
            table.line("max", kb(12345)),
            format!("{:<28} {:>9} kB", "max", 12345)
        );
        assert_eq!(
            table.line("slope", format!("{:>6.1} kB/min", 2.5)),
            format!("{:<28} {:>6.1} kB/min", "slope", 2.5)
        );
        let table = FigureTable {
            name: 44,
            value: 14,
        };
        assert_eq!(
            table.line("share", format!("{:.2}%", 1.5)),
            format!("{:<44} {:>13.2}%", "share", 1.5)
        );
    }
}
