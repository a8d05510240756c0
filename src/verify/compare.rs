//! The committed output of the killed run against the reference, as multisets of rows:
//! rows fired by one watermark, or written by several subtasks, come in no fixed
//! order, so only how often each row occurs counts.

use std::collections::BTreeMap;
use std::fmt::Write;

/// How a sink's rows differ from the reference's; each row with how many copies.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SinkDiff {
    /// Rows of the reference with fewer copies in the run: (row, copies lost).
    pub missing: Vec<(String, usize)>,
    /// Rows of the reference with more copies in the run: (row, copies too many).
    pub duplicated: Vec<(String, usize)>,
    /// Rows the reference never wrote: (row, copies).
    pub unexpected: Vec<(String, usize)>,
}

impl SinkDiff {
    /// Whether the rows are the same multiset.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.duplicated.is_empty() && self.unexpected.is_empty()
    }

    /// Copies lost, over all rows.
    pub fn missing_count(&self) -> usize {
        self.missing.iter().map(|(_, n)| n).sum()
    }

    /// Copies too many of the reference's rows.
    pub fn duplicated_count(&self) -> usize {
        self.duplicated.iter().map(|(_, n)| n).sum()
    }

    /// Copies of rows the reference never wrote.
    pub fn unexpected_count(&self) -> usize {
        self.unexpected.iter().map(|(_, n)| n).sum()
    }
}

fn counts(rows: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for r in rows {
        *m.entry(r.as_str()).or_insert(0) += 1;
    }
    m
}

/// The difference of `got` from `reference` as multisets (each list sorted by row).
pub fn compare(reference: &[String], got: &[String]) -> SinkDiff {
    let want = counts(reference);
    let have = counts(got);
    let mut diff = SinkDiff::default();
    for (row, &w) in &want {
        let h = have.get(row).copied().unwrap_or(0);
        if h < w {
            diff.missing.push(((*row).to_string(), w - h));
        } else if h > w {
            diff.duplicated.push(((*row).to_string(), h - w));
        }
    }
    for (row, &h) in &have {
        if !want.contains_key(row) {
            diff.unexpected.push(((*row).to_string(), h));
        }
    }
    diff
}

/// The report of one sink's difference: a line of counts, then up to `examples` rows
/// of each kind.
pub fn describe(sink: &str, diff: &SinkDiff, examples: usize) -> String {
    let mut out = format!(
        "sink {sink}: {} rows missing, {} duplicated, {} not in the reference run\n",
        diff.missing_count(),
        diff.duplicated_count(),
        diff.unexpected_count()
    );
    let kinds = [
        ("missing", &diff.missing, "lost"),
        ("duplicated", &diff.duplicated, "too many"),
        ("not in the reference", &diff.unexpected, "written"),
    ];
    for (what, rows, verb) in kinds {
        for (row, n) in rows.iter().take(examples) {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "  {what}: {row} ({n} {verb})");
        }
        if rows.len() > examples {
            let _ = writeln!(out, "  ... and {} more {what} rows", rows.len() - examples);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_same_rows_in_another_order_are_equal() {
        let d = compare(&rows(&["a", "b", "b"]), &rows(&["b", "a", "b"]));
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn lost_doubled_and_foreign_rows_are_counted_per_copy() {
        let d = compare(
            &rows(&["a", "b", "b", "c"]),
            &rows(&["a", "a", "a", "b", "x", "x"]),
        );
        assert_eq!(d.missing, vec![("b".into(), 1), ("c".into(), 1)]);
        assert_eq!(d.duplicated, vec![("a".into(), 2)]);
        assert_eq!(d.unexpected, vec![("x".into(), 2)]);
        assert_eq!(
            (
                d.missing_count(),
                d.duplicated_count(),
                d.unexpected_count()
            ),
            (2, 2, 2)
        );
    }

    #[test]
    fn the_report_gives_counts_and_a_few_examples() {
        let reference: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
        let mut got = reference.clone();
        got.push("r1".into());
        got.retain(|r| r != "r2" && r != "r3" && r != "r4");
        let text = describe("out", &compare(&reference, &got), 2);
        assert_eq!(
            text,
            "sink out: 3 rows missing, 1 duplicated, 0 not in the reference run\n  missing: r2 (1 lost)\n  missing: r3 (1 lost)\n  ... and 1 more missing rows\n  duplicated: r1 (1 too many)\n"
        );
    }
}
