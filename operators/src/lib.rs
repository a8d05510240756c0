//! brook's operators.
//!
//! - [`basic`]: [`basic::Map`], [`basic::Filter`], [`basic::FlatMap`] over closures.
//! - [`process`]: keyed process functions with keyed state and event- and
//!   processing-time timers ([`process::KeyedProcessFunction`],
//!   [`process::KeyedProcessOperator`]).
//! - [`row`]: operators on dynamic JSON rows with CEL expressions (filter, map,
//!   select), used by YAML job specs.
//!
//! All are written against `brook-core`'s [`brook_core::operator::Operator`] trait and
//! `brook-state`'s keyed state. Windows, joins, enrichment and watermark assignment
//! arrive with issues 4 and 6.
//!
//! Must not know about: tasks, channels, checkpoint coordination (the engine), or where
//! records come from (connectors).

pub mod basic;
pub mod process;
pub mod row;
pub mod window;
