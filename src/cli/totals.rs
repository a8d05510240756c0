//! Records read and written by a running job, summed over its source or sink vertices
//! (for `brook run`'s progress line and summary, and the group worker's).

use brook::engine::metrics::JobMetrics;

/// The records of the vertices named in `names`: received when `input`, else emitted.
pub(crate) fn totals(metrics: &JobMetrics, names: &[String], input: bool) -> u64 {
    metrics
        .vertices()
        .iter()
        .filter(|v| names.contains(&v.name))
        .map(|v| {
            if input {
                v.totals().records_in
            } else {
                v.totals().records_out
            }
        })
        .sum()
}
