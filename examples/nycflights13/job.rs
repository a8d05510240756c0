//! The nycflights13 job: every flight that left New York in 2013, replayed through an
//! embedded log topic, with hourly delay statistics per airport and carrier (tumbling
//! event-time windows), the airline's name (lookup enrichment), the weather at the
//! airport in that hour (an event-time temporal join), per-aircraft duty periods
//! (session windows), cancelled flights to a dead-letter file and late flights to a
//! side output.
//!
//! Shared by `main.rs` (the command) and `tests/nycflights13.rs`, which checks the
//! results against an offline computation.

// Items are `pub` for the test that includes this file (tests/nycflights13.rs).
#![allow(unreachable_pub)]

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use brook::core::time::Stopwatch;
use brook::log::{Log, LogOptions, ProducerRecord, TopicConfig};
use brook::operators::enrich::{MissingKey, StaticTable};
use brook::operators::row::Row;
use brook::prelude::*;
use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
use chrono_tz::America::New_York;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;

/// One hour in ms.
pub const HOUR_MS: Millis = 3_600_000;
const MINUTE_MS: i64 = 60_000;
/// Topic of the flights, keyed by origin airport.
pub const FLIGHTS_TOPIC: &str = "flights";
/// Topic of the weather reports, keyed by airport.
pub const WEATHER_TOPIC: &str = "weather";

/// What to run on.
#[derive(Debug, Clone)]
pub struct Config {
    /// The folder with `flights.csv.gz`, `weather.csv.gz` and `airlines.csv`.
    pub input: PathBuf,
    /// The brook data directory (the log topics live here).
    pub data_dir: PathBuf,
    /// Where the results go (replaced on each run).
    pub results: PathBuf,
    /// Parallelism of the job's operators.
    pub parallelism: u32,
    /// The watermark's bound on out-of-orderness (ms), as Flink's
    /// `forBoundedOutOfOrderness`. Flights are announced in scheduled order and
    /// stamped with their actual departure, so a flight delayed by more than this
    /// behind the latest departure seen is late.
    pub out_of_orderness_ms: Millis,
    /// Gap that ends an aircraft's duty period (ms).
    pub session_gap_ms: Millis,
    /// Partitions of the flights topic.
    pub partitions: u32,
}

impl Config {
    /// The defaults of the `nycflights13` command for an input folder.
    pub fn new(
        input: impl Into<PathBuf>,
        data_dir: impl Into<PathBuf>,
        results: impl Into<PathBuf>,
    ) -> Self {
        Config {
            input: input.into(),
            data_dir: data_dir.into(),
            results: results.into(),
            parallelism: 2,
            // The longest delay of 2013 is 21 h 41 min: with a day's bound no flight is late.
            out_of_orderness_ms: 24 * HOUR_MS,
            session_gap_ms: 6 * HOUR_MS,
            partitions: 3,
        }
    }
}

// Missing values are `NA` (R's): numbers that do not parse are `None`
// (`csv::invalid_option`, which works with any format, so the same types go into the
// topics as JSON and into keyed state with bincode).

/// `NA` (R's missing value) as `None`.
fn na_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    Ok(s.filter(|s| s != "NA" && !s.is_empty()))
}

/// A row of `flights.csv` (the columns the job uses), also the value of a record of
/// the flights topic.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flight {
    /// Scheduled departure date (local), year.
    pub year: i32,
    /// Month, 1-12.
    pub month: u32,
    /// Day of the month.
    pub day: u32,
    /// Actual departure, local HHMM (2400 = midnight); `None` if cancelled.
    #[serde(deserialize_with = "csv::invalid_option", default)]
    pub dep_time: Option<u32>,
    /// Scheduled departure, local HHMM.
    pub sched_dep_time: u32,
    /// Departure delay in minutes (negative: early); `None` if cancelled.
    #[serde(deserialize_with = "csv::invalid_option", default)]
    pub dep_delay: Option<i64>,
    /// Carrier code (`UA`).
    pub carrier: String,
    /// Flight number.
    pub flight: u32,
    /// The aircraft's tail number.
    #[serde(deserialize_with = "na_string", default)]
    pub tailnum: Option<String>,
    /// Origin airport (EWR, JFK, LGA).
    pub origin: String,
    /// Destination airport.
    pub dest: String,
    /// Scheduled departure minute (local; the hour is in `time_hour`).
    pub minute: u32,
    /// The scheduled hour in UTC (RFC 3339).
    pub time_hour: String,
}

/// How a flight left: at an instant, or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Departure {
    /// Departed at this instant (ms since the epoch).
    At(Millis),
    /// No departure: why.
    Cancelled(String),
}

impl Flight {
    /// The scheduled departure (ms since the epoch): the scheduled hour in UTC plus the
    /// minute. Using `time_hour` avoids resolving local times around DST changes.
    pub fn scheduled_ms(&self) -> Result<Millis, String> {
        let hour = DateTime::parse_from_rfc3339(&self.time_hour)
            .map_err(|e| format!("time_hour {:?}: {e}", self.time_hour))?;
        Ok(hour.timestamp_millis() + i64::from(self.minute) * MINUTE_MS)
    }

    /// The actual departure: the instant whose New York wall-clock time is `dep_time`
    /// on the scheduled date, the day before or the day after (a flight delayed past
    /// midnight leaves the next day), whichever is closest to scheduled + `dep_delay`.
    /// A flight without a departure time is cancelled; one whose `dep_time` and
    /// `dep_delay` disagree by more than a minute is rejected with the reason.
    pub fn departure(&self) -> Departure {
        let Some(dep_time) = self.dep_time else {
            return Departure::Cancelled("cancelled: no departure time (dep_time NA)".into());
        };
        let scheduled = match self.scheduled_ms() {
            Ok(s) => s,
            Err(e) => return Departure::Cancelled(format!("bad record: {e}")),
        };
        let Some(date) = NaiveDate::from_ymd_opt(self.year, self.month, self.day) else {
            return Departure::Cancelled(format!(
                "bad record: no date {}-{}-{}",
                self.year, self.month, self.day
            ));
        };
        let (h, m) = ((dep_time / 100) % 24, dep_time % 100);
        let Some(time) = NaiveTime::from_hms_opt(h, m, 0) else {
            return Departure::Cancelled(format!("bad record: dep_time {dep_time} is not HHMM"));
        };
        let expected = scheduled + self.dep_delay.unwrap_or(0) * MINUTE_MS;
        let best = [-1, 0, 1]
            .into_iter()
            .filter_map(|d| local_ms(date + Duration::days(d), time))
            .min_by_key(|t| (t - expected).abs());
        match best {
            Some(t) if self.dep_delay.is_none() || (t - expected).abs() <= MINUTE_MS => {
                Departure::At(t)
            }
            Some(t) => Departure::Cancelled(format!(
                "inconsistent: dep_time {dep_time} is {} min from the scheduled time + dep_delay",
                (t - expected) / MINUTE_MS
            )),
            None => Departure::Cancelled(format!("bad record: dep_time {dep_time} does not exist")),
        }
    }
}

/// A New York wall-clock time as ms since the epoch (the earlier instant when the
/// clock is set back; the instant after the gap when it is set forward).
fn local_ms(date: NaiveDate, time: NaiveTime) -> Option<Millis> {
    let naive = NaiveDateTime::new(date, time);
    match New_York.from_local_datetime(&naive) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Some(t.timestamp_millis()),
        LocalResult::None => New_York
            .from_local_datetime(&(naive + Duration::hours(1)))
            .earliest()
            .map(|t| t.timestamp_millis()),
    }
}

/// A flight that departed, stamped with its departure (what the windows see).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Departed {
    /// Carrier code.
    pub carrier: String,
    /// Flight number.
    pub flight: u32,
    /// Tail number.
    pub tailnum: Option<String>,
    /// Origin airport.
    pub origin: String,
    /// Destination airport.
    pub dest: String,
    /// Departure delay, minutes.
    pub dep_delay: i64,
    /// Actual departure, ms since the epoch (the event time).
    pub departed_ms: Millis,
}

/// A weather report (the value of a record of the weather topic).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Weather {
    /// Airport.
    pub origin: String,
    /// The hour, UTC (RFC 3339).
    pub time_hour: String,
    /// Temperature, °F.
    #[serde(deserialize_with = "csv::invalid_option", default)]
    pub temp: Option<f64>,
    /// Wind speed, mph.
    #[serde(deserialize_with = "csv::invalid_option", default)]
    pub wind_speed: Option<f64>,
    /// Precipitation, inches.
    #[serde(deserialize_with = "csv::invalid_option", default)]
    pub precip: Option<f64>,
    /// Visibility, miles.
    #[serde(deserialize_with = "csv::invalid_option", default)]
    pub visib: Option<f64>,
}

impl Weather {
    /// The report's hour in ms since the epoch.
    pub fn hour_ms(&self) -> Result<Millis, String> {
        DateTime::parse_from_rfc3339(&self.time_hour)
            .map(|t| t.timestamp_millis())
            .map_err(|e| format!("time_hour {:?}: {e}", self.time_hour))
    }
}

/// A row of `hourly_delays.jsonl`: one airport, carrier and hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HourlyDelay {
    /// Origin airport.
    pub origin: String,
    /// Carrier code.
    pub carrier: String,
    /// The airline's name (`None` if not in airlines.csv).
    pub airline: Option<String>,
    /// The hour (window start), UTC, RFC 3339.
    pub hour: String,
    /// The hour as ms since the epoch.
    pub hour_ms: Millis,
    /// Departures in the hour.
    pub flights: u64,
    /// Mean departure delay, minutes.
    pub avg_dep_delay_min: f64,
    /// Largest departure delay, minutes.
    pub max_dep_delay_min: Option<i64>,
    /// The weather report joined (its hour), `None` if the airport had none yet.
    #[serde(default)]
    pub weather_hour: Option<String>,
    /// Temperature, °F.
    #[serde(default)]
    pub temp_f: Option<f64>,
    /// Wind speed, mph.
    #[serde(default)]
    pub wind_speed_mph: Option<f64>,
    /// Precipitation, inches.
    #[serde(default)]
    pub precip_in: Option<f64>,
    /// Visibility, miles.
    #[serde(default)]
    pub visib_mi: Option<f64>,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Flights read from the CSV.
    pub flights: u64,
    /// Weather reports read.
    pub weather_reports: u64,
    /// Time to load both topics, ms.
    pub ingest_ms: u64,
    /// Time the job ran, ms.
    pub job_ms: u64,
    /// Rows in `hourly_delays.jsonl`.
    pub hourly_rows: u64,
    /// Rows in `duty_periods.jsonl`.
    pub duty_periods: u64,
    /// Rows in `cancelled.jsonl`.
    pub cancelled: u64,
    /// Rows in `late.jsonl`.
    pub late: u64,
    /// Flights counted in the hourly windows.
    pub windowed_flights: u64,
}

/// Output file names inside the results folder.
pub mod files {
    /// Hourly statistics per airport and carrier, with airline name and weather.
    pub const HOURLY: &str = "hourly_delays.jsonl";
    /// Per-aircraft duty periods.
    pub const DUTY: &str = "duty_periods.jsonl";
    /// Cancelled (and rejected) flights with the reason.
    pub const CANCELLED: &str = "cancelled.jsonl";
    /// Flights too late for their window.
    pub const LATE: &str = "late.jsonl";
}

fn open_gz(path: &Path) -> Result<impl Read> {
    let f = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(flate2::read::GzDecoder::new(f))
}

/// Reads `flights.csv.gz`.
pub fn read_flights(input: &Path) -> Result<Vec<Flight>> {
    read_csv_gz(&input.join("flights.csv.gz"))
}

/// Reads `weather.csv.gz`.
pub fn read_weather(input: &Path) -> Result<Vec<Weather>> {
    read_csv_gz(&input.join("weather.csv.gz"))
}

/// Every row of a gzipped CSV file; an error names the file and record.
fn read_csv_gz<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let mut rdr = csv::Reader::from_reader(open_gz(path)?);
    rdr.deserialize()
        .enumerate()
        .map(|(i, r)| r.with_context(|| format!("{} record {}", path.display(), i + 1)))
        .collect()
}

/// Reads `airlines.csv` as lookup rows `{"carrier", "airline"}`.
pub fn read_airlines(input: &Path) -> Result<Vec<Row>> {
    #[derive(Deserialize)]
    struct Airline {
        carrier: String,
        name: String,
    }
    let path = input.join("airlines.csv");
    let mut rdr =
        csv::Reader::from_path(&path).with_context(|| format!("opening {}", path.display()))?;
    rdr.deserialize::<Airline>()
        .enumerate()
        .map(|(i, r)| {
            let a = r.with_context(|| format!("{} record {}", path.display(), i + 1))?;
            Ok(json!({"carrier": a.carrier, "airline": a.name}))
        })
        .collect()
}

/// Loads both topics from the CSV files, replacing earlier contents. Flights are
/// appended in order of scheduled departure, as a departures board announces them
/// (the file itself is sorted by month as text), keyed by origin; weather reports
/// in order of their hour, keyed by airport. Returns (flights, reports).
pub fn ingest(log: &Log, cfg: &Config) -> Result<(u64, u64)> {
    let flights = by_time(
        read_flights(&cfg.input)?,
        "flights.csv.gz",
        Flight::scheduled_ms,
    )?;
    append_all(
        log,
        FLIGHTS_TOPIC,
        cfg.partitions,
        flights.iter().map(|(s, f)| (f.origin.as_str(), *s, f)),
    )?;
    let weather = by_time(
        read_weather(&cfg.input)?,
        "weather.csv.gz",
        Weather::hour_ms,
    )?;
    append_all(
        log,
        WEATHER_TOPIC,
        cfg.partitions,
        weather.iter().map(|(t, w)| (w.origin.as_str(), *t, w)),
    )?;
    Ok((flights.len() as u64, weather.len() as u64))
}

/// The rows stamped with `time` and sorted by it; a stable sort keeps the file's
/// order among rows of the same time. An error names the file and record.
fn by_time<T>(
    rows: Vec<T>,
    file: &str,
    time: impl Fn(&T) -> Result<Millis, String>,
) -> Result<Vec<(Millis, T)>> {
    let mut stamped = Vec::with_capacity(rows.len());
    for (i, row) in rows.into_iter().enumerate() {
        let t = time(&row).map_err(|e| anyhow::anyhow!("{file} record {}: {e}", i + 1))?;
        stamped.push((t, row));
    }
    stamped.sort_by_key(|(t, _)| *t);
    Ok(stamped)
}

/// (Re)creates `topic` and appends the records as JSON, in batches.
fn append_all<'a, T: Serialize + 'a>(
    log: &Log,
    topic: &str,
    partitions: u32,
    records: impl Iterator<Item = (&'a str, Millis, &'a T)>,
) -> Result<()> {
    if log.topics().iter().any(|t| t == topic) {
        log.delete_topic(topic)?;
    }
    // 2013 is long past: keep the records whatever their age.
    let config = TopicConfig {
        retention_ms: None,
        ..TopicConfig::default()
    };
    let t = log.create_topic(topic, partitions, config)?;
    let mut batch = Vec::with_capacity(4096);
    for (key, ts, value) in records {
        let value = serde_json::to_vec(value)?;
        batch.push(ProducerRecord::keyed(key.as_bytes().to_vec(), value).with_timestamp(ts));
        if batch.len() == 4096 {
            t.append(std::mem::take(&mut batch))?;
        }
    }
    if !batch.is_empty() {
        t.append(batch)?;
    }
    Ok(())
}

/// A window's hour as RFC 3339 UTC.
fn rfc3339(ms: Millis) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// Loads the topics, runs the job, and returns what it did. Results (replacing
/// earlier ones) in `cfg.results`: see [`files`].
pub fn run(cfg: &Config) -> Result<Summary> {
    if cfg.parallelism == 0 {
        bail!("parallelism must be at least 1");
    }
    let airlines = read_airlines(&cfg.input)?;
    fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
    let log = Log::open(&cfg.data_dir, LogOptions::default())
        .with_context(|| format!("opening the log in {}", cfg.data_dir.display()))?;
    let started = Stopwatch::start();
    let (flights, weather_reports) = ingest(&log, cfg)?;
    let ingest_ms = started.elapsed_nanos() / 1_000_000;

    if cfg.results.exists() {
        fs::remove_dir_all(&cfg.results)
            .with_context(|| format!("clearing {}", cfg.results.display()))?;
    }
    fs::create_dir_all(&cfg.results)
        .with_context(|| format!("creating {}", cfg.results.display()))?;
    let out = |name: &str| cfg.results.join(name);

    let env = StreamEnvironment::new(JobConfig::with_parallelism(cfg.parallelism));

    // Flights, stamped with their actual departure (cancelled ones with their
    // scheduled time: they only go to the dead letters).
    let flights_in = env
        .from_source(
            LogSource::json::<Flight>(&log, FLIGHTS_TOPIC).bounded(true),
            WatermarkStrategy::for_bounded_out_of_orderness(cfg.out_of_orderness_ms)
                .with_timestamp_assigner(|f: &Flight, _| match f.departure() {
                    Departure::At(t) => t,
                    Departure::Cancelled(_) => f.scheduled_ms().unwrap_or(0),
                }),
        )
        .name("flights");
    // Each flight's departure resolved once: departed, or a dead letter with the reason.
    let classified = flights_in
        .map(|f: Flight| match f.departure() {
            Departure::At(t) => Ok(Departed {
                dep_delay: f.dep_delay.unwrap_or(0),
                carrier: f.carrier,
                flight: f.flight,
                tailnum: f.tailnum,
                origin: f.origin,
                dest: f.dest,
                departed_ms: t,
            }),
            Departure::Cancelled(reason) => Err(json!({
                "reason": reason,
                "carrier": f.carrier,
                "flight": f.flight,
                "tailnum": f.tailnum,
                "origin": f.origin,
                "dest": f.dest,
                "scheduled": rfc3339(f.scheduled_ms().unwrap_or(0)),
            })),
        })
        .name("departure");
    let departures = classified
        .clone()
        .flat_map(|r: Result<Departed, Row>| r.ok())
        .name("departed");
    classified
        .flat_map(|r: Result<Departed, Row>| r.err())
        .name("cancelled")
        .sink(FileSink::jsonl(out(files::CANCELLED)))
        .set_parallelism(1);

    // Hourly delay statistics per airport and carrier.
    let late = OutputTag::<Departed>::new("late-flights");
    let hourly = departures
        .clone()
        .key_by(|d: &Departed| (d.origin.clone(), d.carrier.clone()))
        .window(TumblingEventTimeWindows::of(HOUR_MS)?)
        .side_output_late_data(&late)
        .name("hourly-delays")
        .aggregate((
            Count,
            Avg::of(|d: &Departed| d.dep_delay),
            Max::of(|d: &Departed| d.dep_delay),
        ));
    hourly
        .get_side_output(&late)?
        .sink(FileSink::jsonl(out(files::LATE)))
        .set_parallelism(1);

    let hourly_rows = hourly
        .map(|r| {
            let ((origin, carrier), w, (count, avg, max)) = (r.key, r.window, r.value);
            json!({
                "origin": origin,
                "carrier": carrier,
                "hour": rfc3339(w.start),
                "hour_ms": w.start,
                "flights": count,
                "avg_dep_delay_min": avg,
                "max_dep_delay_min": max,
            })
        })
        .name("hourly-rows")
        .enrich(
            "airline-names",
            move || StaticTable(airlines.clone()),
            vec!["carrier".into()],
            vec!["carrier".into()],
            Some(vec!["airline".into()]),
            MissingKey::Nulls,
        );

    // The weather at the airport in that hour: the report valid at the window's last
    // millisecond (its timestamp), i.e. the one of the window's hour, or the latest
    // before it when that hour has none.
    let weather = env
        .from_source(
            LogSource::json::<Weather>(&log, WEATHER_TOPIC).bounded(true),
            WatermarkStrategy::for_bounded_out_of_orderness(0)
                .with_timestamp_assigner(|w: &Weather, _| w.hour_ms().unwrap_or(0)),
        )
        .name("weather");
    hourly_rows
        // Keyed state is stored with bincode, which cannot decode a JSON value: the
        // join keeps a typed row.
        .flat_map(|r: Row| serde_json::from_value::<HourlyDelay>(r).ok())
        .name("hourly-typed")
        .key_by(|r: &HourlyDelay| r.origin.clone())
        .temporal_join(weather.key_by(|w: &Weather| w.origin.clone()))
        .left_outer()
        .name("weather-at-hour")
        .apply(|row: &HourlyDelay, w: Option<&Weather>| {
            let mut row = row.clone();
            if let Some(w) = w {
                row.weather_hour = Some(w.time_hour.clone());
                row.temp_f = w.temp;
                row.wind_speed_mph = w.wind_speed;
                row.precip_in = w.precip;
                row.visib_mi = w.visib;
            }
            row
        })
        .sink(FileSink::jsonl(out(files::HOURLY)))
        .set_parallelism(1);

    // Duty periods: an aircraft's departures with less than the gap between them.
    departures
        .filter(|d: &Departed| d.tailnum.is_some())
        .key_by(|d: &Departed| d.tailnum.clone().unwrap_or_default())
        .window(EventTimeSessionWindows::with_gap(cfg.session_gap_ms)?)
        .name("duty-periods")
        .aggregate((
            Count,
            Min::of(|d: &Departed| d.departed_ms),
            Max::of(|d: &Departed| d.departed_ms),
        ))
        .map(|r| {
            let (count, first, last) = r.value;
            json!({
                "tailnum": r.key,
                "first_departure": first.map(rfc3339),
                "last_departure": last.map(rfc3339),
                "flights": count,
            })
        })
        .sink(FileSink::jsonl(out(files::DUTY)))
        .set_parallelism(1);

    let started = Stopwatch::start();
    env.execute("nycflights13")?;
    let job_ms = started.elapsed_nanos() / 1_000_000;
    log.close()?;

    let count = |name: &str| -> Result<u64> {
        let text = fs::read_to_string(out(name))
            .with_context(|| format!("reading {}", out(name).display()))?;
        Ok(text.lines().count() as u64)
    };
    let mut windowed_flights = 0;
    for line in fs::read_to_string(out(files::HOURLY))?.lines() {
        let v: Row = serde_json::from_str(line)?;
        windowed_flights += v["flights"].as_u64().unwrap_or(0);
    }
    Ok(Summary {
        flights,
        weather_reports,
        ingest_ms,
        job_ms,
        hourly_rows: count(files::HOURLY)?,
        duty_periods: count(files::DUTY)?,
        cancelled: count(files::CANCELLED)?,
        late: count(files::LATE)?,
        windowed_flights,
    })
}

/// The hourly rows, for a summary: (origin, carrier, hour) → row.
pub fn read_rows(path: &Path) -> Result<Vec<Row>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{} line {}", path.display(), i + 1))
        })
        .collect()
}

/// The worst hours by average delay (at least `min_flights` flights), for the summary.
pub fn worst_hours(rows: &[Row], min_flights: u64, n: usize) -> Vec<Row> {
    let mut rows: Vec<&Row> = rows
        .iter()
        .filter(|r| r["flights"].as_u64().unwrap_or(0) >= min_flights)
        .collect();
    rows.sort_by(|a, b| {
        let (x, y) = (
            a["avg_dep_delay_min"].as_f64().unwrap_or(0.0),
            b["avg_dep_delay_min"].as_f64().unwrap_or(0.0),
        );
        y.total_cmp(&x)
    });
    rows.into_iter().take(n).cloned().collect()
}

/// Average departure delay per carrier over the year (from the hourly rows): carrier →
/// (airline, flights, mean delay in minutes).
pub fn per_carrier(rows: &[Row]) -> Vec<(String, String, u64, f64)> {
    let mut acc: HashMap<String, (String, u64, f64)> = HashMap::new();
    for r in rows {
        let e = acc
            .entry(r["carrier"].as_str().unwrap_or_default().to_string())
            .or_insert_with(|| {
                (
                    r["airline"].as_str().unwrap_or_default().to_string(),
                    0,
                    0.0,
                )
            });
        let n = r["flights"].as_u64().unwrap_or(0);
        e.1 += n;
        e.2 += r["avg_dep_delay_min"].as_f64().unwrap_or(0.0) * n as f64;
    }
    let mut v: Vec<_> = acc
        .into_iter()
        .map(|(c, (name, n, sum))| (c, name, n, if n > 0 { sum / n as f64 } else { 0.0 }))
        .collect();
    v.sort_by(|a, b| b.3.total_cmp(&a.3));
    v
}
