//! Crash test: a child process appends acknowledged batches under
//! [`FsyncPolicy::Always`] and is killed with SIGKILL at random moments; after every
//! kill this process reopens the log (an unclean open, so the active segments are
//! scanned and a torn tail is truncated) and checks `docs/semantics.md` §1
//! "Durability":
//!
//! - every acknowledged record is present, exactly once, in order;
//! - records that were sent but not acknowledged may be present, but only as a
//!   contiguous suffix continuing the sequence (no gaps, no duplicates, nothing that
//!   was never sent);
//! - everything seen by an earlier check is still there (the log never shrinks).
//!
//! The child is this test binary itself (a private hard link to it, so that a rebuild
//! of the workspace during the run cannot swap it), re-executed to run the ignored test
//! [`crash_child`] by exact name, with the data directory in an environment variable.
//! It reports on stdout `sending <partition> <seq>` before each append and
//! `acked <partition> <seq>` after it returns, flushing each line, so the parent knows
//! the highest acknowledged (and highest attempted) record at the moment of the kill.
//!
//! Each record's value is `<partition>/<seq>/<key>/<filler>`; the per-partition
//! sequence number equals the record's offset, so the check is simply "record at
//! offset `o` carries sequence `o`". Records are keyed (24 keys over 3 partitions), so
//! one append usually writes a batch to several partitions; segments are 16 KiB, so
//! rolls happen between and during kills. Each round continues the previous log: the
//! child resumes after the last sequence on disk in each partition.
//!
//! Rounds: `BROOK_CRASH_ITERATIONS` (default 30) kills 5-60 ms after the child started
//! writing; besides, every 7th round kills the child 0-20 ms after it was spawned
//! (possibly during its own recovery), and every 5th round lets the child finish a few
//! batches and close the log cleanly (so the next open is a clean one, trusting the
//! index files). `BROOK_CRASH_SEED` fixes the random choices (the kill moments still
//! depend on timing).
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use brook_log::partitioner::partition_for_key;
use brook_log::{FsyncPolicy, Log, LogOptions, ProducerRecord, ReadLimit, Record, TopicConfig};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TOPIC: &str = "crash";
const PARTITIONS: u32 = 3;
const SEGMENT_BYTES: u64 = 16 * 1024;
const KEYS: usize = 24;
const MAX_BATCH: usize = 50;
const MAX_FILLER: usize = 120;

/// Name of the child test, run by exact name.
const CHILD_TEST: &str = "crash_child";
const DIR_ENV: &str = "BROOK_CRASH_CHILD_DIR";
const SEED_ENV: &str = "BROOK_CRASH_CHILD_SEED";
const MAX_BATCHES_ENV: &str = "BROOK_CRASH_CHILD_MAX_BATCHES";
/// Prefix of the child's report lines (the test harness prints its own lines too).
const TAG: &str = "BROOK-CRASH";

/// How long to wait for a child to open the log before giving up (the machine may be
/// slow, but not this slow).
const START_TIMEOUT: Duration = Duration::from_secs(120);

fn key_name(i: usize) -> String {
    format!("key-{i:02}")
}

fn filler_byte(seq: u64, i: usize) -> u8 {
    b'a' + ((seq + i as u64) % 26) as u8
}

fn value(partition: u32, seq: u64, key: &str, filler_len: usize) -> Bytes {
    let mut v = format!("{partition}/{seq}/{key}/").into_bytes();
    v.extend((0..filler_len).map(|i| filler_byte(seq, i)));
    Bytes::from(v)
}

/// Checks one stored record of `partition` and returns its sequence number.
fn check_record(partition: u32, r: &Record) -> u64 {
    let text = std::str::from_utf8(&r.value)
        .unwrap_or_else(|_| panic!("p{partition} offset {}: value is not UTF-8", r.offset));
    let mut parts = text.splitn(4, '/');
    let (Some(p), Some(seq), Some(key), Some(filler)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        panic!("p{partition} offset {}: malformed value {text:?}", r.offset);
    };
    let p: u32 = p.parse().unwrap();
    let seq: u64 = seq.parse().unwrap();
    assert_eq!(
        p, partition,
        "offset {}: record of another partition",
        r.offset
    );
    assert_eq!(
        r.key.as_deref(),
        Some(key.as_bytes()),
        "p{partition} offset {}: key does not match the value",
        r.offset
    );
    assert_eq!(
        partition_for_key(key.as_bytes(), PARTITIONS),
        partition,
        "p{partition} offset {}: key {key} belongs to another partition",
        r.offset
    );
    assert!(
        filler
            .bytes()
            .enumerate()
            .all(|(i, b)| b == filler_byte(seq, i)),
        "p{partition} offset {}: damaged filler",
        r.offset
    );
    seq
}

fn log_options(maintenance: bool) -> LogOptions {
    LogOptions {
        fsync: FsyncPolicy::Always,
        maintenance_interval_ms: maintenance.then_some(1_000),
        ..Default::default()
    }
}

/// The child: appends batches until killed (or until `MAX_BATCHES_ENV` batches, then
/// closes cleanly). Does nothing when run without the environment the parent sets.
#[test]
#[ignore = "child process of `crash_recovery_keeps_every_acknowledged_record`"]
fn crash_child() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let max_batches: Option<u64> = std::env::var(MAX_BATCHES_ENV)
        .ok()
        .map(|s| s.parse().unwrap());
    let mut rng = StdRng::seed_from_u64(seed);
    let log = Log::open(&dir, log_options(true)).unwrap();
    let topic = log.topic(TOPIC).unwrap();
    // Resume after the last sequence on disk in each partition.
    let mut next_seq = Vec::new();
    for p in 0..PARTITIONS {
        let part = topic.partition(p).unwrap();
        let end = part.log_end_offset();
        let next = match end {
            0 => 0,
            _ => {
                let last = part.read(end - 1, ReadLimit::records(1)).unwrap();
                assert_eq!(last.len(), 1);
                check_record(p, &last[0]) + 1
            }
        };
        assert_eq!(next, end, "p{p}: sequence and offset disagree");
        next_seq.push(next);
    }
    let keys: Vec<(String, u32)> = (0..KEYS)
        .map(|i| {
            let k = key_name(i);
            let p = topic.partition_for(Some(k.as_bytes()));
            (k, p)
        })
        .collect();
    let mut out = std::io::stdout().lock();
    let mut report = |line: String| {
        writeln!(out, "{TAG} {line}").unwrap();
        out.flush().unwrap();
    };
    report("start".into());
    let mut batches = 0u64;
    while max_batches.is_none_or(|m| batches < m) {
        // Mostly batches spread over several partitions (one append = one batch per
        // partition); sometimes a batch for a single partition.
        let only = rng.gen_bool(0.3).then(|| rng.gen_range(0..PARTITIONS));
        let candidates: Vec<&(String, u32)> = keys
            .iter()
            .filter(|(_, p)| only.is_none_or(|o| o == *p))
            .collect();
        let n = rng.gen_range(1..=MAX_BATCH);
        let mut last_seq: [Option<u64>; PARTITIONS as usize] = [None; PARTITIONS as usize];
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            let (key, p) = candidates[rng.gen_range(0..candidates.len())];
            let seq = next_seq[*p as usize];
            next_seq[*p as usize] += 1;
            last_seq[*p as usize] = Some(seq);
            let filler = rng.gen_range(0..=MAX_FILLER);
            records.push(ProducerRecord::keyed(
                Bytes::from(key.clone()),
                value(*p, seq, key, filler),
            ));
        }
        for (p, seq) in last_seq.iter().enumerate() {
            if let Some(seq) = seq {
                report(format!("sending {p} {seq}"));
            }
        }
        topic.append(records).unwrap();
        for (p, seq) in last_seq.iter().enumerate() {
            if let Some(seq) = seq {
                report(format!("acked {p} {seq}"));
            }
        }
        batches += 1;
    }
    log.close().unwrap();
    report("done".into());
}

enum Event {
    Start,
    Sending(usize, u64),
    Acked(usize, u64),
    Done,
}

fn parse_event(line: &str) -> Option<Event> {
    // The harness prints `test crash_child ... ` without a newline before the first
    // report, so the tag may be preceded by other text.
    let rest = line[line.find(TAG)? + TAG.len()..].trim();
    let mut words = rest.split(' ');
    let what = words.next()?;
    let mut num = || words.next().and_then(|w| w.parse::<u64>().ok());
    Some(match what {
        "start" => Event::Start,
        "done" => Event::Done,
        "sending" => Event::Sending(num()? as usize, num()?),
        "acked" => Event::Acked(num()? as usize, num()?),
        _ => return None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Killed 5-60 ms after the child started writing.
    KillWhileWriting,
    /// Killed 0-20 ms after spawning (perhaps while it recovers the log).
    KillEarly,
    /// The child appends a few batches and closes the log cleanly.
    CleanExit,
}

/// What a round's child reported: per partition, one past the highest acknowledged
/// and one past the highest attempted sequence.
struct Reported {
    acked: Vec<u64>,
    sent: Vec<u64>,
    started: bool,
    done: bool,
}

/// A private link to (or copy of) this test binary: the workspace may be rebuilt while
/// the test runs (others compile in parallel), and a relinked binary at the original
/// path would be half-written or a different version.
fn pin_own_binary(dir: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let pinned = dir.join("crash-test-binary");
    if std::fs::hard_link(&exe, &pinned).is_err() {
        std::fs::copy(&exe, &pinned).unwrap();
    }
    pinned
}

fn run_child(exe: &Path, dir: &Path, round: Round, rng: &mut StdRng, floor: &[u64]) -> Reported {
    let mut cmd = Command::new(exe);
    cmd.args([
        CHILD_TEST,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(DIR_ENV, dir)
    .env(SEED_ENV, rng.gen::<u64>().to_string())
    .env_remove(MAX_BATCHES_ENV)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if round == Round::CleanExit {
        cmd.env(MAX_BATCHES_ENV, rng.gen_range(1..=20).to_string());
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(e) = parse_event(&line) {
                // The receiver may be gone if the parent panicked; nothing to do then.
                let _ = tx.send(e);
            }
            lines.push(line);
        }
        lines
    });
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let mut rep = Reported {
        acked: floor.to_vec(),
        sent: floor.to_vec(),
        started: false,
        done: false,
    };
    let apply = |rep: &mut Reported, e: Event| match e {
        Event::Start => rep.started = true,
        Event::Done => rep.done = true,
        Event::Sending(p, seq) => rep.sent[p] = rep.sent[p].max(seq + 1),
        Event::Acked(p, seq) => rep.acked[p] = rep.acked[p].max(seq + 1),
    };
    let status = match round {
        Round::CleanExit => child.wait().unwrap(),
        Round::KillEarly => {
            thread::sleep(Duration::from_millis(rng.gen_range(0..=20)));
            child.kill().unwrap();
            child.wait().unwrap()
        }
        Round::KillWhileWriting => {
            let delay = Duration::from_millis(rng.gen_range(5..=60));
            loop {
                match rx.recv_timeout(START_TIMEOUT) {
                    Ok(e @ Event::Start) => {
                        apply(&mut rep, e);
                        break;
                    }
                    Ok(e) => apply(&mut rep, e),
                    Err(_) => break, // the child died or hangs; reported below
                }
            }
            thread::sleep(delay);
            child.kill().unwrap();
            child.wait().unwrap()
        }
    };
    let lines = reader.join().unwrap();
    let errors = err_reader.join().unwrap();
    while let Ok(e) = rx.try_recv() {
        apply(&mut rep, e);
    }
    let killed = status.signal() == Some(9);
    let expected_ok = match round {
        Round::CleanExit => status.success() && rep.done,
        // A kill that came after the child finished is impossible: it never finishes.
        Round::KillEarly | Round::KillWhileWriting => killed,
    };
    assert!(
        expected_ok,
        "child of round {round:?} ended with {status}\n--- stdout (last lines)\n{}\n--- stderr\n{errors}",
        lines[lines.len().saturating_sub(20)..].join("\n")
    );
    if round == Round::KillWhileWriting {
        assert!(
            rep.started,
            "child never started writing:\n{}\n{errors}",
            lines.join("\n")
        );
    }
    rep
}

/// Reopens the log and checks every partition against what the child reported;
/// returns the end offset of each partition.
fn verify(dir: &Path, round: Round, rep: &Reported, durable: &[u64], rng: &mut StdRng) -> Vec<u64> {
    let log = Log::open(dir, log_options(false)).unwrap();
    let topic = log.topic(TOPIC).unwrap();
    let mut ends = Vec::new();
    let mut records = Vec::new();
    for p in 0..PARTITIONS {
        let pi = p as usize;
        let part = topic.partition(p).unwrap();
        assert_eq!(part.log_start_offset(), 0, "p{p}: data went missing");
        let end = part.log_end_offset();
        // Read everything, in reads of bounded size.
        let mut next = 0u64;
        loop {
            records.clear();
            let n = part
                .read_into(
                    next,
                    ReadLimit {
                        max_records: 20_000,
                        max_bytes: 4 << 20,
                    },
                    &mut records,
                )
                .unwrap();
            if n == 0 {
                break;
            }
            for r in &records {
                assert_eq!(r.offset, next, "p{p}: offsets are not dense");
                let seq = check_record(p, r);
                assert_eq!(
                    seq, next,
                    "p{p} offset {next}: expected sequence {next}, found {seq} (a gap or a duplicate)"
                );
                next += 1;
            }
        }
        assert_eq!(
            next, end,
            "p{p}: read {next} records but the log ends at {end}"
        );
        assert!(
            end >= rep.acked[pi],
            "p{p}: acknowledged records lost after {round:?}: {} acknowledged, {end} present",
            rep.acked[pi]
        );
        assert!(
            end >= durable[pi],
            "p{p}: records seen by an earlier check were lost: {} before, {end} now",
            durable[pi]
        );
        assert!(
            end <= rep.sent[pi].max(durable[pi]),
            "p{p}: {end} records present, but only {} were ever sent",
            rep.sent[pi].max(durable[pi])
        );
        if round == Round::CleanExit {
            assert_eq!(
                end, rep.acked[pi],
                "p{p}: clean exit, yet not exactly the acknowledged records"
            );
        }
        // Random positioned reads go through the (rebuilt or loaded) offset index.
        for _ in 0..3.min(end) {
            let o = rng.gen_range(0..end);
            let r = part.read(o, ReadLimit::records(1)).unwrap();
            assert_eq!(r.len(), 1);
            assert_eq!(
                r[0].offset, o,
                "p{p}: read at {o} returned offset {}",
                r[0].offset
            );
            assert_eq!(check_record(p, &r[0]), o);
        }
        ends.push(end);
    }
    log.close().unwrap();
    ends
}

#[test]
fn crash_recovery_keeps_every_acknowledged_record() {
    let kills: usize = std::env::var("BROOK_CRASH_ITERATIONS")
        .ok()
        .map_or(30, |s| {
            s.parse().expect("BROOK_CRASH_ITERATIONS must be a number")
        });
    let seed: u64 = std::env::var("BROOK_CRASH_SEED")
        .ok()
        .map_or_else(rand::random, |s| {
            s.parse().expect("BROOK_CRASH_SEED must be a number")
        });
    println!("crash test: {kills} kills, BROOK_CRASH_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let exe_dir = tempfile::tempdir().unwrap();
    let exe = pin_own_binary(exe_dir.path());
    {
        let log = Log::open(dir.path(), log_options(false)).unwrap();
        let config = TopicConfig {
            segment_bytes: SEGMENT_BYTES,
            ..Default::default()
        };
        log.create_topic(TOPIC, PARTITIONS, config).unwrap();
        log.close().unwrap();
    }
    // Every partition must get keys, or it would not be exercised.
    for p in 0..PARTITIONS {
        assert!((0..KEYS).any(|i| partition_for_key(key_name(i).as_bytes(), PARTITIONS) == p));
    }

    let mut rounds = Vec::new();
    for i in 1..=kills {
        rounds.push(Round::KillWhileWriting);
        if i % 7 == 0 {
            rounds.push(Round::KillEarly);
        }
        if i % 5 == 0 {
            rounds.push(Round::CleanExit);
        }
    }
    let mut durable = vec![0u64; PARTITIONS as usize];
    let mut unacked_survivors = 0;
    for (i, &round) in rounds.iter().enumerate() {
        let rep = run_child(&exe, dir.path(), round, &mut rng, &durable);
        let ends = verify(dir.path(), round, &rep, &durable, &mut rng);
        if ends.iter().zip(&rep.acked).any(|(e, a)| e > a) {
            unacked_survivors += 1;
        }
        // Captured by the harness: shown when the test fails (or with --nocapture).
        println!(
            "round {i} {round:?}: acked {:?} sent {:?} present {ends:?}",
            rep.acked, rep.sent
        );
        durable = ends;
    }

    let log = Log::open(dir.path(), log_options(false)).unwrap();
    let info = log.describe_topic(TOPIC).unwrap();
    let segments: Vec<usize> = info.partitions.iter().map(|p| p.segments).collect();
    println!(
        "crash test: {} rounds, records per partition {durable:?}, segments {segments:?}, \
         rounds with unacknowledged records on disk: {unacked_survivors}",
        rounds.len()
    );
    assert!(
        segments.iter().all(|&s| s >= 3),
        "segments should have rolled several times: {segments:?}"
    );
}
