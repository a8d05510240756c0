//! The record formats of [`FileSource`](super::FileSource) and
//! [`FileSink`](super::FileSink): JSON lines and CSV, decoding (an incremental CSV
//! parser, a row into `T`, type inference for [`csv_row_to_json`]) and encoding (a
//! batch into bytes). No I/O here.

use std::any::TypeId;
use std::io;

use csv::{ByteRecord, StringRecord};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// The record format of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    JsonLines,
    Csv,
}

/// Incremental CSV parsing of whole lines (csv-core), so that a followed file can be
/// read as it grows and a quoted field may span lines.
pub(super) struct CsvState {
    core: csv_core::Reader,
    pub(super) headers: Option<StringRecord>,
    fields: Vec<u8>,
    ends: Vec<usize>,
    outlen: usize,
    endlen: usize,
    /// Bytes of the current row (and maybe rows after it on the same line).
    pub(super) buf: Vec<u8>,
    /// Bytes of `buf` the parser has consumed.
    fed: usize,
    /// Bytes of `buf` that belong to the row last returned.
    pub(super) done: usize,
    /// First line of the current row.
    pub(super) row_line: u64,
}

impl CsvState {
    pub(super) fn new() -> Self {
        CsvState {
            core: csv_core::Reader::new(),
            headers: None,
            fields: vec![0; 1024],
            ends: vec![0; 64],
            outlen: 0,
            endlen: 0,
            buf: Vec::new(),
            fed: 0,
            done: 0,
            row_line: 0,
        }
    }

    /// Forgets the row last returned.
    fn drop_done(&mut self) {
        if self.done > 0 {
            self.buf.drain(..self.done);
            self.fed -= self.done;
            self.done = 0;
        }
        if self.outlen == 0
            && self.endlen == 0
            && self.buf.iter().all(|b| *b == b'\r' || *b == b'\n')
        {
            // Only line terminators left (after a row ended by `\r`): the parser would
            // skip them as an empty line.
            self.buf.clear();
            self.fed = 0;
        }
    }

    /// Whether a row has started and not ended.
    pub(super) fn in_row(&self) -> bool {
        self.buf.len() > self.done
    }

    pub(super) fn push_line(&mut self, line: &[u8], line_no: u64) {
        self.drop_done();
        if self.buf.is_empty() {
            self.row_line = line_no;
        }
        self.buf.extend_from_slice(line);
    }

    /// The raw bytes of the row last returned, without its line terminator.
    pub(super) fn row_raw(&self) -> &[u8] {
        let mut raw = &self.buf[..self.done];
        while let [rest @ .., b'\r' | b'\n'] = raw {
            raw = rest;
        }
        raw
    }

    /// The next complete data row; `eof` when no more input will come (completes a
    /// row without a line terminator). The header row is kept, not returned.
    /// Errors (a reason) only for a header that is not UTF-8.
    pub(super) fn next_row(&mut self, eof: bool) -> Result<Option<ByteRecord>, String> {
        loop {
            self.drop_done();
            let input = &self.buf[self.fed..];
            if input.is_empty() && !eof {
                // An empty input means the end of the data to csv-core.
                return Ok(None);
            }
            let was_empty = input.is_empty();
            let (res, nin, nout, nend) = self.core.read_record(
                input,
                &mut self.fields[self.outlen..],
                &mut self.ends[self.endlen..],
            );
            self.fed += nin;
            self.outlen += nout;
            self.endlen += nend;
            match res {
                csv_core::ReadRecordResult::InputEmpty => {
                    if was_empty {
                        return Ok(None);
                    }
                }
                csv_core::ReadRecordResult::OutputFull => {
                    let n = self.fields.len() * 2;
                    self.fields.resize(n, 0);
                }
                csv_core::ReadRecordResult::OutputEndsFull => {
                    let n = self.ends.len() * 2;
                    self.ends.resize(n, 0);
                }
                csv_core::ReadRecordResult::Record => {
                    let mut record = ByteRecord::with_capacity(self.outlen, self.endlen);
                    let mut start = 0;
                    for &end in &self.ends[..self.endlen] {
                        record.push_field(&self.fields[start..end]);
                        start = end;
                    }
                    self.outlen = 0;
                    self.endlen = 0;
                    self.done = self.fed;
                    if self.headers.is_none() {
                        let headers = StringRecord::from_byte_record(record)
                            .map_err(|e| format!("the CSV header is not UTF-8: {e}"))?;
                        self.headers = Some(headers);
                        continue;
                    }
                    return Ok(Some(record));
                }
                csv_core::ReadRecordResult::End => return Ok(None),
            }
        }
    }
}

/// Decodes a CSV row named by `headers` into `T` (see the [module docs](super)).
pub(super) fn decode_csv_row<T: DeserializeOwned + 'static>(
    headers: &StringRecord,
    row: ByteRecord,
) -> Result<T, String> {
    if row.len() != headers.len() {
        return Err(format!(
            "the row has {} fields, the header has {}",
            row.len(),
            headers.len()
        ));
    }
    let row = StringRecord::from_byte_record(row).map_err(|e| e.to_string())?;
    let as_json = || serde_json::from_value::<T>(csv_row_to_json(headers, &row));
    if TypeId::of::<T>() == TypeId::of::<Value>() {
        return as_json().map_err(|e| e.to_string());
    }
    match row.deserialize::<T>(Some(headers)) {
        Ok(v) => Ok(v),
        Err(e) => as_json().map_err(|_| csv_error_reason(&e, headers)),
    }
}

/// A csv deserialisation error, naming the column.
fn csv_error_reason(e: &csv::Error, headers: &StringRecord) -> String {
    if let csv::ErrorKind::Deserialize { err, .. } = e.kind() {
        if let Some(i) = err.field() {
            let name = usize::try_from(i).ok().and_then(|i| headers.get(i));
            let kind = err.kind();
            return match name {
                Some(name) => format!("column {name:?}: {kind}"),
                None => format!("field {}: {kind}", i + 1),
            };
        }
        return err.kind().to_string();
    }
    e.to_string()
}

/// A CSV row as a JSON object keyed by the header: a field that parses as an integer
/// or a finite float becomes a number, `true` and `false` booleans, an empty field
/// `null`, anything else a string. Fields beyond the header are left out; missing
/// ones are `null`.
///
/// ```
/// use brook_connectors::csv_row_to_json;
/// let headers = csv::StringRecord::from(vec!["id", "name", "score", "ok", "note"]);
/// let row = csv::StringRecord::from(vec!["7", "mia", "2.5", "true", ""]);
/// assert_eq!(
///     csv_row_to_json(&headers, &row),
///     serde_json::json!({"id": 7, "name": "mia", "score": 2.5, "ok": true, "note": null})
/// );
/// ```
pub fn csv_row_to_json(headers: &StringRecord, record: &StringRecord) -> Value {
    let map = headers
        .iter()
        .enumerate()
        .map(|(i, name)| (name.to_string(), record.get(i).map_or(Value::Null, infer)))
        .collect();
    Value::Object(map)
}

/// The JSON value of a CSV field: numbers and booleans where that loses nothing.
/// Fields that only look numeric stay strings: leading zeros (`02134`), a leading `+`,
/// integers too big for 64 bits (which a float would round) and `NaN`/`inf`, so zip
/// codes, phone numbers and long ids keep their text.
fn infer(field: &str) -> Value {
    match field {
        "" => Value::Null,
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => {
            let digits = field.strip_prefix('-').unwrap_or(field);
            let leading_zero =
                digits.len() > 1 && digits.starts_with('0') && !digits.starts_with("0.");
            let plain = !field.starts_with('+') && !leading_zero;
            if !plain {
                return Value::String(field.to_string());
            }
            if let Ok(i) = field.parse::<i64>() {
                Value::from(i)
            } else if let Ok(u) = field.parse::<u64>() {
                Value::from(u)
            } else if let Some(n) = field
                .parse::<f64>()
                .ok()
                .filter(|f| {
                    f.is_finite()
                        && digits.contains(['.', 'e', 'E'])
                        && digits
                            .bytes()
                            .all(|b| b.is_ascii_digit() || b".eE+-".contains(&b))
                })
                .and_then(serde_json::Number::from_f64)
            {
                Value::Number(n)
            } else {
                Value::String(field.to_string())
            }
        }
    }
}

/// How CSV rows are produced, decided by the first record.
enum CsvMode {
    /// The csv crate's serde support (structs, tuples): header from field names.
    Serde,
    /// Records that serialise as maps: header from the first record's keys.
    Object(Vec<String>),
}

pub(super) struct CsvEncoder {
    writer: csv::Writer<Vec<u8>>,
    mode: Option<CsvMode>,
    /// The header is already in the output (a restored exactly-once writer): write
    /// rows only; for records that serialise as maps, these are its columns.
    existing_header: Option<Option<Vec<String>>>,
}

impl CsvEncoder {
    pub(super) fn new() -> Self {
        CsvEncoder {
            writer: csv::Writer::from_writer(Vec::new()),
            mode: None,
            existing_header: None,
        }
    }

    /// An encoder for output that already has the header `header` (as read back).
    pub(super) fn after_header(header: Option<Vec<String>>) -> Self {
        CsvEncoder {
            writer: csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(Vec::new()),
            mode: None,
            existing_header: Some(header),
        }
    }

    pub(super) fn encode<T: Serialize>(&mut self, value: &T) -> Result<(), String> {
        if self.mode.is_none() {
            let mut probe = csv::Writer::from_writer(Vec::new());
            let mode = match probe.serialize(value) {
                Ok(()) => CsvMode::Serde,
                Err(probe_err) => match serde_json::to_value(value) {
                    Ok(Value::Object(map)) => match &self.existing_header {
                        Some(existing) => CsvMode::Object(
                            existing
                                .clone()
                                .unwrap_or_else(|| map.keys().cloned().collect()),
                        ),
                        None => {
                            let headers: Vec<String> = map.keys().cloned().collect();
                            self.writer
                                .write_record(&headers)
                                .map_err(|e| e.to_string())?;
                            CsvMode::Object(headers)
                        }
                    },
                    Ok(_) => return Err(probe_err.to_string()),
                    Err(e) => return Err(e.to_string()),
                },
            };
            self.mode = Some(mode);
        }
        match &self.mode {
            Some(CsvMode::Object(headers)) => {
                let map = match serde_json::to_value(value).map_err(|e| e.to_string())? {
                    Value::Object(map) => map,
                    other => {
                        return Err(format!(
                            "expected an object like the first record, got {other}"
                        ))
                    }
                };
                if let Some(extra) = map.keys().find(|k| !headers.contains(k)) {
                    return Err(format!(
                        "field {extra:?} is not in the CSV header (taken from the first record: {})",
                        headers.join(",")
                    ));
                }
                let row = headers.iter().map(|h| match map.get(h) {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                });
                self.writer.write_record(row).map_err(|e| e.to_string())
            }
            _ => self.writer.serialize(value).map_err(|e| e.to_string()),
        }
    }

    /// Moves the encoded bytes to `out`.
    pub(super) fn drain_into(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        if self.mode.is_none() {
            return Ok(());
        }
        // The header, if any, is written: the next writer only writes rows.
        let next = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        let done = std::mem::replace(&mut self.writer, next);
        let mut bytes = done.into_inner().map_err(|e| e.into_error())?;
        out.append(&mut bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(text: &[u8], eof: bool) -> (Vec<(u64, Vec<String>)>, CsvState) {
        let mut csv = CsvState::new();
        let mut got = Vec::new();
        for (i, line) in text.split_inclusive(|b| *b == b'\n').enumerate() {
            csv.push_line(line, i as u64 + 1);
            while let Some(r) = csv.next_row(false).unwrap() {
                got.push((
                    csv.row_line,
                    r.iter()
                        .map(|f| String::from_utf8_lossy(f).into())
                        .collect(),
                ));
            }
        }
        if eof {
            while let Some(r) = csv.next_row(true).unwrap() {
                got.push((
                    csv.row_line,
                    r.iter()
                        .map(|f| String::from_utf8_lossy(f).into())
                        .collect(),
                ));
            }
        }
        (got, csv)
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn csv_rows_across_lines_and_terminators() {
        let (got, csv) = rows(b"a,b\r\n1,\"x\ny\"\r\n2,z\n3,w", true);
        assert_eq!(csv.headers.unwrap(), StringRecord::from(vec!["a", "b"]));
        assert_eq!(
            got,
            vec![
                (2, strs(&["1", "x\ny"])),
                (4, strs(&["2", "z"])),
                (5, strs(&["3", "w"])),
            ]
        );
    }

    #[test]
    fn csv_row_without_terminator_waits_for_eof() {
        let (got, _) = rows(b"a\n1\n2", false);
        assert_eq!(got, vec![(2, strs(&["1"]))]);
    }

    #[test]
    fn csv_raw_is_the_row() {
        let mut csv = CsvState::new();
        csv.push_line(b"h1,h2\n", 1);
        assert!(csv.next_row(false).unwrap().is_none());
        csv.push_line(b"\"a\n", 2);
        assert!(csv.next_row(false).unwrap().is_none());
        assert!(csv.in_row());
        csv.push_line(b"b\",c\r\n", 3);
        let r = csv.next_row(false).unwrap().unwrap();
        assert_eq!(&r[0], b"a\nb");
        assert_eq!(csv.row_raw(), b"\"a\nb\",c");
        assert_eq!(csv.row_line, 2);
        assert!(csv.next_row(false).unwrap().is_none());
        assert!(!csv.in_row());
    }

    #[test]
    fn inference() {
        assert_eq!(infer(""), Value::Null);
        assert_eq!(infer("true"), Value::Bool(true));
        assert_eq!(infer("False"), Value::String("False".into()));
        assert_eq!(infer("-12"), Value::from(-12));
        assert_eq!(infer("18446744073709551615"), Value::from(u64::MAX));
        assert_eq!(infer("2.5"), Value::from(2.5));
        assert_eq!(infer("1e3"), Value::from(1000.0));
        assert_eq!(infer("NaN"), Value::String("NaN".into()));
        assert_eq!(infer("mia"), Value::String("mia".into()));
        for text in [
            "02134",
            "+15551234",
            "-007",
            "9999999999999999999999",
            "inf",
            "1.2.3",
        ] {
            assert_eq!(infer(text), Value::String(text.into()), "{text}");
        }
        assert_eq!(infer("0"), Value::from(0));
        assert_eq!(infer("0.5"), Value::from(0.5));
        assert_eq!(infer("-1.5e-3"), Value::from(-0.0015));
    }
}
