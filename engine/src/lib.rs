//! brook's runtime.
//!
//! Owns (as it grows, see issues 3, 5 and 7): the `JobGraph`, the tasks that run its
//! subtasks over bounded channels, watermark propagation, the `CheckpointCoordinator`
//! and the runner service that supervises jobs.
//!
//! Must not know about: the inside of any operator, state backend or connector beyond
//! the traits they implement.
