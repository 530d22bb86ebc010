//! Parameters checked once, where they enter the core: a value of these types has passed its
//! check, so the code that receives one does not test it again. The errors name the argument
//! as the caller spells it.

use crate::error::{LocalizationError, Result};
use crate::real::Real;
use ndarray::ArrayView1;

/// A finite, strictly positive number (a bandwidth, a step length).
#[derive(Copy, Clone, Debug, PartialEq, PartialOrd)]
pub struct Positive(f64);

impl Positive {
    pub fn new(name: &'static str, value: f64) -> Result<Self> {
        if value > 0.0 && value.is_finite() {
            Ok(Positive(value))
        } else {
            Err(LocalizationError::param(name, "must be finite and strictly positive"))
        }
    }

    #[inline(always)]
    pub fn get(self) -> f64 {
        self.0
    }
}

/// Whether the radial kernel can resolve points at bandwidth `h` in F: finite, strictly
/// positive, and 1/h² finite (distances are scaled by it: h ≳ 1e-154 in f64, 1e-19 in f32,
/// once the coordinates are of order one). The one definition of a usable bandwidth; the
/// callers word the refusal for their argument.
pub fn resolvable<F: Real>(h: F) -> bool {
    h > F::zero() && h.is_finite() && (F::one() / (h * h)).is_finite()
}

/// Refuse NaN and infinity in the array `name` (samples or values that are kept, such as a
/// prepared reference's, are checked once when they are taken in).
pub fn finite<'a, F: Real + 'a>(name: &'static str, values: impl IntoIterator<Item = &'a F>) -> Result<()> {
    if values.into_iter().all(|v| v.is_finite()) {
        Ok(())
    } else {
        Err(LocalizationError::NonFinite { name })
    }
}

/// Sample weights: one finite, non-negative value per sample.
#[derive(Copy, Clone, Debug)]
pub struct Weights<'a, F>(ArrayView1<'a, F>);

impl<'a, F: Real> Weights<'a, F> {
    /// `w` as the weights of `n` samples (argument `sample_weight`).
    pub fn new(w: ArrayView1<'a, F>, n: usize) -> Result<Self> {
        if w.len() != n {
            return Err(LocalizationError::shape("sample_weight", format!("{n} entries"), w.len()));
        }
        if w.iter().any(|v| !(*v >= F::zero()) || !v.is_finite()) {
            return Err(LocalizationError::param("sample_weight", "must be finite and non-negative"));
        }
        Ok(Weights(w))
    }

    /// Optional weights, checked when present.
    pub fn optional(w: Option<ArrayView1<'a, F>>, n: usize) -> Result<Option<Self>> {
        w.map(|w| Weights::new(w, n)).transpose()
    }

    pub fn view(&self) -> ArrayView1<'a, F> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn positive_refuses_zero_negative_nan_and_infinity_naming_the_argument() {
        assert_eq!(Positive::new("bandwidth", 0.5).unwrap().get(), 0.5);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(Positive::new("step", bad).unwrap_err(), LocalizationError::param("step", "must be finite and strictly positive"));
        }
    }

    #[test]
    fn finite_refuses_nan_and_infinity_naming_the_array() {
        assert!(finite("X", &array![1.0, -2.0]).is_ok());
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(finite("values", &array![1.0, bad]).unwrap_err(), LocalizationError::NonFinite { name: "values" });
        }
    }

    #[test]
    fn weights_check_length_sign_and_finiteness() {
        let w = array![1.0, 0.0, 2.5];
        assert_eq!(Weights::new(w.view(), 3).unwrap().view(), w.view());
        assert!(matches!(Weights::new(w.view(), 2), Err(LocalizationError::ShapeMismatch { name: "sample_weight", .. })));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let w = array![1.0, bad];
            assert_eq!(Weights::new(w.view(), 2).unwrap_err(), LocalizationError::param("sample_weight", "must be finite and non-negative"));
        }
        assert!(Weights::<f64>::optional(None, 4).unwrap().is_none());
    }
}
