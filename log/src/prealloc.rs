//! Disk blocks reserved ahead of the active segment's appends.
//!
//! Why: on ext4 (delayed allocation) an fsync allocates the blocks of the data it
//! writes back, and appends extending the same file meanwhile wait for it. The
//! `interval` fsync runs without the partition's lock ([`crate::flush`]), yet each
//! append into a growing segment stalled behind it in the kernel: `strace` of the
//! broker bench showed `pwrite64` calls taking 14–34 ms while an `fdatasync` of the
//! segment ran, and that stall was the p99 produce latency at half load (20–29 ms at
//! linger 1 ms; 2.6 ms with fsync `never`). Into blocks reserved beforehand
//! (`fallocate` with `FALLOC_FL_KEEP_SIZE`: the file's length, which is the segment's
//! data, does not change) the same appends never waited longer than 0.5 ms
//! (benches/README.md, "Broker").
//!
//! How much: the reservation doubles with the segment, from [`MIN_RESERVE`] bytes to
//! [`MAX_RESERVE`], and never passes `segment.bytes`. So a quiet partition reserves
//! about what it holds, a busy one a few fsync intervals of appends, never more than
//! 32 MiB beyond its data; the blocks left over when the segment rolls are given back
//! by its roll's flush (truncating the file to its length). Kafka's `preallocate`
//! (off by default) reserves the whole `segment.bytes` at once instead.
//!
//! Best effort: a file system without `fallocate` (or any error, such as a full disk)
//! leaves the append to allocate as it always did; it then fails or not on its own.

use std::fs::File;

/// The smallest reservation (bytes).
pub(crate) const MIN_RESERVE: u64 = 64 * 1024;
/// The largest reservation (bytes).
pub(crate) const MAX_RESERVE: u64 = 32 * 1024 * 1024;

/// Where an active segment's reserved blocks end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reserve {
    /// Bytes from the file's start that are reserved (or written).
    pub(crate) end: u64,
    /// Set once a reservation failed: the file system cannot, or the disk is full;
    /// the segment stops trying.
    pub(crate) off: bool,
}

impl Reserve {
    /// A segment whose first `size` bytes are written and nothing beyond reserved.
    pub(crate) fn new(size: u64) -> Self {
        Reserve {
            end: size,
            off: false,
        }
    }

    /// The range (start, length) to reserve before writing `len` bytes at `pos` into
    /// a segment of at most `segment_bytes`, or `None` when the reserved blocks
    /// already cover the write (or reserving is off). The reservation covers the write
    /// and then as much again as the segment will hold after it, between
    /// [`MIN_RESERVE`] and [`MAX_RESERVE`], capped at `segment_bytes` (a batch larger
    /// than the segment is still covered: it is written whole).
    pub(crate) fn next(&self, pos: u64, len: u64, segment_bytes: u64) -> Option<(u64, u64)> {
        let write_end = pos + len;
        if self.off || write_end <= self.end {
            return None;
        }
        let ahead = write_end.clamp(MIN_RESERVE, MAX_RESERVE);
        let end = (write_end + ahead).min(segment_bytes).max(write_end);
        Some((self.end, end - self.end))
    }

    /// Reserves `range` (from [`Reserve::next`]) in `file`; on failure reserving stops
    /// for this segment.
    pub(crate) fn reserve(&mut self, file: &File, (start, len): (u64, u64)) {
        match fallocate_keep_size(file, start, len) {
            Ok(()) => self.end = start + len,
            Err(e) => {
                tracing::debug!(error = %e, "reserving segment blocks failed; appends allocate their own");
                self.off = true;
            }
        }
    }
}

#[cfg(target_os = "linux")]
fn fallocate_keep_size(file: &File, start: u64, len: u64) -> std::io::Result<()> {
    rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, start, len)
        .map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn fallocate_keep_size(_file: &File, _start: u64, _len: u64) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_write_inside_the_reserved_blocks_reserves_nothing() {
        let r = Reserve {
            end: 1000,
            off: false,
        };
        assert_eq!(r.next(0, 1000, GIB), None);
        assert_eq!(r.next(900, 100, GIB), None);
    }

    #[test]
    fn the_reservation_doubles_the_segment_between_the_bounds() {
        let r = Reserve::new(0);
        // A first small batch: the write and 64 KiB after it.
        assert_eq!(r.next(0, 100, GIB), Some((0, 100 + MIN_RESERVE)));
        // At 1 MiB: as much again.
        let r = Reserve::new(1 << 20);
        assert_eq!(
            r.next(1 << 20, 100, GIB),
            Some((1 << 20, 2 * 100 + (1 << 20)))
        );
        // At 100 MiB: 32 MiB ahead.
        let at = 100 << 20;
        let r = Reserve::new(at);
        assert_eq!(r.next(at, 100, GIB), Some((at, 100 + MAX_RESERVE)));
    }

    #[test]
    fn the_reservation_stops_at_the_segment_size_but_covers_the_write() {
        let r = Reserve::new(0);
        assert_eq!(r.next(0, 100, 4096), Some((0, 4096)));
        // A batch larger than the segment (written whole, as Kafka does).
        assert_eq!(r.next(0, 10_000, 4096), Some((0, 10_000)));
        let r = Reserve::new(4000);
        assert_eq!(r.next(4000, 500, 4096), Some((4000, 500)));
    }

    #[test]
    fn a_failed_reservation_turns_reserving_off() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = File::create(dir.path().join("f")).expect("create");
        let mut r = Reserve::new(0);
        // A negative-length range in the kernel's terms: always refused.
        r.reserve(&file, (u64::MAX / 2, u64::MAX / 2));
        assert!(r.off);
        assert_eq!(r.next(0, 100, GIB), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reserved_blocks_keep_the_length_and_truncating_gives_them_back() {
        use std::os::unix::fs::{FileExt as _, MetadataExt as _};
        let dir = tempfile::tempdir().expect("temp dir");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("seg"))
            .expect("create");
        let mut r = Reserve::new(0);
        let range = r.next(0, 4096, GIB).expect("a reservation");
        r.reserve(&file, range);
        // ext4 and tmpfs (where CI's temp dirs are) support it.
        assert!(!r.off, "fallocate failed in the temp dir");
        file.write_all_at(&[7u8; 4096], 0).expect("write");
        let meta = file.metadata().expect("metadata");
        assert_eq!(meta.len(), 4096, "the length is the data's");
        assert!(
            meta.blocks() * 512 >= 4096 + MIN_RESERVE,
            "{} blocks",
            meta.blocks()
        );
        file.set_len(4096).expect("truncate");
        let meta = file.metadata().expect("metadata");
        assert!(
            meta.blocks() * 512 < 4096 + MIN_RESERVE,
            "{} blocks",
            meta.blocks()
        );
    }
}
