//! The main job (examples/nycflights13) against an offline computation over the same
//! CSV files in plain Rust: the same hourly statistics, airline names, weather, duty
//! periods and dead letters, to the last digit.
//!
//! The offline side shares nothing with the job: it reads the CSV by column name and
//! takes the departure as the scheduled hour (`time_hour`, UTC) + `minute` +
//! `dep_delay`, where the job resolves the local `dep_time` in New York time.

#[allow(dead_code)]
#[path = "../examples/nycflights13/job.rs"]
mod job;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use chrono::DateTime;
use serde_json::Value;

const HOUR: i64 = 3_600_000;
const MINUTE: i64 = 60_000;

fn input() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/nycflights13")
}

fn gz_csv(name: &str) -> csv::Reader<flate2::read::GzDecoder<fs::File>> {
    let f = fs::File::open(input().join(name)).expect("the data set is in the repository");
    csv::Reader::from_reader(flate2::read::GzDecoder::new(f))
}

fn utc_ms(s: &str) -> i64 {
    DateTime::parse_from_rfc3339(s)
        .expect("time_hour is RFC 3339")
        .timestamp_millis()
}

fn na(s: &str) -> Option<&str> {
    (s != "NA" && !s.is_empty()).then_some(s)
}

/// (origin, carrier, hour start ms) → (flights, sum of delays, max delay).
type Hourly = BTreeMap<(String, String, i64), (u64, i64, i64)>;

struct Offline {
    hourly: Hourly,
    /// tailnum → sorted departures (ms).
    departures_by_tail: HashMap<String, Vec<i64>>,
    departed: u64,
    cancelled: u64,
    /// (carrier, flight number, departure ms) of each departed flight.
    flight_keys: Vec<(String, u64, i64)>,
    airlines: HashMap<String, String>,
    /// origin → hour ms → (time_hour, temp, wind_speed, precip, visib).
    weather: HashMap<String, BTreeMap<i64, WeatherRow>>,
}

type WeatherRow = (String, Option<f64>, Option<f64>, Option<f64>, Option<f64>);

fn offline() -> Offline {
    let mut rdr = gz_csv("flights.csv.gz");
    let h = rdr.headers().expect("a header").clone();
    let col = |name: &str| h.iter().position(|c| c == name).expect("column present");
    let flight_no = col("flight");
    let (dep_time, dep_delay, carrier, tailnum, origin, minute, time_hour) = (
        col("dep_time"),
        col("dep_delay"),
        col("carrier"),
        col("tailnum"),
        col("origin"),
        col("minute"),
        col("time_hour"),
    );
    let mut o = Offline {
        hourly: BTreeMap::new(),
        departures_by_tail: HashMap::new(),
        departed: 0,
        cancelled: 0,
        flight_keys: Vec::new(),
        airlines: HashMap::new(),
        weather: HashMap::new(),
    };
    for rec in rdr.records() {
        let r = rec.expect("a CSV record");
        if na(&r[dep_time]).is_none() {
            o.cancelled += 1;
            continue;
        }
        let delay: i64 = r[dep_delay].parse().expect("dep_delay with dep_time");
        let m: i64 = r[minute].parse().expect("minute");
        let ts = utc_ms(&r[time_hour]) + m * MINUTE + delay * MINUTE;
        o.departed += 1;
        let flight: u64 = r[flight_no].parse().expect("flight");
        o.flight_keys.push((r[carrier].to_string(), flight, ts));
        let hour = ts.div_euclid(HOUR) * HOUR;
        let e = o
            .hourly
            .entry((r[origin].to_string(), r[carrier].to_string(), hour))
            .or_insert((0, 0, i64::MIN));
        e.0 += 1;
        e.1 += delay;
        e.2 = e.2.max(delay);
        if let Some(t) = na(&r[tailnum]) {
            o.departures_by_tail
                .entry(t.to_string())
                .or_default()
                .push(ts);
        }
    }
    for v in o.departures_by_tail.values_mut() {
        v.sort_unstable();
    }

    let mut rdr = csv::Reader::from_path(input().join("airlines.csv")).expect("airlines.csv");
    for rec in rdr.records() {
        let r = rec.expect("an airline");
        o.airlines.insert(r[0].to_string(), r[1].to_string());
    }

    let mut rdr = gz_csv("weather.csv.gz");
    let h = rdr.headers().expect("a header").clone();
    let col = |name: &str| h.iter().position(|c| c == name).expect("column present");
    let cols = [col("temp"), col("wind_speed"), col("precip"), col("visib")];
    let (w_origin, w_hour) = (col("origin"), col("time_hour"));
    for rec in rdr.records() {
        let r = rec.expect("a weather report");
        let num = |i: usize| na(&r[i]).map(|s| s.parse::<f64>().expect("a number"));
        o.weather
            .entry(r[w_origin].to_string())
            .or_default()
            .insert(
                utc_ms(&r[w_hour]),
                (
                    r[w_hour].to_string(),
                    num(cols[0]),
                    num(cols[1]),
                    num(cols[2]),
                    num(cols[3]),
                ),
            );
    }
    o
}

/// Sessions of sorted departures: a departure within `gap` of the previous one (the
/// windows `[t, t + gap)` touch or overlap) continues the period.
fn duty_periods(o: &Offline, gap: i64) -> BTreeMap<(String, i64), (i64, u64)> {
    let mut out = BTreeMap::new();
    for (tail, deps) in &o.departures_by_tail {
        let (mut first, mut last, mut n) = (deps[0], deps[0], 0u64);
        for &t in deps {
            if t - last > gap {
                out.insert((tail.clone(), first), (last, n));
                (first, n) = (t, 0);
            }
            last = t;
            n += 1;
        }
        out.insert((tail.clone(), first), (last, n));
    }
    out
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .expect("the job wrote its results")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn run_job(out_of_orderness_ms: i64) -> (tempfile::TempDir, job::Config, job::Summary) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut cfg = job::Config::new(input(), dir.path().join("data"), dir.path().join("results"));
    cfg.out_of_orderness_ms = out_of_orderness_ms;
    let summary = job::run(&cfg).expect("the job runs");
    (dir, cfg, summary)
}

#[test]
fn main_job_matches_an_offline_computation() {
    let o = offline();
    let (_dir, cfg, s) = run_job(24 * HOUR);
    assert_eq!(s.flights, o.departed + o.cancelled);
    assert_eq!(s.flights, 336_776);

    // Dead letters: every cancelled flight, with its reason; nothing else.
    let cancelled = read_jsonl(&cfg.results.join(job::files::CANCELLED));
    assert_eq!(cancelled.len() as u64, o.cancelled);
    assert!(cancelled
        .iter()
        .all(|c| c["reason"] == "cancelled: no departure time (dep_time NA)"));
    // With a day's bound on out-of-orderness no flight of 2013 is late.
    assert_eq!(s.late, 0);

    // Hourly statistics, airline names and weather: row for row.
    let rows = read_jsonl(&cfg.results.join(job::files::HOURLY));
    assert_eq!(
        rows.len(),
        o.hourly.len(),
        "one row per airport, carrier and hour"
    );
    let mut seen = BTreeMap::new();
    for r in &rows {
        let key = (
            r["origin"].as_str().expect("origin").to_string(),
            r["carrier"].as_str().expect("carrier").to_string(),
            r["hour_ms"].as_i64().expect("hour_ms"),
        );
        assert!(seen.insert(key.clone(), ()).is_none(), "{key:?} twice");
        let &(n, sum, max) = o
            .hourly
            .get(&key)
            .unwrap_or_else(|| panic!("{key:?} not expected"));
        assert_eq!(r["flights"].as_u64(), Some(n), "{key:?}");
        assert_eq!(
            r["avg_dep_delay_min"].as_f64(),
            Some(sum as f64 / n as f64),
            "{key:?}"
        );
        assert_eq!(r["max_dep_delay_min"].as_i64(), Some(max), "{key:?}");
        assert_eq!(
            r["airline"].as_str(),
            o.airlines.get(&key.1).map(String::as_str)
        );
        // The report valid at the hour's last millisecond.
        let w = o.weather[&key.0]
            .range(..key.2 + HOUR)
            .next_back()
            .map(|(_, w)| w);
        assert_eq!(
            r["weather_hour"].as_str(),
            w.map(|w| w.0.as_str()),
            "{key:?}"
        );
        assert_eq!(r["temp_f"].as_f64(), w.and_then(|w| w.1), "{key:?}");
        assert_eq!(r["wind_speed_mph"].as_f64(), w.and_then(|w| w.2), "{key:?}");
        assert_eq!(r["precip_in"].as_f64(), w.and_then(|w| w.3), "{key:?}");
        assert_eq!(r["visib_mi"].as_f64(), w.and_then(|w| w.4), "{key:?}");
    }
    assert_eq!(s.windowed_flights, o.departed);

    // Duty periods per aircraft.
    let want = duty_periods(&o, cfg.session_gap_ms);
    let got: BTreeMap<(String, i64), (i64, u64)> = read_jsonl(&cfg.results.join(job::files::DUTY))
        .iter()
        .map(|d| {
            let t = |f: &str| utc_ms(d[f].as_str().expect("a time"));
            (
                (
                    d["tailnum"].as_str().expect("tailnum").to_string(),
                    t("first_departure"),
                ),
                (t("last_departure"), d["flights"].as_u64().expect("flights")),
            )
        })
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "duty periods differ");
    assert!(
        want.values().any(|&(_, n)| n > 1),
        "some periods have several flights"
    );
}

#[test]
fn late_flights_go_to_the_side_output_and_nowhere_else() {
    // A 30-minute bound: flights delayed well past it arrive after their hour fired.
    let o = offline();
    let (_dir, cfg, s) = run_job(30 * MINUTE);
    let late = read_jsonl(&cfg.results.join(job::files::LATE));
    assert!(late.len() > 1000, "{} late flights", late.len());
    assert_eq!(s.late, late.len() as u64);
    // Every departed flight is counted in exactly one window or is late.
    assert_eq!(s.windowed_flights + s.late, o.departed);
    // Each late flight is a real departure (carrier, flight number, departure), once.
    let mut departures: HashMap<(String, u64, i64), u32> = HashMap::new();
    for k in &o.flight_keys {
        *departures.entry(k.clone()).or_default() += 1;
    }
    for f in &late {
        let key = (
            f["carrier"].as_str().expect("carrier").to_string(),
            f["flight"].as_u64().expect("flight"),
            f["departed_ms"].as_i64().expect("departed_ms"),
        );
        let left = departures
            .get_mut(&key)
            .unwrap_or_else(|| panic!("{f} never departed"));
        assert!(*left > 0, "{f} late twice");
        *left -= 1;
    }
}
