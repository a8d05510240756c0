//! The batch path of YAML jobs at the spec's edges (issue 18 step 3): what turns a
//! source's records into [`RowBatch`]es of its schema, and the sinks that take
//! batches. Between them `filter`, `map` and `select` run on the batches
//! ([`brook_operators::batch_sql`]); any other step or sink gets rows, converted once
//! at that boundary ([`brook_operators::batch_rows`]).

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::SchemaRef;
use brook_connectors::GeneratorEvent;
use brook_core::element::Batch;
use brook_core::operator::{
    OpResult, Operator, OperatorContext, OperatorError, Output, SubtaskInfo,
};
use brook_core::sink::{Sink, SinkWriter};
use brook_operators::row_batch::{row_times, RowBatch};
use brook_sql::schema::SchemaError;

/// The schema of generated events: `{key, ts, value}`, all `int64`; the one their
/// steps are planned against (`schema.rs`) and their batches have.
///
/// # Errors
/// None in practice (three distinct fields of a known type); a [`SchemaError`] should
/// the declared form change.
pub(crate) fn generator_schema() -> Result<SchemaRef, SchemaError> {
    brook_sql::schema::declared([("key", "int64"), ("ts", "int64"), ("value", "int64")])
}

/// Generated events into one batch per engine batch, each row with its event's time.
#[derive(Debug, Clone)]
pub(crate) struct GeneratorBatches {
    pub(crate) schema: SchemaRef,
}

impl Operator for GeneratorBatches {
    type In = GeneratorEvent;
    type Out = RowBatch;

    fn process_batch(
        &mut self,
        batch: Batch<GeneratorEvent>,
        _ctx: &mut OperatorContext,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        if batch.is_empty() {
            return Ok(());
        }
        // Keys are below `keys` (a u64 the spec takes as at most i64::MAX in practice:
        // 10 000 by default); a larger one wraps as the row path's JSON would not, so
        // it saturates instead.
        let key: ArrayRef = Arc::new(Int64Array::from_iter_values(
            batch
                .iter()
                .map(|r| i64::try_from(r.value.key).unwrap_or(i64::MAX)),
        ));
        let ts: ArrayRef = Arc::new(Int64Array::from_iter_values(
            batch.iter().map(|r| r.value.ts),
        ));
        let value: ArrayRef = Arc::new(Int64Array::from_iter_values(
            batch.iter().map(|r| r.value.value),
        ));
        let timestamps = row_times(batch.iter().map(|r| r.timestamp));
        let columns = RecordBatch::try_new(Arc::clone(&self.schema), vec![key, ts, value])
            .map_err(OperatorError::other)?;
        out.push(
            RowBatch {
                columns,
                timestamps,
            }
            .into_record(),
        );
        Ok(())
    }
}

/// The `blackhole` sink of the batch path: drops every batch (the engine counts its
/// rows as written).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchBlackhole;

impl Sink for BatchBlackhole {
    type In = RowBatch;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = RowBatch>>> {
        Ok(Box::new(BatchBlackhole))
    }
}

impl SinkWriter for BatchBlackhole {
    type In = RowBatch;

    fn write_batch(&mut self, batch: Batch<RowBatch>) -> OpResult {
        drop(batch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use brook_engine::JobConfig;

    /// A generator's rows through `filter` and `map` to a `blackhole` stay batches from
    /// the source to the sink (no vertex turns them into rows), and the job still
    /// reports rows read and written, not batches.
    #[test]
    fn a_stateless_job_runs_on_batches_from_source_to_sink() {
        let yaml = r#"
name: batches
sources:
  - {name: events, connector: generator, count: 20000, keys: 50}
steps:
  - {name: kept, filter: "value % 4 <> 0"}
  - {name: priced, map: {dollars: "value / 100.0", bucket: "key % 16"}}
sinks:
  - {name: out, connector: blackhole}
"#;
        let valid =
            crate::spec::validate(crate::spec::parse(yaml).expect("parses")).expect("valid");
        let built =
            crate::spec::build(&valid, JobConfig::with_parallelism(1), None).expect("builds");
        let result = built.env.execute("batches").expect("runs");
        let count = |name: &str, f: fn(&brook_engine::metrics::VertexTotals) -> u64| {
            result
                .vertices
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| f(t))
        };
        assert_eq!(
            count("out", |t| t.records_in),
            Some(15_000),
            "rows, not batches"
        );
        assert_eq!(count("kept", |t| t.records_in), Some(20_000));
        let names: Vec<&str> = result.vertices.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            !names.iter().any(|n| n.ends_with("-rows")),
            "no boundary to rows: {names:?}"
        );
    }
}
