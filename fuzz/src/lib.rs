//! Helpers shared by the fuzz targets (fuzz_targets/).

use brook_log::format;

/// Where a batch's CRC32C sits and where the bytes it covers start (log/src/format.rs).
const CRC_AT: usize = 12;
const CRC_START: usize = 16;

/// Rewrites the CRC of every batch of a segment file whose header parses and whose
/// length fits, so that the fuzzer's mutations reach the record decoder instead of
/// stopping at the checksum. Stops at the first batch that does not parse.
pub fn fix_batch_crcs(data: &mut [u8]) {
    let mut pos = 0;
    while pos < data.len() {
        let Ok(h) = format::parse_header(&data[pos..]) else {
            return;
        };
        let end = match pos.checked_add(h.total_len()) {
            Some(end) if end <= data.len() => end,
            _ => return,
        };
        let crc = crc32c::crc32c(&data[pos + CRC_START..end]);
        data[pos + CRC_AT..pos + CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        pos = end;
    }
}

/// Splits `data` into pieces, each prefixed by a little-endian u16 length; the last
/// piece takes whatever is left (also when a length runs past the end).
pub fn split(mut data: &[u8], pieces: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(pieces);
    for _ in 1..pieces {
        if data.len() < 2 {
            out.push(&data[..0]);
            continue;
        }
        let n = usize::from(u16::from_le_bytes([data[0], data[1]])).min(data.len() - 2);
        out.push(&data[2..2 + n]);
        data = &data[2 + n..];
    }
    out.push(data);
    out
}

/// The inverse of [`split`]: how the seed corpus is written.
pub fn join(pieces: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        if i + 1 < pieces.len() {
            let n = u16::try_from(p.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&p[..usize::from(n)]);
        } else {
            out.extend_from_slice(p);
        }
    }
    out
}

/// A scratch directory in memory where the machine has one (/dev/shm), so that the
/// targets that go through files do not wait on a disk.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("a temporary directory")
}
