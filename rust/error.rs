//! The one error type of the core. Every fallible public function returns
//! `Result<T>`; the Python layer maps each variant to a Python exception
//! (`localization.LocalizationError`, a `ValueError` carrying [`LocalizationError::parameter`],
//! for bad input; `MemoryError`, `KeyboardInterrupt`, `RuntimeError`).

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
    /// An environment variable the library reads holds a value it cannot use.
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    Environment { name: &'static str, value: String, reason: String },
    /// An output sized by the caller's request does not fit in memory (or in the address space).
    /// `what` describes the array (shape and element type).
    #[error("not enough memory for `{name}`: {what} needs {}", human_bytes(*.bytes))]
    OutOfMemory { name: &'static str, what: String, bytes: u128 },
    /// The operating system refused to start the worker threads.
    #[error("cannot start {threads} worker threads: {reason}; lower n_jobs or LOCALIZATION_NUM_THREADS")]
    ThreadPool { threads: usize, reason: String },
    /// The caller asked the call to stop (Ctrl-C, or a progress callback that raised).
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
    /// The argument at fault, for errors about one argument.
    pub fn parameter(&self) -> Option<&'static str> {
        match self {
            LocalizationError::InvalidParameter { name, .. }
            | LocalizationError::ShapeMismatch { name, .. }
            | LocalizationError::EmptyInput { name }
            | LocalizationError::NonFinite { name } => Some(name),
            _ => None,
        }
    }
}

/// "320 GB", "1.5 MB": decimal units, as people read memory sizes.
fn human_bytes(bytes: u128) -> String {
    const UNITS: [&str; 7] = ["bytes", "kB", "MB", "GB", "TB", "PB", "EB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} bytes")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_names_the_argument_at_fault() {
        assert_eq!(LocalizationError::param("bandwidth", "must be positive").parameter(), Some("bandwidth"));
        assert_eq!(LocalizationError::shape("X_query", "(m, 2)", "(m, 3)").parameter(), Some("X_query"));
        assert_eq!(LocalizationError::NonFinite { name: "X" }.parameter(), Some("X"));
        assert_eq!(LocalizationError::EmptyInput { name: "X" }.parameter(), Some("X"));
        let env = LocalizationError::Environment { name: "LOCALIZATION_NUM_THREADS", value: "x".into(), reason: "r".into() };
        assert_eq!(env.parameter(), None);
        assert_eq!(LocalizationError::Interrupted.parameter(), None);
    }

    #[test]
    fn out_of_memory_names_the_array_and_its_size() {
        let e = LocalizationError::OutOfMemory { name: "kernel matrix", what: "200000 × 200000 float64".into(), bytes: 320_000_000_000 };
        assert_eq!(e.to_string(), "not enough memory for `kernel matrix`: 200000 × 200000 float64 needs 320 GB");
        assert_eq!(human_bytes(999), "999 bytes");
        assert_eq!(human_bytes(1_500_000), "1.5 MB");
        assert!(human_bytes(u128::MAX).ends_with(" EB"));
    }
}
