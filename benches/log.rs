//! Log benchmark (being written).
fn main() {}
