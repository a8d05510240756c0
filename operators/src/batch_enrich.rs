//! Lookup enrichment on the batch path (issue 18): the `enrich` step of a YAML job whose
//! input schema and table schema are known at plan time. Same meaning as the row path's
//! [`LookupEnrich`](crate::enrich::LookupEnrich) (a Kafka Streams `GlobalKTable` join:
//! every subtask holds the whole table, the latest row per key, and applies the
//! table's updates before each batch), with no row and no JSON between its input and
//! its output:
//!
//! - the table is held as Arrow columns, in chunks (one per batch of updates), with an
//!   index from each key (its [`arrow_row`] encoding) to its row; an update appends a
//!   chunk and moves the key's entry, a deletion removes the entry, and the chunks are
//!   compacted into one when fewer than half of their rows are still indexed;
//! - a batch's keys are encoded in one pass, looked up, and the added columns gathered
//!   from the chunks with one `interleave` per column; a missing key takes chunk 0's
//!   all-null row (`missing: nulls`), or leaves the batch (`drop`, `bad_record`).
//!
//! The plan ([`EnrichPlan`]) is made when the job is validated: a key field the input
//! or the table lacks, or a table key whose type cannot be cast to the input key's, is
//! a plan-time error. Table keys are cast to the input keys' types (a CSV table's
//! `"7"` meets an `int64` key 7), as SQL compares across types.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{new_null_array, Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use brook_core::bad_record::BadRecords;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
use brook_sql::decode::{Format, RecordDecoder};
use brook_sql::schema::field_names;
use serde_json::{Map, Value};

use crate::batch_rows::row_at;
use crate::enrich::{table_keys, MissingKey, TableSource, TableUpdate};
use crate::row::row_key;
use crate::row_batch::RowBatch;

/// A mistake in an enrich step found at plan time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct EnrichPlanError {
    /// The step's setting at fault: `on`, `table_key` or `fields`.
    pub setting: &'static str,
    /// What is wrong, naming the field.
    pub reason: String,
}

/// Where an output column comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutColumn {
    /// The input's column at this index.
    Input(usize),
    /// The added table column at this index of [`EnrichPlan::added`].
    Added(usize),
}

/// An enrich step planned against its input's and its table's schemas.
#[derive(Debug, Clone)]
pub struct EnrichPlan {
    input: SchemaRef,
    /// The schema the table's rows are decoded into.
    table: SchemaRef,
    /// The input's key columns.
    on: Vec<usize>,
    /// The table's key columns, in the same order.
    table_key: Vec<usize>,
    /// The table columns added to each row.
    added: Vec<usize>,
    output: SchemaRef,
    columns: Vec<OutColumn>,
}

impl EnrichPlan {
    /// Plans the step: rows of `input` get the `fields` (default: all but the key) of the
    /// `table` row whose `table_key` fields equal their `on` fields. A field the input
    /// already has is replaced in place (the row path overwrites it); the others are
    /// appended in the table's order. Every added field is nullable (a missing key).
    ///
    /// # Errors
    /// A key field the input or the table lacks, a field to add the table lacks, a
    /// table key whose type cannot be cast to the input key's.
    pub fn new(
        input: &SchemaRef,
        table: &SchemaRef,
        on: &[String],
        table_key: &[String],
        fields: Option<&[String]>,
    ) -> Result<Self, EnrichPlanError> {
        let find = |schema: &SchemaRef, setting: &'static str, side: &str, f: &str| {
            schema.index_of(f).map_err(|_| EnrichPlanError {
                setting,
                reason: format!(
                    "field {f:?} is not in the {side} (its fields: {})",
                    field_names(schema)
                ),
            })
        };
        let on_idx = on
            .iter()
            .map(|f| find(input, "on", "input", f))
            .collect::<Result<Vec<_>, _>>()?;
        let key_idx = table_key
            .iter()
            .map(|f| find(table, "table_key", "lookup table", f))
            .collect::<Result<Vec<_>, _>>()?;
        for ((&i, &k), name) in on_idx.iter().zip(&key_idx).zip(table_key) {
            let (want, have) = (input.field(i).data_type(), table.field(k).data_type());
            if !arrow_cast::can_cast_types(have, want) {
                return Err(EnrichPlanError {
                    setting: "table_key",
                    reason: format!(
                        "field {name:?} of the lookup table is {have}, which cannot be compared with the input's {:?} ({want})",
                        input.field(i).name()
                    ),
                });
            }
        }
        let key_fields: Vec<SortField> = on_idx
            .iter()
            .map(|&i| SortField::new(input.field(i).data_type().clone()))
            .collect();
        if !RowConverter::supports_fields(&key_fields) {
            return Err(EnrichPlanError {
                setting: "on",
                reason: "a key field's type cannot be a lookup key".to_string(),
            });
        }
        if let Some(fields) = fields {
            for f in fields {
                find(table, "fields", "lookup table", f)?;
            }
        }
        let added: Vec<usize> = (0..table.fields().len())
            .filter(|k| !key_idx.contains(k))
            .filter(|&k| fields.is_none_or(|f| f.contains(table.field(k).name())))
            .collect();
        let mut out_fields: Vec<Field> =
            input.fields().iter().map(|f| f.as_ref().clone()).collect();
        let mut columns: Vec<OutColumn> = (0..out_fields.len()).map(OutColumn::Input).collect();
        for (j, &k) in added.iter().enumerate() {
            let f = table.field(k);
            let field = Field::new(f.name(), f.data_type().clone(), true);
            match out_fields.iter().position(|o| o.name() == f.name()) {
                Some(at) => {
                    out_fields[at] = field;
                    columns[at] = OutColumn::Added(j);
                }
                None => {
                    out_fields.push(field);
                    columns.push(OutColumn::Added(j));
                }
            }
        }
        Ok(EnrichPlan {
            input: Arc::clone(input),
            table: Arc::clone(table),
            on: on_idx,
            table_key: key_idx,
            added,
            output: Arc::new(Schema::new(out_fields)),
            columns,
        })
    }

    /// The schema of the step's output rows.
    pub fn output_schema(&self) -> &SchemaRef {
        &self.output
    }

    /// The input key columns' types: table keys are cast to them.
    fn key_types(&self) -> Vec<DataType> {
        self.on
            .iter()
            .map(|&i| self.input.field(i).data_type().clone())
            .collect()
    }

    /// The names of the `on` fields (for messages and the row form of a key).
    fn on_names(&self) -> Vec<String> {
        self.on
            .iter()
            .map(|&i| self.input.field(i).name().clone())
            .collect()
    }
}

/// The enrich operator on batches (see the [module docs](self)).
pub struct BatchEnrich {
    name: String,
    plan: Arc<EnrichPlan>,
    source: Box<dyn TableSource>,
    missing: MissingKey,
    /// Where table rows that do not fit the table's schema go.
    bad: BadRecords,
    decoder: RecordDecoder,
    /// Decodes a deleted key's fields (the table's key fields only).
    key_decoder: RecordDecoder,
    keys: RowConverter,
    /// The added columns of each chunk; chunk 0 is one all-null row.
    chunks: Vec<Vec<ArrayRef>>,
    /// Rows in all chunks but the null one.
    table_rows: usize,
    /// Each key's (chunk, row).
    index: HashMap<Vec<u8>, (usize, usize)>,
    /// Per batch: each kept row's (chunk, row) and the kept rows' positions.
    picks: Vec<(usize, usize)>,
    kept: Vec<u32>,
}

impl std::fmt::Debug for BatchEnrich {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchEnrich")
            .field("name", &self.name)
            .field("rows", &self.index.len())
            .finish_non_exhaustive()
    }
}

impl BatchEnrich {
    /// The operator of a planned step `name` reading its table from `source`; table rows
    /// that do not fit the table's schema go to `bad` (the step's `on_bad_record`).
    pub fn new(
        name: &str,
        plan: Arc<EnrichPlan>,
        source: Box<dyn TableSource>,
        missing: MissingKey,
        bad: BadRecords,
    ) -> Self {
        let keys = RowConverter::new(plan.key_types().into_iter().map(SortField::new).collect())
            .expect("EnrichPlan::new checked the key types with RowConverter::supports_fields");
        let key_schema = Arc::new(Schema::new(
            plan.table_key
                .iter()
                .map(|&k| plan.table.field(k).as_ref().clone())
                .collect::<Vec<_>>(),
        ));
        let nulls = plan
            .added
            .iter()
            .map(|&k| new_null_array(plan.table.field(k).data_type(), 1))
            .collect();
        BatchEnrich {
            name: name.to_string(),
            decoder: RecordDecoder::new(Arc::clone(&plan.table), Format::Json),
            key_decoder: RecordDecoder::new(key_schema, Format::Json),
            plan,
            source,
            missing,
            bad,
            keys,
            chunks: vec![nulls],
            table_rows: 0,
            index: HashMap::new(),
            picks: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// Rows in the table now.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// `key_columns` (in the table's key order) encoded as index keys, cast to the input
    /// keys' types, and for each row whether the cast kept its key: a value the cast
    /// turns into null (`"x7"` as an int64) or into another value (`2.5` into 2, `"07"`
    /// into 7, which does not read back as `"07"`) cannot equal any input key, as on
    /// JSON rows, so such a row is not indexed.
    fn encode_keys(&self, key_columns: &[ArrayRef]) -> OpResult<(arrow_row::Rows, Vec<bool>)> {
        let n = key_columns.first().map_or(0, |c| c.len());
        let mut exact = vec![true; n];
        let mut cast = Vec::with_capacity(key_columns.len());
        for (c, t) in key_columns.iter().zip(self.plan.key_types()) {
            if c.data_type() == &t {
                cast.push(Arc::clone(c));
                continue;
            }
            let to = arrow_cast::cast(c.as_ref(), &t).map_err(OperatorError::other)?;
            let back =
                arrow_cast::cast(to.as_ref(), c.data_type()).map_err(OperatorError::other)?;
            for (i, ok) in exact.iter_mut().enumerate() {
                if c.is_null(i) {
                    continue;
                }
                *ok &= !to.is_null(i) && back.slice(i, 1).to_data() == c.slice(i, 1).to_data();
            }
            cast.push(to);
        }
        let rows = self
            .keys
            .convert_columns(&cast)
            .map_err(OperatorError::other)?;
        Ok((rows, exact))
    }

    fn apply_updates(&mut self, updates: Vec<TableUpdate>) -> OpResult {
        let mut rows: Vec<Vec<u8>> = Vec::new();
        for u in updates {
            match u {
                TableUpdate::Upsert(row) => {
                    rows.push(serde_json::to_vec(&row).map_err(OperatorError::other)?)
                }
                TableUpdate::Delete(key) => {
                    // Upserts before the deletion first: order matters per key.
                    self.upsert(&std::mem::take(&mut rows))?;
                    self.delete(&key)?;
                }
            }
        }
        self.upsert(&rows)?;
        self.compact()
    }

    fn upsert(&mut self, rows: &[Vec<u8>]) -> OpResult {
        if rows.is_empty() {
            return Ok(());
        }
        let decoded = self.decoder.decode(rows);
        for b in &decoded.bad {
            self.bad.handle(
                &String::from_utf8_lossy(&rows[b.index]),
                &format!("step {} (lookup table)", self.name),
                &format!("a table row does not fit the table's schema: {b}"),
            )?;
        }
        let batch = decoded.batch;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let key_columns: Vec<ArrayRef> = self
            .plan
            .table_key
            .iter()
            .map(|&k| Arc::clone(batch.column(k)))
            .collect();
        let (keys, exact) = self.encode_keys(&key_columns)?;
        let chunk = self.chunks.len();
        for ((row, key), exact) in keys.iter().enumerate().zip(exact) {
            if exact {
                self.index.insert(key.as_ref().to_vec(), (chunk, row));
            }
        }
        self.table_rows += batch.num_rows();
        self.chunks.push(
            self.plan
                .added
                .iter()
                .map(|&k| Arc::clone(batch.column(k)))
                .collect(),
        );
        Ok(())
    }

    /// Removes the row of a record key ([`TableUpdate::Delete`]): each table key the
    /// record key can stand for, as the row path.
    fn delete(&mut self, key: &[u8]) -> OpResult {
        let fields: Vec<String> = self
            .plan
            .table_key
            .iter()
            .map(|&k| self.plan.table.field(k).name().clone())
            .collect();
        for text in table_keys(key, fields.len()) {
            let Ok(Value::Array(values)) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            let obj: Map<String, Value> = fields.iter().cloned().zip(values).collect();
            let Ok(record) = serde_json::to_vec(&Value::Object(obj)) else {
                continue;
            };
            let decoded = self.key_decoder.decode(&[record]);
            if decoded.batch.num_rows() != 1 {
                continue; // not a key of these types
            }
            let (keys, exact) = self.encode_keys(decoded.batch.columns())?;
            if exact[0] {
                self.index.remove(keys.row(0).as_ref());
            }
        }
        Ok(())
    }

    /// One chunk of the indexed rows when the chunks hold over twice as many rows (and
    /// at least 1024 more): updates of the same keys would otherwise grow it forever.
    fn compact(&mut self) -> OpResult {
        let live = self.index.len();
        if self.table_rows <= 2 * live + 1024 {
            return Ok(());
        }
        let mut entries: Vec<(&Vec<u8>, &mut (usize, usize))> = self.index.iter_mut().collect();
        let picks: Vec<(usize, usize)> = entries.iter().map(|(_, at)| **at).collect();
        let mut merged = Vec::with_capacity(self.plan.added.len());
        for j in 0..self.plan.added.len() {
            let arrays: Vec<&dyn Array> = self.chunks.iter().map(|c| c[j].as_ref()).collect();
            merged.push(
                arrow_select::interleave::interleave(&arrays, &picks)
                    .map_err(OperatorError::other)?,
            );
        }
        for (row, (_, at)) in entries.iter_mut().enumerate() {
            **at = (1, row);
        }
        self.chunks.truncate(1);
        self.chunks.push(merged);
        self.table_rows = live;
        Ok(())
    }

    /// `rows` enriched; `None` when no row is left.
    fn enrich(&mut self, rows: RowBatch) -> OpResult<Option<RowBatch>> {
        let n = rows.num_rows();
        if rows.columns.schema().fields() != self.plan.input.fields() {
            return Err(OperatorError::failed(format!(
                "step {}: a batch of another schema than planned: {:?}",
                self.name,
                rows.columns.schema()
            )));
        }
        let key_columns: Vec<ArrayRef> = self
            .plan
            .on
            .iter()
            .map(|&i| Arc::clone(rows.columns.column(i)))
            .collect();
        let keys = self
            .keys
            .convert_columns(&key_columns)
            .map_err(OperatorError::other)?;
        self.picks.clear();
        self.kept.clear();
        for (row, key) in keys.iter().enumerate() {
            match (self.index.get(key.as_ref()), &self.missing) {
                (Some(&at), _) => self.picks.push(at),
                (None, MissingKey::Nulls) => self.picks.push((0, 0)),
                (None, MissingKey::Drop) => continue,
                (None, MissingKey::Reject(bad)) => {
                    let json = row_at(&rows.columns, row);
                    bad.handle(
                        &json.to_string(),
                        &format!("step {}", self.name),
                        &format!(
                            "key {} is not in the lookup table",
                            row_key(&json, &self.plan.on_names())
                        ),
                    )?;
                    continue;
                }
            }
            // Only read when some row left (then `kept` has every kept row).
            self.kept.push(row as u32);
        }
        if self.picks.is_empty() {
            return Ok(None);
        }
        let rows = if self.picks.len() == n {
            rows
        } else {
            let kept = UInt32Array::from(std::mem::take(&mut self.kept));
            rows.take(&kept).map_err(OperatorError::other)?
        };
        let mut added = Vec::with_capacity(self.plan.added.len());
        for j in 0..self.plan.added.len() {
            let arrays: Vec<&dyn Array> = self.chunks.iter().map(|c| c[j].as_ref()).collect();
            added.push(
                arrow_select::interleave::interleave(&arrays, &self.picks)
                    .map_err(OperatorError::other)?,
            );
        }
        let columns: Vec<ArrayRef> = self
            .plan
            .columns
            .iter()
            .map(|c| match *c {
                OutColumn::Input(i) => Arc::clone(rows.columns.column(i)),
                OutColumn::Added(j) => Arc::clone(&added[j]),
            })
            .collect();
        let columns = RecordBatch::try_new(Arc::clone(&self.plan.output), columns)
            .map_err(OperatorError::other)?;
        Ok(Some(RowBatch {
            columns,
            timestamps: rows.timestamps,
        }))
    }
}

impl Operator for BatchEnrich {
    type In = RowBatch;
    type Out = RowBatch;

    fn open(&mut self, _ctx: &mut OperatorContext) -> OpResult {
        let rows = self.source.load()?;
        self.apply_updates(rows)
    }

    fn process_batch(
        &mut self,
        batch: Batch<RowBatch>,
        _ctx: &mut OperatorContext,
        out: &mut Output<RowBatch>,
    ) -> OpResult {
        let updates = self.source.poll_updates()?;
        if !updates.is_empty() {
            self.apply_updates(updates)?;
        }
        for r in batch {
            if let Some(rows) = self.enrich(r.value)? {
                out.push(rows.into_record());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enrich::StaticTable;
    use arrow_array::Int64Array;
    use brook_core::bad_record::{BadRecordCounts, BadRecordPolicy};
    use brook_sql::schema::{schema_of, FieldType};
    use brook_testkit::operator::{HarnessSetup, OperatorHarness};
    use serde_json::json;
    use std::sync::Mutex;

    /// A table whose updates the test pushes, after one row for mia.
    struct Pushed(Arc<Mutex<Vec<TableUpdate>>>);

    impl TableSource for Pushed {
        fn load(&mut self) -> OpResult<Vec<TableUpdate>> {
            Ok(vec![
                json!({"student": "mia", "class": "3a", "year": 3}).into()
            ])
        }
        fn poll_updates(&mut self) -> OpResult<Vec<TableUpdate>> {
            Ok(std::mem::take(&mut *self.0.lock().unwrap()))
        }
    }

    fn schema(fields: &[(&str, FieldType)]) -> SchemaRef {
        schema_of(fields.iter().map(|(n, t)| (n.to_string(), *t)).collect()).unwrap()
    }

    fn students() -> SchemaRef {
        schema(&[("student", FieldType::String), ("mark", FieldType::Int64)])
    }

    fn classes() -> SchemaRef {
        schema(&[
            ("student", FieldType::String),
            ("class", FieldType::String),
            ("year", FieldType::Int64),
        ])
    }

    fn plan(input: SchemaRef, table: SchemaRef, on: &str, key: &str) -> Arc<EnrichPlan> {
        Arc::new(EnrichPlan::new(&input, &table, &[on.into()], &[key.into()], None).unwrap())
    }

    fn skip() -> (BadRecords, Arc<BadRecordCounts>) {
        let counts = Arc::new(BadRecordCounts::default());
        (
            BadRecords::new(BadRecordPolicy::Skip, Arc::clone(&counts), None),
            counts,
        )
    }

    /// A batch's rows as JSON.
    fn rows_of_batch(b: &RowBatch) -> Vec<Value> {
        (0..b.num_rows()).map(|i| row_at(&b.columns, i)).collect()
    }

    fn opened(op: BatchEnrich) -> OperatorHarness<BatchEnrich> {
        let mut h = HarnessSetup::new("enrich").harness(op).unwrap();
        h.open().unwrap();
        h
    }

    /// `rows` (JSON objects of `schema`) through the operator, as JSON rows out.
    fn run(
        h: &mut OperatorHarness<BatchEnrich>,
        schema: &SchemaRef,
        rows: Vec<Value>,
    ) -> Vec<Value> {
        let lines: Vec<Vec<u8>> = rows
            .iter()
            .map(|r| serde_json::to_vec(r).unwrap())
            .collect();
        let decoded = RecordDecoder::new(Arc::clone(schema), Format::Json).decode(&lines);
        assert!(decoded.bad.is_empty(), "{:?}", decoded.bad);
        let n = decoded.batch.num_rows() as i64;
        let rows = RowBatch {
            columns: decoded.batch,
            timestamps: Some(Arc::new(Int64Array::from_iter_values(0..n))),
        };
        h.process_batch(vec![rows.into_record()]).unwrap();
        h.take_values().iter().flat_map(rows_of_batch).collect()
    }

    #[test]
    fn updates_take_effect_for_later_rows_only_and_deletions_remove_keys() {
        let pushed = Arc::new(Mutex::new(Vec::new()));
        let (bad, _) = skip();
        let mut op = opened(BatchEnrich::new(
            "class",
            plan(students(), classes(), "student", "student"),
            Box::new(Pushed(Arc::clone(&pushed))),
            MissingKey::Nulls,
            bad,
        ));
        let input = || {
            vec![
                json!({"student": "mia", "mark": 1}),
                json!({"student": "leo", "mark": 2}),
            ]
        };
        assert_eq!(
            run(&mut op, &students(), input()),
            vec![
                json!({"student": "mia", "mark": 1, "class": "3a", "year": 3}),
                json!({"student": "leo", "mark": 2, "class": null, "year": null})
            ]
        );
        pushed.lock().unwrap().extend([
            json!({"student": "mia", "class": "4b", "year": 4}).into(),
            json!({"student": "leo", "class": "2c", "year": 2}).into(),
        ]);
        assert_eq!(
            run(&mut op, &students(), input()),
            vec![
                json!({"student": "mia", "mark": 1, "class": "4b", "year": 4}),
                json!({"student": "leo", "mark": 2, "class": "2c", "year": 2})
            ]
        );
        // A tombstone for mia, then leo again: in order.
        pushed.lock().unwrap().extend([
            TableUpdate::Delete(b"mia".to_vec()),
            json!({"student": "leo", "class": "2d", "year": 2}).into(),
        ]);
        assert_eq!(
            run(&mut op, &students(), input()),
            vec![
                json!({"student": "mia", "mark": 1, "class": null, "year": null}),
                json!({"student": "leo", "mark": 2, "class": "2d", "year": 2})
            ]
        );
        assert_eq!(op.operator().len(), 1);
    }

    #[test]
    fn rows_of_missing_keys_are_dropped_or_rejected_with_their_times() {
        let input = schema(&[("n", FieldType::Int64)]);
        let table = schema(&[("id", FieldType::Int64), ("name", FieldType::String)]);
        let rows = || Box::new(StaticTable(vec![json!({"id": 1, "name": "one"})]));
        let (bad, _) = skip();
        let mut drop = opened(BatchEnrich::new(
            "d",
            plan(input.clone(), table.clone(), "n", "id"),
            rows(),
            MissingKey::Drop,
            bad,
        ));
        let lines = [br#"{"n": 2}"#.to_vec(), br#"{"n": 1}"#.to_vec()];
        let batch = RecordDecoder::new(Arc::clone(&input), Format::Json)
            .decode(&lines)
            .batch;
        let rows_in = RowBatch {
            columns: batch,
            timestamps: Some(Arc::new(Int64Array::from(vec![10, 20]))),
        };
        drop.process_batch(vec![rows_in.into_record()]).unwrap();
        let out = drop.take_values();
        assert_eq!(out.len(), 1);
        assert_eq!(rows_of_batch(&out[0]), vec![json!({"n": 1, "name": "one"})]);
        assert_eq!(out[0].timestamp(0), Some(20), "the kept row keeps its time");

        let (bad, counts) = skip();
        let mut reject = opened(BatchEnrich::new(
            "r",
            plan(input.clone(), table, "n", "id"),
            rows(),
            MissingKey::Reject(bad.clone()),
            bad,
        ));
        assert_eq!(
            run(&mut reject, &input, vec![json!({"n": 2})]),
            Vec::<Value>::new()
        );
        assert_eq!(counts.skipped(), 1);
    }

    #[test]
    fn table_keys_are_cast_to_the_input_keys_type() {
        // A table whose ids are text (a CSV column of codes, say) meets int64 rows.
        let input = schema(&[("n", FieldType::Int64)]);
        let table = schema(&[("id", FieldType::String), ("name", FieldType::String)]);
        let (bad, _) = skip();
        let mut op = opened(BatchEnrich::new(
            "c",
            plan(input.clone(), table, "n", "id"),
            Box::new(StaticTable(vec![json!({"id": "7", "name": "seven"})])),
            MissingKey::Nulls,
            bad,
        ));
        assert_eq!(
            run(&mut op, &input, vec![json!({"n": 7}), json!({"n": 8})]),
            vec![
                json!({"n": 7, "name": "seven"}),
                json!({"n": 8, "name": null})
            ]
        );
    }

    #[test]
    fn table_keys_that_the_cast_changes_match_nothing() {
        // "x7" is no int64 (null after the cast), "07" reads back as "7", 2.5 is no
        // int64 either: none of them may meet a row (a null key, 7, 2), as on JSON rows.
        let input = schema(&[("n", FieldType::Int64)]);
        let texts = schema(&[("id", FieldType::String), ("name", FieldType::String)]);
        let floats = schema(&[("id", FieldType::Float64), ("name", FieldType::String)]);
        let rows = vec![json!({"n": null}), json!({"n": 7}), json!({"n": 2})];
        let (bad, _) = skip();
        let mut op = opened(BatchEnrich::new(
            "c",
            plan(input.clone(), texts, "n", "id"),
            Box::new(StaticTable(vec![
                json!({"id": "x7", "name": "x"}),
                json!({"id": "07", "name": "zero-seven"}),
            ])),
            MissingKey::Nulls,
            bad.clone(),
        ));
        assert_eq!(
            run(&mut op, &input, rows.clone()),
            vec![
                json!({"n": null, "name": null}),
                json!({"n": 7, "name": null}),
                json!({"n": 2, "name": null})
            ]
        );
        let mut op = opened(BatchEnrich::new(
            "f",
            plan(input.clone(), floats, "n", "id"),
            Box::new(StaticTable(vec![
                json!({"id": 2.5, "name": "two and a half"}),
                json!({"id": 7.0, "name": "seven"}),
            ])),
            MissingKey::Nulls,
            bad,
        ));
        assert_eq!(
            run(&mut op, &input, rows),
            vec![
                json!({"n": null, "name": null}),
                json!({"n": 7, "name": "seven"}),
                json!({"n": 2, "name": null})
            ]
        );
    }

    #[test]
    fn a_table_row_that_does_not_fit_goes_to_the_steps_policy() {
        let (bad, counts) = skip();
        let mut op = opened(BatchEnrich::new(
            "y",
            plan(students(), classes(), "student", "student"),
            Box::new(StaticTable(vec![
                json!({"student": "mia", "class": "3a", "year": "third"}),
                json!({"student": "leo", "class": "2c", "year": 2}),
            ])),
            MissingKey::Nulls,
            bad,
        ));
        assert_eq!(counts.skipped(), 1);
        assert_eq!(op.operator().len(), 1);
        assert_eq!(
            run(
                &mut op,
                &students(),
                vec![json!({"student": "leo", "mark": 5})]
            ),
            vec![json!({"student": "leo", "mark": 5, "class": "2c", "year": 2})]
        );
    }

    #[test]
    fn many_updates_of_few_keys_compact_the_table_and_keep_the_latest_rows() {
        let pushed = Arc::new(Mutex::new(Vec::new()));
        let (bad, _) = skip();
        let mut op = opened(BatchEnrich::new(
            "k",
            plan(students(), classes(), "student", "student"),
            Box::new(Pushed(Arc::clone(&pushed))),
            MissingKey::Nulls,
            bad,
        ));
        for round in 0..5 {
            let updates = (0..1000).map(|i| {
                json!({"student": format!("s{}", i % 10), "class": format!("c{round}-{i}"), "year": i}).into()
            });
            pushed.lock().unwrap().extend(updates);
            run(
                &mut op,
                &students(),
                vec![json!({"student": "mia", "mark": 0})],
            );
        }
        let e = op.operator();
        assert_eq!(e.len(), 11);
        assert!(
            e.table_rows <= 2 * 11 + 1024,
            "compacted: {} rows",
            e.table_rows
        );
        assert_eq!(
            run(
                &mut op,
                &students(),
                vec![
                    json!({"student": "s3", "mark": 0}),
                    json!({"student": "mia", "mark": 1})
                ]
            ),
            vec![
                json!({"student": "s3", "mark": 0, "class": "c4-993", "year": 993}),
                json!({"student": "mia", "mark": 1, "class": "3a", "year": 3})
            ]
        );
    }

    #[test]
    fn a_field_of_the_input_is_replaced_in_place() {
        let input = schema(&[
            ("student", FieldType::String),
            ("year", FieldType::String),
            ("mark", FieldType::Int64),
        ]);
        let p = EnrichPlan::new(
            &input,
            &classes(),
            &["student".into()],
            &["student".into()],
            Some(&["year".into()]),
        )
        .unwrap();
        let names: Vec<_> = p
            .output_schema()
            .fields()
            .iter()
            .map(|f| (f.name().as_str(), f.data_type().clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("student", DataType::Utf8),
                ("year", DataType::Int64),
                ("mark", DataType::Int64)
            ]
        );
    }

    #[test]
    fn mistakes_are_found_when_planned() {
        let err = |on: &str, key: &str, fields: Option<&[String]>| {
            EnrichPlan::new(&students(), &classes(), &[on.into()], &[key.into()], fields)
                .unwrap_err()
        };
        let e = err("pupil", "student", None);
        assert_eq!(e.setting, "on");
        assert!(
            e.reason
                .contains("\"pupil\" is not in the input (its fields: student, mark)"),
            "{}",
            e.reason
        );
        assert_eq!(err("student", "name", None).setting, "table_key");
        let e = err("student", "student", Some(&["room".to_string()]));
        assert_eq!(e.setting, "fields");
        assert!(
            e.reason.contains("\"room\" is not in the lookup table"),
            "{}",
            e.reason
        );
        let bools = schema(&[("flag", FieldType::Bool), ("x", FieldType::Int64)]);
        let e = EnrichPlan::new(
            &students(),
            &bools,
            &["mark".into()],
            &["flag".into()],
            None,
        );
        // bool -> int64 casts in arrow: a plan, not an error.
        assert!(e.is_ok());
    }
}
