//! The record decoders of YAML jobs on Arrow batches (sql/src/decode.rs) and schema
//! inference from a sample (sql/src/infer.rs): JSON objects and CSV lines into a
//! `RecordBatch` of a fixed schema, each record that does not fit reported by position.
//!
//! Input: a control byte, then the records, one per line. Control bits: 1 = CSV (else
//! JSON); 2 = the schema inferred from the records themselves (else five declared
//! fields `a`..`e` of every type, rotated by the bits above).
//!
//! What must hold: decoding never fails as a whole and never panics; every record is
//! either a row of the batch or a bad record, reported once, in order.
#![no_main]

use brook_sql::decode::{Format, RecordDecoder};
use brook_sql::infer::{infer_csv, infer_json};
use brook_sql::schema::{schema_of, FieldType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let format = if ctl & 1 != 0 { Format::Csv } else { Format::Json };
    let schema = if ctl & 2 != 0 {
        let inferred = match format {
            Format::Csv => infer_csv(rest, Some(100)),
            Format::Json => infer_json(rest, Some(100)),
        };
        match inferred {
            Ok(s) => s,
            Err(_) => return,
        }
    } else {
        let rotate = usize::from(ctl >> 2);
        let fields = ["a", "b", "c", "d", "e"]
            .iter()
            .enumerate()
            .map(|(i, name)| (name.to_string(), FieldType::ALL[(i + rotate) % 5]))
            .collect();
        schema_of(fields).expect("five distinct names make a schema")
    };
    let mut records: Vec<&[u8]> = rest.split(|b| *b == b'\n').collect();
    if ctl & 2 != 0 && format == Format::Csv && !records.is_empty() {
        // The header line named the fields.
        records.remove(0);
    }
    let decoded = RecordDecoder::new(schema.clone(), format).decode(&records);
    assert_eq!(decoded.batch.schema(), schema);
    assert_eq!(
        decoded.batch.num_rows() + decoded.bad.len(),
        records.len(),
        "every record is a row or a bad record"
    );
    assert!(decoded.bad.windows(2).all(|w| w[0].index < w[1].index));
    assert!(decoded.bad.iter().all(|b| b.index < records.len()));
    for b in &decoded.bad {
        let _ = b.to_string();
    }
});
