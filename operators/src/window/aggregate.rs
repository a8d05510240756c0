//! Built-in [`AggregateFunction`]s and their tuple combinators.
//!
//! Functions that read a value from the record take an extractor closure
//! (`Sum::of(|e: &Sale| e.cents)`). Combine several with a tuple:
//! `(Count, Sum::of(|e: &Sale| e.cents))` has the accumulator `(u64, i64)` and the
//! result `(u64, i64)`. None allocates per record for `Copy` values.

use std::collections::HashSet;
use std::hash::Hash;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::AggregateFunction;

/// Numbers that [`Sum`] adds and [`Avg`] averages. Integer sums wrap on overflow, as
/// Java's `long` sums in Flink do.
pub trait Numeric: Copy + Default + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// `self + other` (wrapping for integers).
    fn add(self, other: Self) -> Self;
    /// The value as `f64`.
    fn to_f64(self) -> f64;
}

macro_rules! numeric_int {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            #[inline]
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
numeric_int!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

macro_rules! numeric_float {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            #[inline]
            fn add(self, other: Self) -> Self {
                self + other
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
numeric_float!(f32, f64);

/// Values an aggregate may keep in its accumulator.
pub trait AccValue: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static> AccValue for T {}

/// Combines the records of a window two at a time with `f`, as Flink's
/// `ReduceFunction` (`None` for no records, which a window never emits).
#[derive(Debug, Clone, Copy)]
pub struct Reduce<F>(F);

impl<F> Reduce<F> {
    /// Reduces with `f(accumulated, next)`.
    pub fn of(f: F) -> Self {
        Reduce(f)
    }
}

impl<In, F> AggregateFunction<In> for Reduce<F>
where
    In: AccValue,
    F: Fn(&In, &In) -> In + Clone + Send + Sync + 'static,
{
    type Acc = Option<In>;
    type Out = Option<In>;

    fn create_accumulator(&self) -> Option<In> {
        None
    }
    fn add(&self, acc: &mut Option<In>, value: &In) {
        *acc = Some(match acc.as_ref() {
            Some(a) => (self.0)(a, value),
            None => value.clone(),
        });
    }
    fn merge(&self, acc: &mut Option<In>, other: Option<In>) {
        if let Some(o) = other {
            self.add(acc, &o);
        }
    }
    fn get_result(&self, acc: &Option<In>) -> Option<In> {
        acc.clone()
    }
}

/// The number of records (`u64`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Count;

impl<In> AggregateFunction<In> for Count {
    type Acc = u64;
    type Out = u64;

    fn create_accumulator(&self) -> u64 {
        0
    }
    #[inline]
    fn add(&self, acc: &mut u64, _value: &In) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: u64) {
        *acc += other;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// The sum of an extracted [`Numeric`] value (0 for no records).
#[derive(Debug, Clone, Copy)]
pub struct Sum<F>(F);

impl<F> Sum<F> {
    /// Sums `extract(record)`.
    pub fn of(extract: F) -> Self {
        Sum(extract)
    }
}

impl<In, V, F> AggregateFunction<In> for Sum<F>
where
    V: Numeric,
    F: Fn(&In) -> V + Clone + Send + Sync + 'static,
{
    type Acc = V;
    type Out = V;

    fn create_accumulator(&self) -> V {
        V::default()
    }
    #[inline]
    fn add(&self, acc: &mut V, value: &In) {
        *acc = acc.add((self.0)(value));
    }
    fn merge(&self, acc: &mut V, other: V) {
        *acc = acc.add(other);
    }
    fn get_result(&self, acc: &V) -> V {
        *acc
    }
}

/// Replaces `acc` by `other` when it compares as `wanted` (less for a minimum, greater
/// for a maximum) or `acc` is empty; incomparable values never replace it.
fn keep_extreme<V: PartialOrd>(acc: &mut Option<V>, other: Option<V>, wanted: std::cmp::Ordering) {
    if let Some(o) = other {
        match acc {
            Some(a) if o.partial_cmp(a) != Some(wanted) => {}
            _ => *acc = Some(o),
        }
    }
}

/// Min and Max: the extreme value by `$keep` (`Less` for a minimum).
macro_rules! extreme {
    ($(#[$doc:meta])* $name:ident, $keep:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<F>(F);

        impl<F> $name<F> {
            #[doc = concat!("The ", $what, " of `extract(record)`.")]
            pub fn of(extract: F) -> Self {
                $name(extract)
            }
        }

        impl<In, V, F> AggregateFunction<In> for $name<F>
        where
            V: AccValue + PartialOrd,
            F: Fn(&In) -> V + Clone + Send + Sync + 'static,
        {
            type Acc = Option<V>;
            type Out = Option<V>;

            fn create_accumulator(&self) -> Option<V> {
                None
            }
            #[inline]
            fn add(&self, acc: &mut Option<V>, value: &In) {
                let v = (self.0)(value);
                self.merge(acc, Some(v));
            }
            fn merge(&self, acc: &mut Option<V>, other: Option<V>) {
                keep_extreme(acc, other, std::cmp::Ordering::$keep);
            }
            fn get_result(&self, acc: &Option<V>) -> Option<V> {
                acc.clone()
            }
        }
    };
}

extreme!(
    /// The smallest extracted value (`None` for no records; incomparable values such as
    /// NaN never replace the current minimum).
    Min,
    Less,
    "minimum"
);
extreme!(
    /// The largest extracted value (`None` for no records).
    Max,
    Greater,
    "maximum"
);

/// The arithmetic mean of an extracted [`Numeric`] value as `f64` (NaN for no records,
/// which a window never emits). Accumulator: `(sum as f64, count)`.
#[derive(Debug, Clone, Copy)]
pub struct Avg<F>(F);

impl<F> Avg<F> {
    /// The mean of `extract(record)`.
    pub fn of(extract: F) -> Self {
        Avg(extract)
    }
}

impl<In, V, F> AggregateFunction<In> for Avg<F>
where
    V: Numeric,
    F: Fn(&In) -> V + Clone + Send + Sync + 'static,
{
    type Acc = (f64, u64);
    type Out = f64;

    fn create_accumulator(&self) -> (f64, u64) {
        (0.0, 0)
    }
    #[inline]
    fn add(&self, acc: &mut (f64, u64), value: &In) {
        acc.0 += (self.0)(value).to_f64();
        acc.1 += 1;
    }
    fn merge(&self, acc: &mut (f64, u64), other: (f64, u64)) {
        acc.0 += other.0;
        acc.1 += other.1;
    }
    fn get_result(&self, acc: &(f64, u64)) -> f64 {
        acc.0 / acc.1 as f64
    }
}

/// The extracted value of the first record added (arrival order; `None` for no
/// records). When session windows merge, the earlier session's first value wins.
#[derive(Debug, Clone, Copy)]
pub struct First<F>(F);

impl<F> First<F> {
    /// `extract` of the first record.
    pub fn of(extract: F) -> Self {
        First(extract)
    }
}

impl<In, V, F> AggregateFunction<In> for First<F>
where
    V: AccValue,
    F: Fn(&In) -> V + Clone + Send + Sync + 'static,
{
    type Acc = Option<V>;
    type Out = Option<V>;

    fn create_accumulator(&self) -> Option<V> {
        None
    }
    #[inline]
    fn add(&self, acc: &mut Option<V>, value: &In) {
        if acc.is_none() {
            *acc = Some((self.0)(value));
        }
    }
    fn merge(&self, acc: &mut Option<V>, other: Option<V>) {
        if acc.is_none() {
            *acc = other;
        }
    }
    fn get_result(&self, acc: &Option<V>) -> Option<V> {
        acc.clone()
    }
}

/// The extracted value of the last record added (arrival order; `None` for no
/// records). When session windows merge, the later session's last value wins.
#[derive(Debug, Clone, Copy)]
pub struct Last<F>(F);

impl<F> Last<F> {
    /// `extract` of the last record.
    pub fn of(extract: F) -> Self {
        Last(extract)
    }
}

impl<In, V, F> AggregateFunction<In> for Last<F>
where
    V: AccValue,
    F: Fn(&In) -> V + Clone + Send + Sync + 'static,
{
    type Acc = Option<V>;
    type Out = Option<V>;

    fn create_accumulator(&self) -> Option<V> {
        None
    }
    #[inline]
    fn add(&self, acc: &mut Option<V>, value: &In) {
        *acc = Some((self.0)(value));
    }
    fn merge(&self, acc: &mut Option<V>, other: Option<V>) {
        if other.is_some() {
            *acc = other;
        }
    }
    fn get_result(&self, acc: &Option<V>) -> Option<V> {
        acc.clone()
    }
}

/// The exact number of distinct extracted values (`u64`); keeps the set of values.
#[derive(Debug, Clone, Copy)]
pub struct CountDistinct<F>(F);

impl<F> CountDistinct<F> {
    /// Counts distinct `extract(record)`.
    pub fn of(extract: F) -> Self {
        CountDistinct(extract)
    }
}

impl<In, V, F> AggregateFunction<In> for CountDistinct<F>
where
    V: AccValue + Hash + Eq,
    F: Fn(&In) -> V + Clone + Send + Sync + 'static,
{
    type Acc = HashSet<V>;
    type Out = u64;

    fn create_accumulator(&self) -> HashSet<V> {
        HashSet::new()
    }
    #[inline]
    fn add(&self, acc: &mut HashSet<V>, value: &In) {
        acc.insert((self.0)(value));
    }
    fn merge(&self, acc: &mut HashSet<V>, other: HashSet<V>) {
        acc.extend(other);
    }
    fn get_result(&self, acc: &HashSet<V>) -> u64 {
        acc.len() as u64
    }
}

macro_rules! tuple_aggregate {
    ($($name:ident $idx:tt),+) => {
        /// Several aggregates over the same records: accumulator and result are tuples
        /// of the parts' accumulators and results, in order.
        impl<In, $($name: AggregateFunction<In>),+> AggregateFunction<In> for ($($name,)+) {
            type Acc = ($($name::Acc,)+);
            type Out = ($($name::Out,)+);

            fn create_accumulator(&self) -> Self::Acc {
                ($(self.$idx.create_accumulator(),)+)
            }
            #[inline]
            fn add(&self, acc: &mut Self::Acc, value: &In) {
                $(self.$idx.add(&mut acc.$idx, value);)+
            }
            fn merge(&self, acc: &mut Self::Acc, other: Self::Acc) {
                $(self.$idx.merge(&mut acc.$idx, other.$idx);)+
            }
            fn get_result(&self, acc: &Self::Acc) -> Self::Out {
                ($(self.$idx.get_result(&acc.$idx),)+)
            }
        }
    };
}
tuple_aggregate!(A 0, B 1);
tuple_aggregate!(A 0, B 1, C 2);
tuple_aggregate!(A 0, B 1, C 2, D 3);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone)]
    struct Ev {
        v: i64,
        name: &'static str,
    }

    fn evs() -> Vec<Ev> {
        [(3, "a"), (-2, "b"), (7, "a"), (3, "c")]
            .into_iter()
            .map(|(v, name)| Ev { v, name })
            .collect()
    }

    /// Runs `f` over the records split in two accumulators and merged, and over all in
    /// one: both must give the same result.
    fn run<A: AggregateFunction<Ev>>(f: &A) -> A::Out
    where
        A::Out: PartialEq + std::fmt::Debug,
    {
        let all = evs();
        let mut one = f.create_accumulator();
        for e in &all {
            f.add(&mut one, e);
        }
        let (mut a, mut b) = (f.create_accumulator(), f.create_accumulator());
        for e in &all[..2] {
            f.add(&mut a, e);
        }
        for e in &all[2..] {
            f.add(&mut b, e);
        }
        f.merge(&mut a, b);
        assert_eq!(f.get_result(&a), f.get_result(&one));
        f.get_result(&one)
    }

    #[test]
    fn built_ins() {
        assert_eq!(run(&Count), 4);
        assert_eq!(run(&Sum::of(|e: &Ev| e.v)), 11);
        assert_eq!(run(&Sum::of(|e: &Ev| e.v as f64 / 2.0)), 5.5);
        assert_eq!(run(&Min::of(|e: &Ev| e.v)), Some(-2));
        assert_eq!(run(&Max::of(|e: &Ev| e.v)), Some(7));
        assert_eq!(run(&Avg::of(|e: &Ev| e.v)), 2.75);
        assert_eq!(
            run(&First::of(|e: &Ev| e.name.to_string())),
            Some("a".to_string())
        );
        assert_eq!(
            run(&Last::of(|e: &Ev| e.name.to_string())),
            Some("c".to_string())
        );
        assert_eq!(run(&CountDistinct::of(|e: &Ev| e.name.to_string())), 3);
        assert_eq!(run(&CountDistinct::of(|e: &Ev| e.v)), 3);
        let empty = Min::of(|e: &Ev| e.v);
        assert_eq!(AggregateFunction::<Ev>::get_result(&empty, &None), None);
    }

    #[test]
    fn tuples_combine_parts() {
        assert_eq!(run(&(Count, Sum::of(|e: &Ev| e.v))), (4, 11));
        assert_eq!(
            run(&(Count, Min::of(|e: &Ev| e.v), Max::of(|e: &Ev| e.v))),
            (4, Some(-2), Some(7))
        );
        assert_eq!(
            run(&(
                Count,
                Sum::of(|e: &Ev| e.v),
                CountDistinct::of(|e: &Ev| e.name.to_string()),
                Last::of(|e: &Ev| e.v)
            )),
            (4, 11, 3, Some(3))
        );
    }

    #[test]
    fn integer_sums_wrap_as_java() {
        let f = Sum::of(|e: &i64| *e);
        let mut acc = f.create_accumulator();
        f.add(&mut acc, &i64::MAX);
        f.add(&mut acc, &1);
        assert_eq!(acc, i64::MIN);
    }

    #[test]
    fn min_ignores_nan() {
        let f = Min::of(|e: &f64| *e);
        let mut acc = f.create_accumulator();
        for v in [2.0, f64::NAN, 1.0] {
            f.add(&mut acc, &v);
        }
        assert_eq!(acc, Some(1.0));
    }
}
