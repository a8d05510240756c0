//! The user-facing DataStream API, in Flink's vocabulary: [`environment`] (the
//! [`StreamEnvironment`](environment::StreamEnvironment), [`DataStream`](environment::DataStream)
//! and [`KeyedStream`](environment::KeyedStream)), [`window`] (windowed streams and
//! output tags) and [`join`] (joined streams). It builds the job graph and sits on top
//! of the engine: no runtime module imports it.

pub mod environment;
pub mod join;
mod output_tag;
pub mod window;
