//! `brook topic`, `produce`, `consume` and `group`: the commands on the embedded log.

use std::io::{self, BufRead, BufWriter, Write};

use anyhow::{bail, Context, Result};
use brook::core::config::{parse_duration_ms, parse_size_bytes};
use brook::log::{IsolationLevel, OffsetReset, ProducerRecord, Record, ResetTo, TopicConfig};
use clap::{Args, Subcommand};
use serde_json::Value;

use super::log_access::LogAccess;
use super::remote_reader::ReadSpec;

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
    /// Change a topic's configs (as kafka-configs --alter --add-config), by Kafka's
    /// names: retention.ms, retention.bytes, segment.bytes, segment.ms,
    /// max.message.bytes, index.interval.bytes, cleanup.policy, delete.retention.ms,
    /// min.compaction.lag.ms, min.cleanable.dirty.ratio.
    Alter {
        /// Topic name.
        name: String,
        /// NAME=VALUE (repeatable); durations in ms or with units (7d), sizes in bytes
        /// or with units (1GiB), -1 or none for no limit; cleanup.policy=compact,
        /// min.cleanable.dirty.ratio=0.5.
        #[arg(long = "config", value_name = "NAME=VALUE", required = true)]
        configs: Vec<String>,
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
    /// The same as `--auto-offset-reset earliest`.
    #[arg(long, conflicts_with = "auto_offset_reset")]
    from_beginning: bool,
    /// Where to start without a committed offset, or when the group's committed offset
    /// is outside the log (deleted by retention, or beyond the end), as Kafka's
    /// `auto.offset.reset`: `earliest`, `latest` (the default) or `none` (fail, naming
    /// the offset).
    #[arg(long, value_name = "POLICY")]
    auto_offset_reset: Option<String>,
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
    /// consumer has left to read). A committed offset outside the log shows
    /// `out-of-range` as its lag.
    Describe {
        /// Group name.
        group: String,
    },
    /// Delete a group and its committed offsets (as kafka-consumer-groups --delete);
    /// refused while the group has members.
    Delete {
        /// Group name.
        group: String,
    },
    /// Move a group's committed offsets on every partition of a topic (as
    /// kafka-consumer-groups --reset-offsets); refused while the group has members.
    /// Prints the plan; commits it unless --dry-run.
    ResetOffsets {
        /// Group name.
        group: String,
        /// The topic whose partitions are reset.
        #[arg(long)]
        topic: String,
        #[command(flatten)]
        to: ResetTarget,
        /// Print the plan without committing it.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Where `group reset-offsets` moves the offsets: exactly one.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct ResetTarget {
    /// To the log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// To the log end offset.
    #[arg(long)]
    to_latest: bool,
    /// To the first offset at or after this time: RFC 3339
    /// (2024-05-01T12:00:00+02:00), or without a zone as UTC (2024-05-01T10:00:00.000).
    #[arg(long, value_name = "DATETIME")]
    to_datetime: Option<String>,
    /// To this offset (moved into the log's range when outside, with a warning).
    #[arg(long, value_name = "OFFSET")]
    to_offset: Option<u64>,
}

impl ResetTarget {
    fn resolve(&self) -> Result<ResetTo> {
        Ok(match (&self.to_datetime, self.to_offset) {
            (Some(text), _) => ResetTo::Timestamp(parse_datetime_ms(text)?),
            (None, Some(o)) => ResetTo::Offset(o),
            _ if self.to_earliest => ResetTo::Earliest,
            _ => ResetTo::Latest,
        })
    }
}

/// Ms since the epoch of an RFC 3339 time, or of one without a zone taken as UTC.
fn parse_datetime_ms(text: &str) -> Result<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp_millis());
    }
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .map(|t| t.and_utc().timestamp_millis())
        .with_context(|| {
            format!("--to-datetime {text:?}: expected a time such as 2024-05-01T12:00:00 (UTC) or 2024-05-01T12:00:00+02:00")
        })
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

pub(crate) fn topic_command(log: &LogAccess, cmd: TopicCommand) -> Result<()> {
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
            for name in log.topics()? {
                outln!("{name}");
            }
        }
        TopicCommand::Describe { name } => {
            let info = log.describe_topic(&name)?;
            let dash = || "-".to_string();
            let show_ms = |v: Option<i64>| v.map_or("none".to_string(), |ms| format!("{ms}ms"));
            // Through a broker that does not serve DescribeConfigs the configs are `-`.
            let (retention, retention_bytes, segment_bytes, segment_ms, max_record_bytes) =
                match &info.config {
                    Some(c) => (
                        show_ms(c.retention_ms),
                        c.retention_bytes
                            .map_or("none".to_string(), |b| b.to_string()),
                        c.segment_bytes.to_string(),
                        show_ms(c.segment_ms),
                        c.max_record_bytes.to_string(),
                    ),
                    None => (dash(), dash(), dash(), dash(), dash()),
                };
            outln!(
                "topic {}  partitions {}  retention {retention}  retention-bytes {retention_bytes}  segment-bytes {segment_bytes}  segment-ms {segment_ms}  max-record-bytes {max_record_bytes}  cleanup.policy {}",
                info.name,
                info.partitions.len(),
                info.config
                    .as_ref()
                    .map_or_else(dash, |c| c.cleanup_policy.to_string()),
            );
            if let Some(c) = info.config.as_ref().filter(|c| c.cleanup_policy.compacts()) {
                outln!(
                    "compaction: delete.retention.ms {}  min.compaction.lag.ms {}  min.cleanable.dirty.ratio {}",
                    c.delete_retention_ms,
                    c.min_compaction_lag_ms,
                    c.min_cleanable_dirty_ratio.0,
                );
            }
            // FUTURE-HELD: closed segments time retention keeps only because they
            // hold a record stamped in the future (a warning names each).
            outln!(
                "{:>9} {:>12} {:>12} {:>12} {:>14} {:>9} {:>11}",
                "PARTITION",
                "START",
                "END",
                "STABLE",
                "BYTES",
                "SEGMENTS",
                "FUTURE-HELD"
            );
            for p in info.partitions {
                outln!(
                    "{:>9} {:>12} {:>12} {:>12} {:>14} {:>9} {:>11}",
                    p.partition,
                    p.start,
                    p.end,
                    p.stable,
                    p.size_bytes.map_or_else(dash, |b| b.to_string()),
                    p.segments.map_or_else(dash, |s| s.to_string()),
                    p.future_held.map_or_else(dash, |s| s.to_string())
                );
            }
        }
        TopicCommand::Delete { name } => {
            log.delete_topic(&name)?;
            outln!("deleted topic {name}");
        }
        TopicCommand::Alter { name, configs } => {
            let mut config = log.topic_config(&name)?;
            let mut changes = Vec::with_capacity(configs.len());
            for kv in &configs {
                let (k, v) = kv.split_once('=').with_context(|| {
                    format!("--config {kv:?}: expected NAME=VALUE, such as retention.ms=86400000")
                })?;
                // Checked here in both modes, so the messages are the same.
                config
                    .set(k.trim(), v.trim())
                    .with_context(|| format!("--config {kv}"))?;
                changes.push((k.trim(), v.trim()));
            }
            log.alter_topic(&name, config, &changes)?;
            for kv in &configs {
                outln!("topic {name}: set {kv}");
            }
        }
        TopicCommand::AddPartitions { name, partitions } => {
            let before = log.add_partitions(&name, partitions)?;
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

pub(crate) fn produce(log: &LogAccess, args: ProduceArgs) -> Result<()> {
    let mut writer = log.writer(&args.topic, args.batch as usize)?;
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
        if let Err(e) = writer.send(line_no, record) {
            result = Err(e);
            break;
        }
    }
    // Lines before a bad one are still written: nothing accepted is dropped.
    let written = writer.finish()?;
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

pub(crate) async fn consume(log: &LogAccess, args: ConsumeArgs) -> Result<()> {
    let isolation = args.isolation.parse::<IsolationLevel>()?;
    let spec = ReadSpec {
        group: args.group.clone(),
        from_beginning: args.from_beginning,
        offsets: args
            .offset
            .iter()
            .map(|o| parse_offset_arg(o))
            .collect::<Result<_>>()?,
        isolation,
        auto_offset_reset: match (&args.auto_offset_reset, args.from_beginning) {
            (Some(policy), _) => policy
                .parse::<OffsetReset>()
                .context("--auto-offset-reset")?,
            (None, true) => OffsetReset::Earliest,
            (None, false) => OffsetReset::Latest,
        },
    };
    let mut reader = log.reader(&args.topic, &spec)?;

    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    let max = args.max.unwrap_or(u64::MAX);
    let mut interrupted = false;
    'outer: while printed < max {
        // Only what will be printed is taken, so a group commits exactly that.
        let limit = usize::try_from(max - printed).unwrap_or(usize::MAX);
        let batch = if args.follow {
            tokio::select! {
                r = reader.poll(limit, true) => r?,
                _ = tokio::signal::ctrl_c() => { interrupted = true; break 'outer; }
            }
        } else {
            reader.poll(limit, false).await?
        };
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
            reader.printed(&args.topic, cr.partition, cr.record.offset);
        }
        if out.flush().is_err() {
            break;
        }
        reader.commit()?;
    }
    let _ = out.flush();
    drop(out);
    // Also when nothing was printed: the group then goes on from where this run
    // started (the end, without --from-beginning), as a Kafka consumer commits its
    // positions on close. Unchanged offsets are not rewritten.
    reader.commit()?;
    if printed == 0 && !args.from_beginning && args.offset.is_empty() && !interrupted {
        eprintln!("no new records (use --from-beginning to read from the start)");
    }
    reader.close()?;
    Ok(())
}

pub(crate) fn group_command(log: &LogAccess, cmd: GroupCommand) -> Result<()> {
    match cmd {
        GroupCommand::List => {
            for g in log.groups()? {
                outln!("{g}");
            }
        }
        GroupCommand::Delete { group } => {
            log.delete_group(&group)?;
            outln!("deleted group {group}");
        }
        GroupCommand::ResetOffsets {
            group,
            topic,
            to,
            dry_run,
        } => {
            let rows = log
                .reset_offsets(&group, &topic, to.resolve()?, dry_run)
                .with_context(|| {
                    format!("resetting the offsets of group {group:?} (only possible while it has no members, as Kafka: stop its consumers first)")
                })?;
            outln!(
                "{:<24} {:<24} {:>9} {:>12} {:>12}",
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT",
                "NEW-OFFSET"
            );
            for r in &rows {
                if let Some(asked) = r.clamped_from {
                    eprintln!(
                        "warning: offset {asked} is outside {}-{}; it is set to {}, the log's {}",
                        r.topic,
                        r.partition,
                        r.new_offset,
                        if asked < r.new_offset { "start" } else { "end" }
                    );
                }
                outln!(
                    "{:<24} {:<24} {:>9} {:>12} {:>12}",
                    group,
                    r.topic,
                    r.partition,
                    r.current.map_or_else(|| "-".to_string(), |c| c.to_string()),
                    r.new_offset
                );
            }
            if dry_run {
                eprintln!("dry run: nothing committed");
            }
        }
        GroupCommand::Describe { group } => {
            let (rows, members) = log.group_lag(&group)?;
            if rows.is_empty() && members.is_empty() {
                bail!("group {group:?} has no committed offsets and no members");
            }
            outln!(
                "{:<24} {:>9} {:>12} {:>12} {:>12} {:>12}  MEMBER",
                "TOPIC",
                "PARTITION",
                "COMMITTED",
                "END",
                "STABLE",
                "LAG"
            );
            let dash = || "-".to_string();
            let out_of_range: Vec<String> = rows
                .iter()
                .filter(|r| r.out_of_range)
                .map(|r| {
                    format!(
                        "{}-{} (log {}..{})",
                        r.topic, r.partition, r.log_start_offset, r.log_end_offset
                    )
                })
                .collect();
            for r in rows {
                let lag = if r.out_of_range {
                    "out-of-range".to_string()
                } else {
                    r.lag.map_or_else(dash, |l| l.to_string())
                };
                outln!(
                    "{:<24} {:>9} {:>12} {:>12} {:>12} {:>12}  {}",
                    r.topic,
                    r.partition,
                    r.committed.map_or_else(dash, |c| c.to_string()),
                    r.log_end_offset,
                    r.last_stable_offset,
                    lag,
                    r.member.unwrap_or_else(dash),
                );
            }
            // Live members, as kafka-consumer-groups --describe --members: after a
            // blank line, so the partition table stays one block.
            if !members.is_empty() {
                outln!();
                outln!(
                    "{:<48} {:<24} {:<24}  PARTITIONS",
                    "MEMBER",
                    "CLIENT-ID",
                    "HOST"
                );
                for m in members {
                    let parts: Vec<String> = m
                        .partitions
                        .iter()
                        .map(|(t, p)| format!("{t}/{p}"))
                        .collect();
                    outln!(
                        "{:<48} {:<24} {:<24}  {}",
                        m.member_id,
                        m.client_id,
                        m.host,
                        if parts.is_empty() {
                            dash()
                        } else {
                            parts.join(",")
                        }
                    );
                }
            }
            if !out_of_range.is_empty() {
                eprintln!(
                    "note: committed offsets outside the log on {}: the group's next consumer resets them by its auto.offset.reset (earliest, latest; none fails), or move them with `brook group reset-offsets`",
                    out_of_range.join(", ")
                );
            }
        }
    }
    Ok(())
}
