//! The engine's vocabulary: how points are compared (`Kernel`, `Bandwidth`), where
//! references come from (`Neighborhood`), the run's `Options`, the inputs (`Problem`) and
//! the output (`LocalSums`). Shared by every path of the engine and by its callers.

use crate::distance::Scale;
use crate::error::Result;
use crate::kernel::Profile;
use crate::memory;
use crate::parallel::Monitor;
use crate::real::Real;
use ndarray::{Array1, Array2, Array3, ArrayView1, ArrayView2, Axis};

/// How two points are compared.
#[derive(Clone, Debug, PartialEq)]
pub enum Kernel {
    /// A radial profile of ‖q − x‖ / h.
    Radial(Profile),
    /// K = exp(q·x / τ): the query–key kernel of attention and modern Hopfield networks.
    Dot { temperature: f64 },
    /// K = 1[x among the k nearest references of q], optionally times a profile with h equal
    /// to the k-th neighbour distance (so the k-th neighbour itself gets k(1)).
    Knn { k: usize, profile: Option<Profile> },
}

/// Bandwidth h of a radial kernel.
#[derive(Clone, Debug, PartialEq)]
pub enum Bandwidth<F> {
    Scalar(F),
    /// Balloon estimators: one h per query.
    PerQuery(Vec<F>),
    /// Sample-point estimators: one h per reference.
    PerReference(Vec<F>),
}

impl<F: Real> Bandwidth<F> {
    /// The largest finite bandwidth (0 when there is none).
    pub fn largest(&self) -> f64 {
        let all: &[F] = match self {
            Bandwidth::Scalar(h) => std::slice::from_ref(h),
            Bandwidth::PerQuery(h) | Bandwidth::PerReference(h) => h,
        };
        all.iter().map(|h| h.f64().abs()).filter(|h| h.is_finite()).fold(0.0, f64::max)
    }

    /// The bandwidth in the working units of `lengths`.
    pub fn scaled(&self, lengths: Scale) -> Self {
        match self {
            Bandwidth::Scalar(h) => Bandwidth::Scalar(lengths.down(*h)),
            Bandwidth::PerQuery(h) => Bandwidth::PerQuery(h.iter().map(|&v| lengths.down(v)).collect()),
            Bandwidth::PerReference(h) => Bandwidth::PerReference(h.iter().map(|&v| lengths.down(v)).collect()),
        }
    }
}

/// Where the references of a query come from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Neighborhood {
    /// Tree for compact kernels when it visits far fewer pairs than brute force.
    Auto,
    Brute,
    Tree,
    /// The Gaussian's two-sided Taylor expansion when it applies (else as `Brute`).
    Expansion,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Local polynomial degree of the design moments to return (None: none).
    pub degree: Option<usize>,
    /// Leave-one-out ("hollow" kernel): query i never sees reference i (needs m = n).
    pub exclude_self: bool,
    pub neighborhood: Neighborhood,
    /// The run's cancellation (polled per tile or query) and progress.
    pub monitor: Monitor,
    /// Report the queries done to `monitor` (off when the engine runs inside an algorithm that
    /// reports its own progress, such as mean shift's seeds).
    pub progress: bool,
    /// Error the Gaussian expansions may leave per query, relative to Σ |w| K (and to max |v|
    /// times that for sums of values), when the caller can use sums that coarse: the series'
    /// far pairs then take fewer terms, the Chebyshev grid fewer nodes. Never below
    /// `expansion::TOLERANCE`, the default; only the expansions without design moments read it
    /// (every other path is exact to rounding).
    pub series_tolerance: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            degree: None,
            exclude_self: false,
            neighborhood: Neighborhood::Auto,
            monitor: Monitor::default(),
            progress: false,
            series_tolerance: super::expansion::TOLERANCE,
        }
    }
}

impl Options {
    /// `total` queries to do, none done yet (when reporting progress).
    pub(crate) fn start_progress(&self, total: usize) {
        if self.progress {
            self.monitor.set_progress(0, total);
        }
    }

    /// `k` more queries done (when reporting progress).
    pub(crate) fn advance(&self, k: usize) {
        if self.progress {
            self.monitor.advance(k);
        }
    }
}

/// Kernel-weighted sums per query. True sums are `den · exp(log_scale)` etc.
#[derive(Clone, Debug)]
pub struct LocalSums<F> {
    pub num: Array2<F>,
    pub den: Array1<F>,
    pub log_scale: Array1<F>,
    /// m × D × D, D = number of basis functions (1, 1 + d, 1 + d + d(d+1)/2).
    pub moments: Option<Array3<F>>,
    /// m × D × p.
    pub cross: Option<Array3<F>>,
}

impl<F: Real> LocalSums<F> {
    /// All zeros for m queries, p value columns and (with moments) `basis` functions;
    /// `OutOfMemory` if they do not fit.
    pub fn try_zeros(m: usize, p: usize, basis: Option<usize>) -> Result<Self> {
        let z = F::zero();
        Ok(LocalSums {
            num: memory::try_array("local sums", (m, p), z)?,
            den: memory::try_array("local sums", m, z)?,
            log_scale: memory::try_array("local sums", m, z)?,
            moments: basis.map(|nb| memory::try_array("local moments", (m, nb, nb), z)).transpose()?,
            cross: basis.map(|nb| memory::try_array("local moments", (m, nb, p), z)).transpose()?,
        })
    }

    /// The local mean S₁ / S₀ (the log-scale cancels), NaN where the total weight is zero,
    /// and the number of such queries.
    pub fn mean(&self) -> (Array2<F>, usize) {
        let mut mean = self.num.clone();
        let mut zero = 0;
        for (mut row, &den) in mean.axis_iter_mut(Axis(0)).zip(&self.den) {
            // `!(den != 0)`, as Python's test: a NaN total weight is not "zero".
            if den != F::zero() {
                row.mapv_inplace(|v| v / den);
            } else {
                zero += 1;
                row.fill(F::nan());
            }
        }
        (mean, zero)
    }
}

pub struct Problem<'a, F> {
    pub queries: ArrayView2<'a, F>,
    pub x: ArrayView2<'a, F>,
    pub values: Option<ArrayView2<'a, F>>,
    pub weights: Option<ArrayView1<'a, F>>,
}
