//! `Partition::read_stored`, what a read_committed Kafka fetch is sent: the batches up to
//! the last stable offset as stored (aborted records and markers included) and the
//! aborted transactions that meet them. A reader that filters as Kafka's clients do
//! (Java's `CompletedFetch`, librdkafka's aborted-transactions list) gets exactly what
//! brook's own read-committed reader gets, from any offset and with reads cut anywhere,
//! before and after the log is reopened.

#![allow(clippy::unwrap_used)]

use brook_log::{
    ControlType, FsyncPolicy, IsolationLevel, Log, LogOptions, Partition, ProducerRecord,
    ReadLimit, TopicConfig,
};

const TOPIC: &str = "t";

fn options() -> LogOptions {
    LogOptions {
        fsync: FsyncPolicy::Never,
        maintenance_interval_ms: None,
        ..Default::default()
    }
}

/// One record of a stored read: its batch's start, transaction producer id, control
/// type, and its offset and value.
#[derive(Debug, Clone)]
struct Stored {
    batch: u64,
    producer: Option<u64>,
    control: Option<ControlType>,
    offset: u64,
    value: Vec<u8>,
}

/// Reads from `from` to the last stable offset in reads of at most `max_bytes`,
/// filtering each read as a Kafka client filters a fetch response: a transactional
/// batch of producer P is dropped while P is in the aborted set, which an aborted
/// transaction joins once a batch reaches its first offset and P's ABORT marker
/// leaves. Returns the records kept and the position after the last read.
fn kafka_read_committed(p: &Partition, from: u64, max_bytes: usize) -> (Vec<(u64, String)>, u64) {
    let mut at = from;
    let mut kept = Vec::new();
    while at < p.last_stable_offset() {
        let mut got: Vec<Stored> = Vec::new();
        let read = p
            .read_stored(
                at,
                ReadLimit {
                    max_records: usize::MAX,
                    max_bytes,
                },
                |_, h, r| {
                    got.push(Stored {
                        batch: h.base_offset,
                        producer: h.txn.map(|t| t.producer_id),
                        control: h
                            .is_control()
                            .then(|| ControlType::from_record_key(r.key.unwrap()).unwrap()),
                        offset: r.offset,
                        value: r.value.to_vec(),
                    })
                },
            )
            .unwrap();
        assert!(read.summary.next_offset > at, "a read moves on from {at}");
        let mut queue = read.aborted.clone();
        queue.sort_by_key(|a| a.first_offset);
        let mut queue = queue.into_iter().peekable();
        let mut aborted_producers = std::collections::BTreeSet::new();
        for (i, r) in got.iter().enumerate() {
            let batch_last = got[i..]
                .iter()
                .take_while(|x| x.batch == r.batch)
                .last()
                .map_or(r.offset, |x| x.offset);
            let Some(producer) = r.producer else {
                kept.push((r.offset, String::from_utf8(r.value.clone()).unwrap()));
                continue;
            };
            while let Some(a) = queue.next_if(|a| a.first_offset <= batch_last) {
                aborted_producers.insert(a.producer_id);
            }
            match r.control {
                Some(ControlType::Abort) => {
                    aborted_producers.remove(&producer);
                }
                Some(ControlType::Commit) => {}
                None if aborted_producers.contains(&producer) => {}
                None => kept.push((r.offset, String::from_utf8(r.value.clone()).unwrap())),
            }
        }
        at = read.summary.next_offset;
    }
    (kept, at)
}

/// What brook's own read-committed reader reads from `from`.
fn brook_read_committed(p: &Partition, from: u64) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < p.last_stable_offset() {
        let mut recs = Vec::new();
        at = p
            .read_into_isolated(
                at,
                ReadLimit::default(),
                IsolationLevel::ReadCommitted,
                &mut recs,
            )
            .unwrap()
            .next_offset;
        out.extend(
            recs.iter()
                .map(|r| (r.offset, String::from_utf8(r.value.to_vec()).unwrap())),
        );
    }
    out
}

fn records(prefix: &str, n: usize) -> Vec<ProducerRecord> {
    (0..n)
        .map(|i| ProducerRecord::new(format!("{prefix}{i}")))
        .collect()
}

#[test]
fn a_stored_read_has_the_markers_and_the_aborted_transactions_a_kafka_client_filters_by() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), options()).unwrap();
    let small = TopicConfig {
        segment_bytes: 1024,
        index_interval_bytes: 64,
        ..Default::default()
    };
    log.create_topic(TOPIC, 1, small).unwrap();
    let mut w = log.init_transactions("w").unwrap();
    // Offsets: c0..c2 0-2, commit 3, a0..a2 4-6, plain 7, abort 8, d0..d2 9-11,
    // commit 12, another writer's aborted e0 13 and abort 14, plain 15.
    w.begin().unwrap();
    w.send(TOPIC, records("c", 3)).unwrap();
    w.commit_transaction().unwrap();
    w.begin().unwrap();
    w.send(TOPIC, records("a", 3)).unwrap();
    log.topic(TOPIC)
        .unwrap()
        .append(records("plain-", 1))
        .unwrap();
    w.abort_transaction().unwrap();
    w.begin().unwrap();
    w.send(TOPIC, records("d", 3)).unwrap();
    w.commit_transaction().unwrap();
    let mut other = log.init_transactions("other").unwrap();
    other.begin().unwrap();
    other.send(TOPIC, records("e", 1)).unwrap();
    other.abort_transaction().unwrap();
    log.topic(TOPIC)
        .unwrap()
        .append(vec![ProducerRecord::new("last")])
        .unwrap();

    let check = |log: &Log| {
        let p = log.topic(TOPIC).unwrap().partition(0).unwrap();
        assert_eq!(p.last_stable_offset(), 16);
        // One read of everything: every offset is there, the markers as control
        // records of their transaction, and both aborted transactions listed.
        let mut got = Vec::new();
        let read = p
            .read_stored(0, ReadLimit::default(), |_, h, r| {
                got.push((
                    r.offset,
                    h.is_control()
                        .then(|| ControlType::from_record_key(r.key.unwrap()).unwrap()),
                    h.txn.map(|t| t.producer_id),
                ))
            })
            .unwrap();
        assert_eq!(read.summary.next_offset, 16);
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            (0..16).collect::<Vec<_>>()
        );
        let markers: Vec<_> = got.iter().filter_map(|g| g.1.map(|c| (g.0, c))).collect();
        assert_eq!(
            markers,
            vec![
                (3, ControlType::Commit),
                (8, ControlType::Abort),
                (12, ControlType::Commit),
                (14, ControlType::Abort),
            ]
        );
        let w_pid = got[0].2.unwrap();
        let other_pid = got[13].2.unwrap();
        assert_ne!(w_pid, other_pid);
        assert_eq!(got[7].2, None, "the plain record is no transaction's");
        let listed: Vec<_> = read
            .aborted
            .iter()
            .map(|a| (a.producer_id, a.first_offset, a.last_offset))
            .collect();
        assert_eq!(listed, vec![(w_pid, 4, 8), (other_pid, 13, 14)]);
        // A read from inside the aborted transaction still lists it; one after its
        // marker does not.
        let from_inside = p
            .read_stored(5, ReadLimit::default(), |_, _, _| {})
            .unwrap();
        assert_eq!(from_inside.aborted.len(), 2);
        assert_eq!(from_inside.aborted[0].first_offset, 4);
        let after = p
            .read_stored(9, ReadLimit::default(), |_, _, _| {})
            .unwrap();
        assert_eq!(after.aborted.len(), 1);
        // Filtered as a Kafka client does, from every offset and with reads cut
        // anywhere: exactly brook's read-committed records, position at the end.
        for from in 0..16 {
            let want = brook_read_committed(&p, from);
            for max_bytes in [1, 60, 150, 1 << 20] {
                let (kept, position) = kafka_read_committed(&p, from, max_bytes);
                assert_eq!(kept, want, "from {from}, reads of {max_bytes} bytes");
                assert_eq!(position, 16);
            }
        }
        let want: Vec<(u64, String)> = [
            (0, "c0"),
            (1, "c1"),
            (2, "c2"),
            (7, "plain-0"),
            (9, "d0"),
            (10, "d1"),
            (11, "d2"),
            (15, "last"),
        ]
        .iter()
        .map(|(o, v)| (*o, v.to_string()))
        .collect();
        assert_eq!(brook_read_committed(&p, 0), want);
    };
    check(&log);
    drop((w, other));
    log.close().unwrap();
    drop(log);
    let reopened = Log::open(dir.path(), options()).unwrap();
    check(&reopened);
}

#[test]
fn a_stored_read_stops_at_an_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), options()).unwrap();
    let topic = log.create_topic(TOPIC, 1, TopicConfig::default()).unwrap();
    topic.append(records("before", 1)).unwrap();
    let mut w = log.init_transactions("w").unwrap();
    w.begin().unwrap();
    w.send(TOPIC, records("open", 2)).unwrap();
    let p = topic.partition(0).unwrap();
    let mut n = 0;
    let read = p
        .read_stored(0, ReadLimit::default(), |_, _, _| n += 1)
        .unwrap();
    assert_eq!((n, read.summary.next_offset), (1, 1));
    assert!(read.aborted.is_empty());
    let at_lso = p
        .read_stored(1, ReadLimit::default(), |_, _, _| n += 1)
        .unwrap();
    assert_eq!((n, at_lso.summary.next_offset), (1, 1));
}
