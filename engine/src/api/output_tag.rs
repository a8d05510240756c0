//! Side outputs ([`OutputTag`]), as Flink's: an operator (a window, a join) writes
//! late records to a tag, and [`DataStream::get_side_output`] reads them back.

use std::sync::{Arc, Mutex};

use super::environment::DataStream;
use crate::error::EngineError;

/// Names a side output of type `T`, as Flink's `OutputTag`; clones share it.
///
/// Give it to
/// [`WindowedStream::side_output_late_data`](super::window::WindowedStream::side_output_late_data),
/// then get the late records with [`DataStream::get_side_output`].
pub struct OutputTag<T> {
    id: String,
    pub(crate) stream: Arc<Mutex<Option<DataStream<T>>>>,
}

impl<T> Clone for OutputTag<T> {
    fn clone(&self) -> Self {
        OutputTag {
            id: self.id.clone(),
            stream: Arc::clone(&self.stream),
        }
    }
}

impl<T> std::fmt::Debug for OutputTag<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputTag").field("id", &self.id).finish()
    }
}

impl<T> OutputTag<T> {
    /// A tag named `id` (for error messages).
    pub fn new(id: impl Into<String>) -> Self {
        OutputTag {
            id: id.into(),
            stream: Arc::new(Mutex::new(None)),
        }
    }

    /// The tag's name.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl<T: Clone + Send + 'static> DataStream<T> {
    /// The side output named by `tag`, as Flink's `getSideOutput`.
    ///
    /// # Errors
    /// [`EngineError::InvalidGraph`] when no operator was given the tag.
    pub fn get_side_output<U: Clone + Send + 'static>(
        &self,
        tag: &OutputTag<U>,
    ) -> Result<DataStream<U>, EngineError> {
        tag.stream
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| {
                EngineError::InvalidGraph(format!(
                    "no operator writes the side output {:?}",
                    tag.id
                ))
            })
    }
}
