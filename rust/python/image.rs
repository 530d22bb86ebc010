//! Bindings of the image self-local means (bilateral filter, non-local means). No math here:
//! the Python layer pads the image and builds the kernel tables; this converts arrays,
//! releases the GIL and runs the loops of `algorithms::image` on the chosen pool.

use super::runtime::{run, NJobs};
use crate::algorithms::image::{self, RangeWeight};
use crate::real::Real;
use numpy::{Element, IntoPyArray, PyReadonlyArray1, PyReadonlyArray2};
use super::{is_f32_array, type_error, value_error, view3};
use ndarray::Ix3;
use pyo3::prelude::*;

fn table<'py, F: Element>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<PyReadonlyArray2<'py, F>> {
    let a: PyReadonlyArray2<'py, F> = obj
        .extract()
        .map_err(|_| type_error(name, format!("`{name}` must be a 2-D array with the dtype of the image")))?;
    Ok(a)
}

macro_rules! with_image_float {
    ($x:expr, $F:ident, $body:expr) => {
        if is_f32_array::<Ix3>($x, "image")? {
            type $F = f32;
            $body
        } else {
            type $F = f64;
            $body
        }
    };
}

/// Bilateral filter of a planar padded (channels, rows+2r, cols+2r) image with a (2r+1)² spatial
/// table. Range weight: the exact Gaussian exp(−‖Δf‖²/2σ²) with σ = `range_bandwidth`, or, when
/// `color_lut` is given, scikit-image's table lookup lut[min(⌊‖Δf‖·lut_scale⌋, len−1)].
#[pyfunction]
#[pyo3(signature = (padded, spatial, range_bandwidth=1.0, color_lut=None, lut_scale=1.0, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn bilateral_filter<'py>(
    py: Python<'py>, padded: &Bound<'py, PyAny>, spatial: &Bound<'py, PyAny>, range_bandwidth: f64,
    color_lut: Option<&Bound<'py, PyAny>>, lut_scale: f64, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if !(range_bandwidth.is_finite() && range_bandwidth > 0.0) {
        return Err(value_error("range_bandwidth", "`range_bandwidth` must be a finite positive number".into()));
    }
    with_image_float!(padded, F, {
        let img = view3::<F>(padded, "image")?;
        let sp = table::<F>(spatial, "spatial")?;
        let range = match color_lut {
            Some(lut) => {
                let lut: PyReadonlyArray1<F> = lut.extract().map_err(|_| type_error("color_lut", "`color_lut` must be a 1-D array with the dtype of the image".into()))?;
                RangeWeight::Table { lut: lut.as_array().to_vec(), scale: F::of(lut_scale) }
            }
            None => RangeWeight::Gaussian { inv_two_var: F::of(1.0 / (2.0 * range_bandwidth * range_bandwidth)) },
        };
        let (ia, sa) = (img.as_array(), sp.as_array());
        let out = run(py, n_jobs, progress.as_ref(), |mon| image::bilateral(ia, sa, &range, mon))?;
        Ok(out.into_pyarray(py).into_any())
    })
}

/// Non-local means of a planar padded (channels, rows+s−1, cols+s−1) image with an s×s patch
/// kernel already divided by (channels·Σw·h²); `var2` = 2σ². Returns (rows, cols, channels).
#[pyfunction]
#[pyo3(signature = (padded, patch_weights, patch_distance, var2=0.0, exact=false, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn nl_means<'py>(
    py: Python<'py>, padded: &Bound<'py, PyAny>, patch_weights: &Bound<'py, PyAny>, patch_distance: usize, var2: f64,
    exact: bool, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if !(var2.is_finite() && var2 >= 0.0) {
        return Err(value_error("sigma", "`sigma` must be a finite non-negative number".into()));
    }
    with_image_float!(padded, F, {
        let img = view3::<F>(padded, "image")?;
        let pw = table::<F>(patch_weights, "patch_weights")?;
        let (ia, wa) = (img.as_array(), pw.as_array());
        let v2 = <F as Real>::of(var2);
        let out = run(py, n_jobs, progress.as_ref(), |mon| image::nl_means(ia, wa, patch_distance, v2, exact, mon))?;
        Ok(out.into_pyarray(py).into_any())
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(bilateral_filter, m)?)?;
    m.add_function(wrap_pyfunction!(nl_means, m)?)?;
    Ok(())
}
