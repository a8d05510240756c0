//! Whether a job's committed output is fixed by its input alone, or may also depend
//! on the order in which records arrive (and so differ between a run that was killed
//! and restored and one that was not, without any row being lost or doubled).
//!
//! The rule (docs/semantics.md §4a), decided from the spec only:
//! - a processing-time window fires by the wall clock;
//! - a source with an `idle_timeout` leaves a partition out of the watermark by the
//!   wall clock;
//! - an event-time window or join drops (or sends to `late_output`) the rows behind
//!   the watermark. A row can only be late if it is behind its own split's watermark
//!   (the watermark is a minimum over splits and inputs), so with in-order input (a
//!   generator) nothing is ever late. Otherwise which rows are late depends on
//!   arrival order when watermarks are emitted on a wall-clock interval (`interval`
//!   not 0) or when several source subtasks feed the job (a source's parallelism
//!   above 1, several sources, or `--rescale`): their reads interleave differently
//!   in each run;
//! - with several source subtasks, a count trigger or a `first`/`last` aggregate sees
//!   each key's rows in arrival order.
//!
//! One source subtask reads its splits in an order fixed by their offsets, so a job
//! read by one subtask with watermarks after every record is deterministic.

use crate::spec::{JobSpec, SourceSpec, TimeKind, WindowSpec};

/// The default watermark emission interval (ms), as the spec's `watermark.interval`.
const DEFAULT_WATERMARK_INTERVAL_MS: i64 = 200;

/// Why the job's output may depend on arrival order: one sentence per cause, each
/// naming the spec field; empty when the output is fixed by the input.
///
/// `parallelism` is the default parallelism the runs use (`--parallelism`, else the
/// spec's); `rescale` says whether restores change it.
pub fn order_dependence(spec: &JobSpec, parallelism: Option<u32>, rescale: bool) -> Vec<String> {
    let mut reasons = Vec::new();
    for (i, step) in spec.steps.iter().enumerate() {
        let name = step_name(step.name.as_deref(), i);
        let mut windows = step
            .window
            .iter()
            .chain(step.join.as_ref().and_then(|j| j.window.as_ref()));
        if windows.any(is_processing_time) {
            reasons.push(format!(
                "steps[{i}] ({name}): a processing-time window fires by the wall clock"
            ));
        }
    }
    for (i, source) in spec.sources.iter().enumerate() {
        let (_, watermark) = source.event_time();
        if watermark.is_some_and(|w| w.idle_timeout.is_some()) {
            reasons.push(format!(
                "sources[{i}] ({}): watermark.idle_timeout: the wall clock decides when a partition is idle",
                source.name()
            ));
        }
    }
    let default_parallelism = parallelism.or(spec.parallelism).unwrap_or(1);
    let source_subtasks: u32 = spec
        .sources
        .iter()
        .map(|s| source_parallelism(s).unwrap_or(default_parallelism))
        .sum();
    let interleaved = rescale || source_subtasks > 1;
    let event_time_step = spec.steps.iter().enumerate().find(|(_, s)| {
        s.join.is_some() || s.window.as_ref().is_some_and(|w| !is_processing_time(w))
    });
    if let Some((at, step)) = event_time_step {
        let step = format!("steps[{at}] ({})", step_name(step.name.as_deref(), at));
        for (i, source) in spec.sources.iter().enumerate() {
            if matches!(source, SourceSpec::Generator { .. }) {
                // Event times increase with each event: no row is ever late.
                continue;
            }
            let what = format!("sources[{i}] ({})", source.name());
            if let Some(ms) = watermark_interval_ms(source).filter(|ms| *ms != 0) {
                reasons.push(format!(
                    "{what}: watermarks every {ms} ms of wall time (watermark.interval; 0 emits one after every row): which rows {step} finds late depends on timing"
                ));
            }
            if interleaved {
                reasons.push(format!(
                    "{what}: {}: which rows {step} finds late depends on how their reads interleave",
                    interleaving(source_subtasks, rescale)
                ));
            }
        }
    }
    if interleaved {
        for (i, step) in spec.steps.iter().enumerate() {
            let name = step_name(step.name.as_deref(), i);
            if step.trigger.as_ref().is_some_and(|t| t.count.is_some()) {
                reasons.push(format!(
                    "steps[{i}] ({name}).trigger.count: fires after N rows in arrival order ({})",
                    interleaving(source_subtasks, rescale)
                ));
            }
            let ordered = step.aggregate.iter().flat_map(|a| a.values()).any(|f| {
                let f = f.trim_start();
                f.starts_with("first(") || f.starts_with("last(")
            });
            if ordered {
                reasons.push(format!(
                    "steps[{i}] ({name}).aggregate: first/last take rows in arrival order ({})",
                    interleaving(source_subtasks, rescale)
                ));
            }
        }
    }
    reasons
}

fn step_name(name: Option<&str>, i: usize) -> String {
    name.map_or_else(|| format!("step-{}", i + 1), str::to_string)
}

fn interleaving(source_subtasks: u32, rescale: bool) -> String {
    if rescale {
        "--rescale restores at other parallelisms".to_string()
    } else {
        format!("{source_subtasks} source subtasks")
    }
}

fn is_processing_time(w: &WindowSpec) -> bool {
    let time = match w {
        WindowSpec::Tumbling { time, .. }
        | WindowSpec::Hopping { time, .. }
        | WindowSpec::Session { time, .. } => time,
    };
    matches!(time, TimeKind::Processing)
}

fn source_parallelism(s: &SourceSpec) -> Option<u32> {
    match s {
        SourceSpec::File { parallelism, .. }
        | SourceSpec::Log { parallelism, .. }
        | SourceSpec::Kafka { parallelism, .. }
        | SourceSpec::Generator { parallelism, .. } => *parallelism,
    }
}

/// The source's watermark interval in ms (`None` when it is not valid: the job's own
/// validation reports that).
fn watermark_interval_ms(s: &SourceSpec) -> Option<i64> {
    let (_, watermark) = s.event_time();
    match watermark.and_then(|w| w.interval.as_ref()) {
        Some(d) => d.ms("watermark.interval").ok(),
        None => Some(DEFAULT_WATERMARK_INTERVAL_MS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> JobSpec {
        crate::spec::parse(yaml).expect("a valid spec")
    }

    const LOG_WINDOW: &str = r#"
name: j
sources:
  - { name: s, connector: log, topic: t, watermark: { out_of_orderness: 1s, interval: 0 } }
steps:
  - key_by: [k]
  - { name: w, window: { kind: tumbling, size: 1m }, aggregate: { n: count() } }
sinks:
  - { name: out, connector: file, path: out.jsonl }
"#;

    #[test]
    fn one_reader_with_a_watermark_after_every_row_is_fixed_by_its_input() {
        assert_eq!(
            order_dependence(&spec(LOG_WINDOW), None, false),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_periodic_watermark_makes_lateness_depend_on_timing() {
        let s = spec(&LOG_WINDOW.replace("interval: 0", "interval: 200ms"));
        let r = order_dependence(&s, None, false);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(
            r[0].starts_with("sources[0] (s): watermarks every 200 ms"),
            "{r:?}"
        );
        // The default interval is 200 ms too.
        let s = spec(&LOG_WINDOW.replace(", interval: 0", ""));
        assert_eq!(order_dependence(&s, None, false).len(), 1);
    }

    #[test]
    fn several_readers_or_a_rescale_interleave_the_reads() {
        let s = spec(LOG_WINDOW);
        let r = order_dependence(&s, Some(2), false);
        assert!(r.len() == 1 && r[0].contains("2 source subtasks"), "{r:?}");
        let r = order_dependence(&s, None, true);
        assert!(r.len() == 1 && r[0].contains("--rescale"), "{r:?}");
    }

    #[test]
    fn a_generator_is_in_order_so_nothing_is_late_at_any_parallelism() {
        let s = spec(
            r#"
name: j
sources:
  - { name: g, connector: generator, count: 10, parallelism: 3 }
steps:
  - key_by: [key]
  - { name: w, window: { kind: tumbling, size: 1m }, aggregate: { n: count() } }
sinks:
  - { name: out, connector: file, path: out.jsonl }
"#,
        );
        assert_eq!(order_dependence(&s, None, true), Vec::<String>::new());
    }

    #[test]
    fn arrival_order_aggregates_and_count_triggers_with_several_readers() {
        let s = spec(
            r#"
name: j
sources:
  - { name: g, connector: generator, count: 10 }
steps:
  - key_by: [key]
  - name: w
    window: { kind: tumbling, size: 1m }
    trigger: { count: 3 }
    aggregate: { f: first(value) }
sinks:
  - { name: out, connector: file, path: out.jsonl }
"#,
        );
        let r = order_dependence(&s, Some(2), false);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(
            r[0].contains("trigger.count") && r[1].contains("first/last"),
            "{r:?}"
        );
        // One reader: its order is fixed.
        assert_eq!(order_dependence(&s, Some(1), false), Vec::<String>::new());
    }

    #[test]
    fn processing_time_windows_and_idleness_follow_the_wall_clock() {
        let s = spec(
            &LOG_WINDOW
                .replace("interval: 0", "interval: 0, idle_timeout: 5s")
                .replace("size: 1m }", "size: 1m, time: processing }"),
        );
        let r = order_dependence(&s, None, false);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(r[0].contains("processing-time window"), "{r:?}");
        assert!(r[1].contains("idle_timeout"), "{r:?}");
    }
}
