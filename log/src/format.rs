//! The on-disk record-batch format: pure encoding and decoding, no I/O.
//!
//! A segment file is a sequence of batches. One append of N records is one batch.
//! All integers are little-endian.
//!
//! ```text
//! batch header (38 bytes)
//!   0  base_offset     u64   offset of the first record
//!   8  batch_len       u32   bytes that follow this field (header rest + records)
//!  12  crc32c          u32   CRC32C (Castagnoli) of every byte after this field
//!  16  magic           u8    format version, currently 1
//!  17  attributes      u8    0 (reserved for compression)
//!  18  record_count    u32   N >= 1
//!  22  first_timestamp i64   timestamp of the first record (ms)
//!  30  max_timestamp   i64   largest timestamp in the batch (ms)
//! records, N times
//!      timestamp       i64   ms since the Unix epoch
//!      key_len         i32   -1 for no key
//!      key             [u8]
//!      value_len       u32
//!      value           [u8]
//!      header_count    u16
//!      headers         (key_len u16, key utf-8, value_len i32 (-1 = none), value)*
//! ```
//!
//! The CRC covers everything after itself, so a torn or flipped byte anywhere in a
//! batch (other than in its first 12 bytes, which are checked for plausibility) is
//! detected, as Kafka's v2 record batches use CRC32C.

use bytes::Bytes;
use thiserror::Error;

use crate::record::{Header, ProducerRecord, Record};

/// Current batch format version.
pub const MAGIC: u8 = 1;
/// Size of the batch header in bytes.
pub const BATCH_HEADER_LEN: usize = 38;
/// Bytes before the CRC-covered part (base offset, length, CRC).
const CRC_START: usize = 16;
/// Fixed bytes per record besides key, value and headers.
const RECORD_OVERHEAD: usize = 8 + 4 + 4 + 2;

/// What is wrong with bytes that should be a batch.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FormatError {
    /// The buffer ends before the batch does; `needed` bytes are required in all.
    #[error("batch truncated: {needed} bytes needed, {available} available")]
    Truncated {
        /// Total bytes the batch needs.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// The header is implausible (length, magic, count).
    #[error("bad batch header: {0}")]
    BadHeader(String),
    /// The CRC does not match the contents.
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// The CRC matched but the records do not parse (a bug or a deliberate forgery).
    #[error("malformed record {index} in batch: {reason}")]
    Malformed {
        /// Index of the record in its batch.
        index: u32,
        /// What was wrong.
        reason: &'static str,
    },
}

/// A parsed batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: u64,
    /// Bytes after the length field.
    pub batch_len: u32,
    /// Stored CRC32C.
    pub crc: u32,
    /// Number of records.
    pub record_count: u32,
    /// Timestamp of the first record.
    pub first_timestamp: i64,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
}

impl BatchHeader {
    /// Total size of the batch in bytes, header included.
    pub fn total_len(&self) -> usize {
        12 + self.batch_len as usize
    }

    /// The offset after the last record of the batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }
}

/// Encoded size of one record.
pub fn record_len(r: &ProducerRecord) -> usize {
    RECORD_OVERHEAD
        + r.key.as_ref().map_or(0, |k| k.len())
        + r.value.len()
        + r.headers
            .iter()
            .map(|h| 2 + h.key.len() + 4 + h.value.as_ref().map_or(0, |v| v.len()))
            .sum::<usize>()
}

/// Summary of an encoded batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedBatch {
    /// Number of records.
    pub record_count: u32,
    /// Largest timestamp.
    pub max_timestamp: i64,
    /// Encoded size in bytes.
    pub len: usize,
}

/// Appends one batch holding `records` (at least one) to `buf`, stamping records
/// without a timestamp with `now_ms`.
///
/// The caller has checked sizes: every record is smaller than 4 GiB, header keys and
/// counts fit their fields, and the batch is smaller than 4 GiB.
pub fn encode_batch(
    buf: &mut Vec<u8>,
    base_offset: u64,
    records: &[ProducerRecord],
    now_ms: i64,
) -> EncodedBatch {
    debug_assert!(!records.is_empty());
    let start = buf.len();
    let first_ts = records.first().and_then(|r| r.timestamp).unwrap_or(now_ms);
    let mut max_ts = i64::MIN;
    buf.extend_from_slice(&base_offset.to_le_bytes());
    buf.extend_from_slice(&[0u8; 8]); // length and CRC, filled in below
    buf.push(MAGIC);
    buf.push(0);
    buf.extend_from_slice(&(records.len() as u32).to_le_bytes());
    buf.extend_from_slice(&first_ts.to_le_bytes());
    buf.extend_from_slice(&[0u8; 8]); // max timestamp, filled in below
    for r in records {
        let ts = r.timestamp.unwrap_or(now_ms);
        max_ts = max_ts.max(ts);
        buf.extend_from_slice(&ts.to_le_bytes());
        match &r.key {
            Some(k) => {
                buf.extend_from_slice(&(k.len() as i32).to_le_bytes());
                buf.extend_from_slice(k);
            }
            None => buf.extend_from_slice(&(-1i32).to_le_bytes()),
        }
        buf.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
        buf.extend_from_slice(&r.value);
        buf.extend_from_slice(&(r.headers.len() as u16).to_le_bytes());
        for h in &r.headers {
            buf.extend_from_slice(&(h.key.len() as u16).to_le_bytes());
            buf.extend_from_slice(h.key.as_bytes());
            match &h.value {
                Some(v) => {
                    buf.extend_from_slice(&(v.len() as i32).to_le_bytes());
                    buf.extend_from_slice(v);
                }
                None => buf.extend_from_slice(&(-1i32).to_le_bytes()),
            }
        }
    }
    let len = buf.len() - start;
    buf[start + 30..start + 38].copy_from_slice(&max_ts.to_le_bytes());
    buf[start + 8..start + 12].copy_from_slice(&((len - 12) as u32).to_le_bytes());
    let crc = crc32c::crc32c(&buf[start + CRC_START..]);
    buf[start + 12..start + 16].copy_from_slice(&crc.to_le_bytes());
    EncodedBatch {
        record_count: records.len() as u32,
        max_timestamp: max_ts,
        len,
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Parses the header at the start of `buf` (which may hold more or less than the
/// whole batch) and checks that it is plausible. Does not check the CRC.
///
/// # Errors
/// [`FormatError::Truncated`] when `buf` is shorter than the header;
/// [`FormatError::BadHeader`] for an impossible length, magic or count.
pub fn parse_header(buf: &[u8]) -> Result<BatchHeader, FormatError> {
    if buf.len() < BATCH_HEADER_LEN {
        return Err(FormatError::Truncated {
            needed: BATCH_HEADER_LEN,
            available: buf.len(),
        });
    }
    let h = BatchHeader {
        base_offset: u64_at(buf, 0),
        batch_len: u32_at(buf, 8),
        crc: u32_at(buf, 12),
        record_count: u32_at(buf, 18),
        first_timestamp: u64_at(buf, 22) as i64,
        max_timestamp: u64_at(buf, 30) as i64,
    };
    if buf[16] != MAGIC {
        return Err(FormatError::BadHeader(format!(
            "unknown format version {}",
            buf[16]
        )));
    }
    if (h.batch_len as usize) < BATCH_HEADER_LEN - 12 {
        return Err(FormatError::BadHeader(format!(
            "batch length {} too small",
            h.batch_len
        )));
    }
    if h.record_count == 0 || (h.record_count as usize) * RECORD_OVERHEAD > h.batch_len as usize {
        return Err(FormatError::BadHeader(format!(
            "record count {} does not fit batch length {}",
            h.record_count, h.batch_len
        )));
    }
    Ok(h)
}

/// Checks the CRC of a whole batch (`batch.len() == header.total_len()`).
///
/// # Errors
/// [`FormatError::CrcMismatch`].
pub fn verify_crc(header: &BatchHeader, batch: &[u8]) -> Result<(), FormatError> {
    let computed = crc32c::crc32c(&batch[CRC_START..]);
    if computed != header.crc {
        return Err(FormatError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Parses and fully validates one batch at the start of `buf`: header, length, CRC.
///
/// # Errors
/// As [`parse_header`], [`FormatError::Truncated`] when `buf` ends inside the batch,
/// and [`FormatError::CrcMismatch`].
pub fn check_batch(buf: &[u8]) -> Result<BatchHeader, FormatError> {
    let h = parse_header(buf)?;
    if buf.len() < h.total_len() {
        return Err(FormatError::Truncated {
            needed: h.total_len(),
            available: buf.len(),
        });
    }
    verify_crc(&h, &buf[..h.total_len()])?;
    Ok(h)
}

/// Bounds-checked little-endian reads inside one batch; errors name the record.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    index: u32,
}

impl Fields<'_> {
    fn malformed(&self, reason: &'static str) -> FormatError {
        FormatError::Malformed {
            index: self.index,
            reason,
        }
    }
    /// Claims the next `n` bytes and returns where they start.
    #[inline]
    fn take(&mut self, n: usize) -> Result<usize, FormatError> {
        let at = self.pos;
        if self.buf.len() - at < n {
            return Err(self.malformed("field runs past the batch"));
        }
        self.pos += n;
        Ok(at)
    }
    #[inline]
    fn u16(&mut self) -> Result<u16, FormatError> {
        let at = self.take(2)?;
        Ok(u16::from_le_bytes([self.buf[at], self.buf[at + 1]]))
    }
    #[inline]
    fn u32(&mut self) -> Result<u32, FormatError> {
        let at = self.take(4)?;
        Ok(u32_at(self.buf, at))
    }
    /// A length-prefixed byte string (`-1` = none): its position and length.
    #[inline]
    fn opt_range(&mut self) -> Result<Option<(usize, usize)>, FormatError> {
        match self.u32()? as i32 {
            -1 => Ok(None),
            n if n < 0 => Err(self.malformed("negative length")),
            n => {
                let n = n as usize;
                Ok(Some((self.take(n)?, n)))
            }
        }
    }
}

/// Decodes the records of one validated batch (`batch` is exactly the batch), pushing
/// those with offset `>= from_offset` onto `out`, at most `max_records` of them.
/// Returns how many were pushed. Keys and values share `batch`'s buffer.
///
/// # Errors
/// [`FormatError::Malformed`] when a record does not parse.
pub fn decode_records(
    batch: &Bytes,
    header: &BatchHeader,
    from_offset: u64,
    max_records: usize,
    out: &mut Vec<Record>,
) -> Result<usize, FormatError> {
    let count = header.record_count;
    // Records before `from_offset` are parsed (to find where the wanted ones start)
    // but not returned.
    let skip = from_offset
        .saturating_sub(header.base_offset)
        .min(u64::from(count)) as u32;
    let wanted = ((count - skip) as usize).min(max_records);
    if wanted == 0 {
        return Ok(0);
    }
    let last = skip + wanted as u32;
    out.reserve(wanted);
    let mut f = Fields {
        buf: batch,
        pos: BATCH_HEADER_LEN,
        index: 0,
    };
    for i in 0..last {
        f.index = i;
        let at = f.take(8)?;
        let timestamp = u64_at(f.buf, at) as i64;
        let key = f.opt_range()?;
        let vlen = f.u32()? as usize;
        let vat = f.take(vlen)?;
        let hcount = f.u16()?;
        let mut headers = Vec::new();
        if hcount > 0 {
            headers.reserve_exact(usize::from(hcount));
            for _ in 0..hcount {
                let klen = usize::from(f.u16()?);
                let kat = f.take(klen)?;
                let key = std::str::from_utf8(&f.buf[kat..kat + klen])
                    .map_err(|_| f.malformed("header key is not UTF-8"))?
                    .to_string();
                let value = f.opt_range()?.map(|(at, n)| batch.slice(at..at + n));
                headers.push(Header { key, value });
            }
        }
        if i >= skip {
            out.push(Record {
                offset: header.base_offset + u64::from(i),
                timestamp,
                key: key.map(|(at, n)| batch.slice(at..at + n)),
                value: batch.slice(vat..vat + vlen),
                headers,
            });
        }
    }
    Ok(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_record() -> impl Strategy<Value = ProducerRecord> {
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
            proptest::collection::vec(any::<u8>(), 0..200),
            proptest::option::of(any::<i64>()),
            proptest::collection::vec(
                (
                    "[a-z]{0,5}",
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
                ),
                0..3,
            ),
        )
            .prop_map(|(k, v, ts, hs)| ProducerRecord {
                key: k.map(Bytes::from),
                value: Bytes::from(v),
                timestamp: ts,
                headers: hs
                    .into_iter()
                    .map(|(key, value)| Header {
                        key,
                        value: value.map(Bytes::from),
                    })
                    .collect(),
            })
    }

    proptest! {
        #[test]
        fn batches_round_trip(records in proptest::collection::vec(arb_record(), 1..20), base in 0u64..1_000_000, now in any::<i64>()) {
            let mut buf = Vec::new();
            let enc = encode_batch(&mut buf, base, &records, now);
            prop_assert_eq!(enc.len, buf.len());
            prop_assert_eq!(enc.len, BATCH_HEADER_LEN + records.iter().map(record_len).sum::<usize>());
            let h = check_batch(&buf).unwrap();
            prop_assert_eq!(h.base_offset, base);
            prop_assert_eq!(h.total_len(), buf.len());
            let bytes = Bytes::from(buf);
            let mut out = Vec::new();
            decode_records(&bytes, &h, 0, usize::MAX, &mut out).unwrap();
            prop_assert_eq!(out.len(), records.len());
            for (i, (r, o)) in records.iter().zip(&out).enumerate() {
                prop_assert_eq!(o.offset, base + i as u64);
                prop_assert_eq!(o.timestamp, r.timestamp.unwrap_or(now));
                prop_assert_eq!(&o.key, &r.key);
                prop_assert_eq!(&o.value, &r.value);
                prop_assert_eq!(&o.headers, &r.headers);
            }
            prop_assert_eq!(h.max_timestamp, out.iter().map(|r| r.timestamp).max().unwrap());
        }

        #[test]
        fn any_flipped_byte_after_the_length_is_detected(records in proptest::collection::vec(arb_record(), 1..5), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut buf = Vec::new();
            encode_batch(&mut buf, 7, &records, 0);
            let i = 12 + at.index(buf.len() - 12);
            buf[i] ^= 1 << bit;
            prop_assert!(check_batch(&buf).is_err());
        }
    }

    #[test]
    fn truncated_batches_are_reported_as_truncated() {
        let mut buf = Vec::new();
        encode_batch(&mut buf, 0, &[ProducerRecord::new("hello")], 1);
        for cut in 0..buf.len() {
            assert!(
                matches!(check_batch(&buf[..cut]), Err(FormatError::Truncated { .. })),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn decoding_skips_offsets_before_from_and_stops_at_max() {
        let recs: Vec<_> = (0..5).map(|i| ProducerRecord::new(vec![i as u8])).collect();
        let mut buf = Vec::new();
        encode_batch(&mut buf, 10, &recs, 0);
        let h = check_batch(&buf).unwrap();
        let mut out = Vec::new();
        let n = decode_records(&Bytes::from(buf), &h, 12, 2, &mut out).unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            out.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![12, 13]
        );
    }
}
