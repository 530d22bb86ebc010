//! localization: the localization method (C. Song, "The General Theory of Localization
//! Methods") as one fast engine for kernel-weighted sums, and the methods built on it.
//!
//! Layers, top to bottom: `python` (bindings, behind the `python` feature) → `algorithms`
//! → `engine` → `kernel`, `neighbors`, `distance` → `checked` (validated parameters), `real` (the float trait), `rows`, `error`, `memory`,
//! `parallel`.

pub mod algorithms;
pub mod checked;
pub mod distance;
pub mod engine;
pub mod error;
pub mod kernel;
pub mod memory;
pub mod neighbors;
pub mod parallel;
pub mod real;
pub mod rows;

#[cfg(feature = "python")]
mod python;

pub use error::{LocalizationError, Result};
