//! Identifiers shared by the job graph, the tasks and the checkpoints; they sit below
//! every other module of the engine so none of those imports the others for a name.

/// Index of a vertex in the job graph.
pub(crate) type VertexId = usize;
