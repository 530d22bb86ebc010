//! `_core.KernelSpec`: the kernel of an engine call — a radial profile, the k-NN kernel or
//! the dot-product kernel, with its bandwidth (one value, one per query or one per sample) —
//! checked once when it is built, so that the engine's bindings only hand it on.

use super::{to_vec1, type_error, value_error};
use crate::engine::{Bandwidth, Kernel};
use crate::kernel::Profile;
use crate::real::Real;
use numpy::{Element, PyArray1, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// Per-point bandwidths in the dtype they were given in (a call's arrays share one dtype).
#[derive(Clone)]
pub(crate) enum Points {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Points {
    /// A 1-D, C-contiguous float32 or float64 array, copied.
    fn new(h: &Bound<'_, PyAny>, name: &'static str) -> PyResult<Self> {
        fn contiguous<F: Element + Copy>(a: PyReadonlyArray1<'_, F>, name: &'static str) -> PyResult<Vec<F>> {
            if !a.is_c_contiguous() {
                return Err(value_error(name, format!("`{name}` must be C-contiguous")));
            }
            to_vec1(&a, name)
        }
        if let Ok(a) = h.extract::<PyReadonlyArray1<f64>>() {
            Ok(Points::F64(contiguous(a, name)?))
        } else if let Ok(a) = h.extract::<PyReadonlyArray1<f32>>() {
            Ok(Points::F32(contiguous(a, name)?))
        } else {
            Err(type_error(name, format!("`{name}` must be a 1-D float32 or float64 array")))
        }
    }

    fn to_object<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self {
            Points::F32(h) => PyArray1::from_slice(py, h).into_any(),
            Points::F64(h) => PyArray1::from_slice(py, h).into_any(),
        }
    }
}

/// The float types per-point bandwidths come in.
pub(crate) trait PointFloat: Real + Element {
    fn points(p: &Points) -> Option<&[Self]>;
}
impl PointFloat for f32 {
    fn points(p: &Points) -> Option<&[f32]> {
        match p {
            Points::F32(h) => Some(h),
            Points::F64(_) => None,
        }
    }
}
impl PointFloat for f64 {
    fn points(p: &Points) -> Option<&[f64]> {
        match p {
            Points::F64(h) => Some(h),
            Points::F32(_) => None,
        }
    }
}

#[derive(Clone)]
enum Width {
    Scalar(f64),
    PerQuery(Points),
    PerSample(Points),
}

/// A kernel with its bandwidth, for `local_sums`, `local_polynomial`, `equivalent_kernel` and
/// `kernel_matrix`: `kernel` is a profile name (or alias), ``"knn"`` (with `n_neighbors` and an
/// optional `knn_profile`) or ``"dot"`` (with `temperature`, 1 by default); the bandwidth is
/// `bandwidth`, or one value per query (`query_bandwidth`) or per sample (`sample_bandwidth`),
/// in the dtype of the call's arrays. The bandwidth's values are checked by the call (their
/// lower limit depends on the coordinates). Immutable; pickles as its arguments.
#[pyclass(module = "localization._core", name = "KernelSpec", frozen)]
pub(crate) struct PyKernelSpec {
    kernel: Kernel,
    width: Width,
}

impl PyKernelSpec {
    pub(crate) fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The bandwidth in the call's float type F.
    pub(crate) fn bandwidth<F: PointFloat>(&self) -> PyResult<Bandwidth<F>> {
        let points = |p: &Points| {
            F::points(p).map(<[F]>::to_vec).ok_or_else(|| type_error("bandwidth", "per-point bandwidths must have the same dtype as X".into()))
        };
        Ok(match &self.width {
            Width::Scalar(h) => Bandwidth::Scalar(F::of(*h)),
            Width::PerQuery(h) => Bandwidth::PerQuery(points(h)?),
            Width::PerSample(h) => Bandwidth::PerReference(points(h)?),
        })
    }

    /// Whether the bandwidth is one per sample (a `Reference` holds its own).
    pub(crate) fn is_per_sample(&self) -> bool {
        matches!(self.width, Width::PerSample(_))
    }

    fn with_width(&self, width: Width) -> Self {
        PyKernelSpec { kernel: self.kernel.clone(), width }
    }
}

#[pymethods]
impl PyKernelSpec {
    #[new]
    #[pyo3(signature = (kernel="gaussian", bandwidth=1.0, *, n_neighbors=None, knn_profile=None, temperature=None,
        query_bandwidth=None, sample_bandwidth=None))]
    fn new(
        kernel: &str, bandwidth: f64, n_neighbors: Option<usize>, knn_profile: Option<&str>, temperature: Option<f64>,
        query_bandwidth: Option<&Bound<'_, PyAny>>, sample_bandwidth: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let kernel = match kernel {
            "knn" => Kernel::Knn {
                k: n_neighbors.ok_or_else(|| value_error("n_neighbors", "kernel='knn' needs `n_neighbors`".into()))?,
                profile: knn_profile.map(Profile::from_name).transpose()?,
            },
            "dot" => Kernel::Dot { temperature: temperature.unwrap_or(1.0) },
            name => Kernel::Radial(Profile::from_name(name)?),
        };
        let width = match (query_bandwidth, sample_bandwidth) {
            (Some(_), Some(_)) => {
                return Err(value_error("sample_bandwidth", "give one of `query_bandwidth` and `sample_bandwidth`, not both".into()));
            }
            (Some(h), None) => Width::PerQuery(Points::new(h, "query_bandwidth")?),
            (None, Some(h)) => Width::PerSample(Points::new(h, "sample_bandwidth")?),
            (None, None) => Width::Scalar(bandwidth),
        };
        Ok(PyKernelSpec { kernel, width })
    }

    /// The same kernel with one bandwidth per query (a balloon estimator's).
    fn with_query_bandwidth(&self, query_bandwidth: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(self.with_width(Width::PerQuery(Points::new(query_bandwidth, "query_bandwidth")?)))
    }

    /// The same kernel with one bandwidth per sample (a sample-point estimator's).
    fn with_sample_bandwidth(&self, sample_bandwidth: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(self.with_width(Width::PerSample(Points::new(sample_bandwidth, "sample_bandwidth")?)))
    }

    fn __repr__(&self) -> String {
        let kernel = match &self.kernel {
            Kernel::Radial(p) => format!("{:?}", p.name()),
            Kernel::Knn { k, profile } => format!("'knn', n_neighbors={k}, knn_profile={:?}", profile.map(Profile::name)),
            Kernel::Dot { temperature } => format!("'dot', temperature={temperature}"),
        };
        let width = match &self.width {
            Width::Scalar(h) => format!("bandwidth={h}"),
            Width::PerQuery(_) => "query_bandwidth=...".to_owned(),
            Width::PerSample(_) => "sample_bandwidth=...".to_owned(),
        };
        format!("KernelSpec({kernel}, {width})")
    }

    /// Pickled as its arguments.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let this = slf.get();
        let kw = PyDict::new(py);
        let name = match &this.kernel {
            Kernel::Radial(p) => p.name(),
            Kernel::Knn { k, profile } => {
                kw.set_item("n_neighbors", k)?;
                kw.set_item("knn_profile", profile.map(Profile::name))?;
                "knn"
            }
            Kernel::Dot { temperature } => {
                kw.set_item("temperature", temperature)?;
                "dot"
            }
        };
        let bandwidth = match &this.width {
            Width::Scalar(h) => *h,
            Width::PerQuery(h) => {
                kw.set_item("query_bandwidth", h.to_object(py))?;
                1.0
            }
            Width::PerSample(h) => {
                kw.set_item("sample_bandwidth", h.to_object(py))?;
                1.0
            }
        };
        // `KernelSpec(name, bandwidth, **kw)`: copyreg's `__newobj_ex__` takes keyword arguments.
        let newobj_ex = py.import("copyreg")?.getattr("__newobj_ex__")?;
        let args = PyTuple::new(py, [name.into_pyobject(py)?.into_any(), bandwidth.into_pyobject(py)?.into_any()])?;
        PyTuple::new(py, [newobj_ex, PyTuple::new(py, [slf.get_type().into_any(), args.into_any(), kw.into_any()])?.into_any()])
    }
}
