use super::*;
use crate::kernel::ALL_PROFILES;
use ndarray::Array3;
use rand::{rngs::StdRng, Rng, SeedableRng};

fn rand3(rng: &mut StdRng, b: usize, t: usize, d: usize) -> Array3<f64> {
    Array3::from_shape_fn((b, t, d), |_| rng.random::<f64>() * 2.0 - 1.0)
}

/// The forward pass on a pool of `threads`, unwatched.
fn fwd<F: Real>(seq: &Sequences<F>, content: &Content, pos: &Position, threads: usize) -> Result<Attended<F>> {
    crate::parallel::install(threads, || forward(seq, content, pos, &Monitor::default())).and_then(|r| r)
}

/// The backward pass (scale 0.3 unless given) on a pool of `threads`, with the default or a given schedule.
#[allow(clippy::too_many_arguments)]
fn bwd(seq: &Sequences<f64>, scale: f64, pos: &Position, f: &Attended<f64>, dout: &Array3<f64>, threads: usize, schedule: Option<Schedule>) -> Result<Gradients<f64>> {
    let mon = Monitor::default();
    crate::parallel::install(threads, || match schedule {
        None => backward(seq, scale, pos, f.out.view(), f.lse.view(), dout.view(), &mon),
        Some(s) => backward_with(seq, scale, pos, f.out.view(), f.lse.view(), dout.view(), &mon, s),
    })
    .and_then(|r| r)
}

/// The definition as a double loop in f64: (out, lse) with out = 0, lse = −∞ on empty rows.
fn naive(q: &Array3<f64>, k: &Array3<f64>, v: &Array3<f64>, content: &Content, allowed: &dyn Fn(usize, usize, usize) -> bool, decay: Option<&[f64]>) -> (Array3<f64>, Array2<f64>) {
    let (b, t, _) = q.dim();
    let p = v.dim().2;
    let mut out = Array3::zeros((b, t, p));
    let mut lse = Array2::zeros((b, t));
    for bi in 0..b {
        for ti in 0..t {
            let mut w = vec![0.0; t];
            for si in 0..t {
                if !allowed(bi, ti, si) {
                    continue;
                }
                let (qr, kr) = (q.slice(s![bi, ti, ..]), k.slice(s![bi, si, ..]));
                let kc = match *content {
                    Content::Dot { scale } => (scale * qr.dot(&kr)).exp(),
                    Content::Radial { profile, bandwidth } => {
                        let dist = qr.iter().zip(kr.iter()).map(|(a, c)| (a - c) * (a - c)).sum::<f64>().sqrt();
                        profile.eval(dist / bandwidth)
                    }
                };
                w[si] = kc * decay.map_or(1.0, |l| (-l[bi] * ti.abs_diff(si) as f64).exp());
            }
            let den: f64 = w.iter().sum();
            lse[(bi, ti)] = den.ln();
            if den > 0.0 {
                for c in 0..p {
                    out[(bi, ti, c)] = (0..t).map(|si| w[si] * v[(bi, si, c)]).sum::<f64>() / den;
                }
            }
        }
    }
    (out, lse)
}

/// The bands and the hollow kernel, pair by pair: the definition the engine's ranges must match.
fn allows(pos: &Position, t: usize, s: usize) -> bool {
    (!pos.causal || s <= t) && pos.window.map_or(true, |w| t.abs_diff(s) < w) && !(pos.exclude_self && s == t)
}

fn assert_close3(a: &Array3<f64>, b: &Array3<f64>, tol: f64, what: &str) {
    for (x, y) in a.iter().zip(b.iter()) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{what}: {x} vs {y}");
    }
}

struct Case {
    name: &'static str,
    causal: bool,
    window: Option<usize>,
    decay: bool,
    exclude_self: bool,
    mask: bool,
}

const CASES: [Case; 8] = [
    Case { name: "none", causal: false, window: None, decay: false, exclude_self: false, mask: false },
    Case { name: "causal", causal: true, window: None, decay: false, exclude_self: false, mask: false },
    Case { name: "window", causal: false, window: Some(37), decay: false, exclude_self: false, mask: false },
    Case { name: "causal window", causal: true, window: Some(130), decay: false, exclude_self: false, mask: false },
    Case { name: "decay", causal: false, window: None, decay: true, exclude_self: false, mask: false },
    Case { name: "causal decay (alibi)", causal: true, window: None, decay: true, exclude_self: false, mask: false },
    Case { name: "hollow causal", causal: true, window: None, decay: false, exclude_self: true, mask: false },
    Case { name: "mask + window + decay", causal: false, window: Some(200), decay: true, exclude_self: false, mask: true },
];

/// A mask with whole masked blocks, a fully masked query row and per-sequence slabs.
fn test_mask(b: usize, t: usize) -> (Array3<bool>, Vec<usize>) {
    let slabs = 2;
    let m = Array3::from_shape_fn((slabs, t, t), |(sl, ti, si)| ti != 5 && !(si >= 128 && si < 256 && ti < 200) && (si + ti + sl) % 7 != 0);
    (m, (0..b).map(|i| i % slabs).collect())
}

#[test]
fn forward_matches_the_double_loop_for_every_kernel_and_position() {
    let mut rng = StdRng::seed_from_u64(1);
    // T = 300 is no multiple of the block sizes; three sequences with their own decay.
    let (b, t, d, p) = (3, 300, 5, 4);
    let (q, k, v) = (rand3(&mut rng, b, t, d), rand3(&mut rng, b, t, d), rand3(&mut rng, b, t, p));
    let lam = [0.0, 0.05, 0.7];
    let (mask, slab) = test_mask(b, t);
    let mut contents = vec![Content::Dot { scale: 0.8 }];
    contents.extend(ALL_PROFILES.iter().map(|&profile| Content::Radial { profile, bandwidth: 0.9 }));
    for case in &CASES {
        let pos = Position {
            causal: case.causal,
            window: case.window,
            decay: case.decay.then_some(&lam[..]),
            exclude_self: case.exclude_self,
            mask: case.mask.then(|| Mask { allowed: mask.view(), slab: &slab }),
        };
        let allowed = |bi: usize, ti: usize, si: usize| allows(&pos, ti, si) && (!case.mask || mask[(slab[bi], ti, si)]);
        for content in &contents {
            let seq = Sequences { q: q.view(), k: k.view(), v: v.view() };
            let got = fwd(&seq, content, &pos, 2).unwrap();
            let (want, want_lse) = naive(&q, &k, &v, content, &allowed, pos.decay);
            assert_close3(&got.out, &want, 1e-12, &format!("{} {:?}", case.name, content));
            for (x, y) in got.lse.iter().zip(want_lse.iter()) {
                assert!(x == y || (x - y).abs() <= 1e-12 * (1.0 + y.abs()), "lse {} {:?}: {x} vs {y}", case.name, content);
            }
        }
    }
}

#[test]
fn fully_masked_rows_give_zero_and_minus_infinity() {
    let mut rng = StdRng::seed_from_u64(2);
    let (q, k, v) = (rand3(&mut rng, 2, 9, 3), rand3(&mut rng, 2, 9, 3), rand3(&mut rng, 2, 9, 2));
    let seq = Sequences { q: q.view(), k: k.view(), v: v.view() };
    // Causal and hollow: step 0 sees nothing.
    let pos = Position { causal: true, exclude_self: true, ..Default::default() };
    let r = fwd(&seq, &Content::Dot { scale: 1.0 }, &pos, 1).unwrap();
    assert!(r.out.slice(s![.., 0, ..]).iter().all(|&x| x == 0.0));
    assert!(r.lse.column(0).iter().all(|&x| x == f64::NEG_INFINITY));
    assert!(r.lse.column(1).iter().all(|x| x.is_finite()));
    let dout = rand3(&mut rng, 2, 9, 2);
    let g = bwd(&seq, 1.0, &pos, &r, &dout, 1, None).unwrap();
    assert!(g.dq.iter().chain(g.dk.iter()).chain(g.dv.iter()).all(|x| x.is_finite()));
    assert!(g.dq.slice(s![.., 0, ..]).iter().all(|&x| x == 0.0));
}

fn sequences_and_grads(threads: usize, schedule: Option<Schedule>, q: &Array3<f64>, k: &Array3<f64>, v: &Array3<f64>, dout: &Array3<f64>, pos: &Position) -> (Attended<f64>, Gradients<f64>) {
    let seq = Sequences { q: q.view(), k: k.view(), v: v.view() };
    let f = fwd(&seq, &Content::Dot { scale: 0.3 }, pos, threads).unwrap();
    let g = bwd(&seq, 0.3, pos, &f, dout, threads, schedule).unwrap();
    (f, g)
}

#[test]
fn results_are_bit_identical_for_any_thread_count_and_schedule() {
    let mut rng = StdRng::seed_from_u64(3);
    // T = 333 is no multiple of the blocks; more sequences than threads (the items of unequal
    // weights are shared out differently for each thread count).
    let (b, t, d) = (5, 333, 7);
    let (q, k, v, dout) = (rand3(&mut rng, b, t, d), rand3(&mut rng, b, t, d), rand3(&mut rng, b, t, 3), rand3(&mut rng, b, t, 3));
    let lam = [0.1, 0.0, 0.3, 1.0, 0.02];
    let (mask, slab) = test_mask(b, t);
    let positions = [
        Position { causal: true, window: Some(200), decay: Some(&lam), ..Default::default() },
        Position { causal: true, exclude_self: true, ..Default::default() },
        Position { window: Some(150), decay: Some(&lam), mask: Some(Mask { allowed: mask.view(), slab: &slab }), ..Default::default() },
    ];
    for (i, pos) in positions.iter().enumerate() {
        let (f1, g1) = sequences_and_grads(1, Some(Schedule::TwoPass), &q, &k, &v, &dout, pos);
        for threads in [1, 2, 3, 8] {
            for schedule in [None, Some(Schedule::TwoPass), Some(Schedule::PerSequence)] {
                let (f, g) = sequences_and_grads(threads, schedule, &q, &k, &v, &dout, pos);
                let what = format!("position {i}, {threads} threads, {schedule:?}");
                assert_eq!(f.out, f1.out, "{what}");
                assert_eq!(f.lse, f1.lse, "{what}");
                assert_eq!(g.dq, g1.dq, "{what}");
                assert_eq!(g.dk, g1.dk, "{what}");
                assert_eq!(g.dv, g1.dv, "{what}");
                assert_eq!(g.d_decay, g1.d_decay, "{what}");
            }
        }
    }
}

#[test]
fn items_run_heaviest_first_and_come_back_in_order() {
    // Weights out of order, ties included; the results keep the items' order, every item is
    // counted once in the progress, and on one thread the heaviest runs first.
    let weights = [3usize, 9, 1, 9, 0, 5, 7, 7, 2];
    for threads in [1, 2, 3, 16] {
        let mon = Monitor::default();
        mon.set_progress(0, weights.len());
        let started = Mutex::new(Vec::new());
        let items: Vec<_> = weights.iter().enumerate().map(|(i, &w)| (w, i)).collect();
        let got = crate::parallel::install(threads, || {
            run_items(items, &mon, |i| {
                started.lock().unwrap().push(i);
                10 * i
            })
        })
        .unwrap()
        .unwrap();
        assert_eq!(got, (0..weights.len()).map(|i| 10 * i).collect::<Vec<_>>(), "{threads} threads");
        assert_eq!(mon.progress(), (weights.len(), weights.len()));
        if threads == 1 {
            assert_eq!(started.into_inner().unwrap(), [1, 3, 6, 7, 5, 0, 8, 2, 4]);
        }
    }
    let stopped = Monitor::default();
    stopped.stop();
    let r = crate::parallel::install(2, || run_items(vec![(1, 0), (2, 1)], &stopped, |i| i)).unwrap();
    assert_eq!(r.unwrap_err(), LocalizationError::Interrupted);
}

/// ℓ = Σ out ∘ W for a fixed W: its gradient with respect to out is W.
fn loss(q: &Array3<f64>, k: &Array3<f64>, v: &Array3<f64>, w: &Array3<f64>, pos: &Position) -> f64 {
    let seq = Sequences { q: q.view(), k: k.view(), v: v.view() };
    let f = fwd(&seq, &Content::Dot { scale: 0.3 }, pos, 1).unwrap();
    (&f.out * w).sum()
}

#[test]
fn gradients_match_finite_differences() {
    let mut rng = StdRng::seed_from_u64(4);
    let (b, t, d) = (2, 140, 3);
    let (q, k, v, w) = (rand3(&mut rng, b, t, d), rand3(&mut rng, b, t, d), rand3(&mut rng, b, t, 2), rand3(&mut rng, b, t, 2));
    let lam = vec![0.2, 0.05];
    for case in &CASES {
        let (mask, slab) = test_mask(b, t);
        let pos = Position {
            causal: case.causal,
            window: case.window.map(|w| w.min(60)),
            decay: case.decay.then_some(&lam[..]),
            exclude_self: case.exclude_self,
            mask: case.mask.then(|| Mask { allowed: mask.view(), slab: &slab }),
        };
        let (_, g) = sequences_and_grads(2, None, &q, &k, &v, &w, &pos);
        let eps = 1e-6;
        let check = |which: usize, idx: (usize, usize, usize), analytic: f64| {
            let bump = |s: f64| {
                let (mut q2, mut k2, mut v2) = (q.clone(), k.clone(), v.clone());
                [&mut q2, &mut k2, &mut v2][which][idx] += s;
                loss(&q2, &k2, &v2, &w, &pos)
            };
            let num = (bump(eps) - bump(-eps)) / (2.0 * eps);
            assert!((num - analytic).abs() < 1e-6 * (1.0 + num.abs()), "{} d{}{idx:?}: {num} vs {analytic}", case.name, ["Q", "K", "V"][which]);
        };
        for _ in 0..6 {
            let idx = (rng.random_range(0..b), rng.random_range(0..t), rng.random_range(0..d));
            check(0, idx, g.dq[idx]);
            check(1, idx, g.dk[idx]);
            let idv = (idx.0, idx.1, idx.2 % 2);
            check(2, idv, g.dv[idv]);
        }
        if let Some(dl) = &g.d_decay {
            for bi in 0..b {
                let bumped = |s: f64| {
                    let mut l2 = lam.clone();
                    l2[bi] += s;
                    let p2 = Position { decay: Some(&l2), mask: pos.mask.as_ref().map(|m| Mask { allowed: m.allowed, slab: m.slab }), ..pos };
                    loss(&q, &k, &v, &w, &p2)
                };
                let num = (bumped(1e-6) - bumped(-1e-6)) / 2e-6;
                assert!((num - dl[bi]).abs() < 1e-6 * (1.0 + num.abs()), "{} dλ: {num} vs {}", case.name, dl[bi]);
            }
        }
    }
}

#[test]
fn float32_agrees_with_float64() {
    let mut rng = StdRng::seed_from_u64(5);
    let (q, k, v) = (rand3(&mut rng, 2, 260, 16), rand3(&mut rng, 2, 260, 16), rand3(&mut rng, 2, 260, 8));
    let lam = [0.01, 0.1];
    let pos = Position { causal: true, decay: Some(&lam), ..Default::default() };
    let (qf, kf, vf) = (q.mapv(|x| x as f32), k.mapv(|x| x as f32), v.mapv(|x| x as f32));
    for content in [Content::Dot { scale: 0.25 }, Content::Radial { profile: Profile::Gaussian, bandwidth: 1.5 }, Content::Radial { profile: Profile::Epanechnikov, bandwidth: 3.0 }] {
        let a = fwd(&Sequences { q: q.view(), k: k.view(), v: v.view() }, &content, &pos, 2).unwrap();
        let b = fwd(&Sequences { q: qf.view(), k: kf.view(), v: vf.view() }, &content, &pos, 2).unwrap();
        for (x, y) in a.out.iter().zip(b.out.iter()) {
            assert!((x - *y as f64).abs() < 2e-5, "{content:?}: {x} vs {y}");
        }
    }
}

#[test]
fn bad_input_is_an_error_naming_the_argument() {
    let mut rng = StdRng::seed_from_u64(6);
    let (q, k, v) = (rand3(&mut rng, 2, 10, 3), rand3(&mut rng, 2, 10, 3), rand3(&mut rng, 2, 10, 2));
    let dot = Content::Dot { scale: 1.0 };
    let run = |q: &Array3<f64>, k: &Array3<f64>, v: &Array3<f64>, pos: &Position, c: &Content| {
        fwd(&Sequences { q: q.view(), k: k.view(), v: v.view() }, c, pos, 1).unwrap_err().to_string()
    };
    let none = Position::default();
    assert!(run(&q, &k.slice(s![.., ..9, ..]).to_owned(), &v, &none, &dot).contains("`K`"));
    assert!(run(&q, &k, &v.slice(s![.., ..9, ..]).to_owned(), &none, &dot).contains("`V`"));
    assert!(run(&q, &k.slice(s![.., .., ..2]).to_owned(), &v, &none, &dot).contains("`K`"));
    assert!(run(&q, &k.slice(s![..1, .., ..]).to_owned(), &v, &none, &dot).contains("`K`"));
    let empty = Array3::<f64>::zeros((2, 0, 3));
    assert!(run(&empty, &empty, &Array3::zeros((2, 0, 2)), &none, &dot).contains("`Q`"));
    assert!(run(&q, &k, &v, &Position { window: Some(0), ..Default::default() }, &dot).contains("`window`"));
    let neg = [0.1, -0.1];
    assert!(run(&q, &k, &v, &Position { decay: Some(&neg), ..Default::default() }, &dot).contains("`decay`"));
    let short = [0.1];
    assert!(run(&q, &k, &v, &Position { decay: Some(&short), ..Default::default() }, &dot).contains("`decay`"));
    assert!(run(&q, &k, &v, &none, &Content::Dot { scale: f64::NAN }).contains("`scale`"));
    assert!(run(&q, &k, &v, &none, &Content::Radial { profile: Profile::Gaussian, bandwidth: 0.0 }).contains("`bandwidth`"));
    let t = q.clone().reversed_axes();
    let t = t.view().reversed_axes();
    assert!(!t.is_standard_layout() || t.is_standard_layout()); // a transposed copy is standard again: use a strided slice instead
    let wide = rand3(&mut rng, 2, 20, 3);
    let strided = wide.slice(s![.., ..;2, ..]);
    let e = fwd(&Sequences { q: strided, k: k.view(), v: v.view() }, &dot, &none, 1).unwrap_err().to_string();
    assert!(e.contains("`Q`") && e.contains("contiguous"), "{e}");
    let m = Array3::from_elem((1, 10, 9), true);
    let e = run(&q, &k, &v, &Position { mask: Some(Mask { allowed: m.view(), slab: &[0, 0] }), ..Default::default() }, &dot);
    assert!(e.contains("`mask`"), "{e}");
}

#[test]
fn progress_is_reported_and_an_interrupt_stops_the_run() {
    let mut rng = StdRng::seed_from_u64(7);
    let (q, k, v) = (rand3(&mut rng, 1, 50, 2), rand3(&mut rng, 1, 50, 2), rand3(&mut rng, 1, 50, 2));
    let seq = Sequences { q: q.view(), k: k.view(), v: v.view() };
    let mon = Monitor::default();
    crate::parallel::install(1, || forward(&seq, &Content::Dot { scale: 1.0 }, &Position::default(), &mon)).unwrap().unwrap();
    assert_eq!(mon.progress(), (1, 1));
    let stopped = Monitor::default();
    stopped.stop();
    let r = crate::parallel::install(1, || forward(&seq, &Content::Dot { scale: 1.0 }, &Position::default(), &stopped)).unwrap();
    assert_eq!(r.unwrap_err(), LocalizationError::Interrupted);
}
