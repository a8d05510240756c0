//! brook's operators.
//!
//! Owns (as the runtime grows, see issues 3, 4 and 6): map, filter, flat_map, process
//! functions with timers, window assigners, triggers and window operators, joins,
//! enrichment and watermark assignment, all written against `brook-core`'s `Operator`
//! trait and `brook-state`'s keyed state.
//!
//! Must not know about: tasks, channels, checkpoint coordination (the engine), or where
//! records come from (connectors).
