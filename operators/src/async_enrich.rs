//! Asynchronous enrichment against an external service, as Flink's async I/O
//! (`AsyncDataStream.orderedWait` / `unorderedWait`): each row's lookup runs on a
//! small async runtime while the operator goes on with the next rows, up to
//! `capacity` lookups in flight; results are merged into their rows.
//!
//! - **Order**: `ordered` emits rows in input order; unordered emits each row when its
//!   lookup is done. Either way no row crosses a watermark or a checkpoint barrier:
//!   the operator waits for every lookup in flight before it forwards a watermark,
//!   before a barrier (so no lookup is in flight in a checkpoint; a restore repeats
//!   nothing and loses nothing) and at the end of the input.
//! - **Cache**: answers are kept for `cache_ttl_ms` of processing time per lookup key
//!   (a URL, say), so a hot key costs one request per TTL.
//! - **Timeout**: a lookup not done after `timeout_ms` fails; a failed lookup follows
//!   the [`OnLookupError`] policy.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use brook_core::bad_record::BadRecords;
use brook_core::checkpoint::CheckpointId;
use brook_core::element::{Batch, StreamRecord};
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
use brook_core::time::{Millis, Watermark};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::row::Row;

/// A lookup in an external service.
pub trait AsyncLookup: Send + Sync + 'static {
    /// The key of `row`'s lookup (the URL of its request, say): rows with equal keys
    /// share cached answers.
    ///
    /// # Errors
    /// When the row lacks what the lookup needs (a field of the URL).
    fn key(&self, row: &Row) -> Result<String, String>;
    /// Looks `key` up: a JSON object whose fields are added to the row.
    fn lookup(&self, key: String) -> BoxFuture<'static, Result<Row, String>>;
}

/// What happens to a row whose lookup failed (error, timeout).
#[derive(Debug, Clone)]
pub enum OnLookupError {
    /// The job fails.
    Fail,
    /// The row passes unchanged.
    Pass,
    /// The row is dropped.
    Drop,
    /// The row goes to the bad-record policy (dead letter, skip).
    Reject(BadRecords),
}

/// Settings of [`AsyncEnrich`].
#[derive(Debug, Clone)]
pub struct AsyncEnrichConfig {
    /// Lookups in flight at most (default 16).
    pub capacity: usize,
    /// Rows leave in input order (default true).
    pub ordered: bool,
    /// A lookup not done after this long fails (ms, default 5000).
    pub timeout_ms: Millis,
    /// How long an answer is reused for the same key (ms of processing time; 0, the
    /// default, disables the cache).
    pub cache_ttl_ms: Millis,
    /// What a failed lookup does (default: the job fails).
    pub on_error: OnLookupError,
}

impl Default for AsyncEnrichConfig {
    fn default() -> Self {
        AsyncEnrichConfig {
            capacity: 16,
            ordered: true,
            timeout_ms: 5_000,
            cache_ttl_ms: 0,
            on_error: OnLookupError::Fail,
        }
    }
}

/// A row waiting for its lookup.
struct Pending {
    record: StreamRecord<Row>,
    key: String,
    task: Option<JoinHandle<Result<Row, String>>>,
    done: Option<Result<Row, String>>,
}

impl Pending {
    fn is_done(&self) -> bool {
        self.done.is_some() || self.task.as_ref().is_some_and(JoinHandle::is_finished)
    }
}

/// The async enrichment operator (see the [module docs](self)).
pub struct AsyncEnrich {
    lookup: Arc<dyn AsyncLookup>,
    config: AsyncEnrichConfig,
    /// Started in `open`.
    runtime: Option<tokio::runtime::Runtime>,
    in_flight: VecDeque<Pending>,
    cache: HashMap<String, (Row, Millis)>,
    name: String,
    requests: u64,
}

impl fmt::Debug for AsyncEnrich {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEnrich")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("in_flight", &self.in_flight.len())
            .field("cached", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl AsyncEnrich {
    /// The operator of step `name`, looking rows up with `lookup`. Its async runtime
    /// (one thread) starts in `open`.
    pub fn new(name: &str, lookup: Arc<dyn AsyncLookup>, config: AsyncEnrichConfig) -> Self {
        AsyncEnrich {
            lookup,
            config: AsyncEnrichConfig {
                capacity: config.capacity.max(1),
                ..config
            },
            runtime: None,
            in_flight: VecDeque::new(),
            cache: HashMap::new(),
            name: name.to_string(),
            requests: 0,
        }
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, OperatorError> {
        self.runtime
            .as_ref()
            .ok_or_else(|| OperatorError::failed(format!("{}: used before open", self.name)))
    }

    /// Lookups sent so far (cache hits are not).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    fn start(&mut self, record: StreamRecord<Row>, now: Millis) -> OpResult<Pending> {
        let key = match self.lookup.key(&record.value) {
            Ok(k) => k,
            Err(e) => {
                return Ok(Pending {
                    record,
                    key: String::new(),
                    task: None,
                    done: Some(Err(e)),
                })
            }
        };
        if let Some((v, expires)) = self.cache.get(&key) {
            if *expires > now {
                return Ok(Pending {
                    record,
                    key,
                    task: None,
                    done: Some(Ok(v.clone())),
                });
            }
        }
        self.requests += 1;
        let fut = self.lookup.lookup(key.clone());
        let timeout = Duration::from_millis(self.config.timeout_ms.max(0) as u64);
        let ms = self.config.timeout_ms;
        let task = self.runtime()?.spawn(async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {ms} ms")),
            }
        });
        Ok(Pending {
            record,
            key,
            task: Some(task),
            done: None,
        })
    }

    /// The result of `p`, waiting for it.
    fn wait(&self, p: &mut Pending) -> Result<Row, String> {
        if let Some(d) = p.done.take() {
            return d;
        }
        match (p.task.take(), self.runtime.as_ref()) {
            (Some(t), Some(rt)) => rt
                .block_on(t)
                .unwrap_or_else(|e| Err(format!("the lookup task failed: {e}"))),
            _ => Err("no lookup".into()),
        }
    }

    /// Emits `p` with its result.
    fn emit(&mut self, mut p: Pending, now: Millis, out: &mut Output<Row>) -> OpResult {
        let result = self.wait(&mut p);
        let mut row = p.record.value;
        match result {
            Ok(found) => {
                if self.config.cache_ttl_ms > 0 && !p.key.is_empty() {
                    self.cache.insert(
                        p.key,
                        (found.clone(), now.saturating_add(self.config.cache_ttl_ms)),
                    );
                }
                if let (Value::Object(m), Value::Object(f)) = (&mut row, found) {
                    m.extend(f);
                }
                out.collect(row, p.record.timestamp);
            }
            Err(e) => match &self.config.on_error {
                OnLookupError::Fail => {
                    return Err(OperatorError::failed(format!(
                        "{}: lookup failed for {row}: {e}",
                        self.name
                    )))
                }
                OnLookupError::Pass => out.collect(row, p.record.timestamp),
                OnLookupError::Drop => {}
                OnLookupError::Reject(bad) => {
                    bad.handle(&row.to_string(), &format!("step {}", self.name), &e)?
                }
            },
        }
        Ok(())
    }

    /// Emits what is done: the done rows at the front (ordered) or all done rows
    /// (unordered); with `all`, waits for every row in flight.
    fn drain(&mut self, all: bool, now: Millis, out: &mut Output<Row>) -> OpResult {
        if all || self.config.ordered {
            while let Some(front) = self.in_flight.front() {
                if !all && !front.is_done() {
                    break;
                }
                let p = self.in_flight.pop_front().unwrap_or_else(|| unreachable!());
                self.emit(p, now, out)?;
            }
        } else {
            let mut i = 0;
            while i < self.in_flight.len() {
                if self.in_flight[i].is_done() {
                    if let Some(p) = self.in_flight.remove(i) {
                        self.emit(p, now, out)?;
                    }
                } else {
                    i += 1;
                }
            }
        }
        Ok(())
    }

    fn expire_cache(&mut self, now: Millis) {
        if self.cache.len() > 4 * self.config.capacity + 1024 {
            self.cache.retain(|_, (_, expires)| *expires > now);
        }
    }
}

impl Operator for AsyncEnrich {
    type In = Row;
    type Out = Row;

    fn open(&mut self, _ctx: &mut OperatorContext) -> OpResult {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("brook-async-io")
            .enable_all()
            .build()
            .map_err(|e| {
                OperatorError::failed(format!("{}: cannot start async I/O: {e}", self.name))
            })?;
        self.runtime = Some(rt);
        Ok(())
    }

    fn close(&mut self) {
        // Requests still in flight (after a failure) are dropped with the runtime.
        self.in_flight.clear();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    fn process_batch(
        &mut self,
        batch: Batch<Row>,
        ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        let now = ctx.processing_time();
        self.expire_cache(now);
        for r in batch {
            if self.in_flight.len() >= self.config.capacity {
                // Full: wait for the oldest (in unordered mode too: it is the one
                // most likely done).
                if let Some(p) = self.in_flight.pop_front() {
                    self.emit(p, now, out)?;
                }
            }
            let p = self.start(r, now)?;
            self.in_flight.push_back(p);
            self.drain(false, now, out)?;
        }
        self.drain(false, now, out)
    }

    fn on_watermark(
        &mut self,
        wm: Watermark,
        ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult<Option<Watermark>> {
        self.drain(true, ctx.processing_time(), out)?;
        Ok(Some(wm))
    }

    fn prepare_snapshot_pre_barrier(
        &mut self,
        _checkpoint: CheckpointId,
        ctx: &mut OperatorContext,
        out: &mut Output<Row>,
    ) -> OpResult {
        self.drain(true, ctx.processing_time(), out)
    }

    fn finish(&mut self, ctx: &mut OperatorContext, out: &mut Output<Row>) -> OpResult {
        self.drain(true, ctx.processing_time(), out)
    }
}
