//! `<data-dir>/broker.addr`: where the broker serving a data directory listens, for
//! clients on the same machine (later steps route `brook produce`, `consume` and jobs
//! through it). It holds `host:port` and is written atomically once the port is
//! bound, and removed when the broker stops.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The file's name in the data directory.
pub const ADDRESS_FILE: &str = "broker.addr";

/// The address file of `data_dir`.
pub fn address_file(data_dir: &Path) -> PathBuf {
    data_dir.join(ADDRESS_FILE)
}

/// Writes `addr` through a temporary file and a rename, so a reader sees a whole
/// address or none.
///
/// # Errors
/// I/O errors.
pub fn write_address(data_dir: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let path = address_file(data_dir);
    let tmp = path.with_extension("addr.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(addr.to_string().as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &path)
}

/// The address a broker wrote into `data_dir`, if there is a readable one.
pub fn read_address(data_dir: &Path) -> Option<SocketAddr> {
    std::fs::read_to_string(address_file(data_dir))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_none_when_absent() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(read_address(dir.path()), None);
        let addr: SocketAddr = "127.0.0.1:19092".parse().expect("addr");
        write_address(dir.path(), addr).expect("write");
        assert_eq!(read_address(dir.path()), Some(addr));
    }
}
