//! Keyed process functions: per-record logic with keyed state and timers, as Flink's
//! `KeyedProcessFunction`.

use std::hash::Hash;

use brook_core::checkpoint::{CheckpointId, RestoredState, StateSnapshot};
use brook_core::element::Batch;
use brook_core::keys::{key_group_for_key, KeyGroup};
use brook_core::operator::{OpResult, Operator, OperatorContext, OperatorError, Output};
use brook_core::time::{Millis, Watermark};
use brook_state::snapshot::{restore_keyed, snapshot_keyed};
use brook_state::{KeyedStateBackend, KeyedStateStore, TimeDomain, Timer, TimerService};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a keyed process function can see and do while handling one record or timer:
/// its key, its timestamp, keyed state and timers of that key.
#[derive(Debug)]
pub struct KeyedContext<'a, K> {
    key: &'a K,
    timestamp: Option<Millis>,
    watermark: Watermark,
    processing_time: Millis,
    state: &'a mut KeyedStateStore,
    timers: &'a mut TimerService,
    /// Late records counted while handling this batch or timer.
    late_records: &'a mut u64,
}

impl<K> KeyedContext<'_, K> {
    /// The current key.
    pub fn key(&self) -> &K {
        self.key
    }

    /// The record's event time, or the timer's time in `on_timer`.
    pub fn timestamp(&self) -> Option<Millis> {
        self.timestamp
    }

    /// The operator's current watermark.
    pub fn current_watermark(&self) -> Watermark {
        self.watermark
    }

    /// Processing time now (ms).
    pub fn current_processing_time(&self) -> Millis {
        self.processing_time
    }

    /// Keyed state of the current key.
    pub fn state(&mut self) -> &mut KeyedStateStore {
        self.state
    }

    /// Counts a late record (dropped or sent to a late side output) in the operator's
    /// `late_records` metric (`brook_late_records_total`).
    pub fn count_late_record(&mut self) {
        *self.late_records += 1;
    }

    fn timer(&self, ts: Millis) -> Timer {
        Timer {
            timestamp: ts,
            key_group: self.state.current_key_group(),
            key: self.state.current_key().unwrap_or_default().to_vec(),
            namespace: Vec::new(),
        }
    }

    /// Calls `on_timer` when the watermark reaches `ts` (ms). Idempotent.
    pub fn register_event_time_timer(&mut self, ts: Millis) {
        let t = self.timer(ts);
        self.timers.register(TimeDomain::EventTime, t);
    }

    /// Calls `on_timer` when processing time reaches `ts` (ms). Idempotent.
    pub fn register_processing_time_timer(&mut self, ts: Millis) {
        let t = self.timer(ts);
        self.timers.register(TimeDomain::ProcessingTime, t);
    }

    /// Deletes an event-time timer of the current key.
    pub fn delete_event_time_timer(&mut self, ts: Millis) {
        let t = self.timer(ts);
        self.timers.delete(TimeDomain::EventTime, &t);
    }

    /// Deletes a processing-time timer of the current key.
    pub fn delete_processing_time_timer(&mut self, ts: Millis) {
        let t = self.timer(ts);
        self.timers.delete(TimeDomain::ProcessingTime, &t);
    }
}

/// Per-record logic on a keyed stream, with state and timers per key.
pub trait KeyedProcessFunction: Send + 'static {
    /// The key type.
    type Key;
    /// Input records.
    type In;
    /// Output records.
    type Out;

    /// Handles one record of the current key.
    fn process_element(
        &mut self,
        value: Self::In,
        ctx: &mut KeyedContext<'_, Self::Key>,
        out: &mut Output<Self::Out>,
    ) -> OpResult;

    /// A timer of the current key fired (`timestamp` in `domain`).
    fn on_timer(
        &mut self,
        _timestamp: Millis,
        _domain: TimeDomain,
        _ctx: &mut KeyedContext<'_, Self::Key>,
        _out: &mut Output<Self::Out>,
    ) -> OpResult {
        Ok(())
    }
}

/// Runs a [`KeyedProcessFunction`] on a keyed stream.
pub struct KeyedProcessOperator<F: KeyedProcessFunction, S> {
    func: F,
    key_selector: S,
    state: KeyedStateStore,
    timers: TimerService,
    key_buf: Vec<u8>,
}

impl<F: KeyedProcessFunction, S> std::fmt::Debug for KeyedProcessOperator<F, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedProcessOperator")
            .field("timers", &self.timers)
            .finish_non_exhaustive()
    }
}

impl<F, S> KeyedProcessOperator<F, S>
where
    F: KeyedProcessFunction,
    S: Fn(&F::In) -> F::Key,
{
    /// The operator, keyed by `key_selector`, keeping state in `backend`.
    pub fn new(func: F, key_selector: S, backend: Box<dyn KeyedStateBackend>) -> Self {
        KeyedProcessOperator {
            func,
            key_selector,
            state: KeyedStateStore::new(backend),
            timers: TimerService::new(),
            key_buf: Vec::new(),
        }
    }

    /// The keyed state entries (all keys and states) and the timers (both domains)
    /// held now: what the state costs, for tests and metrics.
    pub fn state_size(&self) -> (usize, usize) {
        (
            self.state.backend().len(),
            self.timers.len(TimeDomain::EventTime) + self.timers.len(TimeDomain::ProcessingTime),
        )
    }
}

fn codec_err(e: bincode::Error) -> OperatorError {
    OperatorError::failed(format!("cannot encode or decode a key: {e}"))
}

impl<F, S> KeyedProcessOperator<F, S>
where
    F: KeyedProcessFunction,
    F::Key: Hash + Serialize + DeserializeOwned + Send + 'static,
    F::In: Send + 'static,
    F::Out: Send + 'static,
    S: Fn(&F::In) -> F::Key + Send + 'static,
{
    fn fire(
        &mut self,
        domain: TimeDomain,
        time: Millis,
        ctx: &OperatorContext,
        out: &mut Output<F::Out>,
    ) -> OpResult {
        // Timers see no new records, so nothing they do is late.
        let mut late = 0;
        while let Some(t) = self.timers.pop_due(domain, time) {
            let key: F::Key = bincode::deserialize(&t.key).map_err(codec_err)?;
            self.state.set_current_key(t.key_group, &t.key);
            self.state.set_current_time(ctx.processing_time());
            self.state.set_namespace(&t.namespace);
            // An event-time timer fires during a watermark advance: the function sees
            // the watermark being advanced to (as Flink's `currentWatermark()` in
            // `onTimer`).
            let watermark = match domain {
                TimeDomain::EventTime => Watermark(time).max(ctx.current_watermark()),
                TimeDomain::ProcessingTime => ctx.current_watermark(),
            };
            let mut kctx = KeyedContext {
                key: &key,
                timestamp: Some(t.timestamp),
                watermark,
                processing_time: ctx.processing_time(),
                state: &mut self.state,
                timers: &mut self.timers,
                late_records: &mut late,
            };
            self.func.on_timer(t.timestamp, domain, &mut kctx, out)?;
        }
        Ok(())
    }

    fn key_group(&self, key: &F::Key, ctx: &OperatorContext) -> KeyGroup {
        key_group_for_key(key, ctx.info().max_parallelism)
    }
}

impl<F, S> Operator for KeyedProcessOperator<F, S>
where
    F: KeyedProcessFunction,
    F::Key: Hash + Serialize + DeserializeOwned + Send + 'static,
    F::In: Send + 'static,
    F::Out: Send + 'static,
    S: Fn(&F::In) -> F::Key + Send + 'static,
{
    type In = F::In;
    type Out = F::Out;

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        ctx: &mut OperatorContext,
        snapshot: &mut StateSnapshot,
    ) -> OpResult {
        let key_groups = ctx.info().key_groups();
        snapshot_keyed(self.state.backend_mut(), &self.timers, snapshot, key_groups)
            .map_err(OperatorError::other)
    }

    fn restore_state(&mut self, ctx: &mut OperatorContext, state: &RestoredState) -> OpResult {
        restore_keyed(state, self.state.backend_mut(), &mut self.timers)
            .map_err(OperatorError::other)?;
        if let Some(t) = self.timers.next_processing_time() {
            ctx.request_processing_time_callback(t);
        }
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Batch<F::In>,
        ctx: &mut OperatorContext,
        out: &mut Output<F::Out>,
    ) -> OpResult {
        let (wm, now) = (ctx.current_watermark(), ctx.processing_time());
        let mut late = 0;
        for r in batch {
            let key = (self.key_selector)(&r.value);
            self.key_buf.clear();
            bincode::serialize_into(&mut self.key_buf, &key).map_err(codec_err)?;
            let kg = self.key_group(&key, ctx);
            self.state.set_current_key(kg, &self.key_buf);
            self.state.set_current_time(now);
            let mut kctx = KeyedContext {
                key: &key,
                timestamp: r.timestamp,
                watermark: wm,
                processing_time: now,
                state: &mut self.state,
                timers: &mut self.timers,
                late_records: &mut late,
            };
            self.func.process_element(r.value, &mut kctx, out)?;
        }
        if late > 0 {
            ctx.count_late_records(late);
        }
        if let Some(t) = self.timers.next_processing_time() {
            ctx.request_processing_time_callback(t);
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        wm: Watermark,
        ctx: &mut OperatorContext,
        out: &mut Output<F::Out>,
    ) -> OpResult<Option<Watermark>> {
        self.fire(TimeDomain::EventTime, wm.millis(), ctx, out)?;
        Ok(Some(wm))
    }

    fn on_processing_time(
        &mut self,
        now_ms: Millis,
        ctx: &mut OperatorContext,
        out: &mut Output<F::Out>,
    ) -> OpResult {
        self.fire(TimeDomain::ProcessingTime, now_ms, ctx, out)?;
        if let Some(t) = self.timers.next_processing_time() {
            ctx.request_processing_time_callback(t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_core::element::StreamRecord;
    use brook_state::StateDescriptor;
    use brook_testkit::operator::{HarnessSetup, TestBackend};

    /// Counts records per key and emits the count when the watermark passes the last
    /// record's time + 10.
    struct CountThenEmit;
    const COUNT: StateDescriptor<u64> = StateDescriptor::new("count");

    impl KeyedProcessFunction for CountThenEmit {
        type Key = String;
        type In = (String, i64);
        type Out = (String, u64);

        fn process_element(
            &mut self,
            v: (String, i64),
            ctx: &mut KeyedContext<'_, String>,
            _out: &mut Output<(String, u64)>,
        ) -> OpResult {
            let n = ctx
                .state()
                .value(&COUNT)
                .get()
                .map_err(OperatorError::other)?
                .unwrap_or(0);
            ctx.state()
                .value(&COUNT)
                .set(&(n + 1))
                .map_err(OperatorError::other)?;
            ctx.register_event_time_timer(v.1 + 10);
            Ok(())
        }

        fn on_timer(
            &mut self,
            _ts: Millis,
            _d: TimeDomain,
            ctx: &mut KeyedContext<'_, String>,
            out: &mut Output<(String, u64)>,
        ) -> OpResult {
            let n = ctx
                .state()
                .value(&COUNT)
                .get()
                .map_err(OperatorError::other)?
                .unwrap_or(0);
            out.collect((ctx.key().clone(), n), ctx.timestamp());
            ctx.state()
                .value(&COUNT)
                .clear()
                .map_err(OperatorError::other)?;
            Ok(())
        }
    }

    #[test]
    fn state_and_event_time_timers_per_key() {
        let mut h = HarnessSetup::new("p")
            .keyed(TestBackend::Heap, |b| {
                KeyedProcessOperator::new(CountThenEmit, |v: &(String, i64)| v.0.clone(), b)
            })
            .unwrap();
        h.open().unwrap();
        let batch = vec![
            StreamRecord::new(("a".to_string(), 1)),
            StreamRecord::new(("b".to_string(), 5)),
            StreamRecord::new(("a".to_string(), 3)),
        ];
        h.process_batch(batch).unwrap();
        assert!(h.output().is_empty());
        h.process_watermark(12).unwrap();
        // a's timers at 11 and 13, b's at 15: only a@11 fired, with a's count so far.
        assert_eq!(
            h.take_records(),
            vec![StreamRecord::with_timestamp(("a".to_string(), 2), 11)]
        );
        h.process_watermark(Watermark::MAX.millis()).unwrap();
        assert_eq!(
            h.take_values(),
            vec![("a".to_string(), 0), ("b".to_string(), 1)]
        );
    }
}
