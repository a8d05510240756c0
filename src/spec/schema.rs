//! The schema of each source and step's rows, fixed when the spec is validated, so a
//! `filter`, `map` or `select` is planned (and its mistakes found) before anything runs
//! (issue 18, docs/semantics.md §5a).
//!
//! - A source's `schema: {field: type}` when declared; otherwise a file source's is
//!   inferred from the first [`SAMPLE_RECORDS`] records of its (first) file, and a
//!   generator's is its known fields `{key, ts, value}` (all `int64`).
//! - Each step's output follows from its input: `filter`, `key_by`: the same; `map`,
//!   `select`: brook-sql's projection; a union: its inputs' when they are all the same.
//! - An `enrich` step's: its plan's ([`brook_operators::batch_enrich::EnrichPlan`]),
//!   from its input's and its table's ([`table_schema`]).
//! - An `async_enrich` step's with its answer's `schema:` declared: the input's fields
//!   and the answer's ([`merged`]).
//! - Unknown at plan time (`None`): a log or Kafka source without `schema:` (read only
//!   when the job runs), an `enrich` step's whose table schema is unknown, an
//!   `async_enrich` step's without an answer schema, and a window's on JSON rows. A `filter`/`map`/`select` on such an input is
//!   planned on its first batch ([`brook_operators::row_sql`]).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use arrow_schema::SchemaRef;
use brook_sql::schema::SchemaError;
use indexmap::IndexMap;

use super::{file_format, FileFormat, SourceSpec, SpecError, TableSpec};

/// How many records of a file its schema is inferred from (as Flink's and DataFusion's
/// default sample size for schema inference, 1000).
pub(crate) const SAMPLE_RECORDS: usize = 1000;

/// The schema of a source's rows, if known at plan time.
///
/// # Errors
/// A declared schema with an unknown type or a repeated field; a file whose first
/// records are not JSON / CSV.
pub(crate) fn source_schema(field: &str, s: &SourceSpec) -> Result<Option<SchemaRef>, SpecError> {
    if let Some(declared) = declared_fields(s) {
        return declared_schema(field, declared).map(Some);
    }
    match s {
        SourceSpec::File { path, format, .. } => file_schema(field, path, *format),
        SourceSpec::Generator { .. } => super::columnar::generator_schema()
            .map(Some)
            .map_err(|e| schema_error(field, &e)),
        SourceSpec::Log { .. } | SourceSpec::Kafka { .. } => Ok(None),
    }
}

/// A file's schema inferred from its first [`SAMPLE_RECORDS`] records (`path` a file, or
/// a directory whose first file by name is read); `None` when there is nothing to
/// infer from yet.
fn file_schema(
    field: &str,
    path: &Path,
    format: Option<FileFormat>,
) -> Result<Option<SchemaRef>, SpecError> {
    let Some(file) = first_file(path) else {
        return Ok(None);
    };
    let format = format
        .or_else(|| file_format(&file))
        .unwrap_or(FileFormat::Jsonl);
    let sample = read_sample(&file).map_err(|e| {
        SpecError::new(
            format!("{field}.path"),
            format!("cannot read {}: {e}", file.display()),
        )
    })?;
    // Lines that are not JSON objects are the source's bad records, not
    // part of the schema.
    let sample = match format {
        FileFormat::Jsonl => json_objects(&sample),
        FileFormat::Csv => sample,
    };
    if sample.iter().all(u8::is_ascii_whitespace) {
        // Nothing to infer from (a file still to be written, with `follow`).
        return Ok(None);
    }
    let inferred = match format {
        // Nested objects or arrays: no schema at plan time. Their rows stay JSON rows,
        // which keep such fields; batches of the scalars would drop them (a window's
        // late rows, an enrich's output) and refuse an aggregate of one.
        FileFormat::Jsonl => brook_sql::infer::infer_json_scalars(&sample, None)
            .map(|(schema, nested)| nested.is_empty().then_some(schema)),
        FileFormat::Csv => brook_sql::infer::infer_csv(&sample, None).map(Some),
    };
    inferred.map_err(|e| {
        SpecError::new(
            format!("{field}.schema"),
            format!(
                "cannot infer it from the first records of {}: {e}; declare it (`schema: {{field: type}}`)",
                file.display()
            ),
        )
    })
}

/// The schema of an `enrich` step's lookup table, if known at plan time: declared
/// (`table.schema`), or a file table's inferred from its first records as a file
/// source's; a log topic's without `schema:` is read only when the job runs. `field`
/// is the step's `enrich.table`.
///
/// # Errors
/// A declared schema with an unknown type or a repeated field; a file whose first
/// records are not JSON / CSV.
pub(crate) fn table_schema(field: &str, t: &TableSpec) -> Result<Option<SchemaRef>, SpecError> {
    match t {
        TableSpec::File {
            schema: Some(s), ..
        }
        | TableSpec::Log {
            schema: Some(s), ..
        } => declared_schema(field, s).map(Some),
        TableSpec::File { path, format, .. } => file_schema(field, path, *format),
        TableSpec::Log { schema: None, .. } => Ok(None),
    }
}

/// `input`'s fields with `added`'s merged in: a field of both takes `added`'s type in
/// place, the others are appended in order; the added ones nullable (an
/// `async_enrich` step's output: the row with the answer's fields).
pub(crate) fn merged(input: &SchemaRef, added: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<arrow_schema::Field> =
        input.fields().iter().map(|f| f.as_ref().clone()).collect();
    for f in added.fields() {
        let field = f.as_ref().clone().with_nullable(true);
        match fields.iter().position(|g| g.name() == f.name()) {
            Some(i) => fields[i] = field,
            None => fields.push(field),
        }
    }
    std::sync::Arc::new(arrow_schema::Schema::new(fields))
}

/// The lines of `sample` that are JSON objects.
fn json_objects(sample: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sample.len());
    for line in sample.split(|b| *b == b'\n') {
        if serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(line).is_ok() {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out
}

/// The `schema:` a source declares.
fn declared_fields(s: &SourceSpec) -> Option<&IndexMap<String, String>> {
    match s {
        SourceSpec::File { schema, .. }
        | SourceSpec::Log { schema, .. }
        | SourceSpec::Kafka { schema, .. } => schema.as_ref(),
        SourceSpec::Generator { .. } => None,
    }
}

pub(crate) fn declared_schema(
    field: &str,
    fields: &IndexMap<String, String>,
) -> Result<SchemaRef, SpecError> {
    brook_sql::schema::declared(fields.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| schema_error(field, &e))
}

/// `sources[0] (s).schema.price: unknown type ...`: the schema error's own place
/// (`schema.price`) after the source's.
fn schema_error(field: &str, e: &SchemaError) -> SpecError {
    let text = e.to_string();
    match text.split_once(": ") {
        Some((at, reason)) if at.starts_with("schema") && !at.contains(' ') => {
            SpecError::new(format!("{field}.{at}"), reason)
        }
        _ => SpecError::new(format!("{field}.schema"), text),
    }
}

/// The file a source reads first: the file itself, or the first file of a directory in
/// name order (as the file source reads them).
fn first_file(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files.into_iter().next()
}

/// The first lines of `file` (gunzipped for `.gz`): a CSV header and [`SAMPLE_RECORDS`]
/// records, or as many JSON lines.
fn read_sample(file: &Path) -> std::io::Result<Vec<u8>> {
    let f = File::open(file)?;
    let gz = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    let reader: Box<dyn Read> = if gz {
        Box::new(flate2::read::MultiGzDecoder::new(f))
    } else {
        Box::new(f)
    };
    let mut reader = BufReader::new(reader);
    let mut sample = Vec::new();
    for _ in 0..=SAMPLE_RECORDS {
        if reader.read_until(b'\n', &mut sample)? == 0 {
            break;
        }
    }
    Ok(sample)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_file_schema_is_inferred_from_its_first_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sales.jsonl");
        let mut f = File::create(&path).expect("create");
        writeln!(f, r#"{{"item": "milk", "price_cents": 250, "tags": [1]}}"#).expect("write");
        writeln!(f, "not json").expect("write");
        writeln!(f, r#"{{"item": "tea", "price_cents": 120.5}}"#).expect("write");
        let spec = super::super::parse(&format!(
            "name: x\nsources:\n  - {{name: s, connector: file, path: {}}}\nsinks:\n  - {{name: o, connector: stdout}}\n",
            path.display()
        ))
        .expect("parses");
        // A nested field: no schema at plan time (the rows stay JSON rows, which
        // keep it).
        assert_eq!(
            source_schema("sources[0] (s)", &spec.sources[0]).expect("infers"),
            None
        );
        std::fs::write(
            &path,
            "{\"item\": \"milk\", \"price_cents\": 250}\nnot json\n{\"item\": \"tea\", \"price_cents\": 120.5}\n",
        )
        .expect("write");
        let schema = source_schema("sources[0] (s)", &spec.sources[0])
            .expect("infers")
            .expect("known");
        let fields: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| format!("{}: {}", f.name(), f.data_type()))
            .collect();
        assert_eq!(fields, ["item: Utf8", "price_cents: Float64"]);
    }

    #[test]
    fn a_declared_schema_error_names_the_field() {
        let spec = super::super::parse(
            "name: x\nsources:\n  - {name: s, connector: log, topic: t, schema: {price: integer}}\nsinks:\n  - {name: o, connector: stdout}\n",
        )
        .expect("parses");
        let err = source_schema("sources[0] (s)", &spec.sources[0]).expect_err("bad type");
        assert_eq!(
            err.to_string(),
            "sources[0] (s).schema.price: unknown type `integer` (types: string, int64, float64, bool, timestamp)"
        );
    }
}
