//! Methods built on the engine: per-query solves, iterations, merging.

pub mod local_poly;
pub mod image;
