//! The log's batch decoder (log/src/format.rs): header parsing, the CRC check and the
//! records of a batch, as a read of a segment decodes them. The first byte chooses
//! whether the CRCs are fixed up first (to reach the record decoder) or left as they
//! are (to exercise the check), and where the read starts inside the batch.
#![no_main]

use brook_log::format;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if ctl & 1 == 0 {
        brook_fuzz::fix_batch_crcs(&mut buf);
    }
    let bytes = Bytes::from(buf);
    let mut pos = 0;
    while pos < bytes.len() {
        let Ok(h) = format::check_batch(&bytes[pos..]) else {
            return;
        };
        let batch = bytes.slice(pos..pos + h.total_len());
        let from = h.base_offset.saturating_add(u64::from(ctl >> 4));
        let max = usize::from((ctl >> 1) & 7) * 100 + 1;
        let mut n = 0usize;
        let passed = format::for_each_record(&batch, &h, from, max, |r| {
            n += 1;
            for header in r.headers.iter() {
                let _ = (header.key, header.value);
            }
            let _ = r.to_record();
        });
        if let Ok(passed) = passed {
            assert_eq!(passed, n, "for_each_record's count is the records passed on");
            assert_eq!(passed, format::records_wanted(&h, from, max));
        }
        let mut out = Vec::new();
        let _ = format::decode_records(&batch, &h, from, max, &mut out);
        if h.is_control() {
            let _ = out
                .first()
                .and_then(|r| r.key.as_ref())
                .and_then(|k| format::ControlType::from_record_key(k));
        }
        let _ = h.next_offset();
        pos += h.total_len();
    }
});
