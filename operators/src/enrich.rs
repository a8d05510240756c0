//! Lookup enrichment: each row gets the fields of the row with the same key in a
//! lookup table (a list of students with their class, say), as a Kafka Streams join
//! with a `GlobalKTable`: every subtask holds the whole table, the latest row per key
//! (a compacted topic's view), and keeps it up to date while the job runs.
//!
//! Where the table comes from is a [`TableSource`] (a file, a log topic; implemented
//! where those are known): [`TableSource::load`] fills the table when the operator
//! opens, [`TableSource::poll_updates`] brings rows written since, and is asked
//! before each batch, so an update takes effect for every row processed after it was
//! read and for none before (processing-time semantics, as a `GlobalKTable`).

use std::collections::HashMap;
use std::fmt;

use brook_core::bad_record::BadRecords;
use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
use serde_json::{Map, Value};

use crate::row::{row_key, Row};

/// One change to a lookup table.
#[derive(Debug, Clone, PartialEq)]
pub enum TableUpdate {
    /// A row: it replaces the row with the same `table_key` fields.
    Upsert(Row),
    /// A deletion by record key (a tombstone, the null value of a compacted log
    /// topic, as a Kafka Streams `GlobalKTable` deletes a key): removes the row whose
    /// `table_key` fields equal the key. With one key field the key is that field's
    /// value as text (a string) or as JSON (a number, ...); with several, a JSON array
    /// of their values. These are the keys `brook produce --key-field` writes.
    Delete(Vec<u8>),
}

impl TableUpdate {
    /// The update a record of a table topic stands for, whichever way the topic is
    /// read (the log in this process, or a broker): its value is a JSON row; a null
    /// value (`None`, a tombstone) deletes the row of its key.
    ///
    /// # Errors
    /// A value that is not JSON, a tombstone without a key: what is wrong, for the
    /// caller to place (topic, partition, offset).
    pub fn from_record(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Self, String> {
        match (value, key) {
            (Some(v), _) => serde_json::from_slice::<Row>(v)
                .map(TableUpdate::Upsert)
                .map_err(|e| e.to_string()),
            (None, Some(k)) => Ok(TableUpdate::Delete(k.to_vec())),
            (None, None) => Err("a tombstone without a key".to_string()),
        }
    }
}

impl From<Row> for TableUpdate {
    fn from(row: Row) -> Self {
        TableUpdate::Upsert(row)
    }
}

/// Rows of a lookup table: the initial contents and the updates that follow.
pub trait TableSource: Send {
    /// The table's contents now, as updates in order (later rows of a key replace
    /// earlier ones, a deletion removes its key).
    ///
    /// # Errors
    /// When the table cannot be read (a missing file, a bad row): the job fails to
    /// start.
    fn load(&mut self) -> OpResult<Vec<TableUpdate>>;
    /// Updates since the last `load` or `poll_updates`; none for a static table.
    /// Called before every batch: must be cheap when nothing changed.
    ///
    /// # Errors
    /// When the updates cannot be read.
    fn poll_updates(&mut self) -> OpResult<Vec<TableUpdate>> {
        Ok(Vec::new())
    }
}

/// What happens to a row whose key is not in the table.
#[derive(Debug, Clone)]
pub enum MissingKey {
    /// It is dropped.
    Drop,
    /// It passes with `null` for each table field (the fields of the table's rows).
    Nulls,
    /// It goes to the bad-record policy (dead letter, skip or fail).
    Reject(BadRecords),
}

/// The enrichment operator (see the [module docs](self)).
pub struct LookupEnrich {
    source: Box<dyn TableSource>,
    table: HashMap<String, Map<String, Value>>,
    /// Table fields in the order first seen, for `MissingKey::Nulls`.
    table_fields: Vec<String>,
    on: Vec<String>,
    table_key: Vec<String>,
    fields: Option<Vec<String>>,
    missing: MissingKey,
    name: String,
}

impl fmt::Debug for LookupEnrich {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LookupEnrich")
            .field("name", &self.name)
            .field("rows", &self.table.len())
            .field("on", &self.on)
            .field("table_key", &self.table_key)
            .finish_non_exhaustive()
    }
}

impl LookupEnrich {
    /// Enriches rows by their `on` fields with the table row whose `table_key` fields
    /// are equal (same number of fields, compared in order), adding the table row's
    /// other fields (or only `fields`); a field the row already has is overwritten.
    /// `name` names the step in errors.
    pub fn new(
        name: &str,
        source: Box<dyn TableSource>,
        on: Vec<String>,
        table_key: Vec<String>,
        fields: Option<Vec<String>>,
        missing: MissingKey,
    ) -> Self {
        LookupEnrich {
            source,
            table: HashMap::new(),
            table_fields: Vec::new(),
            on,
            table_key,
            fields,
            missing,
            name: name.to_string(),
        }
    }

    /// Rows in the table now.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    fn upsert(&mut self, row: Row) -> OpResult {
        let key = row_key(&row, &self.table_key);
        let Value::Object(mut m) = row else {
            return Err(OperatorError::failed(format!(
                "{}: a lookup table row is not a JSON object: {row}",
                self.name
            )));
        };
        m.retain(|k, _| {
            !self.table_key.contains(k) && self.fields.as_ref().is_none_or(|f| f.contains(k))
        });
        for k in m.keys() {
            if !self.table_fields.contains(k) {
                self.table_fields.push(k.clone());
            }
        }
        self.table.insert(key, m);
        Ok(())
    }

    fn apply_updates(&mut self, updates: Vec<TableUpdate>) -> OpResult {
        for u in updates {
            match u {
                TableUpdate::Upsert(row) => self.upsert(row)?,
                TableUpdate::Delete(key) => {
                    for k in table_keys(&key, self.table_key.len()) {
                        self.table.remove(&k);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Operator for LookupEnrich {
    type In = Row;
    type Out = Row;

    fn open(&mut self, _ctx: &mut OperatorContext) -> OpResult {
        let rows = self.source.load()?;
        self.apply_updates(rows)
    }

    fn process_batch(
        &mut self,
        batch: Batch<Row>,
        _ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        let updates = self.source.poll_updates()?;
        self.apply_updates(updates)?;
        for r in batch {
            let mut row = r.value;
            let key = row_key(&row, &self.on);
            let Value::Object(m) = &mut row else {
                out.collect(row, r.timestamp);
                continue;
            };
            match (self.table.get(&key), &self.missing) {
                (Some(t), _) => {
                    for (k, v) in t {
                        m.insert(k.clone(), v.clone());
                    }
                }
                (None, MissingKey::Drop) => continue,
                (None, MissingKey::Nulls) => {
                    for f in self.fields.as_ref().unwrap_or(&self.table_fields) {
                        m.insert(f.clone(), Value::Null);
                    }
                }
                (None, MissingKey::Reject(bad)) => {
                    bad.handle(
                        &row.to_string(),
                        &format!("step {}", self.name),
                        &format!("key {key} is not in the lookup table"),
                    )?;
                    continue;
                }
            }
            out.collect(row, r.timestamp);
        }
        Ok(())
    }
}

/// The table keys (see [`row_key`]) a record key can stand for (see
/// [`TableUpdate::Delete`]): a JSON array of `fields` values as it is; with one field,
/// the key's text as a string and, when it is JSON (a number, say), as that value.
pub(crate) fn table_keys(key: &[u8], fields: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(key);
    let json = serde_json::from_str::<Value>(&text).ok();
    if let Some(Value::Array(values)) = &json {
        if values.len() == fields && fields != 1 {
            return vec![Value::Array(values.clone()).to_string()];
        }
    }
    if fields != 1 {
        return Vec::new();
    }
    let mut keys = vec![Value::Array(vec![Value::String(text.to_string())]).to_string()];
    if let Some(v) = json.filter(|v| !v.is_string()) {
        keys.push(Value::Array(vec![v]).to_string());
    }
    keys
}

/// A table that never changes: these rows.
#[derive(Debug, Clone)]
pub struct StaticTable(pub Vec<Row>);

impl TableSource for StaticTable {
    fn load(&mut self) -> OpResult<Vec<TableUpdate>> {
        Ok(self.0.iter().cloned().map(TableUpdate::Upsert).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_core::bad_record::{BadRecordCounts, BadRecordPolicy};
    use brook_core::element::StreamRecord;
    use brook_testkit::operator::{HarnessSetup, OperatorHarness};
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    /// A table whose updates the test pushes.
    struct Pushed(Arc<Mutex<Vec<TableUpdate>>>);

    impl TableSource for Pushed {
        fn load(&mut self) -> OpResult<Vec<TableUpdate>> {
            Ok(vec![json!({"student": "mia", "class": "3a"}).into()])
        }
        fn poll_updates(&mut self) -> OpResult<Vec<TableUpdate>> {
            Ok(std::mem::take(&mut *self.0.lock().unwrap()))
        }
    }

    /// An opened harness for `op`.
    fn opened(op: LookupEnrich) -> OperatorHarness<LookupEnrich> {
        let mut h = HarnessSetup::new("enrich").harness(op).unwrap();
        h.open().unwrap();
        h
    }

    fn run(h: &mut OperatorHarness<LookupEnrich>, rows: Vec<Row>) -> Vec<Row> {
        let batch = rows.into_iter().map(StreamRecord::new).collect();
        h.process_batch(batch).unwrap();
        h.take_values()
    }

    #[test]
    fn updates_take_effect_for_later_rows_only() {
        let pushed = Arc::new(Mutex::new(Vec::new()));
        let mut op = opened(LookupEnrich::new(
            "class",
            Box::new(Pushed(Arc::clone(&pushed))),
            vec!["student".into()],
            vec!["student".into()],
            None,
            MissingKey::Nulls,
        ));
        let before = run(
            &mut op,
            vec![json!({"student": "mia"}), json!({"student": "leo"})],
        );
        assert_eq!(
            before,
            vec![
                json!({"student": "mia", "class": "3a"}),
                json!({"student": "leo", "class": null})
            ]
        );
        pushed
            .lock()
            .unwrap()
            .push(json!({"student": "mia", "class": "4b"}).into());
        pushed
            .lock()
            .unwrap()
            .push(json!({"student": "leo", "class": "2c"}).into());
        let after = run(
            &mut op,
            vec![json!({"student": "mia"}), json!({"student": "leo"})],
        );
        assert_eq!(
            after,
            vec![
                json!({"student": "mia", "class": "4b"}),
                json!({"student": "leo", "class": "2c"})
            ]
        );
        assert_eq!(op.operator().len(), 2);
        // A tombstone for mia deletes her row: later rows miss it.
        pushed
            .lock()
            .unwrap()
            .push(TableUpdate::Delete(b"mia".to_vec()));
        let deleted = run(
            &mut op,
            vec![json!({"student": "mia"}), json!({"student": "leo"})],
        );
        assert_eq!(
            deleted,
            vec![
                json!({"student": "mia", "class": null}),
                json!({"student": "leo", "class": "2c"})
            ]
        );
        assert_eq!(op.operator().len(), 1);
    }

    #[test]
    fn a_record_is_a_row_a_deletion_or_an_error() {
        assert_eq!(
            TableUpdate::from_record(Some(b"mia"), Some(br#"{"student":"mia"}"#)),
            Ok(TableUpdate::Upsert(json!({"student": "mia"})))
        );
        assert_eq!(
            TableUpdate::from_record(Some(b"mia"), None),
            Ok(TableUpdate::Delete(b"mia".to_vec()))
        );
        assert_eq!(
            TableUpdate::from_record(None, None),
            Err("a tombstone without a key".to_string())
        );
        assert!(TableUpdate::from_record(None, Some(b"{")).is_err());
    }

    #[test]
    fn a_deleted_key_is_the_key_produce_writes() {
        // One field: its text, as a string or as JSON.
        assert_eq!(table_keys(b"mia", 1), vec![r#"["mia"]"#]);
        assert_eq!(table_keys(b"42", 1), vec![r#"["42"]"#, "[42]"]);
        // Several: a JSON array of their values.
        assert_eq!(table_keys(br#"["mia",3]"#, 2), vec![r#"["mia",3]"#]);
        assert!(table_keys(b"mia", 2).is_empty());
    }

    #[test]
    fn missing_keys_are_dropped_or_rejected() {
        let table = || Box::new(StaticTable(vec![json!({"id": 1, "name": "one"})]));
        let mut drop = opened(LookupEnrich::new(
            "d",
            table(),
            vec!["n".into()],
            vec!["id".into()],
            None,
            MissingKey::Drop,
        ));
        assert_eq!(
            run(&mut drop, vec![json!({"n": 1}), json!({"n": 2})]),
            vec![json!({"n": 1, "name": "one"})]
        );
        let counts = Arc::new(BadRecordCounts::default());
        let bad = BadRecords::new(BadRecordPolicy::Skip, Arc::clone(&counts), None);
        let mut reject = opened(LookupEnrich::new(
            "r",
            table(),
            vec!["n".into()],
            vec!["id".into()],
            None,
            MissingKey::Reject(bad),
        ));
        assert_eq!(run(&mut reject, vec![json!({"n": 2})]), Vec::<Row>::new());
        assert_eq!(counts.skipped(), 1);
    }
}
