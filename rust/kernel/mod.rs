//! Localization kernels: radial profiles k(u) of the scaled distance u = ‖x − x'‖ / h,
//! their supports and d-dimensional normalising constants (SPEC §1).
//!
//! Profiles are evaluated from u² so that the common ones never take a square root.
//! The engine is generic over [`ProfileFn`] so the `match` on the kernel kind happens
//! once per call (see [`dispatch_profile!`]), never inside the pair loop.

use crate::error::{LocalizationError, Result};
use crate::real::Real;
use std::f64::consts::PI;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    Gaussian,
    Exponential,
    Cauchy,
    Tophat,
    Epanechnikov,
    Biweight,
    Triweight,
    Linear,
    Tricube,
    Cosine,
}

pub const ALL_PROFILES: [Profile; 10] = [
    Profile::Gaussian,
    Profile::Exponential,
    Profile::Cauchy,
    Profile::Tophat,
    Profile::Epanechnikov,
    Profile::Biweight,
    Profile::Triweight,
    Profile::Linear,
    Profile::Tricube,
    Profile::Cosine,
];

impl Profile {
    pub fn from_name(name: &str) -> Result<Self> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "gaussian" | "rbf" | "normal" => Profile::Gaussian,
            "exponential" | "laplace" | "laplacian" => Profile::Exponential,
            "cauchy" => Profile::Cauchy,
            "tophat" | "flat" | "uniform" => Profile::Tophat,
            "epanechnikov" => Profile::Epanechnikov,
            "biweight" | "quartic" => Profile::Biweight,
            "triweight" => Profile::Triweight,
            "linear" | "triangular" => Profile::Linear,
            "tricube" => Profile::Tricube,
            "cosine" => Profile::Cosine,
            other => {
                return Err(LocalizationError::param(
                    "kernel",
                    format!(
                        "unknown kernel {other:?}; expected one of gaussian, exponential, cauchy, tophat, \
                         epanechnikov, biweight, triweight, linear, tricube, cosine (or an alias)"
                    ),
                ))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Profile::Gaussian => "gaussian",
            Profile::Exponential => "exponential",
            Profile::Cauchy => "cauchy",
            Profile::Tophat => "tophat",
            Profile::Epanechnikov => "epanechnikov",
            Profile::Biweight => "biweight",
            Profile::Triweight => "triweight",
            Profile::Linear => "linear",
            Profile::Tricube => "tricube",
            Profile::Cosine => "cosine",
        }
    }

    /// Radius of the support in units of h (`None` = unbounded).
    pub const fn support(self) -> Option<f64> {
        match self {
            Profile::Gaussian | Profile::Exponential | Profile::Cauchy => None,
            _ => Some(1.0),
        }
    }

    /// Exponential-type profiles are accumulated with a running max (online softmax).
    pub const fn is_exponential(self) -> bool {
        matches!(self, Profile::Gaussian | Profile::Exponential)
    }

    /// k(u) in f64, the reference implementation the fast paths are tested against.
    pub fn eval(self, u: f64) -> f64 {
        dispatch_profile!(self, P, P::k(u * u))
    }

    /// log ∫_{ℝ^d} k(‖x‖) dx, so that K_h(x) = k(‖x‖/h) / (h^d ∫k) integrates to one.
    pub fn log_integral(self, d: usize) -> Result<f64> {
        if d == 0 {
            return Err(LocalizationError::param("X", "needs at least one feature"));
        }
        let df = d as f64;
        let log_sphere = (2.0f64).ln() + 0.5 * df * PI.ln() - ln_gamma_half(d); // log |S^{d-1}|
        // ∫_0^1 (1 − r²)^a r^{d−1} dr = a! / (2 ∏_{i=0}^{a} (d/2 + i))
        let poly = |a: u32| -> f64 {
            let mut v = (1..=a).map(|i| i as f64).product::<f64>() / 2.0;
            for i in 0..=a {
                v /= df / 2.0 + i as f64;
            }
            v.ln()
        };
        Ok(match self {
            Profile::Gaussian => 0.5 * df * (2.0 * PI).ln(),
            Profile::Exponential => log_sphere + ln_factorial(d - 1),
            Profile::Cauchy => {
                if d != 1 {
                    return Err(LocalizationError::param(
                        "kernel",
                        format!("the cauchy profile is not integrable in {d} dimensions; use it for local means, not densities"),
                    ));
                }
                PI.ln()
            }
            Profile::Tophat => log_sphere + poly(0),
            Profile::Epanechnikov => log_sphere + poly(1),
            Profile::Biweight => log_sphere + poly(2),
            Profile::Triweight => log_sphere + poly(3),
            Profile::Linear => log_sphere - (df * (df + 1.0)).ln(),
            Profile::Tricube => {
                let a = df / 3.0;
                log_sphere + (6.0 / (3.0 * a * (a + 1.0) * (a + 2.0) * (a + 3.0))).ln()
            }
            Profile::Cosine => log_sphere + cosine_radial_moment(d).ln(),
        })
    }
}

/// ln Γ(d/2) for a positive integer d, by the exact half-integer recursion.
fn ln_gamma_half(d: usize) -> f64 {
    if d % 2 == 0 {
        ln_factorial(d / 2 - 1)
    } else {
        // Γ(k + 1/2) = √π · ∏_{i=0}^{k−1} (i + 1/2)
        let k = (d - 1) / 2;
        0.5 * PI.ln() + (0..k).map(|i| (i as f64 + 0.5).ln()).sum::<f64>()
    }
}

fn ln_factorial(n: usize) -> f64 {
    (2..=n).map(|i| (i as f64).ln()).sum()
}

/// ∫_0^1 cos(πr/2) r^{d−1} dr by repeated integration by parts (exact, no quadrature).
fn cosine_radial_moment(d: usize) -> f64 {
    // I_n = ∫_0^1 r^n cos(ar) dr, J_n = ∫_0^1 r^n sin(ar) dr with a = π/2:
    // I_n = (sin a − n J_{n−1}) / a,  J_n = (−cos a + n I_{n−1}) / a, sin a = 1, cos a = 0.
    let a = PI / 2.0;
    let (mut i, mut j) = (1.0 / a, 1.0 / a); // I_0, J_0
    for n in 1..d {
        let (ni, nj) = ((1.0 - n as f64 * j) / a, (n as f64 * i) / a);
        i = ni;
        j = nj;
    }
    i
}

/// A radial profile as a type, so the engine's inner loops are monomorphised per kernel.
pub trait ProfileFn: Copy + Send + Sync + 'static {
    const PROFILE: Profile;
    /// k at squared scaled distance u².
    fn k<F: Real>(u2: F) -> F;
    /// log k at u² (only called for exponential-type profiles).
    #[inline(always)]
    fn log_k<F: Real>(u2: F) -> F {
        Self::k(u2).ln()
    }
}

macro_rules! profile_type {
    ($t:ident, $p:expr, |$u2:ident| $body:expr $(, log |$l:ident| $lbody:expr)?) => {
        #[derive(Copy, Clone, Debug)]
        pub struct $t;
        impl ProfileFn for $t {
            const PROFILE: Profile = $p;
            #[inline(always)]
            fn k<F: Real>($u2: F) -> F {
                $body
            }
            $(
            #[inline(always)]
            fn log_k<F: Real>($l: F) -> F {
                $lbody
            }
            )?
        }
    };
}

#[inline(always)]
fn one_minus<F: Real>(x: F) -> F {
    (F::one() - x).max(F::zero())
}

profile_type!(Gaussian, Profile::Gaussian, |u2| (u2 * F::of(-0.5)).exp_fast(), log |u2| u2 * F::of(-0.5));
profile_type!(Exponential, Profile::Exponential, |u2| (-u2.sqrt()).exp_fast(), log |u2| -u2.sqrt());
profile_type!(Cauchy, Profile::Cauchy, |u2| F::one() / (F::one() + u2));
profile_type!(Tophat, Profile::Tophat, |u2| if u2 < F::one() { F::one() } else { F::zero() });
profile_type!(Epanechnikov, Profile::Epanechnikov, |u2| one_minus(u2));
profile_type!(Biweight, Profile::Biweight, |u2| {
    let t = one_minus(u2);
    t * t
});
profile_type!(Triweight, Profile::Triweight, |u2| {
    let t = one_minus(u2);
    t * t * t
});
profile_type!(Linear, Profile::Linear, |u2| one_minus(u2.sqrt()));
profile_type!(Tricube, Profile::Tricube, |u2| {
    let u = u2.sqrt().min(F::one());
    let t = F::one() - u * u * u;
    t * t * t
});
profile_type!(Cosine, Profile::Cosine, |u2| {
    if u2 < F::one() {
        (u2.sqrt() * F::of(std::f64::consts::FRAC_PI_2)).cos()
    } else {
        F::zero()
    }
});

/// Run `$body` with `$P` bound to the profile type matching the runtime value `$profile`.
#[macro_export]
macro_rules! dispatch_profile {
    ($profile:expr, $P:ident, $body:expr) => {{
        use $crate::kernel as __k;
        match $profile {
            __k::Profile::Gaussian => { type $P = __k::Gaussian; $body }
            __k::Profile::Exponential => { type $P = __k::Exponential; $body }
            __k::Profile::Cauchy => { type $P = __k::Cauchy; $body }
            __k::Profile::Tophat => { type $P = __k::Tophat; $body }
            __k::Profile::Epanechnikov => { type $P = __k::Epanechnikov; $body }
            __k::Profile::Biweight => { type $P = __k::Biweight; $body }
            __k::Profile::Triweight => { type $P = __k::Triweight; $body }
            __k::Profile::Linear => { type $P = __k::Linear; $body }
            __k::Profile::Tricube => { type $P = __k::Tricube; $body }
            __k::Profile::Cosine => { type $P = __k::Cosine; $body }
        }
    }};
}
pub use dispatch_profile;

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: [(Profile, fn(f64) -> f64); 10] = [
        (Profile::Gaussian, |u| (-u * u / 2.0).exp()),
        (Profile::Exponential, |u| (-u).exp()),
        (Profile::Cauchy, |u| 1.0 / (1.0 + u * u)),
        (Profile::Tophat, |u| if u < 1.0 { 1.0 } else { 0.0 }),
        (Profile::Epanechnikov, |u| (1.0 - u * u).max(0.0)),
        (Profile::Biweight, |u| (1.0 - u * u).max(0.0).powi(2)),
        (Profile::Triweight, |u| (1.0 - u * u).max(0.0).powi(3)),
        (Profile::Linear, |u| (1.0 - u).max(0.0)),
        (Profile::Tricube, |u| (1.0 - u.powi(3)).max(0.0).powi(3)),
        (Profile::Cosine, |u| if u < 1.0 { (PI * u / 2.0).cos() } else { 0.0 }),
    ];

    #[test]
    fn profiles_match_their_formulas_and_support_edges() {
        for (p, f) in TABLE {
            for i in 0..=300 {
                let u = i as f64 / 100.0;
                assert!((p.eval(u) - f(u)).abs() < 1e-14, "{p:?} at {u}");
                assert!((dispatch_profile!(p, P, P::k((u * u) as f32)) as f64 - f(u)).abs() < 2e-6);
            }
            if let Some(r) = p.support() {
                assert_eq!(p.eval(r), 0.0, "{p:?} must vanish on the support edge");
                assert_eq!(p.eval(r * 1.5), 0.0);
                assert!(p.eval(r * 0.999) > 0.0);
            }
            assert_eq!(Profile::from_name(p.name()).unwrap(), p);
        }
        assert_eq!(Profile::from_name("flat").unwrap(), Profile::Tophat);
        assert!(Profile::from_name("nope").is_err());
    }

    /// Radial numerical integration: ∫ k(‖x‖)/(∫k) dx = |S^{d−1}| ∫ k(r) r^{d−1} dr / e^{log_integral} = 1.
    #[test]
    fn normalising_constants_integrate_to_one() {
        for (p, f) in TABLE {
            for d in 1..=3usize {
                let Ok(logc) = p.log_integral(d) else {
                    assert!(p == Profile::Cauchy && d > 1);
                    continue;
                };
                let sphere = match d {
                    1 => 2.0,
                    2 => 2.0 * PI,
                    _ => 4.0 * PI,
                };
                let upper = if p.support().is_some() { 1.0 } else { 60.0 };
                let n = 400_000;
                let hstep = upper / n as f64;
                // Simpson's rule in r
                let mut s = 0.0;
                for i in 0..=n {
                    let r = i as f64 * hstep;
                    let w = if i == 0 || i == n { 1.0 } else if i % 2 == 1 { 4.0 } else { 2.0 };
                    s += w * f(r) * r.powi(d as i32 - 1);
                }
                let mut integral = sphere * s * hstep / 3.0;
                if p == Profile::Cauchy {
                    integral += 2.0 * (PI / 2.0 - upper.atan()); // analytic tail beyond the grid
                }
                let total = integral / logc.exp();
                let tol = if p == Profile::Tophat { 1e-5 } else { 1e-7 };
                assert!((total - 1.0).abs() < tol, "{p:?} d={d}: {total}");
            }
        }
    }
}
