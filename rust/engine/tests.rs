use super::*;
use crate::kernel::ALL_PROFILES;
use crate::parallel::{install, Monitor};
use ndarray::Axis;
use rand::{rngs::StdRng, Rng, SeedableRng};

fn rand_mat(rng: &mut StdRng, n: usize, d: usize) -> Array2<f64> {
    Array2::from_shape_fn((n, d), |_| rng.random::<f64>() * 2.0 - 1.0)
}

/// The definition, as a plain double loop in f64.
fn naive(q: &Array2<f64>, x: &Array2<f64>, v: &Array2<f64>, w: &[f64], k: &dyn Fn(usize, usize, f64) -> f64, skip_self: bool) -> (Array2<f64>, Vec<f64>) {
    let mut num = Array2::zeros((q.nrows(), v.ncols()));
    let mut den = vec![0.0; q.nrows()];
    for i in 0..q.nrows() {
        for j in 0..x.nrows() {
            if skip_self && i == j {
                continue;
            }
            let d2 = crate::distance::sq_euclidean(q.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap());
            let kw = k(i, j, d2) * w[j];
            den[i] += kw;
            for c in 0..v.ncols() {
                num[(i, c)] += kw * v[(j, c)];
            }
        }
    }
    (num, den)
}

fn true_sums(s: &LocalSums<f64>) -> (Array2<f64>, Vec<f64>) {
    let f: Vec<f64> = s.log_scale.iter().map(|l| l.exp()).collect();
    let mut num = s.num.clone();
    for (i, mut r) in num.rows_mut().into_iter().enumerate() {
        r *= f[i];
    }
    (num, s.den.iter().zip(&f).map(|(a, b)| a * b).collect())
}

fn assert_close(a: &Array2<f64>, b: &Array2<f64>, da: &[f64], db: &[f64], tol: f64, what: &str) {
    for (x, y) in a.iter().zip(b.iter()).chain(da.iter().zip(db)) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{what}: {x} vs {y}");
    }
}

#[test]
fn engine_matches_naive_loop_for_every_profile_path_and_bandwidth() {
    let mut rng = StdRng::seed_from_u64(7);
    for &d in &[1usize, 2, 3, 5, 20] {
        let (n, m) = (1100, 70);
        let x = rand_mat(&mut rng, n, d);
        let q = rand_mat(&mut rng, m, d);
        let v = rand_mat(&mut rng, n, if d == 5 { 11 } else { 3 }); // 11 columns: the wide-values path
        let w: Vec<f64> = (0..n).map(|_| rng.random::<f64>() + 0.1).collect();
        let hq: Vec<f64> = (0..m).map(|_| 0.3 + rng.random::<f64>()).collect();
        let hr: Vec<f64> = (0..n).map(|_| 0.3 + rng.random::<f64>()).collect();
        for profile in ALL_PROFILES {
            for (bi, bw) in [Bandwidth::Scalar(0.7), Bandwidth::PerQuery(hq.clone()), Bandwidth::PerReference(hr.clone())].iter().enumerate() {
                let kf = |i: usize, j: usize, d2: f64| {
                    let h = match bi {
                        0 => 0.7,
                        1 => hq[i],
                        _ => hr[j],
                    };
                    profile.eval(d2.sqrt() / h)
                };
                let (wn, wd) = naive(&q, &x, &v, &w, &kf, false);
                // Expansion applies to the Gaussian with a scalar bandwidth in d ≤ 4; elsewhere it
                // must fall back to the direct sums.
                for nh in [Neighborhood::Brute, Neighborhood::Tree, Neighborhood::Auto, Neighborhood::Expansion] {
                    let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
                    let s = local_sums(&pb, &Kernel::Radial(profile), bw, &Options { neighborhood: nh, ..Options::default() }).unwrap();
                    let (gn, gd) = true_sums(&s);
                    assert_close(&gn, &wn, &gd, &wd, 1e-11, &format!("{profile:?} d={d} bw#{bi} {nh:?}"));
                }
            }
        }
    }
}

#[test]
fn f32_fast_path_agrees_with_f64() {
    let mut rng = StdRng::seed_from_u64(9);
    for &d in &[2usize, 24] {
        let x = rand_mat(&mut rng, 3000, d);
        let q = rand_mat(&mut rng, 100, d);
        let v = rand_mat(&mut rng, 3000, 2);
        for profile in [Profile::Gaussian, Profile::Epanechnikov, Profile::Exponential] {
            let x32 = x.mapv(|a| a as f32);
            let q32 = q.mapv(|a| a as f32);
            let v32 = v.mapv(|a| a as f32);
            let h = if d > 3 { 6.0 } else { 0.4 };
            let a = local_sums(&Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None }, &Kernel::Radial(profile), &Bandwidth::Scalar(h), &Options::default()).unwrap();
            let b = local_sums(&Problem { queries: q32.view(), x: x32.view(), values: Some(v32.view()), weights: None }, &Kernel::Radial(profile), &Bandwidth::Scalar(h as f32), &Options::default()).unwrap();
            for i in 0..100 {
                for c in 0..2 {
                    let ma = a.num[(i, c)] / a.den[i];
                    let mb = (b.num[(i, c)] / b.den[i]) as f64;
                    assert!((ma - mb).abs() < 2e-4, "{profile:?} d={d}: {ma} vs {mb}");
                }
            }
        }
    }
}

#[test]
fn leave_one_out_and_dot_kernel_and_knn() {
    let mut rng = StdRng::seed_from_u64(11);
    let x = rand_mat(&mut rng, 600, 3);
    let v = rand_mat(&mut rng, 600, 2);
    let w = vec![1.0; 600];
    for profile in [Profile::Gaussian, Profile::Biweight] {
        let kf = |_: usize, _: usize, d2: f64| profile.eval(d2.sqrt() / 0.5);
        let (wn, wd) = naive(&x, &x, &v, &w, &kf, true);
        for nh in [Neighborhood::Brute, Neighborhood::Tree] {
            let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: None };
            let s = local_sums(&pb, &Kernel::Radial(profile), &Bandwidth::Scalar(0.5), &Options { exclude_self: true, neighborhood: nh, ..Options::default() }).unwrap();
            let (gn, gd) = true_sums(&s);
            assert_close(&gn, &wn, &gd, &wd, 1e-11, "hollow");
        }
    }
    // dot kernel = softmax attention
    let q = rand_mat(&mut rng, 40, 3);
    let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None };
    let s = local_sums(&pb, &Kernel::Dot { temperature: 0.3 }, &Bandwidth::Scalar(1.0), &Options::default()).unwrap();
    for i in 0..40 {
        let logits: Vec<f64> = (0..600).map(|j| crate::distance::dot(q.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap()) / 0.3).collect();
        let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = logits.iter().map(|l| (l - mx).exp()).collect();
        let z: f64 = e.iter().sum();
        for c in 0..2 {
            let want: f64 = e.iter().zip(v.column(c)).map(|(a, b)| a * b).sum::<f64>() / z;
            assert!((s.num[(i, c)] / s.den[i] - want).abs() < 1e-12);
        }
    }
    // kNN kernel = mean of the k nearest values
    let s = local_sums(&pb, &Kernel::Knn { k: 5, profile: None }, &Bandwidth::Scalar(1.0), &Options::default()).unwrap();
    let nb = Index::build(x.view(), Algorithm::Brute, 16, &Monitor::default()).unwrap().knn(q.view(), 5, &Monitor::default()).unwrap();
    for i in 0..40 {
        let want: f64 = nb.row(i).0.iter().map(|&j| v[(j, 0)]).sum::<f64>() / 5.0;
        assert!((s.num[(i, 0)] / s.den[i] - want).abs() < 1e-12);
    }
}

#[test]
fn tiny_bandwidth_gives_the_nearest_neighbour_not_nan() {
    let x = ndarray::array![[0.0], [1.0], [3.0]];
    let v = ndarray::array![[10.0], [20.0], [30.0]];
    let q = ndarray::array![[0.9], [2.2]];
    for nh in [Neighborhood::Auto, Neighborhood::Expansion] {
        let opts = Options { neighborhood: nh, ..Options::default() };
        for bw in [1e-3, 1e-8] {
            let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None };
            let s = local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(bw), &opts).unwrap();
            assert_eq!(s.num[(0, 0)] / s.den[0], 20.0);
            assert_eq!(s.num[(1, 0)] / s.den[1], 30.0);
            assert!(s.log_scale[0] < -1000.0);
        }
        // a zero-weight sample nearest to the query must not hide the others
        let w = ndarray::array![0.0, 1.0, 1.0];
        let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: Some(w.view()) };
        let s = local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(0.01), &opts).unwrap();
        assert_eq!(s.num[(0, 0)] / s.den[0], 20.0);
    }
    // compact kernel with nothing in range: den = 0 reported, no NaN invented here
    let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None };
    let s = local_sums(&pb, &Kernel::Radial(Profile::Epanechnikov), &Bandwidth::Scalar(0.01), &Options::default()).unwrap();
    assert_eq!(s.den[0], 0.0);
}

/// Per query: the local means of the values, moments and cross terms (num/den, …), which do
/// not depend on the stabilising scale.
fn means(s: &LocalSums<f64>) -> Vec<Vec<f64>> {
    (0..s.den.len())
        .map(|i| {
            let mut r: Vec<f64> = s.num.row(i).to_vec();
            for a in s.moments.iter().chain(&s.cross) {
                r.extend(a.index_axis(Axis(0), i).iter());
            }
            r.iter().map(|v| v / s.den[i]).collect()
        })
        .collect()
}

/// Each query's means within `tol` of the largest of its reference means.
fn assert_means_close(a: &[Vec<f64>], b: &[Vec<f64>], tol: impl Fn(usize) -> f64, what: &str) {
    for (i, (ra, rb)) in a.iter().zip(b).enumerate() {
        let scale = rb.iter().fold(0.0f64, |s, v| s.max(v.abs()));
        for (x, y) in ra.iter().zip(rb) {
            assert!((x - y).abs() <= tol(i) * scale, "{what} query {i}: {x} vs {y}");
        }
    }
}

#[test]
fn expansion_matches_direct_sums_with_moments_zero_weights_and_far_queries() {
    let mut rng = StdRng::seed_from_u64(21);
    // d = 3 is past expansion::MAX_DIM: the direct sums must take over.
    for d in 1..=3 {
        let (n, m) = (500, 160);
        let x = rand_mat(&mut rng, n, d);
        let mut q = rand_mat(&mut rng, m, d);
        // Queries far outside the data (the stabilised sums must still find their neighbours).
        for (i, shift) in [(0, 20.0), (1, -20.0), (2, 200.0), (3, 1e4)] {
            q[(i, 0)] += shift;
        }
        let v = rand_mat(&mut rng, n, 2);
        let w: Vec<f64> = (0..n).map(|j| if j % 7 == 0 { 0.0 } else { rng.random::<f64>() + 0.1 }).collect();
        let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
        for h in [0.02, 0.3, 3.0, 1e3] {
            for degree in [None, Some(0), Some(1), Some(2)] {
                let run = |nh| means(&local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(h), &Options { degree, neighborhood: nh, ..Options::default() }).unwrap());
                // Both round the log-kernel, whose size grows with the squared distance in
                // bandwidths; the tolerance follows it.
                let tol = |i: usize| 1e-12 * (1.0 + (0..d).map(|k| (q[(i, k)].abs() - 1.0).max(0.0).powi(2)).sum::<f64>() / (h * h));
                assert_means_close(&run(Neighborhood::Expansion), &run(Neighborhood::Brute), tol, &format!("d={d} h={h} degree={degree:?}"));
            }
        }
    }
    // f32 input: sums in f64 inside, reported in f32.
    let x = rand_mat(&mut rng, 3000, 2);
    let v = rand_mat(&mut rng, 3000, 1);
    let (x32, v32) = (x.mapv(|a| a as f32), v.mapv(|a| a as f32));
    let opts = Options { neighborhood: Neighborhood::Expansion, ..Options::default() };
    let a = local_sums(&Problem { queries: x32.view(), x: x32.view(), values: Some(v32.view()), weights: None }, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(0.5f32), &opts).unwrap();
    let b = local_sums(&Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: None }, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(0.5), &Options::default()).unwrap();
    for i in 0..3000 {
        assert!(((a.num[(i, 0)] / a.den[i]) as f64 - b.num[(i, 0)] / b.den[i]).abs() < 1e-5);
    }
}

#[test]
fn a_coarser_series_tolerance_stays_within_its_bound() {
    // Clustered points, offset or not; values: a coordinate (the mean-shift shortcut) and
    // another column. Each sum within tolerance · Σ K (times max |v| for values) of the direct
    // sums, and not the default's answer (the option is used).
    let mut rng = StdRng::seed_from_u64(31);
    let n = 3000;
    for offset in [0.0, 1e3] {
        let mut x = rand_mat(&mut rng, n, 2).mapv(|a| 0.3 * a);
        for (i, mut row) in x.rows_mut().into_iter().enumerate() {
            row[0] += offset + (i % 3) as f64;
            row[1] += offset;
        }
        let other = rand_mat(&mut rng, n, 1).mapv(|a| 10.0 * a - 5.0);
        let v = ndarray::concatenate![ndarray::Axis(1), x.column(0).insert_axis(ndarray::Axis(1)), other];
        let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: None };
        let sums = |nh, tol| {
            let opts = Options { neighborhood: nh, series_tolerance: tol, ..Options::default() };
            local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(0.05), &opts).unwrap()
        };
        let exact = sums(Neighborhood::Brute, SERIES_TOLERANCE);
        let fine = sums(Neighborhood::Expansion, SERIES_TOLERANCE);
        for tol in [1e-10, 1e-6, 1e-3] {
            let coarse = sums(Neighborhood::Expansion, tol);
            let mut differs = false;
            for i in 0..n {
                let scale = (coarse.log_scale[i] - exact.log_scale[i]).exp();
                let total = exact.den[i];
                assert!((coarse.den[i] * scale - total).abs() <= tol * total, "den, tol {tol}, query {i}");
                for c in 0..2 {
                    let top = v.column(c).iter().fold(0.0f64, |m, a| m.max(a.abs()));
                    assert!((coarse.num[(i, c)] * scale - exact.num[(i, c)]).abs() <= tol * top * total, "value {c}, tol {tol}, query {i}");
                }
                differs |= coarse.den[i] != fine.den[i];
            }
            assert!(differs, "tol {tol} gave the default's sums");
        }
    }
}

#[test]
fn leave_one_out_through_the_expansion_matches_the_direct_hollow_sums() {
    let mut rng = StdRng::seed_from_u64(23);
    for d in 1..=2 {
        let n = 400;
        let x = rand_mat(&mut rng, n, d);
        let v = rand_mat(&mut rng, n, 2);
        let w: Vec<f64> = (0..n).map(|j| if j % 7 == 0 { 0.0 } else { rng.random::<f64>() + 0.1 }).collect();
        let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
        // 1e-4: every point's own term dominates, the series is refused and the direct path runs.
        for h in [1e-4, 0.03, 0.3, 3.0] {
            for degree in [None, Some(1), Some(2)] {
                let run = |nh| {
                    let opts = Options { degree, exclude_self: true, neighborhood: nh, ..Options::default() };
                    means(&local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(h), &opts).unwrap())
                };
                assert_means_close(&run(Neighborhood::Expansion), &run(Neighborhood::Brute), |_| 1e-11, &format!("d={d} h={h} degree={degree:?}"));
            }
        }
    }
}

#[test]
fn results_are_bit_identical_for_any_thread_count() {
    let mut rng = StdRng::seed_from_u64(5);
    for &d in &[2usize, 30] {
        let x = rand_mat(&mut rng, 2000, d);
        let q = rand_mat(&mut rng, 333, d);
        let v = rand_mat(&mut rng, 2000, if d == 2 { 2 } else { 12 });
        let cases = [
            (Kernel::Radial(Profile::Gaussian), Neighborhood::Brute),
            (Kernel::Radial(Profile::Gaussian), Neighborhood::Expansion),
            (Kernel::Radial(Profile::Tricube), Neighborhood::Auto),
            (Kernel::Knn { k: 7, profile: Some(Profile::Epanechnikov) }, Neighborhood::Auto),
        ];
        for (kernel, neighborhood) in cases {
            let run = |t: usize| {
                install(t, || {
                    let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None };
                    local_sums(&pb, &kernel, &Bandwidth::Scalar(0.9), &Options { degree: Some(1), neighborhood, ..Options::default() }).unwrap()
                })
                .unwrap()
            };
            let (a, b, c) = (run(1), run(2), run(5));
            for o in [&b, &c] {
                assert_eq!(a.num, o.num);
                assert_eq!(a.den, o.den);
                assert_eq!(a.moments, o.moments);
            }
        }
    }
}

#[test]
fn design_moments_match_their_definition() {
    let mut rng = StdRng::seed_from_u64(2);
    let x = rand_mat(&mut rng, 500, 2);
    let q = rand_mat(&mut rng, 9, 2);
    let v = rand_mat(&mut rng, 500, 1);
    for nh in [Neighborhood::Brute, Neighborhood::Tree] {
        let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None };
        let s = local_sums(&pb, &Kernel::Radial(Profile::Epanechnikov), &Bandwidth::Scalar(0.8), &Options { degree: Some(2), neighborhood: nh, ..Options::default() }).unwrap();
        let mo = s.moments.unwrap();
        let cr = s.cross.unwrap();
        assert_eq!(mo.dim(), (9, 6, 6));
        for i in 0..9 {
            let mut want = vec![0.0; 36];
            let mut wc = vec![0.0; 6];
            for j in 0..500 {
                let dx = x[(j, 0)] - q[(i, 0)];
                let dy = x[(j, 1)] - q[(i, 1)];
                let k = Profile::Epanechnikov.eval((dx * dx + dy * dy).sqrt() / 0.8);
                let phi = [1.0, dx, dy, dx * dx, dx * dy, dy * dy];
                for a in 0..6 {
                    wc[a] += k * phi[a] * v[(j, 0)];
                    for b in 0..6 {
                        want[a * 6 + b] += k * phi[a] * phi[b];
                    }
                }
            }
            for a in 0..6 {
                assert!((cr[(i, a, 0)] - wc[a]).abs() < 1e-10);
                for b in 0..6 {
                    assert!((mo[(i, a, b)] - want[a * 6 + b]).abs() < 1e-10);
                }
            }
        }
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let x = Array2::<f64>::zeros((4, 2));
    let q = Array2::<f64>::zeros((3, 3));
    let pb = Problem { queries: q.view(), x: x.view(), values: None, weights: None };
    assert!(local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(1.0), &Options::default()).is_err());
    let q = Array2::<f64>::zeros((3, 2));
    let pb = Problem { queries: q.view(), x: x.view(), values: None, weights: None };
    for h in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-200] {
        assert!(local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(h), &Options::default()).is_err());
    }
    assert!(local_sums(&pb, &Kernel::Knn { k: 5, profile: None }, &Bandwidth::Scalar(1.0), &Options::default()).is_err());
    assert!(local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(1.0), &Options { exclude_self: true, ..Options::default() }).is_err());
    let e = Array2::<f64>::zeros((0, 2));
    let pb = Problem { queries: q.view(), x: e.view(), values: None, weights: None };
    assert!(local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(1.0), &Options::default()).is_err());
}

#[test]
fn tile_skipping_by_bounding_boxes_is_exact() {
    // Small bandwidths over many tiles and blocks: compact kernels visit only the tiles within
    // reach and exponential ones stop once the rest underflow; both must equal the definition.
    let mut rng = StdRng::seed_from_u64(11);
    for &d in &[1usize, 2, 3] {
        let n = 1500;
        let mut x = rand_mat(&mut rng, n, d);
        // a far cluster and exact duplicates: degenerate boxes must not break the bounds
        for i in 0..100 {
            x.row_mut(i).fill(50.0 + (i % 3) as f64);
        }
        let v = rand_mat(&mut rng, n, 2);
        let w: Vec<f64> = (0..n).map(|i| if i % 17 == 0 { 0.0 } else { rng.random::<f64>() + 0.1 }).collect();
        let hq: Vec<f64> = (0..n).map(|_| 0.02 + 0.05 * rng.random::<f64>()).collect();
        let hr: Vec<f64> = (0..n).map(|_| 0.02 + 0.05 * rng.random::<f64>()).collect();
        for profile in [Profile::Gaussian, Profile::Exponential, Profile::Epanechnikov, Profile::Tophat, Profile::Tricube] {
            for (bi, bw) in [Bandwidth::Scalar(0.03), Bandwidth::PerQuery(hq.clone()), Bandwidth::PerReference(hr.clone())].iter().enumerate() {
                let kf = |i: usize, j: usize, d2: f64| {
                    let h = [0.03, hq[i], hr[j]][bi];
                    profile.eval(d2.sqrt() / h)
                };
                for exclude_self in [false, true] {
                    let (wn, wd) = naive(&x, &x, &v, &w, &kf, exclude_self);
                    let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
                    let opts = Options { exclude_self, neighborhood: Neighborhood::Brute, ..Options::default() };
                    let s = local_sums(&pb, &Kernel::Radial(profile), bw, &opts).unwrap();
                    let (gn, gd) = true_sums(&s);
                    for i in 0..n {
                        // relative to the query's own sums (tiny for isolated queries), plus an
                        // absolute 1e-15: a compact kernel near its edge is ill-conditioned
                        let tol = |want: f64| 1e-12 * want.abs() + 1e-15;
                        assert!((gd[i] - wd[i]).abs() <= tol(wd[i]), "{profile:?} d={d} bw#{bi} loo={exclude_self} den[{i}]: {} vs {}", gd[i], wd[i]);
                        for c in 0..2 {
                            assert!((gn[(i, c)] - wn[(i, c)]).abs() <= tol(wd[i]), "{profile:?} d={d} bw#{bi} num[{i}]");
                        }
                    }
                }
            }
        }
        // the nearest-neighbour limit survives the tile order and the early stop
        let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: None };
        let s = local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(1e-9), &Options { exclude_self: true, ..Options::default() }).unwrap();
        let nn = Index::build(x.view(), Algorithm::KdTree, 16, &Monitor::default()).unwrap().knn(x.view(), 2, &Monitor::default()).unwrap();
        for i in 100..n {
            let j = nn.row(i).0[1];
            assert!((s.num[(i, 0)] / s.den[i] - v[(j, 0)]).abs() < 1e-12, "d={d} query {i}");
        }
    }
}

/// Points near a common offset and two clusters far apart, in d ≥ GEMM_MIN_DIM: the product
/// path must agree with direct differences (the naive loop), with design moments too.
#[test]
fn product_path_is_right_on_offset_data_and_far_clusters() {
    let mut rng = StdRng::seed_from_u64(21);
    for &d in &[16usize, 40] {
        let (n, m) = (700, 50);
        for case in 0..2 {
            let shift = |i: usize| if case == 0 { 1e5 } else if i % 2 == 0 { 1e7 } else { -1e7 };
            let x = Array2::from_shape_fn((n, d), |(i, k)| if k == 0 || case == 0 { shift(i) } else { 0.0 } + 0.01 * rng.random::<f64>());
            let q = Array2::from_shape_fn((m, d), |(i, k)| if k == 0 || case == 0 { shift(i) } else { 0.0 } + 0.01 * rng.random::<f64>());
            let v = rand_mat(&mut rng, n, 2);
            let w = vec![1.0; n];
            let h = 0.01;
            let kf = |_: usize, _: usize, d2: f64| (-0.5 * d2 / (h * h)).exp();
            let (wn, wd) = naive(&q, &x, &v, &w, &kf, false);
            let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None };
            let s = local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(h), &Options { degree: Some(1), ..Options::default() }).unwrap();
            let (gn, gd) = true_sums(&s);
            for i in 0..m {
                assert!((gd[i] - wd[i]).abs() <= 1e-11 * wd[i], "case {case} d={d}: {} vs {}", gd[i], wd[i]);
                for c in 0..2 {
                    assert!((gn[(i, c)] / gd[i] - wn[(i, c)] / wd[i]).abs() < 1e-11, "case {case} d={d}");
                }
                // First moments Σ K (x − q) against the loop.
                let f = s.log_scale[i].exp();
                for k in 0..d {
                    let want: f64 = (0..n).map(|j| kf(i, j, crate::distance::sq_euclidean(q.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap())) * (x[(j, k)] - q[(i, k)])).sum();
                    let got = s.moments.as_ref().unwrap()[(i, 0, 1 + k)] * f;
                    assert!((got - want).abs() <= 1e-10 * wd[i] * h, "moment case {case} d={d}: {got} vs {want}");
                }
            }
        }
    }
}

/// Weights and values near the float limits, and coordinates at 2^±600 with the bandwidth
/// alike: the sums are those of ordinary inputs, scaled back.
#[test]
fn extreme_magnitudes_are_rescaled_exactly() {
    let mut rng = StdRng::seed_from_u64(22);
    for &d in &[2usize, 20] {
        let x = rand_mat(&mut rng, 300, d);
        let v = rand_mat(&mut rng, 300, 2);
        let w: Vec<f64> = (0..300).map(|_| 0.5 + rng.random::<f64>()).collect();
        let kernel = Kernel::Radial(Profile::Gaussian);
        let opts = Options::default();
        let base = local_sums(&Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) }, &kernel, &Bandwidth::Scalar(0.5), &opts).unwrap();
        let (bn, bd) = true_sums(&base);
        // Coordinates and bandwidth times 2^600 and 2^-600: the same bits.
        for e in [600, -600] {
            let f = 2f64.powi(e);
            let xs = x.mapv(|a| a * f);
            let s = local_sums(&Problem { queries: xs.view(), x: xs.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) }, &kernel, &Bandwidth::Scalar(0.5 * f), &opts).unwrap();
            assert_eq!(s.num, base.num);
            assert_eq!(s.den, base.den);
        }
        // Weights times 2^1000: the sums times 2^1000, with what does not fit in log_scale.
        let wb: Vec<f64> = w.iter().map(|a| a * 2f64.powi(1000)).collect();
        let vb = v.mapv(|a| a * 1e300);
        let s = local_sums(&Problem { queries: x.view(), x: x.view(), values: Some(vb.view()), weights: Some(ndarray::ArrayView1::from(&wb)) }, &kernel, &Bandwidth::Scalar(0.5), &opts).unwrap();
        for i in 0..300 {
            assert!(s.den[i].is_finite() && s.num.row(i).iter().all(|a| a.is_finite()));
            let log_den = s.den[i].ln() + s.log_scale[i];
            assert!((log_den - (bd[i].ln() + 1000.0 * std::f64::consts::LN_2)).abs() < 1e-12);
            for c in 0..2 {
                assert!((s.num[(i, c)] / s.den[i] - 1e300 * bn[(i, c)] / bd[i]).abs() < 1e-12 * 1e300);
            }
        }
    }
}

#[test]
fn a_stopped_monitor_interrupts_every_path() {
    let mut rng = StdRng::seed_from_u64(9);
    let x = rand_mat(&mut rng, 3000, 2);
    let v = rand_mat(&mut rng, 3000, 1);
    let stopped = Monitor::default();
    stopped.stop();
    let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: None };
    let bw = Bandwidth::Scalar(0.3);
    let cases = [
        (Kernel::Radial(Profile::Gaussian), Neighborhood::Brute),
        (Kernel::Radial(Profile::Gaussian), Neighborhood::Expansion),
        (Kernel::Radial(Profile::Epanechnikov), Neighborhood::Tree),
        (Kernel::Radial(Profile::Gaussian), Neighborhood::Expansion),
        (Kernel::Knn { k: 5, profile: None }, Neighborhood::Auto),
        (Kernel::Dot { temperature: 1.0 }, Neighborhood::Auto),
    ];
    for (kernel, neighborhood) in cases {
        let opts = Options { neighborhood, monitor: stopped.clone(), ..Options::default() };
        assert_eq!(local_sums(&pb, &kernel, &bw, &opts).unwrap_err(), LocalizationError::Interrupted, "{kernel:?} {neighborhood:?}");
        // The same call unwatched completes.
        assert!(local_sums(&pb, &kernel, &bw, &Options { neighborhood, ..Options::default() }).is_ok());
    }
    let gauss = Kernel::Radial(Profile::Gaussian);
    assert_eq!(kernel_matrix(x.view(), x.view(), &gauss, &bw, &stopped).unwrap_err(), LocalizationError::Interrupted);
    let ell = crate::algorithms::local_poly::equivalent_kernel(x.view(), x.view(), &gauss, &bw, 1, 0.0, Neighborhood::Auto, &stopped);
    assert_eq!(ell.unwrap_err(), LocalizationError::Interrupted);
}

#[test]
fn progress_counts_the_queries_only_when_asked() {
    let mut rng = StdRng::seed_from_u64(10);
    let x = rand_mat(&mut rng, 700, 2);
    let v = rand_mat(&mut rng, 700, 1);
    let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: None };
    let bw = Bandwidth::Scalar(0.3);
    let cases = [
        (Kernel::Radial(Profile::Gaussian), Neighborhood::Brute),
        (Kernel::Radial(Profile::Epanechnikov), Neighborhood::Tree),
        (Kernel::Radial(Profile::Gaussian), Neighborhood::Expansion),
        (Kernel::Knn { k: 5, profile: None }, Neighborhood::Auto),
        (Kernel::Dot { temperature: 1.0 }, Neighborhood::Auto),
    ];
    for (kernel, neighborhood) in cases {
        let reported = Options { neighborhood, progress: true, ..Options::default() };
        let with = install(2, || local_sums(&pb, &kernel, &bw, &reported)).unwrap().unwrap();
        assert_eq!(reported.monitor.progress(), (700, 700), "{kernel:?} {neighborhood:?}");
        // Inside an algorithm that counts its own units, the engine leaves the monitor alone.
        let quiet = Options { neighborhood, ..Options::default() };
        let without = install(2, || local_sums(&pb, &kernel, &bw, &quiet)).unwrap().unwrap();
        assert_eq!(quiet.monitor.progress(), (0, 0));
        assert_eq!(with.num, without.num);
        assert_eq!(with.den, without.den);
    }
}

/// A few queries scattered over the data: their block is split so that each reaches only
/// the tiles near it, and the sums still equal the definition (every profile, bandwidth kind).
#[test]
fn scattered_queries_are_split_into_blocks_and_stay_exact() {
    let mut rng = StdRng::seed_from_u64(5);
    let (n, m) = (20_000, 12);
    let x = rand_mat(&mut rng, n, 2);
    let v = rand_mat(&mut rng, n, 2);
    let w: Vec<f64> = (0..n).map(|i| if i % 13 == 0 { 0.0 } else { rng.random::<f64>() + 0.1 }).collect();
    // Ten scattered queries and two next to each other.
    let mut q = rand_mat(&mut rng, m, 2);
    let near = &q.row(10) + 1e-3;
    q.row_mut(11).assign(&near);
    let hq: Vec<f64> = (0..m).map(|_| 0.01 + 0.02 * rng.random::<f64>()).collect();
    let hr: Vec<f64> = (0..n).map(|_| 0.01 + 0.02 * rng.random::<f64>()).collect();
    let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
    let mon = Monitor::default();
    for profile in [Profile::Gaussian, Profile::Epanechnikov, Profile::Tricube] {
        // The Gaussian reaches ~38 h: narrower bandwidths keep its reach local.
        let f = if profile == Profile::Gaussian { 0.25 } else { 1.0 };
        let (h0, hq, hr): (f64, Vec<f64>, Vec<f64>) = (0.02 * f, hq.iter().map(|h| h * f).collect(), hr.iter().map(|h| h * f).collect());
        for (bi, bw) in [Bandwidth::Scalar(h0), Bandwidth::PerQuery(hq.clone()), Bandwidth::PerReference(hr.clone())].iter().enumerate() {
            let tiles = Tiles::new(&pb, bw, true, true, false, &mon).unwrap();
            dispatch_profile!(profile, P, {
                let pricing = TilePricing::<f64, Radial<P>> { tiles: &tiles, bw, c: 1.0, kernel: std::marker::PhantomData };
                let blocks = Blocks::new(q.view(), QUERY_BLOCK, true, &mon, &pricing).unwrap();
                assert!(blocks.len() >= 8, "{profile:?} bw#{bi}: {} blocks", blocks.len());
                let whole = pricing.cost(&tiles::box_of_rows(q.view(), &(0..m).collect::<Vec<_>>()), &(0..m).collect::<Vec<_>>());
                let split: f64 = (0..blocks.len()).map(|b| pricing.cost(blocks.box_of(b).unwrap(), blocks.rows(b))).sum();
                assert!(split < 0.5 * whole, "{profile:?} bw#{bi}: {split} vs {whole}");
            });
            let kf = |i: usize, j: usize, d2: f64| profile.eval(d2.sqrt() / [h0, hq[i], hr[j]][bi]);
            let (wn, wd) = naive(&q, &x, &v, &w, &kf, false);
            for threads in [1, 2] {
                let opts = Options { neighborhood: Neighborhood::Brute, ..Options::default() };
                let s = install(threads, || local_sums(&pb, &Kernel::Radial(profile), bw, &opts)).unwrap().unwrap();
                let (gn, gd) = true_sums(&s);
                for i in 0..m {
                    let tol = |want: f64| 1e-12 * want.abs() + 1e-15;
                    assert!((gd[i] - wd[i]).abs() <= tol(wd[i]), "{profile:?} bw#{bi} den[{i}]: {} vs {}", gd[i], wd[i]);
                    for c in 0..2 {
                        assert!((gn[(i, c)] - wn[(i, c)]).abs() <= tol(wd[i]), "{profile:?} bw#{bi} num[{i}]");
                    }
                }
            }
        }
    }
}

/// The grouped search of the tiles within a compact kernel's reach finds exactly the tiles a
/// scan of every tile's box finds, in the same order (tile counts that are not powers of two,
/// 1 to 3 features, every bandwidth kind, boxes of single queries and of wide blocks).
#[test]
fn grouped_tile_search_equals_the_scan() {
    let mut rng = StdRng::seed_from_u64(17);
    let mon = Monitor::default();
    for (n, d) in [(1usize, 2usize), (300, 1), (20_000, 2), (5_555, 3)] {
        let x = rand_mat(&mut rng, n, d);
        let q = rand_mat(&mut rng, 64, d);
        let hr: Vec<f64> = (0..n).map(|_| 0.01 + 0.05 * rng.random::<f64>()).collect();
        let pb = Problem { queries: q.view(), x: x.view(), values: None, weights: None };
        for bw in [Bandwidth::Scalar(0.03), Bandwidth::PerReference(hr.clone())] {
            let tiles = Tiles::new(&pb, &bw, true, true, false, &mon).unwrap();
            for s in [1.0 / (0.03 * 0.03), 1.0 / (0.2 * 0.2), 1.0] {
                for rows in [vec![0usize], vec![3, 9], (0..16).collect(), (0..64).collect()] {
                    let qbox = tiles::box_of_rows(q.view(), &rows);
                    let far = |g2: f64, ts: Option<f64>| beyond_reach::<f64, Radial<crate::kernel::Epanechnikov>>(g2 * ts.unwrap_or(s), 1.0, 0.0);
                    let scan: Vec<usize> = (0..n.div_ceil(TILE)).filter(|&t| !far(tiles.gap2(&qbox, t), tiles.inv_h2.as_ref().map(|_| tiles.tile_scale(t, s)))).collect();
                    let mut grouped = Vec::new();
                    tiles.visit_near(&qbox, far, |t| grouped.push(t));
                    assert_eq!(grouped, scan, "n={n} d={d} scale {s} rows {}", rows.len());
                }
            }
        }
    }
}


/// The one-pass direct tile (`fused_tile`, taken with one bandwidth for all samples) against
/// the separate passes it replaces (taken with the same bandwidth given per sample): the same
/// bits, in f32 and f64, in 1 to 3 features, with and without values, leave-one-out, design
/// moments and many value columns, across running maxima raised by later tiles (a far cluster
/// of queries visits its near tiles last, scattered queries raise theirs often).
#[test]
fn one_pass_direct_tiles_give_the_bits_of_the_separate_passes() {
    fn check<F: Real>(rng: &mut StdRng) {
        for &d in &[1usize, 2, 3] {
            let n = 1500;
            let mut x = rand_mat(rng, n, d);
            for i in 0..60 {
                x.row_mut(i).fill(4.0 + 0.01 * i as f64);
            }
            let x = x.mapv(F::of);
            for (p, degree, h) in [(0usize, None, 0.3), (1, None, 0.05), (2, Some(1), 0.2), (11, None, 0.1), (1, Some(2), 0.02)] {
                let v = rand_mat(rng, n, p.max(1)).mapv(F::of);
                let w: Vec<F> = (0..n).map(|_| F::of(0.5 + rng.random::<f64>())).collect();
                for profile in [Profile::Gaussian, Profile::Exponential] {
                    for exclude_self in [false, true] {
                        let pb = Problem {
                            queries: x.view(),
                            x: x.view(),
                            values: (p > 0).then(|| v.view()),
                            weights: Some(ndarray::ArrayView1::from(&w)),
                        };
                        let opts = Options { exclude_self, degree, neighborhood: Neighborhood::Brute, ..Options::default() };
                        let kernel = Kernel::Radial(profile);
                        let one = local_sums(&pb, &kernel, &Bandwidth::Scalar(F::of(h)), &opts).unwrap();
                        let each = local_sums(&pb, &kernel, &Bandwidth::PerReference(vec![F::of(h); n]), &opts).unwrap();
                        let what = format!("{} d={d} p={p} {degree:?} h={h} {profile:?} loo={exclude_self}", std::any::type_name::<F>());
                        assert_eq!(one.den, each.den, "{what}");
                        assert_eq!(one.num, each.num, "{what}");
                        assert_eq!(one.log_scale, each.log_scale, "{what}");
                        assert_eq!(one.moments, each.moments, "{what}");
                        assert_eq!(one.cross, each.cross, "{what}");
                    }
                }
            }
        }
    }
    let mut rng = StdRng::seed_from_u64(17);
    check::<f32>(&mut rng);
    check::<f64>(&mut rng);
}

/// The tiles skipped because their terms are negligible against a query's sums so far (far
/// below the underflow in f64) leave the sums within 2⁻⁶¹ of Σ k·w (times the largest |v|),
/// also when the far samples carry most of the weight and values a million times larger.
#[test]
fn negligible_tiles_are_skipped_within_the_bound() {
    let mut rng = StdRng::seed_from_u64(23);
    for &d in &[1usize, 2, 3] {
        let n = 3000;
        let mut x = rand_mat(&mut rng, n, d);
        let mut v = rand_mat(&mut rng, n, 1);
        let mut w: Vec<f64> = (0..n).map(|_| 0.5 + rng.random::<f64>()).collect();
        // A heavy cluster at 7 to 13 bandwidths from the nearest others: its log-kernel there
        // runs from -25 to -90, and its total weight 1e9 makes terms far below the running
        // maximum count (a bound without it drops them).
        for i in 0..1000 {
            x[(i, 0)] = 1.0 + 0.21 + 0.18 * rng.random::<f64>();
            for k in 1..d {
                x[(i, k)] = 0.1 * rng.random::<f64>();
            }
            w[i] = 1e6;
            v[(i, 0)] = 1e6;
        }
        let h = 0.03;
        let kf = |_: usize, _: usize, d2: f64| (-0.5 * d2 / (h * h)).exp();
        let (wn, wd) = naive(&x, &x, &v, &w, &kf, true);
        let (an, _) = naive(&x, &x, &v.mapv(f64::abs), &w, &kf, true);
        let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
        let opts = Options { exclude_self: true, neighborhood: Neighborhood::Brute, ..Options::default() };
        let s = local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(h), &opts).unwrap();
        let (gn, gd) = true_sums(&s);
        for i in 0..n {
            let skipped = 2f64.powi(-61) * wd[i];
            assert!((gd[i] - wd[i]).abs() <= skipped + 1e-14 * wd[i], "d={d} den[{i}]: {} vs {}", gd[i], wd[i]);
            assert!((gn[(i, 0)] - wn[(i, 0)]).abs() <= skipped * 1e6 + 1e-14 * an[(i, 0)], "d={d} num[{i}]: {} vs {}", gn[(i, 0)], wn[(i, 0)]);
        }
    }
}

/// Design moments formed in the lanes (degree 0 and 1, at most one value column) against the
/// stored basis and dot products (taken with a second value column): the same bits.
#[test]
fn design_moments_in_lanes_give_the_bits_of_the_stored_basis() {
    fn check<F: Real>(rng: &mut StdRng) {
        for &d in &[1usize, 2, 3] {
            let n = 1300;
            let x = rand_mat(rng, n, d).mapv(F::of);
            let v2 = rand_mat(rng, n, 2).mapv(F::of);
            let v1 = v2.slice(ndarray::s![.., ..1]).to_owned();
            let w: Vec<F> = (0..n).map(|i| if i % 29 == 0 { F::zero() } else { F::of(0.5 + rng.random::<f64>()) }).collect();
            for degree in [0usize, 1] {
                for (h, exclude_self) in [(0.4, false), (0.05, true)] {
                    let run = |v: &Array2<F>| {
                        let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
                        let opts = Options { exclude_self, degree: Some(degree), neighborhood: Neighborhood::Brute, ..Options::default() };
                        local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(F::of(h)), &opts).unwrap()
                    };
                    let (one, two) = (run(&v1), run(&v2));
                    let what = format!("{} d={d} degree={degree} h={h}", std::any::type_name::<F>());
                    assert_eq!(one.moments, two.moments, "{what}");
                    assert_eq!(one.cross.unwrap(), two.cross.unwrap().slice(ndarray::s![.., .., ..1]), "{what}");
                    assert_eq!(one.den, two.den, "{what}");
                }
            }
        }
    }
    let mut rng = StdRng::seed_from_u64(29);
    check::<f32>(&mut rng);
    check::<f64>(&mut rng);
}

/// The same skip with design moments (degree 1 and 2): tiles whose every term k·u^(2·degree)
/// is negligible leave each moment Σ k·w·φ_a φ_b (and Σ k·w·φ_a v) within 2⁻⁶¹ of its own scale
/// Σ k·w·h^(|a|+|b|) (times the largest |v|), against the definition summed in f64.
#[test]
fn negligible_tiles_with_design_moments_are_skipped_within_the_bound() {
    let mut rng = StdRng::seed_from_u64(29);
    let (n, d, h) = (2500, 2, 0.03);
    let mut x = rand_mat(&mut rng, n, d);
    let mut v = rand_mat(&mut rng, n, 1);
    let mut w: Vec<f64> = (0..n).map(|_| 0.5 + rng.random::<f64>()).collect();
    // A heavy far cluster, as in the test above: terms far below the running maximum count.
    for i in 0..800 {
        x[(i, 0)] = 1.0 + 0.21 + 0.18 * rng.random::<f64>();
        x[(i, 1)] = 0.1 * rng.random::<f64>();
        w[i] = 1e6;
        v[(i, 0)] = 1e6;
    }
    for degree in [1usize, 2] {
        let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
        let opts = Options { exclude_self: true, degree: Some(degree), neighborhood: Neighborhood::Brute, ..Options::default() };
        let s = local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(h), &opts).unwrap();
        let (mom, cross) = (s.moments.as_ref().unwrap(), s.cross.as_ref().unwrap());
        let powers: Vec<i32> = basis_degrees(d, degree).iter().map(|&p| p as i32).collect();
        let nb = powers.len();
        for i in (0..n).step_by(7) {
            let (mut want, mut abs) = (vec![0.0; nb * (nb + 1)], vec![0.0; nb * (nb + 1)]);
            let mut den = 0.0;
            for j in (0..n).filter(|&j| j != i) {
                let (dx, dy) = (x[(j, 0)] - x[(i, 0)], x[(j, 1)] - x[(i, 1)]);
                let kw = (-0.5 * (dx * dx + dy * dy) / (h * h)).exp() * w[j];
                let mut phi = vec![1.0, dx, dy];
                if degree == 2 {
                    phi.extend([dx * dx, dx * dy, dy * dy]);
                }
                den += kw;
                for a in 0..nb {
                    for b in 0..nb {
                        want[a * (nb + 1) + b] += kw * phi[a] * phi[b];
                        abs[a * (nb + 1) + b] += (kw * phi[a] * phi[b]).abs();
                    }
                    want[a * (nb + 1) + nb] += kw * phi[a] * v[(j, 0)];
                    abs[a * (nb + 1) + nb] += (kw * phi[a] * v[(j, 0)]).abs();
                }
            }
            let scale = s.log_scale[i].exp();
            for a in 0..nb {
                for b in 0..=nb {
                    let (got, vmax, pw) = if b < nb { (mom[(i, a, b)], 1.0, powers[a] + powers[b]) } else { (cross[(i, a, 0)], 1e6, powers[a]) };
                    let bound = 2f64.powi(-61) * den * h.powi(pw) * vmax + 1e-13 * abs[a * (nb + 1) + b];
                    let want = want[a * (nb + 1) + b];
                    assert!((got * scale - want).abs() <= bound, "degree {degree} query {i} moment ({a}, {b}): {} vs {want}", got * scale);
                }
            }
        }
    }
}

/// Clustered samples in `d` features (three clusters along the first), shifted by `offset`.
fn clustered(rng: &mut StdRng, n: usize, d: usize, offset: f64) -> Array2<f64> {
    let mut x = rand_mat(rng, n, d).mapv(|a| 0.4 * a);
    for (i, mut row) in x.rows_mut().into_iter().enumerate() {
        row[0] += (i % 3) as f64;
        row.mapv_inplace(|a| a + offset);
    }
    x
}

#[test]
fn chebyshev_grid_matches_direct_sums_in_two_and_three_features() {
    // Weights with zeros, values (one repeats a coordinate), offset data, and a query far from
    // the mass (the grid's bound does not cover it: summed exactly). Every sum within 1e-13 of
    // Σ w K (times max |v| for values) of the direct ones.
    let mut rng = StdRng::seed_from_u64(41);
    for d in 2..=3 {
        for offset in [0.0, 1e4] {
            let n = 3000;
            let x = clustered(&mut rng, n, d, offset);
            let mut q = x.slice(ndarray::s![..200, ..]).to_owned();
            q[(0, 1)] += 12.0;
            let other = rand_mat(&mut rng, n, 1).mapv(|a| 10.0 * a - 5.0);
            let v = ndarray::concatenate![Axis(1), x.column(0).insert_axis(Axis(1)), other];
            let top = v.iter().fold(0.0f64, |m, a| m.max(a.abs()));
            let w: Vec<f64> = (0..n).map(|j| if j % 11 == 0 { 0.0 } else { rng.random::<f64>() + 0.5 }).collect();
            let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: Some(ndarray::ArrayView1::from(&w)) };
            for h in [1.0, 0.3] {
                let grid = chebyshev::Grid::plan(&pb, h, None, SERIES_TOLERANCE).expect("a grid fits");
                let (_, missed) = grid.sums(&pb, &Options::default()).unwrap();
                assert!(missed.contains(&0) && missed.len() < 5, "d={d} h={h}: missed {missed:?}");
                let run = |nh| true_sums(&local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(h), &Options { neighborhood: nh, ..Options::default() }).unwrap());
                let ((na, da), (nb, db)) = (run(Neighborhood::Expansion), run(Neighborhood::Brute));
                for i in 0..q.nrows() {
                    assert!((da[i] - db[i]).abs() <= 1e-13 * db[i], "d={d} offset={offset} h={h} query {i}: {} vs {}", da[i], db[i]);
                    for c in 0..2 {
                        assert!((na[(i, c)] - nb[(i, c)]).abs() <= 1e-13 * top * db[i], "d={d} offset={offset} h={h} query {i} value {c}");
                    }
                }
            }
        }
    }
}

#[test]
fn chebyshev_grid_design_moments_match_direct_sums() {
    // Local linear and quadratic moments through the grid (most queries covered by its
    // bound, the rest summed directly), on data at the origin and far from it.
    let mut rng = StdRng::seed_from_u64(47);
    let (n, m) = (1500, 200);
    for d in 2..=3 {
        for offset in [0.0, 1e3] {
            let x = rand_mat(&mut rng, n, d).mapv(|a| a + offset);
            let q = rand_mat(&mut rng, m, d).mapv(|a| 1.1 * a + offset);
            let v = rand_mat(&mut rng, n, 2);
            let pb = Problem { queries: q.view(), x: x.view(), values: Some(v.view()), weights: None };
            for (h, degree) in [(0.5, 1), (0.2, 1), (0.4, 2)] {
                let grid = chebyshev::Grid::plan(&pb, h, Some(degree), SERIES_TOLERANCE).expect("a grid fits");
                let (_, missed) = grid.sums(&pb, &Options::default()).unwrap();
                assert!(missed.len() < m / 4, "d={d} offset={offset} h={h} degree={degree}: {} missed", missed.len());
                let run = |nh| means(&local_sums(&pb, &Kernel::Radial(Profile::Gaussian), &Bandwidth::Scalar(h), &Options { degree: Some(degree), neighborhood: nh, ..Options::default() }).unwrap());
                assert_means_close(&run(Neighborhood::Expansion), &run(Neighborhood::Brute), |_| 1e-12, &format!("d={d} offset={offset} h={h} degree={degree}"));
            }
        }
    }
}

#[test]
fn chebyshev_grid_leave_one_out_threads_float32_and_flat_boxes() {
    let mut rng = StdRng::seed_from_u64(43);
    let gauss = Kernel::Radial(Profile::Gaussian);
    let x = clustered(&mut rng, 2500, 3, 0.0);
    let v = rand_mat(&mut rng, 2500, 2);
    let pb = Problem { queries: x.view(), x: x.view(), values: Some(v.view()), weights: None };
    let grid = |t: usize, exclude_self: bool| {
        install(t, || local_sums(&pb, &gauss, &Bandwidth::Scalar(0.5), &Options { exclude_self, neighborhood: Neighborhood::Expansion, ..Options::default() }).unwrap()).unwrap()
    };
    // Leave-one-out: the full sums less each point's own term.
    let ((na, da), (nb, db)) = (true_sums(&grid(2, true)), true_sums(&local_sums(&pb, &gauss, &Bandwidth::Scalar(0.5), &Options { exclude_self: true, neighborhood: Neighborhood::Brute, ..Options::default() }).unwrap()));
    for i in 0..2500 {
        assert!((da[i] - db[i]).abs() <= 1e-12 * db[i]);
        assert!((na[(i, 1)] - nb[(i, 1)]).abs() <= 1e-12 * db[i]);
    }
    // Any thread count, the same bits.
    let one = grid(1, false);
    for t in [2, 5] {
        let other = grid(t, false);
        assert_eq!(one.den, other.den);
        assert_eq!(one.num, other.num);
    }
    // float32 points: the sums run in float64 and are rounded once.
    let (x32, v32) = (x.mapv(|a| a as f32), v.mapv(|a| a as f32));
    let opts = Options { neighborhood: Neighborhood::Expansion, ..Options::default() };
    let f32s = local_sums(&Problem { queries: x32.view(), x: x32.view(), values: Some(v32.view()), weights: None }, &gauss, &Bandwidth::Scalar(0.5f32), &opts).unwrap();
    let (x64, v64) = (x32.mapv(|a| a as f64), v32.mapv(|a| a as f64));
    let (_, want) = true_sums(&local_sums(&Problem { queries: x64.view(), x: x64.view(), values: Some(v64.view()), weights: None }, &gauss, &Bandwidth::Scalar(0.5), &Options { neighborhood: Neighborhood::Brute, ..Options::default() }).unwrap());
    for i in 0..2500 {
        assert_eq!(f32s.log_scale[i], 0.0);
        assert!((f32s.den[i] as f64 - want[i]).abs() <= f32::EPSILON as f64 * want[i]);
    }
    // Boxes of no width along some or all features: one panel there.
    let mut flat = x.clone();
    flat.column_mut(2).fill(3.0);
    let all_same = Array2::from_elem((500, 3), -7.5);
    for pts in [flat, all_same] {
        let pb = Problem { queries: pts.view(), x: pts.view(), values: None, weights: None };
        let run = |nh| local_sums(&pb, &gauss, &Bandwidth::Scalar(0.4), &Options { neighborhood: nh, ..Options::default() }).unwrap();
        assert!(chebyshev::Grid::plan(&pb, 0.4, None, SERIES_TOLERANCE).is_some());
        let ((_, a), (_, b)) = (true_sums(&run(Neighborhood::Expansion)), true_sums(&run(Neighborhood::Brute)));
        for i in 0..pts.nrows() {
            assert!((a[i] - b[i]).abs() <= 1e-13 * b[i]);
        }
    }
}
