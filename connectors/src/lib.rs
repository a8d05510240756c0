//! brook's connectors: sources and sinks.
//!
//! Owns (as the runtime grows, see issues 3 and 9): the adapters that turn the embedded
//! log ([`brook_log`]), files and later Kafka into brook `Source`s and `Sink`s, with
//! their split, offset and pre-commit state.
//!
//! Must not know about: the engine's tasks and channels, or any operator.
