//! The one error type of the core. Every fallible public function returns
//! `Result<T>`; the Python layer maps each variant to a `ValueError`/`TypeError`.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum LocalizationError {
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParameter { name: &'static str, reason: String },
    #[error("shape mismatch for `{name}`: expected {expected}, got {got}")]
    ShapeMismatch { name: &'static str, expected: String, got: String },
    #[error("`{name}` is empty: at least one sample is required")]
    EmptyInput { name: &'static str },
    #[error("`{name}` contains NaN or infinity")]
    NonFinite { name: &'static str },
    #[error("interrupted")]
    Interrupted,
}

pub type Result<T> = std::result::Result<T, LocalizationError>;

impl LocalizationError {
    pub fn param(name: &'static str, reason: impl Into<String>) -> Self {
        LocalizationError::InvalidParameter { name, reason: reason.into() }
    }
    pub fn shape(name: &'static str, expected: impl ToString, got: impl ToString) -> Self {
        LocalizationError::ShapeMismatch { name, expected: expected.to_string(), got: got.to_string() }
    }
}
