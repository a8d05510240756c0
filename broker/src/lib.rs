//! brook's log served over the Kafka wire protocol: `brook broker`.
//!
//! Any Kafka client (librdkafka and what is built on it, kafka-python, the Java
//! client, kcat) reads and writes a brook data directory through this crate. The
//! message codec is the `kafka-protocol` crate; this crate only maps requests onto the
//! log ([`brook_log`]):
//!
//! - one module per API ([`api_versions`], [`metadata`], [`create_topics`],
//!   [`delete_topics`], [`create_partitions`], [`describe_configs`],
//!   [`incremental_alter_configs`], [`alter_configs`], [`produce`],
//!   [`fetch`], [`list_offsets`]), each a function from a decoded request
//!   and the [`Log`](brook_log::Log) to the response, tested without sockets;
//! - [`frame`] checks a request frame and decides what to do with it (answer, or
//!   close the connection) as a pure function;
//! - [`sasl`] authenticates clients (SCRAM-SHA-256/512) when users are configured:
//!   one connection's authentication is a state machine the server consults;
//! - [`server`] is the thin socket shell: it reads frames, calls the handlers (on
//!   the blocking pool, as appends may fsync), waits for data for long-polling
//!   fetches, and writes the responses.
//!
//! This serves a single broker (node id 0) that leads every partition; plain,
//! idempotent ([`idempotence`], [`producers`]) and transactional ([`transactions`])
//! producers (an EndTxn may resume a transaction a job prepared in-process,
//! [`resume_txn`]); consumers that assign partitions themselves or form consumer groups of
//! separate processes ([`group`]: Kafka's classic protocol); clients authenticated
//! with SASL SCRAM ([`sasl`]) when users are configured. An API that is not served is
//! left out of ApiVersions, so
//! clients report it as unsupported instead of waiting. `docs/semantics.md` §
//! "The log as a Kafka broker" lists the rules.

pub mod address;
pub mod alter_configs;
pub mod api_versions;
pub mod buffers;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_topics;
pub mod describe_configs;
mod error_code;
pub mod fetch;
pub mod frame;
pub mod group;
pub mod idempotence;
pub mod incremental_alter_configs;
pub mod list_offsets;
pub mod metadata;
pub mod produce;
pub mod producers;
pub mod resume_txn;
pub mod sasl;
pub mod server;
pub mod transactions;
pub mod txn_ids;

pub use crate::address::{address_file, read_address, write_address, ADDRESS_FILE};
pub use crate::error_code::error_code;
pub use crate::server::{BrokerConfig, BrokerError, Server};
