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
}

impl<T: Clone + Send + Sync + 'static> VecSource<T> {
    /// Records without timestamps.
    pub fn new(values: Vec<T>) -> Self {
        VecSource {
            records: Arc::new(values.into_iter().map(StreamRecord::new).collect()),
            splits: None,
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
        }
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
}

impl Split for VecSplit {
    fn split_id(&self) -> String {
        format!("{}..{}", self.start, self.end)
    }
}

impl<T: Clone + Send + Sync + 'static> Source for VecSource<T> {
    type Out = T;
    type Split = VecSplit;

    fn enumerate_splits(&self, parallelism: u32) -> OpResult<Vec<VecSplit>> {
        let n = self.records.len();
        let k = self.splits.unwrap_or(parallelism as usize).max(1);
        Ok((0..k)
            .map(|i| VecSplit {
                start: i * n / k,
                end: (i + 1) * n / k,
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
            splits,
            pos: None,
            done: 0,
        }))
    }

    fn is_bounded(&self) -> bool {
        true
    }
}

struct VecReader<T> {
    records: Arc<Vec<StreamRecord<T>>>,
    splits: Vec<VecSplit>,
    pos: Option<usize>,
    /// Splits read so far: the index of the current one.
    done: u32,
}

impl<T: Clone + Send + Sync + 'static> SourceReader for VecReader<T> {
    type Out = T;

    fn poll_next(&mut self, out: &mut Output<T>) -> OpResult<InputStatus> {
        let Some(split) = self.splits.first().cloned() else {
            return Ok(InputStatus::End);
        };
        let pos = self.pos.unwrap_or(split.start);
        let end = split.end.min(pos + 1024);
        out.set_split(self.done);
        for r in &self.records[pos..end] {
            out.push(r.clone());
        }
        if end == split.end {
            out.finish_split(self.done);
            self.done += 1;
            self.splits.remove(0);
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
