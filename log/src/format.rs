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
//! transactional batches without a sequence (format version 2): 18 more header bytes
//!  38  producer_id     u64   the transactional id's producer id
//!  46  producer_epoch  u16   its epoch when the batch was written
//!  48  txn_sequence    u64   the transaction's number among the producer id's
//! batches of an idempotent or transactional producer (format version 3): 14 more
//! header bytes, and 8 after them when the batch is transactional (attribute 0x10)
//!  38  producer_id     u64   the producer id (Kafka's producerId)
//!  46  producer_epoch  u16   its epoch (Kafka's producerEpoch)
//!  48  base_sequence   i32   the sequence of the first record (Kafka's baseSequence)
//!  52  txn_sequence    u64   transactional only: as in version 2
//! records, N times
//!      timestamp       i64   ms since the Unix epoch
//!      key_len         i32   -1 for no key
//!      key             [u8]
//!      value_len       u32   0xFFFF_FFFF (-1) for a null value (a tombstone)
//!      value           [u8]
//!      header_count    u16
//!      headers         (key_len u16, key utf-8, value_len i32 (-1 = none), value)*
//! ```
//!
//! Version 1 batches are plain (non-transactional) appends. Version 2 batches belong to
//! a transaction (attribute bit `0x10`, as Kafka's): data appended inside it, or (bit
//! `0x20`, a *control batch*) the commit or abort marker that ends it in this partition.
//! Version 3 batches are appended by a Kafka producer with a producer id (through the
//! broker): plain (attributes 0) or transactional data (`0x10`), they carry the
//! producer id, epoch and base sequence, as Kafka's v2 batch header does, so the
//! idempotent producers' state can be rebuilt from the log when a partition is opened
//! (as Kafka's `ProducerStateManager`); record `i` has the sequence
//! `base_sequence + i`, wrapping from `i32::MAX` to 0. Versions 1 and 2 stay readable
//! and are still written by appends without a producer sequence.
//! A control batch holds one record whose key is a version `u16` (0) and a type `u16`
//! (0 = abort, 1 = commit), with an empty value, as Kafka's control records; readers
//! never see it, but it occupies an offset.
//!
//! A null value (Kafka's tombstone: "delete this key" in a compacted topic) is stored
//! with length `-1`, as Kafka's record format v2 stores it, so it stays distinct from
//! an empty value. No value can be that long (records are below 2 GiB).
//!
//! The CRC covers everything after itself, so a torn or flipped byte anywhere in a
//! batch (other than in its first 12 bytes, which are checked for plausibility) is
//! detected, as Kafka's v2 record batches use CRC32C.

use bytes::Bytes;
use thiserror::Error;

use crate::record::{Header, ProducerRecord, Record};

/// Format version of plain (non-transactional) batches.
pub const MAGIC: u8 = 1;
/// Format version of transactional batches (data and control).
pub const MAGIC_TXN: u8 = 2;
/// Format version of a producer's batches: with producer id, epoch and base sequence.
pub const MAGIC_PRODUCER: u8 = 3;
/// Size of the header of a producer's plain batch in bytes.
pub const PRODUCER_BATCH_HEADER_LEN: usize = 52;
/// Size of the header of a producer's transactional batch in bytes.
pub const PRODUCER_TXN_BATCH_HEADER_LEN: usize = 60;
/// Size of the header of a plain batch in bytes.
pub const BATCH_HEADER_LEN: usize = 38;
/// Size of the header of a transactional batch in bytes.
pub const TXN_BATCH_HEADER_LEN: usize = 56;
/// Attribute bit: the batch belongs to a transaction (as Kafka's `isTransactional`).
pub const ATTR_TRANSACTIONAL: u8 = 0x10;
/// Attribute bit: the batch is a control batch (a transaction marker).
pub const ATTR_CONTROL: u8 = 0x20;
/// The smallest batch of the version with the longest header (a producer's
/// transactional batch of one empty record): reading this many bytes at a batch
/// start, or up to the end of the file when that comes first, always covers its
/// header.
pub const MIN_BATCH_LEN: usize = PRODUCER_TXN_BATCH_HEADER_LEN + RECORD_OVERHEAD;
/// Bytes before the CRC-covered part (base offset, length, CRC).
const CRC_START: usize = 16;
/// Fixed bytes per record besides key, value and headers.
const RECORD_OVERHEAD: usize = 8 + 4 + 4 + 2;
/// The stored value length of a null value (a tombstone): `-1` as a `u32`.
const NULL_VALUE_LEN: u32 = u32::MAX;

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

/// Which transaction a batch belongs to: the producer id and epoch of the writer and
/// the transaction's number among that producer id's transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnMark {
    /// The transactional id's producer id.
    pub producer_id: u64,
    /// The producer epoch of the session that wrote the batch.
    pub epoch: u16,
    /// The transaction's number (unique per producer id).
    pub sequence: u64,
}

/// The producer fields of a batch appended by an idempotent or transactional
/// producer (format version 3), as Kafka's batch header keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerMark {
    /// The producer id (Kafka's are `>= 0`; stored as their bits).
    pub producer_id: u64,
    /// The producer's epoch (Kafka's `i16`, stored as its bits).
    pub epoch: u16,
    /// The sequence of the batch's first record; record `i` has `base_sequence + i`,
    /// wrapping from `i32::MAX` to 0.
    pub base_sequence: i32,
}

impl ProducerMark {
    /// The sequence of the last of `record_count` records (at least one), wrapping as
    /// Kafka's `DefaultRecordBatch.incrementSequence`.
    pub fn last_sequence(&self, record_count: u32) -> i32 {
        increment_sequence(self.base_sequence, record_count.saturating_sub(1))
    }
}

/// `sequence + by`, wrapping from `i32::MAX` to 0 (Kafka's `incrementSequence`).
pub fn increment_sequence(sequence: i32, by: u32) -> i32 {
    let wrapped = (i64::from(sequence) + i64::from(by)) % (i64::from(i32::MAX) + 1);
    // The remainder of a division by 2^31 fits an i32.
    wrapped as i32
}

/// What a control record says about its transaction (as Kafka's `ControlRecordType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    /// The transaction was aborted: its records are not returned to read-committed
    /// readers.
    Abort,
    /// The transaction was committed.
    Commit,
}

impl ControlType {
    fn code(self) -> u16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
        }
    }

    /// The key of the control record for this type.
    pub fn record_key(self) -> [u8; 4] {
        let mut k = [0u8; 4];
        k[2..].copy_from_slice(&self.code().to_le_bytes());
        k
    }

    /// Parses a control record's key (`None` for an unknown version or type).
    pub fn from_record_key(key: &[u8]) -> Option<Self> {
        match key {
            [0, 0, 0, 0] => Some(ControlType::Abort),
            [0, 0, 1, 0] => Some(ControlType::Commit),
            _ => None,
        }
    }
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
    /// The attribute bits ([`ATTR_TRANSACTIONAL`], [`ATTR_CONTROL`]).
    pub attributes: u8,
    /// The transaction of a transactional batch (format versions 2 and 3).
    pub txn: Option<TxnMark>,
    /// The producer fields of a producer's batch (format version 3).
    pub producer: Option<ProducerMark>,
}

impl BatchHeader {
    /// Size of this batch's header: [`BATCH_HEADER_LEN`], [`TXN_BATCH_HEADER_LEN`],
    /// [`PRODUCER_BATCH_HEADER_LEN`] or [`PRODUCER_TXN_BATCH_HEADER_LEN`].
    #[inline]
    pub fn header_len(&self) -> usize {
        match (self.producer.is_some(), self.txn.is_some()) {
            (false, false) => BATCH_HEADER_LEN,
            (false, true) => TXN_BATCH_HEADER_LEN,
            (true, false) => PRODUCER_BATCH_HEADER_LEN,
            (true, true) => PRODUCER_TXN_BATCH_HEADER_LEN,
        }
    }

    /// Whether this is a control batch (a transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

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
        + if r.tombstone { 0 } else { r.value.len() }
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
    encode(buf, base_offset, records, now_ms, None, None)
}

/// Appends one batch of a producer (format version 3) holding `records` (at least
/// one): plain, or data of the transaction `txn`; otherwise as [`encode_batch`].
pub fn encode_producer_batch(
    buf: &mut Vec<u8>,
    base_offset: u64,
    records: &[ProducerRecord],
    now_ms: i64,
    producer: ProducerMark,
    txn: Option<TxnMark>,
) -> EncodedBatch {
    encode(
        buf,
        base_offset,
        records,
        now_ms,
        txn.map(|t| (t, ATTR_TRANSACTIONAL)),
        Some(producer),
    )
}

/// Appends one transactional batch (format version 2) holding `records` (at least
/// one), written by the transaction `txn`; otherwise as [`encode_batch`].
pub fn encode_txn_batch(
    buf: &mut Vec<u8>,
    base_offset: u64,
    records: &[ProducerRecord],
    now_ms: i64,
    txn: TxnMark,
) -> EncodedBatch {
    encode(
        buf,
        base_offset,
        records,
        now_ms,
        Some((txn, ATTR_TRANSACTIONAL)),
        None,
    )
}

/// Appends the control batch (one control record) that commits or aborts `txn` in a
/// partition, stamped `now_ms`.
pub fn encode_control_batch(
    buf: &mut Vec<u8>,
    base_offset: u64,
    txn: TxnMark,
    control: ControlType,
    now_ms: i64,
) -> EncodedBatch {
    let record = ProducerRecord {
        key: Some(Bytes::copy_from_slice(&control.record_key())),
        value: Bytes::new(),
        timestamp: Some(now_ms),
        headers: Vec::new(),
        tombstone: false,
    };
    encode(
        buf,
        base_offset,
        std::slice::from_ref(&record),
        now_ms,
        Some((txn, ATTR_TRANSACTIONAL | ATTR_CONTROL)),
        None,
    )
}

fn encode(
    buf: &mut Vec<u8>,
    base_offset: u64,
    records: &[ProducerRecord],
    now_ms: i64,
    txn: Option<(TxnMark, u8)>,
    producer: Option<ProducerMark>,
) -> EncodedBatch {
    debug_assert!(!records.is_empty());
    let start = buf.len();
    let first_ts = records.first().and_then(|r| r.timestamp).unwrap_or(now_ms);
    let mut max_ts = i64::MIN;
    buf.extend_from_slice(&base_offset.to_le_bytes());
    buf.extend_from_slice(&[0u8; 8]); // length and CRC, filled in below
    buf.push(match (producer.is_some(), txn.is_some()) {
        (true, _) => MAGIC_PRODUCER,
        (false, true) => MAGIC_TXN,
        (false, false) => MAGIC,
    });
    buf.push(txn.map_or(0, |(_, attributes)| attributes));
    buf.extend_from_slice(&(records.len() as u32).to_le_bytes());
    buf.extend_from_slice(&first_ts.to_le_bytes());
    buf.extend_from_slice(&[0u8; 8]); // max timestamp, filled in below
                                      // Versions 2 and 3 share one layout after the first 38 bytes: the writer's
                                      // producer id and epoch, the producer's base sequence (version 3), then the
                                      // transaction's sequence (transactional batches).
    let writer = match (producer, txn) {
        (Some(p), _) => Some((p.producer_id, p.epoch)),
        (None, Some((mark, _))) => Some((mark.producer_id, mark.epoch)),
        (None, None) => None,
    };
    if let Some((producer_id, epoch)) = writer {
        buf.extend_from_slice(&producer_id.to_le_bytes());
        buf.extend_from_slice(&epoch.to_le_bytes());
    }
    if let Some(p) = producer {
        buf.extend_from_slice(&p.base_sequence.to_le_bytes());
    }
    if let Some((mark, _)) = txn {
        buf.extend_from_slice(&mark.sequence.to_le_bytes());
    }
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
        if r.tombstone {
            buf.extend_from_slice(&NULL_VALUE_LEN.to_le_bytes());
        } else {
            buf.extend_from_slice(&(r.value.len() as u32).to_le_bytes());
            buf.extend_from_slice(&r.value);
        }
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

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

#[inline]
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
    let mut h = BatchHeader {
        base_offset: u64_at(buf, 0),
        batch_len: u32_at(buf, 8),
        crc: u32_at(buf, 12),
        record_count: u32_at(buf, 18),
        first_timestamp: u64_at(buf, 22) as i64,
        max_timestamp: u64_at(buf, 30) as i64,
        attributes: buf[17],
        txn: None,
        producer: None,
    };
    match buf[16] {
        MAGIC if h.attributes == 0 => {}
        MAGIC_PRODUCER if h.attributes & !ATTR_TRANSACTIONAL == 0 => {
            let transactional = h.attributes != 0;
            let needed = if transactional {
                PRODUCER_TXN_BATCH_HEADER_LEN
            } else {
                PRODUCER_BATCH_HEADER_LEN
            };
            if buf.len() < needed {
                return Err(FormatError::Truncated {
                    needed,
                    available: buf.len(),
                });
            }
            let producer = ProducerMark {
                producer_id: u64_at(buf, 38),
                epoch: u16::from_le_bytes([buf[46], buf[47]]),
                base_sequence: u32_at(buf, 48) as i32,
            };
            h.producer = Some(producer);
            if transactional {
                h.txn = Some(TxnMark {
                    producer_id: producer.producer_id,
                    epoch: producer.epoch,
                    sequence: u64_at(buf, 52),
                });
            }
        }
        MAGIC_TXN if h.attributes & ATTR_TRANSACTIONAL != 0 => {
            if buf.len() < TXN_BATCH_HEADER_LEN {
                return Err(FormatError::Truncated {
                    needed: TXN_BATCH_HEADER_LEN,
                    available: buf.len(),
                });
            }
            h.txn = Some(TxnMark {
                producer_id: u64_at(buf, 38),
                epoch: u16::from_le_bytes([buf[46], buf[47]]),
                sequence: u64_at(buf, 48),
            });
        }
        MAGIC | MAGIC_TXN | MAGIC_PRODUCER => {
            return Err(FormatError::BadHeader(format!(
                "attributes {:#04x} do not fit format version {}",
                h.attributes, buf[16]
            )))
        }
        v => {
            return Err(FormatError::BadHeader(format!(
                "unknown format version {v}"
            )))
        }
    }
    if (h.batch_len as usize) < h.header_len() - 12 {
        return Err(FormatError::BadHeader(format!(
            "batch length {} too small",
            h.batch_len
        )));
    }
    if h.record_count == 0
        || (h.record_count as usize) * RECORD_OVERHEAD > h.batch_len as usize + 12 - h.header_len()
    {
        return Err(FormatError::BadHeader(format!(
            "record count {} does not fit batch length {}",
            h.record_count, h.batch_len
        )));
    }
    // Offsets are dense from 0, so no batch the log wrote ends past the largest offset;
    // a header that says so is damage, and its next offset (and its records' offsets)
    // would overflow. Found by fuzzing (fuzz/, target log_batch).
    if h.base_offset
        .checked_add(u64::from(h.record_count))
        .is_none()
    {
        return Err(FormatError::BadHeader(format!(
            "base offset {} and record count {} pass the largest offset",
            h.base_offset, h.record_count
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
    #[cold]
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

/// A stored record borrowed from the buffer it was read into, as
/// [`Partition::read_with`](crate::Partition::read_with) hands them out: nothing is
/// allocated or reference-counted per record.
///
/// [`RecordRef::to_record`] makes an owned [`Record`] (copying the bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Its offset in the partition.
    pub offset: u64,
    /// Its timestamp (ms since the Unix epoch).
    pub timestamp: i64,
    /// Its key.
    pub key: Option<&'a [u8]>,
    /// Its value (empty for a tombstone).
    pub value: &'a [u8],
    /// Whether the value is null (Kafka's tombstone), not just empty.
    pub tombstone: bool,
    /// Its headers, decoded when iterated.
    pub headers: HeadersRef<'a>,
}

impl RecordRef<'_> {
    /// An owned copy of the record (keys, values and header values are copied).
    pub fn to_record(&self) -> Record {
        Record {
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.map(Bytes::copy_from_slice),
            value: Bytes::copy_from_slice(self.value),
            tombstone: self.tombstone,
            headers: self
                .headers
                .iter()
                .map(|h| Header {
                    key: h.key.to_string(),
                    value: h.value.map(Bytes::copy_from_slice),
                })
                .collect(),
        }
    }

    /// An owned record whose key and values share `buf`, the buffer this record
    /// borrows from (no copy of the bytes).
    fn to_record_in(self, buf: &Bytes) -> Record {
        let headers = if self.headers.is_empty() {
            Vec::new()
        } else {
            self.headers
                .iter()
                .map(|h| Header {
                    key: h.key.to_string(),
                    value: h.value.map(|v| buf.slice_ref(v)),
                })
                .collect()
        };
        Record {
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.map(|k| buf.slice_ref(k)),
            value: buf.slice_ref(self.value),
            tombstone: self.tombstone,
            headers,
        }
    }
}

/// The headers of a [`RecordRef`]: a borrowed view of their encoded bytes, decoded
/// one at a time by [`HeadersRef::iter`]. A record without headers has an empty view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeadersRef<'a> {
    /// The encoded headers (already checked when the record was decoded).
    buf: &'a [u8],
    count: u16,
}

impl<'a> HeadersRef<'a> {
    /// Number of headers.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The headers, in order.
    pub fn iter(&self) -> HeadersIter<'a> {
        HeadersIter {
            buf: self.buf,
            left: self.count,
        }
    }
}

impl<'a> IntoIterator for HeadersRef<'a> {
    type Item = HeaderRef<'a>;
    type IntoIter = HeadersIter<'a>;
    fn into_iter(self) -> HeadersIter<'a> {
        self.iter()
    }
}

/// One header of a [`RecordRef`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRef<'a> {
    /// The header's name.
    pub key: &'a str,
    /// The header's value; `None` is distinct from empty.
    pub value: Option<&'a [u8]>,
}

/// Iterator over the headers of a [`RecordRef`] (see [`HeadersRef::iter`]).
#[derive(Debug, Clone)]
pub struct HeadersIter<'a> {
    buf: &'a [u8],
    left: u16,
}

impl<'a> Iterator for HeadersIter<'a> {
    type Item = HeaderRef<'a>;

    fn next(&mut self) -> Option<HeaderRef<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The bytes were checked (lengths and UTF-8) when the record was decoded, and a
        // `HeadersRef` is only made from checked bytes; the fallbacks are unreachable.
        let b = self.buf;
        let klen = usize::from(u16::from_le_bytes([*b.first()?, *b.get(1)?]));
        let key = std::str::from_utf8(b.get(2..2 + klen)?).unwrap_or_default();
        let at = 2 + klen;
        let vlen = u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as i32;
        let at = at + 4;
        let (value, end) = if vlen < 0 {
            (None, at)
        } else {
            let end = at + vlen as usize;
            (Some(b.get(at..end)?), end)
        };
        self.buf = &b[end..];
        Some(HeaderRef { key, value })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::from(self.left), Some(usize::from(self.left)))
    }
}

/// How many records of the batch `header` [`for_each_record`] yields from
/// `from_offset` on, at most `max_records`.
#[inline]
pub fn records_wanted(header: &BatchHeader, from_offset: u64, max_records: usize) -> usize {
    let skip = from_offset
        .saturating_sub(header.base_offset)
        .min(u64::from(header.record_count));
    ((u64::from(header.record_count) - skip) as usize).min(max_records)
}

/// Decodes the records of one validated batch (`batch` is exactly the batch), calling
/// `f` with each record with offset `>= from_offset`, at most `max_records` of them,
/// borrowed from `batch`. Returns how many were passed to `f`
/// ([`records_wanted`]). Records before `from_offset` are parsed (to find where the
/// wanted ones start) and checked, but not passed on.
///
/// # Errors
/// [`FormatError::Malformed`] when a record does not parse; `f` has then been called
/// for the records before it.
#[inline]
pub fn for_each_record<'a>(
    batch: &'a [u8],
    header: &BatchHeader,
    from_offset: u64,
    max_records: usize,
    mut f: impl FnMut(RecordRef<'a>),
) -> Result<usize, FormatError> {
    let wanted = records_wanted(header, from_offset, max_records);
    if wanted == 0 {
        return Ok(0);
    }
    let skip = from_offset.saturating_sub(header.base_offset) as u32;
    let last = skip + wanted as u32;
    let mut fl = Fields {
        buf: batch,
        pos: header.header_len(),
        index: 0,
    };
    for i in 0..last {
        fl.index = i;
        let at = fl.take(8)?;
        let timestamp = u64_at(batch, at) as i64;
        let key = fl.opt_range()?;
        let (vat, vlen, tombstone) = match fl.u32()? {
            NULL_VALUE_LEN => (fl.pos, 0, true),
            n => (fl.take(n as usize)?, n as usize, false),
        };
        let hcount = fl.u16()?;
        let hstart = fl.pos;
        if hcount > 0 {
            for _ in 0..hcount {
                let klen = usize::from(fl.u16()?);
                let kat = fl.take(klen)?;
                if std::str::from_utf8(&batch[kat..kat + klen]).is_err() {
                    return Err(fl.malformed("header key is not UTF-8"));
                }
                fl.opt_range()?;
            }
        }
        if i >= skip {
            f(RecordRef {
                offset: header.base_offset + u64::from(i),
                timestamp,
                key: key.map(|(at, n)| &batch[at..at + n]),
                value: &batch[vat..vat + vlen],
                tombstone,
                headers: HeadersRef {
                    buf: &batch[hstart..fl.pos],
                    count: hcount,
                },
            });
        }
    }
    Ok(wanted)
}

/// Decodes the records of one validated batch (`batch` is exactly the batch), pushing
/// those with offset `>= from_offset` onto `out`, at most `max_records` of them.
/// Returns how many were pushed. Keys and values share `batch`'s buffer. This is
/// [`for_each_record`] with each record made owned.
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
    out.reserve(records_wanted(header, from_offset, max_records));
    for_each_record(batch, header, from_offset, max_records, |r| {
        out.push(r.to_record_in(batch));
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_record() -> impl Strategy<Value = ProducerRecord> {
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
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
                tombstone: v.is_none(),
                value: Bytes::from(v.unwrap_or_default()),
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
                prop_assert_eq!(o.tombstone, r.tombstone);
                prop_assert_eq!(&o.headers, &r.headers);
            }
            prop_assert_eq!(h.max_timestamp, out.iter().map(|r| r.timestamp).max().unwrap());
            // Borrowed records, from any offset and limit, are the owned ones.
            let from = base + (records.len() as u64) / 2;
            let mut borrowed = Vec::new();
            let n = for_each_record(&bytes, &h, from, 7, |r| borrowed.push(r.to_record())).unwrap();
            let skip = records.len() / 2;
            prop_assert_eq!(n, borrowed.len());
            prop_assert_eq!(&borrowed[..], &out[skip..(skip + 7).min(out.len())]);
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

    proptest! {
        #[test]
        fn transactional_batches_round_trip(
            records in proptest::collection::vec(arb_record(), 1..10),
            base in 0u64..1_000_000,
            producer_id in any::<u64>(),
            epoch in any::<u16>(),
            sequence in any::<u64>(),
            at in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let mark = TxnMark { producer_id, epoch, sequence };
            let mut buf = Vec::new();
            let enc = encode_txn_batch(&mut buf, base, &records, 7, mark);
            prop_assert_eq!(enc.len, TXN_BATCH_HEADER_LEN + records.iter().map(record_len).sum::<usize>());
            let h = check_batch(&buf).unwrap();
            prop_assert_eq!(h.txn, Some(mark));
            prop_assert!(!h.is_control());
            prop_assert_eq!(h.header_len(), TXN_BATCH_HEADER_LEN);
            let mut out = Vec::new();
            decode_records(&Bytes::from(buf.clone()), &h, 0, usize::MAX, &mut out).unwrap();
            prop_assert_eq!(out.len(), records.len());
            for (r, o) in records.iter().zip(&out) {
                prop_assert_eq!(&o.value, &r.value);
                prop_assert_eq!(&o.key, &r.key);
            }
            // The transaction fields are covered by the CRC.
            let i = 12 + at.index(buf.len() - 12);
            buf[i] ^= 1 << bit;
            prop_assert!(check_batch(&buf).is_err());
        }
    }

    proptest! {
        #[test]
        fn producer_batches_round_trip(
            records in proptest::collection::vec(arb_record(), 1..10),
            base in 0u64..1_000_000,
            producer_id in any::<u64>(),
            epoch in any::<u16>(),
            base_sequence in 0..=i32::MAX,
            txn_sequence in proptest::option::of(any::<u64>()),
            at in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let producer = ProducerMark { producer_id, epoch, base_sequence };
            let txn = txn_sequence.map(|sequence| TxnMark { producer_id, epoch, sequence });
            let mut buf = Vec::new();
            let enc = encode_producer_batch(&mut buf, base, &records, 7, producer, txn);
            let header_len = if txn.is_some() { PRODUCER_TXN_BATCH_HEADER_LEN } else { PRODUCER_BATCH_HEADER_LEN };
            prop_assert_eq!(enc.len, header_len + records.iter().map(record_len).sum::<usize>());
            let h = check_batch(&buf).unwrap();
            prop_assert_eq!(h.producer, Some(producer));
            prop_assert_eq!(h.txn, txn);
            prop_assert_eq!(h.header_len(), header_len);
            prop_assert!(!h.is_control());
            let mut out = Vec::new();
            decode_records(&Bytes::from(buf.clone()), &h, 0, usize::MAX, &mut out).unwrap();
            prop_assert_eq!(out.len(), records.len());
            for (r, o) in records.iter().zip(&out) {
                prop_assert_eq!(&o.value, &r.value);
                prop_assert_eq!(&o.key, &r.key);
                prop_assert_eq!(&o.headers, &r.headers);
            }
            // The producer fields are covered by the CRC.
            let i = 12 + at.index(buf.len() - 12);
            buf[i] ^= 1 << bit;
            prop_assert!(check_batch(&buf).is_err());
        }
    }

    #[test]
    fn sequences_wrap_as_kafkas() {
        let p = ProducerMark {
            producer_id: 1,
            epoch: 0,
            base_sequence: i32::MAX - 1,
        };
        assert_eq!(p.last_sequence(1), i32::MAX - 1);
        assert_eq!(p.last_sequence(2), i32::MAX);
        assert_eq!(p.last_sequence(3), 0);
        assert_eq!(increment_sequence(5, 10), 15);
    }

    #[test]
    fn a_producer_header_cut_short_is_truncated_and_older_versions_still_parse() {
        let producer = ProducerMark {
            producer_id: 9,
            epoch: 1,
            base_sequence: 4,
        };
        let mut buf = Vec::new();
        encode_producer_batch(&mut buf, 0, &[ProducerRecord::new("x")], 1, producer, None);
        assert!(matches!(
            parse_header(&buf[..BATCH_HEADER_LEN + 4]),
            Err(FormatError::Truncated {
                needed: PRODUCER_BATCH_HEADER_LEN,
                ..
            })
        ));
        // A version 1 batch has no producer fields.
        let mut plain = Vec::new();
        encode_batch(&mut plain, 0, &[ProducerRecord::new("x")], 1);
        assert_eq!(check_batch(&plain).map(|h| h.producer), Ok(None));
        // Control batches are not a producer's.
        buf[17] = ATTR_TRANSACTIONAL | ATTR_CONTROL;
        let crc = crc32c::crc32c(&buf[CRC_START..]);
        buf[12..16].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(check_batch(&buf), Err(FormatError::BadHeader(_))));
    }

    #[test]
    fn a_batch_ending_past_the_largest_offset_is_a_bad_header() {
        // A damaged base offset near u64::MAX: its next offset would overflow (a panic
        // with overflow checks, a wrapped offset without) when a segment is scanned
        // or read. Found by fuzzing (fuzz/, target log_batch).
        let mut buf = Vec::new();
        encode_batch(
            &mut buf,
            0,
            &[ProducerRecord::new("x"), ProducerRecord::new("y")],
            1,
        );
        buf[..8].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        assert!(
            matches!(parse_header(&buf), Err(FormatError::BadHeader(ref m)) if m.contains("largest offset")),
            "{:?}",
            parse_header(&buf)
        );
        // The last offset itself is u64::MAX - 1: still a batch.
        buf[..8].copy_from_slice(&(u64::MAX - 2).to_le_bytes());
        assert_eq!(parse_header(&buf).map(|h| h.next_offset()), Ok(u64::MAX));
    }

    #[test]
    fn control_batches_carry_their_type_and_transaction() {
        let mark = TxnMark {
            producer_id: 3,
            epoch: 2,
            sequence: 9,
        };
        for control in [ControlType::Commit, ControlType::Abort] {
            let mut buf = Vec::new();
            encode_control_batch(&mut buf, 40, mark, control, 123);
            let h = check_batch(&buf).unwrap();
            assert!(h.is_control());
            assert_eq!(h.txn, Some(mark));
            assert_eq!((h.base_offset, h.record_count), (40, 1));
            let mut out = Vec::new();
            decode_records(&Bytes::from(buf), &h, 0, 10, &mut out).unwrap();
            let key = out[0].key.clone().unwrap();
            assert_eq!(ControlType::from_record_key(&key), Some(control));
            assert!(out[0].value.is_empty());
        }
        assert_eq!(ControlType::from_record_key(&[0, 0, 7, 0]), None);
    }

    #[test]
    fn plain_batches_with_transaction_attributes_are_rejected() {
        let mut buf = Vec::new();
        encode_batch(&mut buf, 0, &[ProducerRecord::new("x")], 1);
        buf[17] = ATTR_TRANSACTIONAL;
        let crc = crc32c::crc32c(&buf[CRC_START..]);
        buf[12..16].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(check_batch(&buf), Err(FormatError::BadHeader(_))));
        // A transactional header cut short is truncated, not misread.
        let mut buf = Vec::new();
        let mark = TxnMark {
            producer_id: 1,
            epoch: 0,
            sequence: 0,
        };
        encode_txn_batch(&mut buf, 0, &[ProducerRecord::new("x")], 1, mark);
        assert!(matches!(
            parse_header(&buf[..BATCH_HEADER_LEN + 4]),
            Err(FormatError::Truncated {
                needed: TXN_BATCH_HEADER_LEN,
                ..
            })
        ));
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
