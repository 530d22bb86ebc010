//! Bindings of the embedding family (LLE, triplet / ordinal embedding, softmax asymmetric
//! MDS, trustworthiness): arrays in, plain arrays out. No math here. Every call runs through
//! `runtime::run` (GIL released, the pool `n_jobs` selects, Ctrl-C and progress watched).

use super::runtime::{run, NJobs};
use super::{indices2, internal, is_f32, to_indices, to_vec1, type_error, value_error, view1, view2};
use crate::algorithms::embedding::{lle, quality, softmax, triplet};
use crate::memory;
use crate::neighbors::Algorithm;
use ndarray::ArrayView2;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1};
use pyo3::prelude::*;

fn indices1(a: &Bound<'_, PyAny>, name: &'static str) -> PyResult<Vec<usize>> {
    let arr: PyReadonlyArray1<i64> = a.extract().map_err(|_| type_error(name, format!("`{name}` must be a 1-D int64 array")))?;
    to_indices(arr.as_array().iter().copied(), arr.as_array().shape(), name)
}

fn f64_vec(a: &Bound<'_, PyAny>, name: &'static str) -> PyResult<Vec<f64>> {
    to_vec1(&view1::<f64>(a, name)?, name)
}

fn triplets(a: &Bound<'_, PyAny>) -> PyResult<Vec<triplet::Triplet>> {
    let (flat, k) = indices2(a, "triplets")?;
    if k != 3 {
        return Err(value_error("triplets", format!("`triplets` must have 3 columns (i, j, k), got {k}")));
    }
    flat.chunks_exact(3)
        .map(|t| {
            let c = |v: usize| u32::try_from(v).map_err(|_| value_error("triplets", "`triplets` indices must be below 2³²".into()));
            Ok([c(t[0])?, c(t[1])?, c(t[2])?])
        })
        .collect()
}

fn to_i64_2d(v: Vec<usize>, cols: usize) -> PyResult<ndarray::Array2<i64>> {
    let rows = v.len().checked_div(cols).unwrap_or(0);
    ndarray::Array2::from_shape_vec((rows, cols), v.into_iter().map(|j| j as i64).collect()).map_err(internal)
}

/// LLE: (neighbour indices m×k, barycentric weights m×k). With `queries=None` the queries
/// are the samples and each leaves itself out.
#[pyfunction]
#[pyo3(signature = (x, n_neighbors, reg=1e-3, queries=None, algorithm="auto", n_jobs=None))]
fn lle_weights<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, n_neighbors: usize, reg: f64, queries: Option<&Bound<'py, PyAny>>, algorithm: &str, n_jobs: Option<NJobs>,
) -> PyResult<(Bound<'py, PyArray2<i64>>, Bound<'py, PyArray2<f64>>)> {
    let alg = Algorithm::from_name(algorithm)?;
    let (nb, w) = with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let qr = queries.map(|q| view2::<F>(q, "X")).transpose()?;
        let (xa, qa) = (xr.as_array(), qr.as_ref().map(|q| q.as_array()));
        run(py, n_jobs, None, |mon| lle::neighbors_and_weights(xa, qa, n_neighbors, reg, alg, mon))?
    });
    Ok((to_i64_2d(nb, n_neighbors)?.into_pyarray(py), w.into_pyarray(py)))
}

/// M⁺ for LLE's M = (I − W)ᵀ(I − W), from one sparse LU of the grounded I − W.
#[pyclass(module = "localization._core", frozen)]
struct GroundedInverse {
    inner: lle::GroundedInverse,
}

#[pymethods]
impl GroundedInverse {
    /// From the hollow weights: `neighbors` (n×k int64) and `weights` (n×k float64).
    #[new]
    fn new(py: Python<'_>, neighbors: &Bound<'_, PyAny>, weights: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (nb, k) = indices2(neighbors, "neighbors")?;
        let w = view2::<f64>(weights, "weights")?;
        let wv = memory::try_collect("weights", &[w.as_array().len()], w.as_array().iter().copied())?;
        let inner = run(py, None, None, |mon| lle::GroundedInverse::new(&nb, &wv, k, mon))?;
        Ok(GroundedInverse { inner })
    }

    /// M⁺b for a vector (n) or for each column of a matrix (n × c): a new array.
    fn apply<'py>(&self, py: Python<'py>, b: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(v) = view1::<f64>(b, "b") {
            let mut col = memory::try_copy("b", v.as_array().insert_axis(ndarray::Axis(1)))?;
            run(py, None, None, |_| self.inner.apply(col.view_mut()))?;
            return Ok(col.remove_axis(ndarray::Axis(1)).into_pyarray(py).into_any());
        }
        let mut m = memory::try_copy("b", view2::<f64>(b, "b")?.as_array())?;
        run(py, None, None, |_| self.inner.apply(m.view_mut()))?;
        Ok(m.into_pyarray(py).into_any())
    }
}

/// TriMap's triplets (T×3) and weights (T) from the data and its neighbour lists (self first).
#[pyfunction]
#[pyo3(signature = (x, neighbors, distances, n_inliers=12, n_outliers=4, n_random=3, weight_temp=0.5, random_weight=0.1, seed=0, n_jobs=None))]
#[allow(clippy::too_many_arguments)]
fn trimap_triplets<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, neighbors: &Bound<'py, PyAny>, distances: &Bound<'py, PyAny>, n_inliers: usize, n_outliers: usize,
    n_random: usize, weight_temp: f64, random_weight: f64, seed: u64, n_jobs: Option<NJobs>,
) -> PyResult<(Bound<'py, PyArray2<i64>>, Bound<'py, PyArray1<f64>>)> {
    let (nb, listed) = indices2(neighbors, "neighbors")?;
    let s = triplet::Sampling { n_inliers, n_outliers, n_random, weight_temp, random_weight, seed };
    let (tr, w) = with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let dr = view2::<F>(distances, "distances")?;
        let (xa, da) = (xr.as_array(), dr.as_array());
        let dv: Vec<F> = da.iter().copied().collect();
        run(py, n_jobs, None, |_| triplet::sample_trimap(xa, &nb, &dv, listed, &s))?
    });
    let flat: Vec<usize> = tr.iter().flat_map(|t| t.map(|v| v as usize)).collect();
    Ok((to_i64_2d(flat, 3)?.into_pyarray(py), w.into_pyarray(py)))
}

/// Σ_t w_t ℓ(d²_ij, d²_ik) and its gradient with respect to the embedding `y`.
#[pyfunction]
#[pyo3(signature = (y, triplets, weights, loss="trimap", alpha=1.0, n_jobs=None))]
fn triplet_loss_grad<'py>(
    py: Python<'py>, y: &Bound<'py, PyAny>, triplets: &Bound<'py, PyAny>, weights: &Bound<'py, PyAny>, loss: &str, alpha: f64, n_jobs: Option<NJobs>,
) -> PyResult<(f64, Bound<'py, PyArray2<f64>>)> {
    let loss = triplet::Loss::from_name(loss, alpha)?;
    let tr = self::triplets(triplets)?;
    let w = f64_vec(weights, "weights")?;
    let yv = view2::<f64>(y, "embedding")?;
    let ya = yv.as_array();
    let (l, g) = run(py, n_jobs, None, |_| triplet::loss_grad(ya, &tr, &w, loss))?;
    Ok((l, g.into_pyarray(py)))
}

/// TriMap's optimiser from `y0`: (embedding, mean loss per triplet at every iteration).
#[pyfunction]
#[pyo3(signature = (y0, triplets, weights, loss="trimap", alpha=1.0, learning_rate=0.05, n_iter=400, n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn triplet_optimize<'py>(
    py: Python<'py>, y0: &Bound<'py, PyAny>, triplets: &Bound<'py, PyAny>, weights: &Bound<'py, PyAny>, loss: &str, alpha: f64,
    learning_rate: f64, n_iter: usize, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<(Bound<'py, PyArray2<f64>>, Bound<'py, PyArray1<f64>>)> {
    let loss = triplet::Loss::from_name(loss, alpha)?;
    let tr = self::triplets(triplets)?;
    let w = f64_vec(weights, "weights")?;
    let yv = view2::<f64>(y0, "init")?;
    let ya = yv.as_array();
    let opt = triplet::Optimizer { learning_rate, n_iter };
    let fit = run(py, n_jobs, progress.as_ref(), |mon| triplet::optimize(ya, &tr, &w, loss, &opt, mon))?;
    Ok((fit.y.into_pyarray(py), fit.loss.into_pyarray(py)))
}

struct Csr {
    indptr: Vec<usize>,
    indices: Vec<usize>,
    data: Vec<f64>,
}

fn csr(indptr: &Bound<'_, PyAny>, indices: &Bound<'_, PyAny>, data: &Bound<'_, PyAny>) -> PyResult<Csr> {
    Ok(Csr { indptr: indices1(indptr, "indptr")?, indices: indices1(indices, "indices")?, data: f64_vec(data, "data")? })
}

/// The sampled softmax problem's arguments converted (Z₁, Z₂, the CSR target, the row weights,
/// the sampler), handed to `f`.
#[allow(clippy::too_many_arguments)]
fn sampled<R>(
    (z1, z2): (&Bound<'_, PyAny>, &Bound<'_, PyAny>), (indptr, indices, data): (&Bound<'_, PyAny>, &Bound<'_, PyAny>, &Bound<'_, PyAny>),
    row_weight: &Bound<'_, PyAny>, proposal: &Bound<'_, PyAny>, n_negative: usize, seed: u64,
    f: impl FnOnce(ArrayView2<f64>, ArrayView2<f64>, &softmax::Target, &[f64], &softmax::Sampler) -> PyResult<R>,
) -> PyResult<R> {
    let p = csr(indptr, indices, data)?;
    let (w, pr) = (f64_vec(row_weight, "row_weight")?, f64_vec(proposal, "proposal")?);
    let (a, b) = (view2::<f64>(z1, "embedding")?, view2::<f64>(z2, "key_embedding")?);
    let t = softmax::Target { indptr: &p.indptr, indices: &p.indices, data: &p.data };
    let s = softmax::Sampler { proposal: &pr, n_negative, seed };
    f(a.as_array(), b.as_array(), &t, &w, &s)
}

/// One evaluation of the sampled softmax loss and its gradient [∂Z₁ | ∂Z₂] (n × 2q).
#[pyfunction]
#[pyo3(signature = (z1, z2, indptr, indices, data, row_weight, proposal, n_negative=20, seed=0, stage=0, n_jobs=None))]
#[allow(clippy::too_many_arguments)]
fn softmax_sampled_loss_grad<'py>(
    py: Python<'py>, z1: &Bound<'py, PyAny>, z2: &Bound<'py, PyAny>, indptr: &Bound<'py, PyAny>, indices: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>, row_weight: &Bound<'py, PyAny>, proposal: &Bound<'py, PyAny>, n_negative: usize, seed: u64, stage: u64,
    n_jobs: Option<NJobs>,
) -> PyResult<(f64, Bound<'py, PyArray2<f64>>)> {
    sampled((z1, z2), (indptr, indices, data), row_weight, proposal, n_negative, seed, |za, zb, t, w, s| {
        let (l, g) = run(py, n_jobs, None, |_| softmax::sampled_loss_grad(za, zb, t, w, s, stage))?;
        Ok((l, g.into_pyarray(py)))
    })
}

/// Fit Z₁, Z₂ to the sampled softmax loss with Adam: (Z₁, Z₂, loss at every iteration).
#[pyfunction]
#[pyo3(signature = (z1, z2, indptr, indices, data, row_weight, proposal, n_negative=20, seed=0, learning_rate=0.05, n_iter=200,
    n_jobs=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn softmax_fit_sampled<'py>(
    py: Python<'py>, z1: &Bound<'py, PyAny>, z2: &Bound<'py, PyAny>, indptr: &Bound<'py, PyAny>, indices: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>, row_weight: &Bound<'py, PyAny>, proposal: &Bound<'py, PyAny>, n_negative: usize, seed: u64,
    learning_rate: f64, n_iter: usize, n_jobs: Option<NJobs>, progress: Option<Py<PyAny>>,
) -> PyResult<(Bound<'py, PyArray2<f64>>, Bound<'py, PyArray2<f64>>, Bound<'py, PyArray1<f64>>)> {
    let opt = softmax::Adam { learning_rate, n_iter };
    sampled((z1, z2), (indptr, indices, data), row_weight, proposal, n_negative, seed, |za, zb, t, w, s| {
        let fit = run(py, n_jobs, progress.as_ref(), |mon| softmax::fit_sampled(za, zb, t, w, s, &opt, mon))?;
        Ok((fit.z1.into_pyarray(py), fit.z2.into_pyarray(py), fit.loss.into_pyarray(py)))
    })
}

/// Σ over `anchors` of Σ_{j ∈ E_i} max(rank_ij − k, 0) (trustworthiness without the n×n ranks).
#[pyfunction]
#[pyo3(signature = (x, anchors, embedded_neighbors, n_jobs=None))]
fn trustworthiness_penalty<'py>(
    py: Python<'py>, x: &Bound<'py, PyAny>, anchors: &Bound<'py, PyAny>, embedded_neighbors: &Bound<'py, PyAny>, n_jobs: Option<NJobs>,
) -> PyResult<u64> {
    let anchors = indices1(anchors, "anchors")?;
    let (nb, k) = indices2(embedded_neighbors, "embedded_neighbors")?;
    let pen = with_float!(x, F, {
        let xr = view2::<F>(x, "X")?;
        let xa = xr.as_array();
        run(py, n_jobs, None, |_| quality::trustworthiness_penalty(xa, &anchors, &nb, k))?
    });
    Ok(pen)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lle_weights, m)?)?;
    m.add_class::<GroundedInverse>()?;
    m.add_function(wrap_pyfunction!(trimap_triplets, m)?)?;
    m.add_function(wrap_pyfunction!(triplet_loss_grad, m)?)?;
    m.add_function(wrap_pyfunction!(triplet_optimize, m)?)?;
    m.add_function(wrap_pyfunction!(softmax_sampled_loss_grad, m)?)?;
    m.add_function(wrap_pyfunction!(softmax_fit_sampled, m)?)?;
    m.add_function(wrap_pyfunction!(trustworthiness_penalty, m)?)?;
    Ok(())
}
