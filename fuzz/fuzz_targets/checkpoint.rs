//! The checkpoint reader (engine/src/checkpoint/): a `chk-<id>` directory's `_metadata`
//! (JSON) and the task files it lists (magic, format version, bincode body; version 2
//! migrated), as a restore reads them.
//!
//! Input: a control byte, then either (bit 1 clear) a task file, listed by a metadata
//! file that matches its size and CRC so that the body reaches the decoder, or (bit 1
//! set) a `_metadata` file, with one task file `t.state` beside it (the rest after a
//! u16-length-prefixed metadata piece). Bit 2 lists the task file twice.
//!
//! What must hold: loading fails with an error or succeeds, without a panic or an
//! allocation the input does not pay for.
#![no_main]

use brook_engine::checkpoint::FORMAT_VERSION;
use brook_engine::{latest_complete, RestoredCheckpoint};
use libfuzzer_sys::fuzz_target;

fn metadata(version: u32, size: usize, crc: u32, twice: bool) -> String {
    let entry = format!(r#"{{"name":"t.state","size":{size},"crc32c":{crc}}}"#);
    let files = if twice {
        format!("{entry},{entry}")
    } else {
        entry
    };
    format!(
        r#"{{"format_version":{version},"job":"fuzz","checkpoint_id":7,"timestamp_ms":0,"max_parallelism":128,"vertices":["source","sink"],"files":[{files}]}}"#
    )
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let dir = brook_fuzz::scratch_dir();
    let chk = dir.path().join("chk-7");
    std::fs::create_dir(&chk).expect("a scratch directory");
    let (meta, task): (Vec<u8>, &[u8]) = if ctl & 1 == 0 {
        let version = if ctl & 8 == 0 { FORMAT_VERSION } else { 2 };
        let meta = metadata(version, rest.len(), crc32c::crc32c(rest), ctl & 2 != 0);
        (meta.into_bytes(), rest)
    } else {
        let pieces = brook_fuzz::split(rest, 2);
        (pieces[0].to_vec(), pieces[1])
    };
    std::fs::write(chk.join("_metadata"), &meta).expect("a scratch file");
    std::fs::write(chk.join("t.state"), task).expect("a scratch file");
    let loaded = RestoredCheckpoint::load(&chk);
    let latest = latest_complete(dir.path());
    assert_eq!(loaded.is_ok(), latest.is_ok(), "latest_complete loads the one checkpoint");
    // The id is the metadata's (as Flink's `_metadata`): the directory's name is no
    // authority (a savepoint's is `savepoint-<id>`, a copied checkpoint's anything).
    // Only metadata written here says 7; a raw one may say another id.
    if let (Ok(c), true) = (loaded, ctl & 1 == 0) {
        assert_eq!(c.id, 7);
    }
});
