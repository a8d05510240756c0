//! `brook topic`, `produce`, `consume` and `group`: the commands on the embedded log.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, BufWriter, Write};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use brook::core::config::{parse_duration_ms, parse_size_bytes};
use brook::log::{
    format::record_len, AssignmentStrategy, Consumer, ConsumerConfig, IsolationLevel, Log,
    OffsetReset, ProducerRecord, Record, Topic, TopicConfig, TopicPartition,
};
use clap::{Args, Subcommand};
use serde_json::Value;

#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// Create a topic.
    Create {
        /// Topic name: letters, digits, '.', '_' and '-'.
        name: String,
        /// Number of partitions.
        #[arg(long)]
        partitions: u32,
        /// Delete closed segments older than this (7d, 12h, ...) or `none`.
        #[arg(long, default_value = "7d")]
        retention: String,
        /// Keep at most this many bytes per partition (1GiB, ...) or `none`.
        #[arg(long, default_value = "none")]
        retention_bytes: String,
        /// Roll segments at this size.
        #[arg(long, default_value = "1GiB")]
        segment_bytes: String,
        /// Roll segments at this age, or `none`.
        #[arg(long, default_value = "7d")]
        segment_ms: String,
        /// Largest record accepted.
        #[arg(long, default_value = "1MiB")]
        max_record_bytes: String,
        /// A topic config by its Kafka name, NAME=VALUE (repeatable), applied after
        /// the options above: cleanup.policy=compact (or compact,delete),
        /// delete.retention.ms, min.compaction.lag.ms, min.cleanable.dirty.ratio,
        /// retention.ms, retention.bytes, segment.bytes, segment.ms, max.message.bytes,
        /// index.interval.bytes.
        #[arg(long, value_name = "NAME=VALUE")]
        config: Vec<String>,
    },
    /// List topics.
    List,
    /// Show partitions: start offset, end offset, bytes, segments.
    Describe {
        /// Topic name.
        name: String,
    },
    /// Delete a topic and its data.
    Delete {
        /// Topic name.
        name: String,
    },
    /// Grow a topic to N partitions (changes where keys land).
    AddPartitions {
        /// Topic name.
        name: String,
        /// The new total number of partitions.
        partitions: u32,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ProduceArgs {
    /// Topic to append to.
    topic: String,
    /// Read each line as a JSON object and use this field as the record key.
    #[arg(long, conflicts_with = "key")]
    key_field: Option<String>,
    /// Use this key for every record.
    #[arg(long)]
    key: Option<String>,
    /// Records per append (one batch per partition per append).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// Read each line as KEY, this separator, VALUE (as Kafka's console producer's
    /// `parse.key=true` with `key.separator`); a line without it is an error.
    #[arg(long, conflicts_with_all = ["key", "key_field"])]
    key_separator: Option<String>,
    /// A value equal to this text is produced as a null value, a tombstone (as Kafka's
    /// console producer's `null.marker`): with --key-separator, `mia<TAB><MARKER>`
    /// deletes key mia from a compacted topic.
    #[arg(long)]
    null_marker: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ConsumeArgs {
    /// Topic to read.
    topic: String,
    /// Read as this consumer group: start from its committed offsets and commit what
    /// was printed.
    #[arg(long)]
    group: Option<String>,
    /// Without a committed offset, start at the oldest record (default: only new ones).
    #[arg(long)]
    from_beginning: bool,
    /// Read partition P from offset O (repeatable); only these partitions are read.
    /// An offset past the partition's end is an error naming the end.
    #[arg(long, value_name = "P:O", conflicts_with = "from_beginning")]
    offset: Vec<String>,
    /// Stop after N records.
    #[arg(long)]
    max: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end.
    #[arg(long)]
    follow: bool,
    /// `read-committed` (default: records of committed transactions and plain
    /// appends, up to the last stable offset) or `read-uncommitted` (every record).
    #[arg(long, default_value = "read-committed")]
    isolation: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum GroupCommand {
    /// List consumer groups.
    List,
    /// Show a group's committed offset, end offset, last stable offset and lag per
    /// partition (lag = last stable offset - committed: what a read-committed
    /// consumer has left to read).
    Describe {
        /// Group name.
        group: String,
    },
}

/// `println!` that returns an error instead of panicking when stdout is closed (for
/// example piped into `head`).
macro_rules! outln {
    ($($arg:tt)*) => {
        writeln!(io::stdout(), $($arg)*).context("writing to stdout")?
    };
}

fn optional(text: &str) -> Option<&str> {
    match text {
        "none" | "forever" | "-1" => None,
        t => Some(t),
    }
}

pub(crate) fn topic_command(log: &Log, cmd: TopicCommand) -> Result<()> {
    match cmd {
        TopicCommand::Create {
            name,
            partitions,
            retention,
            retention_bytes,
            segment_bytes,
            segment_ms,
            max_record_bytes,
            config: settings,
        } => {
            let mut config = TopicConfig {
                retention_ms: optional(&retention)
                    .map(parse_duration_ms)
                    .transpose()
                    .context("--retention")?,
                retention_bytes: optional(&retention_bytes)
                    .map(parse_size_bytes)
                    .transpose()
                    .context("--retention-bytes")?,
                segment_bytes: parse_size_bytes(&segment_bytes).context("--segment-bytes")?,
                segment_ms: optional(&segment_ms)
                    .map(parse_duration_ms)
                    .transpose()
                    .context("--segment-ms")?,
                max_record_bytes: parse_size_bytes(&max_record_bytes)
                    .context("--max-record-bytes")?,
                ..TopicConfig::default()
            };
            for setting in &settings {
                let (key, value) = setting.split_once('=').with_context(|| {
                    format!(
                        "--config {setting:?}: expected NAME=VALUE, such as cleanup.policy=compact"
                    )
                })?;
                config
                    .set(key.trim(), value)
                    .with_context(|| format!("--config {setting:?}"))?;
            }
            log.create_topic(&name, partitions, config)?;
            outln!("created topic {name} with {partitions} partition(s)");
        }
        TopicCommand::List => {
            for name in log.topics() {
                outln!("{name}");
            }
        }
        TopicCommand::Describe { name } => {
            let info = log.describe_topic(&name)?;
            let c = &info.config;
            let show_ms = |v: Option<i64>| v.map_or("none".to_string(), |ms| format!("{ms}ms"));
            outln!(
                "topic {}  partitions {}  retention {}  retention-bytes {}  segment-bytes {}  segment-ms {}  max-record-bytes {}  cleanup.policy {}",
                info.name,
                info.partitions.len(),
                show_ms(c.retention_ms),
                c.retention_bytes.map_or("none".to_string(), |b| b.to_string()),
                c.segment_bytes,
                show_ms(c.segment_ms),
                c.max_record_bytes,
                c.cleanup_policy,
            );
            if c.cleanup_policy.compacts() {
                outln!(
                    "compaction: delete.retention.ms {}  min.compaction.lag.ms {}  min.cleanable.dirty.ratio {}",
                    c.delete_retention_ms,
                    c.min_compaction_lag_ms,
                    c.min_cleanable_dirty_ratio.0,
                );
            }
            outln!(
                "{:>9} {:>12} {:>12} {:>12} {:>14} {:>9}",
                "PARTITION",
                "START",
                "END",
                "STABLE",
                "BYTES",
                "SEGMENTS"
            );
            for p in info.partitions {
                outln!(
                    "{:>9} {:>12} {:>12} {:>12} {:>14} {:>9}",
                    p.partition,
                    p.log_start_offset,
                    p.log_end_offset,
                    p.last_stable_offset,
                    p.size_bytes,
                    p.segments
                );
            }
        }
        TopicCommand::Delete { name } => {
            log.delete_topic(&name)?;
            outln!("deleted topic {name}");
        }
        TopicCommand::AddPartitions { name, partitions } => {
            let before = log.topic(&name)?.partition_count();
            log.add_partitions(&name, partitions)?;
            eprintln!(
                "warning: topic {name} grew from {before} to {partitions} partitions; keys now map to \
                 different partitions, so a key's new records may land on another partition than \
                 its old ones and their order across the change is not kept"
            );
            outln!("topic {name} now has {partitions} partition(s)");
        }
    }
    Ok(())
}

/// The key of a JSON line: a string field as its text, any other value as JSON.
fn key_of(line_no: usize, line: &str, field: &str) -> Result<Option<Vec<u8>>> {
    let v: Value = serde_json::from_str(line)
        .with_context(|| format!("line {line_no}: not valid JSON (needed for --key-field)"))?;
    let Value::Object(map) = v else {
        bail!("line {line_no}: expected a JSON object (needed for --key-field)");
    };
    Ok(match map.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone().into_bytes()),
        Some(other) => Some(other.to_string().into_bytes()),
    })
}

pub(crate) fn produce(log: &Log, args: ProduceArgs) -> Result<()> {
    let topic = log.topic(&args.topic)?;
    let max = topic.config().max_record_bytes as usize;
    let mut batch = Vec::with_capacity(args.batch as usize);
    let mut written = 0u64;
    let flush = |topic: &Topic, batch: &mut Vec<ProducerRecord>, written: &mut u64| -> Result<()> {
        if !batch.is_empty() {
            let n = batch.len() as u64;
            topic.append(std::mem::take(batch)).context("appending")?;
            *written += n;
        }
        Ok(())
    };
    let stdin = io::stdin();
    let mut result = Ok(());
    for (i, line) in stdin.lock().lines().enumerate() {
        let line_no = i + 1;
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                result =
                    Err(anyhow::Error::new(e).context(format!("line {line_no}: reading stdin")));
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let (key, value) = match (&args.key_separator, &args.key_field, &args.key) {
            (Some(sep), _, _) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.as_bytes().to_vec()), v.to_string()),
                None => {
                    result = Err(anyhow::anyhow!(
                        "line {line_no}: no key separator {sep:?} (needed for --key-separator)"
                    ));
                    break;
                }
            },
            (None, Some(f), _) => match key_of(line_no, &line, f) {
                Ok(k) => (k, line),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            },
            (None, None, Some(k)) => (Some(k.clone().into_bytes()), line),
            (None, None, None) => (None, line),
        };
        let tombstone = args.null_marker.as_deref() == Some(value.as_str());
        let record = ProducerRecord {
            key: key.map(Into::into),
            value: if tombstone {
                Default::default()
            } else {
                value.into_bytes().into()
            },
            tombstone,
            ..Default::default()
        };
        let size = record_len(&record);
        if size > max {
            result = Err(anyhow::anyhow!(
                "line {line_no}: record of {size} bytes exceeds the topic's maximum record size of {max} bytes"
            ));
            break;
        }
        batch.push(record);
        if batch.len() >= args.batch as usize {
            flush(&topic, &mut batch, &mut written)?;
        }
    }
    // Lines before a bad one are still written: nothing accepted is dropped.
    flush(&topic, &mut batch, &mut written)?;
    eprintln!("produced {written} record(s) to {}", args.topic);
    result
}

fn parse_offset_arg(text: &str) -> Result<(u32, u64)> {
    let (p, o) = text
        .split_once(':')
        .with_context(|| format!("--offset {text:?}: expected PARTITION:OFFSET, such as 0:42"))?;
    let p = p
        .parse()
        .with_context(|| format!("--offset {text:?}: bad partition {p:?}"))?;
    let o = o
        .parse()
        .with_context(|| format!("--offset {text:?}: bad offset {o:?}"))?;
    Ok((p, o))
}

fn record_json(partition: u32, r: &Record) -> Value {
    let key = r
        .key
        .as_ref()
        .map(|k| Value::String(String::from_utf8_lossy(k).into_owned()));
    // A JSON value is printed as JSON; anything else as a string; a tombstone (null
    // value) as null, as Kafka's console consumer prints it.
    let value = if r.is_tombstone() {
        Value::Null
    } else {
        serde_json::from_slice::<Value>(&r.value)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&r.value).into_owned()))
    };
    serde_json::json!({
        "partition": partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": key,
        "value": value,
    })
}

pub(crate) async fn consume(log: &Log, args: ConsumeArgs) -> Result<()> {
    let topic = log.topic(&args.topic)?;
    let mut config = ConsumerConfig {
        group: args.group.clone(),
        client_id: "brook-cli".into(),
        auto_offset_reset: if args.from_beginning {
            OffsetReset::Earliest
        } else {
            OffsetReset::Latest
        },
        strategy: AssignmentStrategy::Range,
        isolation: args.isolation.parse::<IsolationLevel>()?,
        ..ConsumerConfig::default()
    };
    let mut consumer = if !args.offset.is_empty() {
        let mut starts = Vec::new();
        for o in &args.offset {
            let (p, off) = parse_offset_arg(o)?;
            // Past the end is an error, as Kafka's OffsetOutOfRange (kcat reports it);
            // the end itself is where the next record will be: nothing yet, no error.
            let end = topic.partition(p)?.log_end_offset();
            if off > end {
                bail!(
                    "--offset {o}: past the end of partition {p} of {}, which ends at offset {end} (the next record's)",
                    args.topic
                );
            }
            starts.push((TopicPartition::new(args.topic.clone(), p), off));
        }
        config.auto_offset_reset = OffsetReset::None;
        let tps = starts.iter().map(|(tp, _)| tp.clone()).collect();
        let mut c = Consumer::assign(log.clone(), tps, config)?;
        for (tp, off) in &starts {
            c.seek(tp, *off)?;
        }
        c
    } else if args.group.is_some() {
        Consumer::subscribe(log.clone(), vec![args.topic.clone()], config)?
    } else {
        let tps = (0..topic.partition_count())
            .map(|p| TopicPartition::new(args.topic.clone(), p))
            .collect();
        Consumer::assign(log.clone(), tps, config)?
    };

    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    // What the group has consumed so far: every assigned partition starts at its
    // initial position, so a commit covers partitions nothing was printed from too.
    let mut done: BTreeMap<TopicPartition, u64> = BTreeMap::new();
    if args.group.is_some() {
        for tp in consumer.assignment() {
            let start = consumer.position(&tp)?;
            done.insert(tp, start);
        }
    }
    let max = args.max.unwrap_or(u64::MAX);
    let mut interrupted = false;
    'outer: while printed < max {
        let batch = if args.follow {
            tokio::select! {
                r = consumer.poll(Duration::from_secs(1)) => r?,
                _ = tokio::signal::ctrl_c() => { interrupted = true; break 'outer; }
            }
        } else {
            consumer.try_poll()?
        };
        if args.group.is_some() {
            // A partition this poll returned nothing from is consumed up to the
            // consumer's position, which a reset may have moved (when retention deleted
            // the committed offset), as a Kafka consumer commits its position.
            let fetched: BTreeSet<u32> = batch.iter().map(|cr| cr.partition).collect();
            for (tp, o) in done.iter_mut() {
                if !fetched.contains(&tp.partition) {
                    *o = consumer.position(tp)?;
                }
            }
        }
        if batch.is_empty() && !args.follow {
            break;
        }
        for cr in batch {
            if printed >= max {
                break;
            }
            let line = record_json(cr.partition, &cr.record);
            if writeln!(out, "{line}").is_err() {
                // stdout closed (for example piped into `head`): stop quietly.
                break 'outer;
            }
            printed += 1;
            done.insert(
                TopicPartition::new(args.topic.clone(), cr.partition),
                cr.record.offset + 1,
            );
        }
        if out.flush().is_err() {
            break;
        }
        if args.group.is_some() {
            let offsets: Vec<_> = done.iter().map(|(tp, o)| (tp.clone(), *o)).collect();
            consumer
                .commit_offsets(&offsets)
                .context("committing offsets")?;
        }
    }
    let _ = out.flush();
    drop(out);
    if args.group.is_some() {
        // Also when nothing was printed: the group then goes on from where this run
        // started (the end, without --from-beginning), as a Kafka consumer commits its
        // positions on close. Unchanged offsets are not rewritten.
        let offsets: Vec<_> = done.iter().map(|(tp, o)| (tp.clone(), *o)).collect();
        consumer
            .commit_offsets(&offsets)
            .context("committing offsets")?;
    }
    if printed == 0 && !args.from_beginning && args.offset.is_empty() && !interrupted {
        eprintln!("no new records (use --from-beginning to read from the start)");
    }
    consumer.close().context("leaving the group")?;
    Ok(())
}

pub(crate) fn group_command(log: &Log, cmd: GroupCommand) -> Result<()> {
    match cmd {
        GroupCommand::List => {
            for g in log.groups() {
                outln!("{g}");
            }
        }
        GroupCommand::Describe { group } => {
            let rows = log.group_lag(&group)?;
            if rows.is_empty() {
                bail!("group {group:?} has no committed offsets and no members");
            }
            outln!(
                "{:<24} {:>9} {:>12} {:>12} {:>12} {:>10}  MEMBER",
                "TOPIC",
                "PARTITION",
                "COMMITTED",
                "END",
                "STABLE",
                "LAG"
            );
            let dash = || "-".to_string();
            for r in rows {
                outln!(
                    "{:<24} {:>9} {:>12} {:>12} {:>12} {:>10}  {}",
                    r.topic,
                    r.partition,
                    r.committed.map_or_else(dash, |c| c.to_string()),
                    r.log_end_offset,
                    r.last_stable_offset,
                    r.lag.map_or_else(dash, |l| l.to_string()),
                    r.member.unwrap_or_else(dash),
                );
            }
        }
    }
    Ok(())
}
