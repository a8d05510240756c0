//! `cargo bench -p brook-sql --bench filter_map`: a filter and a map over batches of
//! W1-style events (`../shared/docs/workloads.md`: key = i * 2654435761 mod 10000,
//! ts = i ms, value = i mod 100), as planned SQL expressions (brook-sql) and as a
//! hand-written loop over the same columns, in the same run; rows per CPU-second and
//! the ratio. The filter keeps 75% (`value >= 25`), the map adds
//! `dollars: value / 100.0` and `bucket: key % 16`.
//!
//! Run without `--bench` (as `cargo test --all-targets` does) it only checks that both
//! give the same output, on a few batches. Knobs: `BROOK_BENCH_SCALE` (default 1.0 of
//! 20 M rows), `BROOK_BENCH_REPS` (default 5), `BROOK_BENCH_BATCH` (rows per batch,
//! default 4096: a source poll's worth).

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow_schema::SchemaRef;
use brook_sql::schema::declared;
use brook_sql::{Filter, Projection};

const MULTIPLIER: u64 = 2_654_435_761;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This thread's CPU time (user + system) in seconds, from `/proc/thread-self/stat`
/// (10 ms resolution; both sides run on this thread). `None` where there is none.
fn thread_cpu() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // After the command name (which may hold spaces, so up to the last ')'), utime and
    // stime are the 12th and 13th fields, in clock ticks (USER_HZ = 100).
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// CPU seconds of `f` (wall seconds where the CPU time cannot be read).
#[allow(clippy::disallowed_methods)] // measuring time is the point: Instant::now
fn cpu_secs<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let (c0, t0) = (thread_cpu(), std::time::Instant::now());
    let out = f();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = c0.zip(thread_cpu()).map(|(a, b)| b - a).unwrap_or(wall);
    (cpu, out)
}

fn schema() -> SchemaRef {
    match declared([("key", "int64"), ("ts", "timestamp"), ("value", "int64")]) {
        Ok(s) => s,
        Err(e) => panic!("the bench's schema: {e}"),
    }
}

/// Events `from..from + n` as one batch.
fn events(schema: &SchemaRef, from: u64, n: usize) -> RecordBatch {
    let is = from..from + n as u64;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(
            is.clone().map(|i| ((i * MULTIPLIER) % 10_000) as i64),
        )),
        Arc::new(TimestampMillisecondArray::from_iter_values(
            is.clone().map(|i| i as i64),
        )),
        Arc::new(Int64Array::from_iter_values(is.map(|i| (i % 100) as i64))),
    ];
    match RecordBatch::try_new(schema.clone(), columns) {
        Ok(b) => b,
        Err(e) => panic!("the bench's batch: {e}"),
    }
}

/// The output both sides compute: kept rows' `dollars` and `bucket` summed (and the
/// kept count), to compare them and keep the work from being optimised away.
#[derive(Debug, Default, PartialEq)]
struct Sums {
    kept: u64,
    dollars: f64,
    bucket: i64,
}

fn sql(filter: &Filter, map: &Projection, batches: &[RecordBatch]) -> Sums {
    let mut sums = Sums::default();
    for b in batches {
        let out = filter
            .apply(b)
            .and_then(|kept| map.apply(&kept))
            .unwrap_or_else(|e| panic!("filter + map: {e}"));
        let out = black_box(out);
        sums.kept += out.num_rows() as u64;
        sums.dollars += out
            .column(3)
            .as_primitive::<Float64Type>()
            .values()
            .iter()
            .sum::<f64>();
        sums.bucket += out
            .column(4)
            .as_primitive::<Int64Type>()
            .values()
            .iter()
            .sum::<i64>();
    }
    sums
}

/// The same work written by hand over the same columns: kept rows' columns copied, the
/// two fields computed into new columns.
fn hand_loop(batches: &[RecordBatch]) -> Sums {
    let mut sums = Sums::default();
    for b in batches {
        let key = b.column(0).as_primitive::<Int64Type>().values();
        let ts = b
            .column(1)
            .as_primitive::<arrow_array::types::TimestampMillisecondType>()
            .values();
        let value = b.column(2).as_primitive::<Int64Type>().values();
        let n = b.num_rows();
        let (mut k, mut t, mut v) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut dollars, mut bucket) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            if value[i] >= 25 {
                k.push(key[i]);
                t.push(ts[i]);
                v.push(value[i]);
                dollars.push(value[i] as f64 / 100.0);
                bucket.push(key[i] % 16);
            }
        }
        let out = black_box((
            k,
            t,
            v,
            Float64Array::from(dollars),
            Int64Array::from(bucket),
        ));
        sums.kept += out.3.len() as u64;
        sums.dollars += out.3.values().iter().sum::<f64>();
        sums.bucket += out.4.values().iter().sum::<i64>();
    }
    sums
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let batch_rows: usize = env_or("BROOK_BENCH_BATCH", 4096).max(1);
    let (rows, reps) = if bench {
        (
            (20_000_000.0 * env_or("BROOK_BENCH_SCALE", 1.0)) as u64,
            env_or("BROOK_BENCH_REPS", 5usize).max(1),
        )
    } else {
        (5 * batch_rows as u64, 1)
    };
    let schema = schema();
    let filter = Filter::plan(&schema, "value >= 25").unwrap_or_else(|e| panic!("{e}"));
    let map = Projection::map(
        filter.schema(),
        &[("dollars", "value / 100.0"), ("bucket", "key % 16")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let batches: Vec<RecordBatch> = (0..rows)
        .step_by(batch_rows)
        .map(|from| events(&schema, from, batch_rows.min((rows - from) as usize)))
        .collect();

    let (mut sql_t, mut loop_t) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        // Alternate which side goes first.
        let (s, l) = if rep % 2 == 0 {
            let s = cpu_secs(|| sql(&filter, &map, &batches));
            (s, cpu_secs(|| hand_loop(&batches)))
        } else {
            let l = cpu_secs(|| hand_loop(&batches));
            (cpu_secs(|| sql(&filter, &map, &batches)), l)
        };
        assert_eq!(s.1, l.1, "brook-sql and the hand loop disagree");
        eprintln!("rep {rep}: sql {:.3} s, loop {:.3} s (CPU)", s.0, l.0);
        sql_t.push(s.0);
        loop_t.push(l.0);
    }
    if !bench {
        println!("filter_map: brook-sql and the hand loop agree on {rows} rows (run with --bench to measure)");
        return;
    }
    let (s, l) = (median(sql_t), median(loop_t));
    println!(
        "filter_map: {rows} W1 rows in batches of {batch_rows}, filter (keeps 75%) + map (2 fields), median of {reps} (CPU time)"
    );
    println!(
        "{:<22} {:>16} {:>16} {:>8}",
        "", "sql rows/CPU-s", "loop rows/CPU-s", "ratio"
    );
    let rate = |secs: f64| {
        if secs > 0.0 {
            rows as f64 / secs
        } else {
            f64::INFINITY
        }
    };
    println!(
        "{:<22} {:>16.0} {:>16.0} {:>8.2}",
        "filter + map",
        rate(s),
        rate(l),
        rate(s) / rate(l)
    );
}
