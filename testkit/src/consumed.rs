//! What `brook consume` printed: one JSON object per record (`partition`, `offset`,
//! `timestamp`, `key`, `value`).

use serde_json::Value;

/// The records of `brook consume`'s output, one JSON object per line.
///
/// # Panics
/// If a line is not JSON (a test failure), naming it.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// `(partition, offset)` of each record.
///
/// # Panics
/// If a record has no numeric `partition` or `offset` (a test failure).
pub fn positions(records: &[Value]) -> Vec<(u64, u64)> {
    records
        .iter()
        .map(|r| {
            let field = |name: &str| {
                r[name]
                    .as_u64()
                    .unwrap_or_else(|| panic!("record without a numeric {name}: {r}"))
            };
            (field("partition"), field("offset"))
        })
        .collect()
}
