//! Methods built on the engine: per-query solves, iterations, merging.

pub mod embedding;
pub mod fixed_point;
pub mod local_poly;
pub mod mean_shift;
pub mod forest;
pub mod medoid_shift;
pub mod quickshift;
pub mod image;
