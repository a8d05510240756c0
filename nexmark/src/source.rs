//! [`NexmarkSource`]: the generator as a brook source, parallel and checkpointable as
//! brook's generator (a [`NumberedSource`]: 16 splits of blocks of 16 positions by
//! default, independent of the parallelism; a split's checkpointed position is its
//! next output position; a restore may use another parallelism).

use std::collections::HashMap;

use brook_connectors::{ConnectorError, NumberedSource, NumberedSplit, ScheduleStart};
use brook_core::operator::{OpResult, SubtaskInfo};
use brook_core::source::{Source, SourceReader};
use brook_core::watermark::WatermarkStrategy;

use crate::config::NexmarkConfig;
use crate::generator::Generator;
use crate::model::Event;

/// The Nexmark events `0..events` of a [`NexmarkConfig`], each with its event time.
#[derive(Debug, Clone)]
pub struct NexmarkSource {
    inner: NumberedSource<Generator>,
}

impl NexmarkSource {
    /// A source of the events `config` describes; split ids are `nexmark[j/S]`.
    ///
    /// # Errors
    /// [`ConnectorError::Config`] naming a setting out of its range (see
    /// [`NexmarkConfig::check`]), `splits` of 0, a `rate` that is not a positive number.
    pub fn new(config: NexmarkConfig) -> Result<Self, ConnectorError> {
        config.check()?;
        let (n, splits, rate) = (config.events, config.splits, config.rate);
        let inner = NumberedSource::new("nexmark", Generator::new(config), n)
            .splits(splits)?
            .rate(rate)?;
        Ok(NexmarkSource { inner })
    }

    /// Starts every subtask's rate schedule at one moment, kept in `start` (see
    /// [`NumberedSource::shared_schedule`]): results can be timed against it
    /// ([`crate::latency`]).
    pub fn with_shared_schedule(self, start: ScheduleStart) -> Self {
        NexmarkSource {
            inner: self.inner.shared_schedule(start),
        }
    }

    /// The generator: any event from its number or output position.
    pub fn generator(&self) -> &Generator {
        self.inner.events()
    }

    /// All events in output order (positions `0..events`), for offline computations
    /// in tests and baselines.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        let g = self.generator();
        (0..g.config().events).map(|p| g.event_at(p))
    }

    /// Watermarks that no event is late for: bounded by the out-of-orderness of the
    /// settings ([`NexmarkConfig::max_out_of_orderness_ms`]).
    pub fn watermark_strategy(&self) -> WatermarkStrategy<Event> {
        WatermarkStrategy::for_bounded_out_of_orderness(
            self.generator().config().max_out_of_orderness_ms(),
        )
    }
}

impl Source for NexmarkSource {
    type Out = Event;
    type Split = NumberedSplit;

    fn enumerate_splits(&self, parallelism: u32) -> OpResult<Vec<NumberedSplit>> {
        self.inner.enumerate_splits(parallelism)
    }

    fn create_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<NumberedSplit>,
    ) -> OpResult<Box<dyn SourceReader<Out = Event>>> {
        self.inner.create_reader(info, splits)
    }

    fn restore_reader(
        &self,
        info: &SubtaskInfo,
        splits: Vec<NumberedSplit>,
        positions: &HashMap<String, Vec<u8>>,
    ) -> OpResult<Box<dyn SourceReader<Out = Event>>> {
        self.inner.restore_reader(info, splits, positions)
    }

    fn is_bounded(&self) -> bool {
        true
    }
}
