//! In-memory sources and sinks for tests, examples and doc tests.

use std::sync::{Arc, Mutex};

use brook_core::element::{Batch, StreamRecord};
use brook_core::operator::{OpResult, Output, SubtaskInfo};
use brook_core::sink::{Sink, SinkWriter};
use brook_core::source::{InputStatus, Source, SourceReader, Split};
use brook_core::time::Millis;

/// A bounded source over a vector, split into contiguous parts (by default one per
/// subtask) so that parallel subtasks share it.
#[derive(Debug, Clone)]
pub struct VecSource<T> {
    records: Arc<Vec<StreamRecord<T>>>,
    splits: Option<usize>,
    poll: usize,
}

impl<T: Clone + Send + Sync + 'static> VecSource<T> {
    /// Records without timestamps.
    pub fn new(values: Vec<T>) -> Self {
        VecSource {
            records: Arc::new(values.into_iter().map(StreamRecord::new).collect()),
            splits: None,
            poll: 1024,
        }
    }

    /// Records with timestamps (ms).
    pub fn with_timestamps(values: Vec<(T, Millis)>) -> Self {
        VecSource {
            records: Arc::new(
                values
                    .into_iter()
                    .map(|(v, t)| StreamRecord::with_timestamp(v, t))
                    .collect(),
            ),
            splits: None,
            poll: 1024,
        }
    }

    /// Records read per poll (default 1024): checkpoint barriers go in between polls.
    pub fn poll_size(mut self, n: usize) -> Self {
        self.poll = n.max(1);
        self
    }

    /// Sets the number of splits (at least 1) instead of one per subtask.
    pub fn splits(mut self, n: usize) -> Self {
        self.splits = Some(n.max(1));
        self
    }
}

/// A contiguous range of a [`VecSource`].
#[derive(Debug, Clone)]
pub struct VecSplit {
    start: usize,
    end: usize,
    /// `first..end` as enumerated (a restored split starts later but keeps its id).
    id: String,
}

impl Split for VecSplit {
    fn split_id(&self) -> String {
        self.id.clone()
    }
}

impl<T: Clone + Send + Sync + 'static> Source for VecSource<T> {
    type Out = T;
    type Split = VecSplit;

    fn enumerate_splits(&self, parallelism: u32) -> OpResult<Vec<VecSplit>> {
        let n = self.records.len();
        let k = self.splits.unwrap_or(parallelism as usize).max(1);
        Ok((0..k)
            .map(|i| {
                let (start, end) = (i * n / k, (i + 1) * n / k);
                VecSplit {
                    start,
                    end,
                    id: format!("{start}..{end}"),
                }
            })
            .collect())
    }

    fn create_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<VecSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        Ok(Box::new(VecReader {
            records: Arc::clone(&self.records),
            poll: self.poll,
            splits,
            pos: None,
            done: 0,
            finished: Vec::new(),
            report_finished: false,
        }))
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn restore_reader(
        &self,
        _info: &SubtaskInfo,
        splits: Vec<VecSplit>,
        positions: &std::collections::HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = T>>> {
        let mut finished = Vec::new();
        let mut remaining = Vec::new();
        for s in splits {
            let at = positions
                .get(&s.split_id())
                .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
                .map_or(s.start, |b| u64::from_le_bytes(b) as usize);
            if at >= s.end {
                finished.push(s);
            } else {
                remaining.push(VecSplit {
                    start: at,
                    end: s.end,
                    id: s.id.clone(),
                });
            }
        }
        // Splits are read in order: the finished ones are the first.
        Ok(Box::new(VecReader {
            records: Arc::clone(&self.records),
            poll: self.poll,
            done: finished.len() as u32,
            report_finished: true,
            finished,
            splits: remaining,
            pos: None,
        }))
    }
}

struct VecReader<T> {
    records: Arc<Vec<StreamRecord<T>>>,
    poll: usize,
    splits: Vec<VecSplit>,
    pos: Option<usize>,
    /// Splits read so far: the index of the current one.
    done: u32,
    /// Splits read completely.
    finished: Vec<VecSplit>,
    /// Restored: tell the runtime on the first poll which splits were finished.
    report_finished: bool,
}

impl<T: Clone + Send + Sync + 'static> SourceReader for VecReader<T> {
    type Out = T;

    fn snapshot_positions(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        let at = |s: &VecSplit, p: usize| (s.id.clone(), (p as u64).to_le_bytes().to_vec());
        let mut v: Vec<_> = self.finished.iter().map(|s| at(s, s.end)).collect();
        for (i, s) in self.splits.iter().enumerate() {
            let p = if i == 0 {
                self.pos.unwrap_or(s.start)
            } else {
                s.start
            };
            v.push(at(s, p));
        }
        Some(v)
    }

    fn poll_next(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        if std::mem::take(&mut self.report_finished) {
            (0..self.finished.len() as u32).for_each(|i| out.finish_split(i));
        }
        let Some(split) = self.splits.first().cloned() else {
            return Ok(InputStatus::End);
        };
        let pos = self.pos.unwrap_or(split.start);
        let end = split.end.min(pos + self.poll);
        out.set_split(self.done);
        for r in &self.records[pos..end] {
            out.push(r.clone());
        }
        if end == split.end {
            out.finish_split(self.done);
            self.done += 1;
            self.finished.push(self.splits.remove(0));
            self.pos = None;
        } else {
            self.pos = Some(end);
        }
        Ok(if self.splits.is_empty() {
            InputStatus::End
        } else {
            InputStatus::MoreAvailable
        })
    }
}

/// A sink that collects everything into a shared vector (clones share it).
#[derive(Debug)]
pub struct CollectSink<T> {
    records: Arc<Mutex<Vec<StreamRecord<T>>>>,
}

impl<T> Clone for CollectSink<T> {
    fn clone(&self) -> Self {
        CollectSink {
            records: Arc::clone(&self.records),
        }
    }
}

impl<T: Clone + Send + 'static> Default for CollectSink<T> {
    fn default() -> Self {
        CollectSink {
            records: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl<T: Clone + Send + 'static> CollectSink<T> {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// The collected records, in arrival order (interleaved across subtasks).
    pub fn records(&self) -> Vec<StreamRecord<T>> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The collected values.
    pub fn values(&self) -> Vec<T> {
        self.records().into_iter().map(|r| r.value).collect()
    }
}

impl<T: Clone + Send + 'static> Sink for CollectSink<T> {
    type In = T;

    fn create_writer(&self, _info: &SubtaskInfo) -> OpResult<Box<dyn SinkWriter<In = T>>> {
        Ok(Box::new(self.clone()))
    }
}

impl<T: Clone + Send + 'static> SinkWriter for CollectSink<T> {
    type In = T;

    fn write_batch(&mut self, batch: Batch<T>) -> OpResult {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(batch);
        Ok(())
    }
}

/// Counts the records of each key in keyed state and emits `(key, count)` once, when
/// the input ends (a timer at the final watermark): the state a job ends with, for
/// exactly-once tests of checkpoints and restores.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountPerKey;

const COUNT: brook_state::StateDescriptor<u64> = brook_state::StateDescriptor::new("count");

impl brook_operators::process::KeyedProcessFunction for CountPerKey {
    type Key = u64;
    type In = u64;
    type Out = (u64, u64);

    fn process_element(
        &mut self,
        _value: u64,
        ctx: &mut brook_operators::process::KeyedContext<'_, u64>,
        _out: &mut Output<(u64, u64)>,
    ) -> OpResult {
        let other = brook_core::operator::OperatorError::other;
        let n = ctx.state().value(&COUNT).get().map_err(other)?;
        if n.is_none() {
            // Fires on the final watermark at the end of the input.
            ctx.register_event_time_timer(i64::MAX - 1);
        }
        ctx.state()
            .value(&COUNT)
            .set(&(n.unwrap_or(0) + 1))
            .map_err(other)
    }

    fn on_timer(
        &mut self,
        _timestamp: Millis,
        _domain: brook_state::TimeDomain,
        ctx: &mut brook_operators::process::KeyedContext<'_, u64>,
        out: &mut Output<(u64, u64)>,
    ) -> OpResult {
        let other = brook_core::operator::OperatorError::other;
        let n = ctx.state().value(&COUNT).get().map_err(other)?;
        out.collect((*ctx.key(), n.unwrap_or(0)), None);
        Ok(())
    }
}
