use super::*;

const GOOD: &str = r#"
name: choc
sources:
  - name: sales
    connector: file
    path: examples/data/snack_sales.jsonl
steps:
  - name: milk
    filter: "item = 'chocolate milk'"
  - map: { dollars: "price_cents / 100.0" }
  - key_by: [student]
sinks:
  - name: out
    connector: stdout
"#;

fn check(yaml: &str) -> Result<ValidSpec, SpecError> {
    validate(parse(yaml)?)
}

#[test]
fn a_good_spec_resolves_inputs() {
    // Paths are relative to the package root when tests run.
    let v = check(GOOD).unwrap();
    let names: Vec<_> = v
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.inputs.clone()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("milk", vec!["sales".to_string()]),
            ("step-2", vec!["milk".to_string()]),
            ("step-3", vec!["step-2".to_string()])
        ]
    );
    assert_eq!(v.sink_inputs, vec!["step-3".to_string()]);
}

/// A log sink's `transaction_timeout` (Kafka's `transaction.timeout.ms`, also
/// accepted by that name): a duration up to the log's maximum (15 minutes).
#[test]
fn a_log_sink_takes_a_transaction_timeout_up_to_the_logs_maximum() {
    let yaml = |t: &str| {
        format!("name: x\nsources:\n  - {{name: s, connector: log, topic: t}}\nsinks:\n  - {{name: o, connector: log, topic: u, {t}}}\n")
    };
    for ok in ["transaction_timeout: 15m", "transaction.timeout.ms: 60000"] {
        check(&yaml(ok)).expect(ok);
    }
    for (bad, want) in [
        (
            "transaction_timeout: 16m",
            "sinks[0] (o).transaction_timeout: 960000 ms must be between 1 ms and 900000 ms",
        ),
        (
            "transaction_timeout: 0",
            "sinks[0] (o).transaction_timeout: 0 ms must be between",
        ),
        (
            "transaction_timeout: soon",
            "sinks[0] (o).transaction_timeout: \"soon\"",
        ),
    ] {
        let e = check(&yaml(bad)).expect_err(bad).to_string();
        assert!(e.contains(want), "{bad}\nwant: {want}\ngot: {e}");
    }
}

/// Each broken spec, and (part of) the message it must produce.
#[test]
fn a_log_source_takes_an_isolation_level() {
    for level in ["read_committed", "read_uncommitted"] {
        let yaml = format!(
            "name: x\nsources:\n  - {{name: s, connector: log, topic: t, isolation: {level}}}\nsinks:\n  - {{name: o, connector: stdout}}\n"
        );
        check(&yaml).unwrap();
    }
}

#[test]
fn broken_specs_are_rejected_naming_the_field() {
    let table: &[(&str, &str)] = &[
        (
            "name: x\nsources: []\nsinks: []\n",
            "sources: a job needs at least one source",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsinks: []\n",
            "sinks: a job needs at least one sink",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5, colour: red}\nsinks:\n  - {name: o, connector: stdout}\n",
            "line 3 column 3: sources: unknown field `colour`, expected one of `name`, `count`",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka2, topic: t}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0].connector: unknown variant `kafka2`, expected one of `file`, `log`, `kafka`, `generator`",
        ),
        (
            "name: ../etc\nsources:\n  - {name: s, connector: generator, count: 5}\nsinks:\n  - {name: o, connector: stdout}\n",
            "name: invalid job name \"../etc\"",
        ),
        (
            "name: x\nparallelism: 0\nsources:\n  - {name: s, connector: generator, count: 5}\nsinks:\n  - {name: o, connector: stdout}\n",
            "job.parallelism: must be at least 1",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: file, path: no/such/file.jsonl}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).path: no/such/file.jsonl does not exist",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: log, topic: a/b}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).topic: invalid topic name \"a/b\"",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: log, topic: t, isolation: read_some}\nsinks:\n  - {name: o, connector: stdout}\n",
            "unknown variant `read_some`, expected `read_committed` or `read_uncommitted`",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5, rate: -1}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).rate: must be a positive number",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {filter: 'value >'}\nsinks:\n  - {name: o, connector: stdout}\n",
            "steps[0] (step-1).filter: cannot parse `value >`",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {filter: 'value > 1', map: {a: '1'}}\nsinks:\n  - {name: o, connector: stdout}\n",
            "steps[0] (step-1): needs exactly one of filter, map, select, key_by, union",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {input: nope, filter: 'value > 1'}\nsinks:\n  - {name: o, connector: stdout}\n",
            "steps[0] (step-1).input: \"nope\" is not a source or an earlier step",
        ),
        (
            "name: x\nsources:\n  - {name: a, connector: generator, count: 5}\n  - {name: b, connector: generator, count: 5}\nsteps:\n  - {filter: 'value > 1'}\nsinks:\n  - {name: o, connector: stdout}\n",
            "steps[0] (step-1).input: is required: there are several sources",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {union: [s]}\nsinks:\n  - {name: o, connector: stdout}\n",
            "steps[0] (step-1).union: needs at least two inputs",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {name: s, filter: 'value > 1'}\nsinks:\n  - {name: o, connector: stdout}\n",
            "steps[0] (s).name: is used twice",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {select: {}}\nsinks:\n  - {name: o, connector: stdout}\n",
            "steps[0] (step-1).select: needs at least one field",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsinks:\n  - {name: o, connector: file, path: out.txt}\n",
            "sinks[0] (o).format: cannot tell from the extension",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsinks:\n  - {name: o, connector: stdout, input: ghost}\n",
            "sinks[0] (o).input: \"ghost\" is not a source or a step",
        ),
        (
            "name: x\non_bad_record: dead-letter\nsources:\n  - {name: s, connector: generator, count: 5}\nsinks:\n  - {name: o, connector: stdout}\n",
            "dead_letter: a source or step uses on_bad_record: dead-letter",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {filter: 'value > 1', on_bad_record: sometimes}\nsinks:\n  - {name: o, connector: stdout}\n",
            "unknown variant `sometimes`, expected one of `fail`, `skip`, `dead-letter`",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\n  - {name: t, connector: generator, count: 5}\nsinks:\n  - {name: o, connector: stdout, input: s}\n",
            "sources[1] (t): is not read by any step or sink",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: file, path: examples/data/snack_sales.jsonl}\nsinks:\n  - {name: o, connector: file, path: examples/data/snack_sales.jsonl}\n",
            "sinks[0] (o).path: examples/data/snack_sales.jsonl is also sources[0] (s).path",
        ),
        (
            "name: x\ndead_letter: out.jsonl\nsources:\n  - {name: s, connector: generator, count: 5}\nsinks:\n  - {name: o, connector: file, path: out.jsonl}\n",
            "dead_letter: out.jsonl is also sinks[0] (o).path",
        ),
    ];
    for (yaml, expected) in table {
        let err = check(yaml).map(|_| ()).unwrap_err().to_string();
        assert!(
            err.contains(expected),
            "spec:\n{yaml}\nexpected: {expected}\ngot:      {err}"
        );
    }
}

#[test]
fn set_overrides_by_name_and_index() {
    let mut doc: serde_norway::Value = serde_norway::from_str(GOOD).unwrap();
    apply_set(&mut doc, "parallelism=3").unwrap();
    apply_set(&mut doc, "steps.milk.filter=item = 'pretzel'").unwrap();
    apply_set(&mut doc, "sinks.0.name=printed").unwrap();
    let spec: JobSpec = serde_norway::from_value(doc.clone()).unwrap();
    assert_eq!(spec.parallelism, Some(3));
    assert_eq!(spec.steps[0].filter.as_deref(), Some("item = 'pretzel'"));
    assert_eq!(spec.sinks[0].name(), "printed");
    let e = apply_set(&mut doc, "sources.nope.path=x")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no element named or numbered \"nope\" in sources"),
        "{e}"
    );
    assert!(apply_set(&mut doc, "parallelism")
        .unwrap_err()
        .to_string()
        .contains("expected KEY=VALUE"));
}

const EVENTS: &str = r#"
name: w
sources:
  - name: ev
    connector: file
    path: examples/data/snack_sales.jsonl
    event_time: ts
    watermark: { out_of_orderness: 30s, interval: 0 }
steps:
  - key_by: [item]
  - name: agg
    window: { kind: hopping, size: 1m, slide: 10s }
    allowed_lateness: 5s
    aggregate: { n: count(), cents: sum(price_cents) }
    late_output: late
sinks:
  - { name: out, connector: stdout, input: agg }
  - { name: late, connector: stdout }
"#;

#[test]
fn a_window_step_resolves_its_window_and_late_output() {
    let v = check(EVENTS).unwrap();
    let StepOp::Window(w) = &v.steps[1].op else {
        panic!("not a window: {:?}", v.steps[1].op)
    };
    assert_eq!(w.allowed_lateness_ms, 5_000);
    assert!(w.assigner.is_event_time());
    let names: Vec<_> = w.aggregates.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["n", "cents"]);
    assert_eq!(v.sink_inputs, vec!["agg".to_string(), late_input("agg")]);
    let (ts, wm) = v.source_time[0].clone().unwrap();
    assert_eq!(ts.unwrap().field, "ts");
    assert_eq!(
        (wm.out_of_orderness_ms, wm.interval_ms, wm.idle_timeout_ms),
        (30_000, 0, None)
    );
}

#[test]
fn max_windows_per_record_raises_the_limit() {
    let raised = EVENTS.replace(
        "{ kind: hopping, size: 1m, slide: 10s }",
        "{ kind: hopping, size: 1h, slide: 1ms, max_windows_per_record: 3600000 }",
    );
    let v = check(&raised).unwrap();
    let StepOp::Window(w) = &v.steps[1].op else {
        panic!("not a window: {:?}", v.steps[1].op)
    };
    assert_eq!(w.assigner.windows_per_record(), 3_600_000);
}

#[test]
fn broken_window_specs_are_rejected_naming_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "    aggregate: { n: count(), cents: sum(price_cents) }\n",
            "",
            "steps[1] (agg).aggregate: is required with window",
        ),
        (
            "{ kind: hopping, size: 1m, slide: 10s }",
            "{ kind: hopping, size: 10s, slide: 1m }",
            "steps[1] (agg).window",
        ),
        (
            "{ kind: hopping, size: 1m, slide: 10s }",
            "{ kind: tumbling, size: 0 }",
            "steps[1] (agg).window",
        ),
        (
            "{ kind: hopping, size: 1m, slide: 10s }",
            "{ kind: session, gap: -5 }",
            "steps[1] (agg).window.gap: must not be negative",
        ),
        (
            "{ kind: hopping, size: 1m, slide: 10s }",
            "{ kind: weekly, size: 1m }",
            "unknown variant `weekly`",
        ),
        // Issue 15: 3.6 M windows per record, over the default limit of 100,000.
        (
            "{ kind: hopping, size: 1m, slide: 10s }",
            "{ kind: hopping, size: 1h, slide: 1ms }",
            "steps[1] (agg).window.slide: 1 ms with size 3600000 ms puts each record into \
             3600000 windows, more than max_windows_per_record (100000)",
        ),
        (
            "{ kind: hopping, size: 1m, slide: 10s }",
            "{ kind: hopping, size: 1m, slide: 1s, max_windows_per_record: 59 }",
            "steps[1] (agg).window.slide: 1000 ms with size 60000 ms puts each record into 60 \
             windows, more than max_windows_per_record (59)",
        ),
        (
            "{ kind: hopping, size: 1m, slide: 10s }",
            "{ kind: hopping, size: 1m, slide: 10s, max_windows_per_record: 0 }",
            "steps[1] (agg).window.max_windows_per_record: must be at least 1",
        ),
        (
            "late_output: late",
            "late_output: nowhere",
            "steps[1] (agg).late_output: \"nowhere\" is not a sink",
        ),
        (
            "{ name: late, connector: stdout }",
            "{ name: late, connector: stdout, input: agg }",
            "leave its `input` out",
        ),
        (
            "sum(price_cents)",
            "median(price_cents)",
            "steps[1] (agg).aggregate.cents",
        ),
        (
            "cents: sum(price_cents)",
            "n: sum(price_cents)",
            "\"n\" is given twice",
        ),
        (
            "    event_time: ts\n",
            "",
            "sources[0] (ev).event_time: is required with watermark",
        ),
        (
            "    event_time: ts\n    watermark: { out_of_orderness: 30s, interval: 0 }\n",
            "",
            "is an event-time window but source \"ev\" has no event_time or watermark",
        ),
        (
            "event_time: ts",
            "event_time: { field: ts, format: \"%Y-%m-%d\", timezone: Mars/Olympus }",
            "sources[0] (ev).event_time.format",
        ),
        (
            "out_of_orderness: 30s",
            "out_of_orderness: soon",
            "sources[0] (ev).watermark.out_of_orderness",
        ),
        (
            "  - key_by: [item]\n",
            "  - key_by: [item]\n    aggregate: { n: count() }\n",
            "steps[0] (step-1).aggregate: is only allowed with window",
        ),
        (
            "allowed_lateness: 5s",
            "allowed_lateness: 5s\n    trigger: { count: 0 }",
            "steps[1] (agg).trigger.count: must be at least 1",
        ),
    ];
    for (from, to, expected) in cases {
        assert!(EVENTS.contains(from), "{from}");
        let yaml = EVENTS.replacen(from, to, 1);
        let err = check(&yaml).map(|_| ()).unwrap_err().to_string();
        assert!(
            err.contains(expected),
            "spec:\n{yaml}\nexpected: {expected}\ngot:      {err}"
        );
    }
}

#[test]
fn window_offsets_may_be_negative_as_in_flink() {
    // The day window holding t = 0 starts at 0 - ((0 - offset) mod 1 day).
    let h: i64 = 3_600_000;
    for (offset, start) in [("-8h", -8 * h), ("-1000", -1000), ("2h", -22 * h)] {
        let yaml = EVENTS.replacen(
            "{ kind: hopping, size: 1m, slide: 10s }",
            &format!("{{ kind: tumbling, size: 1d, offset: {offset} }}"),
            1,
        );
        let v = check(&yaml).unwrap();
        let StepOp::Window(w) = &v.steps[1].op else {
            panic!("not a window")
        };
        let mut ws = Vec::new();
        w.assigner.assign_windows(0, 0, &mut ws);
        assert_eq!(ws[0].start, start, "{offset}");
    }
}

#[test]
fn kafka_sources_and_sinks_are_checked_naming_the_field() {
    let ok = "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: '127.0.0.1:9092', topic: in, group: g, start: committed, properties: {security.protocol: plaintext}}\nsinks:\n  - {name: o, connector: kafka, bootstrap: '127.0.0.1:9092', topic: out, key_field: k}\n";
    check(ok).expect("a good kafka spec");
    let table: &[(&str, &str)] = &[
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: '', topic: in}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).bootstrap: must name at least one broker",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: '../in'}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).topic: \"../in\" is not a Kafka topic name",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, start: committed}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).group: is needed with start: committed",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, start: timestamp}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).start_timestamp_ms: is needed with start: timestamp",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, start_timestamp_ms: 5}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).start_timestamp_ms: is only read with start: timestamp",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: file, path: examples/data/snack_sales.jsonl}\nsinks:\n  - {name: o, connector: kafka, bootstrap: 'h:1', topic: 'a b'}\n",
            "sinks[0] (o).topic: \"a b\" is not a Kafka topic name",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, assignment: group}\nsinks:\n  - {name: o, connector: kafka, bootstrap: 'h:1', topic: out}\n",
            "sources[0] (s).group: is needed with assignment: group",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, group: g, assignment: group}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).assignment: group assignment writes to Kafka sinks only",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, group: g, assignment: group}\n  - {name: t, connector: kafka, bootstrap: 'h:1', topic: in2}\nsinks:\n  - {name: o, connector: kafka, bootstrap: 'h:1', topic: out}\n",
            "sources[0] (s).assignment: group assignment needs the Kafka source to be the job's only source",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, group: g, assignment: consumers}\nsinks:\n  - {name: o, connector: kafka, bootstrap: 'h:1', topic: out}\n",
            "unknown variant `consumers`, expected `brook` or `group`",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, connect_timeout: 0}\nsinks:\n  - {name: o, connector: stdout}\n",
            "sources[0] (s).connect_timeout: must be positive",
        ),
        (
            "name: x\nsources:\n  - {name: s, connector: file, path: examples/data/snack_sales.jsonl}\nsinks:\n  - {name: o, connector: kafka, bootstrap: 'h:1', topic: out, connect_timeout: soon}\n",
            "sinks[0] (o).connect_timeout: \"soon\"",
        ),
    ];
    let group = "name: x\nsources:\n  - {name: s, connector: kafka, bootstrap: 'h:1', topic: in, group: g, assignment: group}\nsinks:\n  - {name: o, connector: kafka, bootstrap: 'h:1', topic: out}\n";
    let valid = check(group).expect("a good group-mode spec");
    let g = valid.group_source().expect("its group source");
    assert_eq!(
        (g.topic.as_str(), g.group.as_str(), g.bounded),
        ("in", "g", false)
    );
    assert!(check(ok)
        .expect("a good kafka spec")
        .group_source()
        .is_none());
    for (yaml, want) in table {
        let e = check(yaml).expect_err(yaml).to_string();
        assert!(e.contains(want), "{yaml}\nwant: {want}\ngot: {e}");
    }
}

const JOIN: &str = r#"
name: j
sources:
  - { name: a, connector: file, path: examples/data/snack_sales.jsonl, event_time: ts }
  - { name: b, connector: file, path: examples/data/snack_sales.jsonl, event_time: ts }
steps:
  - name: paired
    join: { kind: interval, left: a, right: b, on: [student], between: [0s, 1m] }
    late_output: late
sinks:
  - { name: out, connector: stdout, input: paired }
  - { name: late, connector: stdout }
"#;

#[test]
fn a_join_step_takes_a_late_output() {
    let v = check(JOIN).unwrap();
    let StepOp::Join(j) = &v.steps[0].op else {
        panic!("not a join: {:?}", v.steps[0].op)
    };
    assert_eq!(j.late_output.as_deref(), Some("late"));
    assert_eq!(
        v.sink_inputs,
        vec!["paired".to_string(), late_input("paired")]
    );
    let e = check(&JOIN.replace(
        "{ name: late, connector: stdout }",
        "{ name: late, connector: stdout, input: paired }",
    ))
    .unwrap_err();
    assert!(e.to_string().contains("leave its `input` out"), "{e}");
    let e = check(&GOOD.replace(
        "  - key_by: [student]\n",
        "  - key_by: [student]\n    late_output: out\n",
    ))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("steps[2] (step-3).late_output: is only allowed with window or join"),
        "{e}"
    );
}

/// Expressions are planned against their input's schema (a file's inferred from its
/// first records, a generator's known fields, a declared one), so a mistake is found
/// before anything runs, naming the step and the field (issue 18).
#[test]
fn sql_mistakes_are_plan_time_errors_naming_step_and_field() {
    let table: &[(&str, &str)] = &[
        (
            "  - name: milk\n    filter: \"item = 'chocolate milk'\"\n  - map: { dollars: \"price / 100.0\" }\n  - key_by: [student]\n",
            "steps[1] (step-2).map.dollars: unknown column `price` in `price / 100.0` (columns: ",
        ),
        (
            "  - name: milk\n    filter: \"item * 2\"\n",
            "steps[0] (milk).filter: type mismatch in `item * 2`",
        ),
        (
            "  - name: milk\n    filter: \"price_cents + 1\"\n",
            "steps[0] (milk).filter: `price_cents + 1` is of type Int64, a filter must be a bool",
        ),
        (
            "  - select: { cents: price_cents }\n  - filter: \"item = 'x'\"\n",
            "steps[1] (step-2).filter: unknown column `item` in `item = 'x'` (columns: cents)",
        ),
        (
            "  - key_by: [studnet]\n",
            "steps[0] (step-1).key_by: unknown field `studnet` (fields: ",
        ),
    ];
    let head = GOOD.split("steps:\n").next().expect("GOOD has steps");
    let tail = GOOD.split("sinks:\n").nth(1).expect("GOOD has sinks");
    for (steps, expected) in table {
        let yaml = format!("{head}steps:\n{steps}sinks:\n{tail}");
        let err = check(&yaml).expect_err(steps).to_string();
        assert!(
            err.starts_with(expected),
            "spec:\n{yaml}\nexpected: {expected}\ngot:      {err}"
        );
    }
    // A generator's fields are known; a declared schema is used as written.
    let generated = "name: x\nsources:\n  - {name: s, connector: generator, count: 5}\nsteps:\n  - {filter: 'valeu > 1'}\nsinks:\n  - {name: o, connector: stdout}\n";
    assert_eq!(
        check(generated).expect_err("typo").to_string(),
        "steps[0] (step-1).filter: unknown column `valeu` in `valeu > 1` (columns: key, ts, value)"
    );
    let declared = "name: x\nsources:\n  - {name: s, connector: log, topic: t, schema: {n: int64}}\nsteps:\n  - {map: {half: 'n / 2.0', m: 'm'}}\nsinks:\n  - {name: o, connector: stdout}\n";
    assert_eq!(
        check(declared).expect_err("no m").to_string(),
        "steps[0] (step-1).map.m: unknown column `m` in `m` (columns: n)"
    );
    // Without a schema a log source's steps are planned when the job runs.
    check(&declared.replace(", schema: {n: int64}", "")).expect("planned later");
}

#[test]
fn a_joins_fields_are_both_inputs_fields() {
    let yaml = JOIN
        .replace(
            "    late_output: late\n",
            "    late_output: late\n  - {name: both, input: paired, filter: \"item = b_item AND price_cents > 0\"}\n",
        )
        .replace("input: paired }", "input: both }");
    let v = check(&yaml).expect("the join's rows have both sides' fields");
    let StepOp::Sql(_, Some(p)) = &v.steps[1].op else {
        panic!("not planned: {:?}", v.steps[1].op)
    };
    assert!(p.output_schema().index_of("b_ts").is_ok());
    let e = check(&yaml.replace("b_item", "b_thing")).expect_err("no such field");
    assert!(
        e.to_string()
            .starts_with("steps[1] (both).filter: unknown column `b_thing`"),
        "{e}"
    );
}

/// `map` and `select` fields come out in the order written (as a SQL `SELECT` list),
/// on batches (a generator's rows) and on rows (a file without `schema:`); a field
/// given twice is refused.
#[test]
fn map_and_select_fields_keep_the_order_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"key\": 1, \"value\": 2}\n").expect("write");
    let out = dir.path().join("out.jsonl");
    for source in [
        "{name: s, connector: generator, count: 1}".to_string(),
        format!("{{name: s, connector: file, path: {}}}", input.display()),
    ] {
        let yaml = format!(
            "name: order\nsources:\n  - {source}\nsteps:\n  - {{name: m, map: {{zz: \"key + 1\", aa: \"value\"}}}}\n  - {{name: p, select: {{yy: zz, bb: aa}}}}\nsinks:\n  - {{name: out, connector: file, path: {}}}\n",
            out.display()
        );
        let valid = check(&yaml).expect("valid");
        let built =
            build(&valid, brook_engine::JobConfig::with_parallelism(1), None).expect("builds");
        built.env.execute("order").expect("runs");
        let text = std::fs::read_to_string(&out).expect("output");
        assert!(text.starts_with("{\"yy\":"), "{source}: {text}");
    }
    let twice = "name: x\nsources:\n  - {name: s, connector: generator, count: 1}\nsteps:\n  - {name: m, map: {a: \"key\", a: \"value\"}}\nsinks:\n  - {name: o, connector: blackhole}\n";
    let err = parse(twice).expect_err("a field given twice");
    assert!(err.to_string().contains("\"a\" is given twice"), "{err}");
}
