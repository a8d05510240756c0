//! Stateless record-at-a-time operators over closures.

use std::marker::PhantomData;

use brook_core::element::Batch;
use brook_core::operator::{OpResult, Operator, OperatorContext, Output};

/// Applies a function to every record, keeping its timestamp (Flink's `map`).
pub struct Map<I, O, F> {
    f: F,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O, F> std::fmt::Debug for Map<I, O, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Map")
    }
}

impl<I, O, F: FnMut(I) -> O> Map<I, O, F> {
    /// A map operator.
    pub fn new(f: F) -> Self {
        Map {
            f,
            _types: PhantomData,
        }
    }
}

impl<I, O, F> Operator for Map<I, O, F>
where
    I: Send + 'static,
    O: Send + 'static,
    F: FnMut(I) -> O + Send + 'static,
{
    type In = I;
    type Out = O;

    fn process_batch(
        &mut self,
        batch: Batch<I>,
        _ctx: &mut OperatorContext,
        out: &mut Output<O>,
    ) -> OpResult {
        out.reserve(batch.len());
        for r in batch {
            out.collect((self.f)(r.value), r.timestamp);
        }
        Ok(())
    }
}

/// Keeps the records for which a predicate holds (Flink's `filter`).
pub struct Filter<T, F> {
    f: F,
    _types: PhantomData<fn(T)>,
}

impl<T, F> std::fmt::Debug for Filter<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Filter")
    }
}

impl<T, F: FnMut(&T) -> bool> Filter<T, F> {
    /// A filter operator.
    pub fn new(f: F) -> Self {
        Filter {
            f,
            _types: PhantomData,
        }
    }
}

impl<T, F> Operator for Filter<T, F>
where
    T: Send + 'static,
    F: FnMut(&T) -> bool + Send + 'static,
{
    type In = T;
    type Out = T;

    fn process_batch(
        &mut self,
        mut batch: Batch<T>,
        _ctx: &mut OperatorContext,
        out: &mut Output<T>,
    ) -> OpResult {
        // Filter in place: the batch's buffer travels on, no copy of the survivors.
        batch.retain(|r| (self.f)(&r.value));
        out.extend_batch(batch);
        Ok(())
    }
}

/// Turns every record into zero or more records with its timestamp (Flink's `flatMap`).
pub struct FlatMap<I, O, It, F> {
    f: F,
    _types: PhantomData<fn(I) -> (O, It)>,
}

impl<I, O, It, F> std::fmt::Debug for FlatMap<I, O, It, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlatMap")
    }
}

impl<I, O, It: IntoIterator<Item = O>, F: FnMut(I) -> It> FlatMap<I, O, It, F> {
    /// A flat-map operator.
    pub fn new(f: F) -> Self {
        FlatMap {
            f,
            _types: PhantomData,
        }
    }
}

impl<I, O, It, F> Operator for FlatMap<I, O, It, F>
where
    I: Send + 'static,
    O: Send + 'static,
    It: IntoIterator<Item = O> + 'static,
    F: FnMut(I) -> It + Send + 'static,
{
    type In = I;
    type Out = O;

    fn process_batch(
        &mut self,
        batch: Batch<I>,
        _ctx: &mut OperatorContext,
        out: &mut Output<O>,
    ) -> OpResult {
        for r in batch {
            let ts = r.timestamp;
            for o in (self.f)(r.value) {
                out.collect(o, ts);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_core::element::StreamRecord;
    use brook_testkit::operator::OperatorHarness;

    fn batch(v: &[i64]) -> Batch<i64> {
        v.iter()
            .map(|&x| StreamRecord::with_timestamp(x, x * 10))
            .collect()
    }

    /// What `op` emits for `input`.
    fn run<O: Operator<In = i64>>(op: O, input: Batch<i64>) -> Batch<O::Out> {
        OperatorHarness::run_batch(op, input).unwrap()
    }

    #[test]
    fn map_filter_flat_map() {
        assert_eq!(
            run(Map::new(|x: i64| x + 1), batch(&[1, 2])),
            vec![
                StreamRecord::with_timestamp(2, 10),
                StreamRecord::with_timestamp(3, 20)
            ]
        );
        assert_eq!(
            run(Filter::new(|x: &i64| x % 2 == 0), batch(&[1, 2, 3, 4])),
            vec![
                StreamRecord::with_timestamp(2, 20),
                StreamRecord::with_timestamp(4, 40)
            ]
        );
        assert_eq!(
            run(FlatMap::new(|x: i64| vec![x; x as usize]), batch(&[0, 2])),
            vec![StreamRecord::with_timestamp(2, 20); 2]
        );
    }
}
