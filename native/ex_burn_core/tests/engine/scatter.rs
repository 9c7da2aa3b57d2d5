use super::common::*;
use ex_burn_core::{DType, Op};

fn scatter_max(strides: Vec<usize>) -> Op {
    Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![2, 3],
        strides: Some(strides),
        padding: None,
    }
}

#[test]
fn window_scatter_max_adds_source_at_each_window_maximum() {
    let x = s(
        &[
            7., 2., 5., 3., 10., 2., 3., 8., 9., 3., 4., 2., 1., 5., 7., 5., 6., 1., 0., 6., 2.,
            7., 2., 8.,
        ],
        &[4, 6],
    );
    let src = s(&[2., 6., 3., 1.], &[2, 2]);
    let init = s(&[0.], &[]);
    let out = ev(scatter_max(vec![2, 3]), &[&x, &src, &init]);
    #[rustfmt::skip]
    let want = [
        0., 0., 0., 0., 6., 0.,
        0., 0., 2., 0., 0., 0.,
        0., 0., 3., 0., 0., 0.,
        0., 0., 0., 0., 0., 1.,
    ];
    check(&out, &[4, 6], DType::S64, &want);
}

#[test]
fn overlapping_windows_accumulate_and_init_fills_the_rest() {
    let x = f(&[1., 5., 2., 4.], &[4]);
    let src = f(&[10., 20., 30.], &[3]);
    let init = f(&[0.5], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![2],
        strides: None,
        padding: None,
    };
    // windows [1,5] [5,2] [2,4] pick 5, 5, 4
    check(
        &ev(op, &[&x, &src, &init]),
        &[4],
        DType::F32,
        &[0.5, 30.5, 0.5, 30.5],
    );
}

#[test]
fn window_scatter_min_breaks_ties_towards_the_last_element() {
    let x = f(&[3., 1., 1., 2.], &[4]);
    let src = f(&[7.], &[1]);
    let init = f(&[0.], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Min,
        window_dims: vec![4],
        strides: None,
        padding: None,
    };
    check(
        &ev(op, &[&x, &src, &init]),
        &[4],
        DType::F32,
        &[0., 0., 7., 0.],
    );
}

#[test]
fn padding_is_filled_with_init_and_cropped() {
    let x = f(&[-1., -2.], &[2]);
    let src = f(&[5., 6.], &[2]);
    let init = f(&[0.], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![2],
        strides: Some(vec![1]),
        padding: Some(vec![(1, 0)]),
    };
    // padded [0, -1, -2]: the first window picks the padding (dropped), the second picks -1
    check(&ev(op, &[&x, &src, &init]), &[2], DType::F32, &[6., 0.]);
}

#[test]
fn a_source_of_the_wrong_shape_is_refused() {
    let x = f(&[1., 2., 3.], &[3]);
    let src = f(&[1.], &[1]);
    let init = f(&[0.], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![2],
        strides: None,
        padding: None,
    };
    assert_eq!(ev_err(op, &[&x, &src, &init]), "shape");
}

/// The values `Nx.BinaryBackend` gives (the engine's reference, written out here): windows
/// in row-major order, each selecting by `>=` (`<=`) from its first element, padding read as
/// `init`; each element `init` plus its selecting windows' sources in their order, in f32.
fn reference(
    x: &[f32],
    shape: &[usize],
    src: &[f32],
    init: f32,
    (window, strides, lo, counts): (&[usize], &[usize], &[usize], &[usize]),
    max: bool,
) -> Vec<f32> {
    let rank = shape.len();
    let mut picked: Vec<Vec<f32>> = vec![Vec::new(); x.len()];
    let windows: usize = counts.iter().product();
    let len: usize = window.iter().product();
    let coords = |mut i: usize, dims: &[usize]| {
        let mut c = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            c[a] = i % dims[a];
            i /= dims[a];
        }
        c
    };
    for (w, &s) in src.iter().enumerate().take(windows) {
        let wc = coords(w, counts);
        let mut best: Option<(f32, Option<usize>)> = None;
        for q in 0..len {
            let qc = coords(q, window);
            let mut at = Some(0);
            for a in 0..rank {
                let pp = wc[a] * strides[a] + qc[a];
                at = match (at, pp.checked_sub(lo[a]).filter(|&p| p < shape[a])) {
                    (Some(o), Some(p)) => Some(o * shape[a] + p),
                    _ => None,
                };
            }
            let value = at.map_or(init, |o| x[o]);
            best = match best {
                None => Some((value, at)),
                Some((b, _)) if (max && value >= b) || (!max && value <= b) => Some((value, at)),
                keep => keep,
            };
        }
        if let Some((_, Some(o))) = best {
            picked[o].push(s);
        }
    }
    picked
        .iter()
        .map(|s| s.iter().fold(init, |acc, v| acc + v))
        .collect()
}

/// Generated shapes, windows, strides and padding, inputs with ties (and NaN), sources of
/// mixed magnitudes (sums of three or four whose value depends on the order): every element
/// bit for bit as the reference, for max and min, on the test device. The last case is a
/// max pooling's gradient of a 3 x 3 window at stride 2 with padding 1, large enough for the
/// parallel pieces of the CPU kernel and the device's kernels.
#[test]
fn window_scatters_equal_binary_backend_order_bit_for_bit() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |m: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % m as u64) as usize
    };
    let mut cases = Vec::new();
    for _ in 0..60 {
        let rank = 1 + next(4);
        let shape: Vec<usize> = (0..rank).map(|_| 1 + next(7)).collect();
        let lo: Vec<usize> = (0..rank).map(|_| next(2)).collect();
        let hi: Vec<usize> = (0..rank).map(|_| next(2)).collect();
        let window: Vec<usize> = (0..rank)
            .map(|a| 1 + next((shape[a] + lo[a] + hi[a]).min(3)))
            .collect();
        let strides: Vec<usize> = (0..rank).map(|_| 1 + next(3)).collect();
        cases.push((shape, window, strides, lo, hi));
    }
    cases.push((
        vec![2, 3, 57, 62],
        vec![1, 1, 3, 3],
        vec![1, 1, 2, 2],
        vec![0, 0, 1, 1],
        vec![0, 0, 1, 1],
    ));
    for (c, (shape, window, strides, lo, hi)) in cases.into_iter().enumerate() {
        let rank = shape.len();
        let counts: Vec<usize> = (0..rank)
            .map(|a| (shape[a] + lo[a] + hi[a] - window[a]) / strides[a] + 1)
            .collect();
        let n: usize = shape.iter().product();
        let windows: usize = counts.iter().product();
        let x: Vec<f32> = (0..n)
            .map(|i| match next(23) {
                0 if c % 3 == 0 => f32::NAN,
                k => (k % 5) as f32 - 2.0 + if i % 7 == 0 { 0.5 } else { 0.0 },
            })
            .collect();
        let src: Vec<f32> = (0..windows)
            .map(|_| {
                let magnitude = [1.0e-3f32, 1.0, 3.0e7, 1.0e8][next(4)];
                (next(1000) as f32 - 500.0) / 7.0 * magnitude
            })
            .collect();
        let init = [0.0f32, 0.25][c % 2];
        let as64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        let (xt, st, it) = (
            f(&as64(&x), &shape),
            f(&as64(&src), &counts),
            f(&[init as f64], &[]),
        );
        for kind in [ScatterKind::Max, ScatterKind::Min] {
            let op = Op::WindowScatter {
                kind,
                window_dims: window.clone(),
                strides: Some(strides.clone()),
                padding: Some(
                    lo.iter()
                        .zip(&hi)
                        .map(|(&l, &h)| (l as i64, h as i64))
                        .collect(),
                ),
            };
            let got: Vec<f32> = v(&ev(op, &[&xt, &st, &it]))
                .iter()
                .map(|&g| g as f32)
                .collect();
            let geometry = (&window[..], &strides[..], &lo[..], &counts[..]);
            let want = reference(&x, &shape, &src, init, geometry, kind == ScatterKind::Max);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "case {c} {kind:?} {shape:?} window {window:?} strides {strides:?} \
                     padding {lo:?}/{hi:?}: element {i} is {g}, want {w}"
                );
            }
        }
    }
}

/// Three windows select one element with sources whose f32 sum depends on the order:
/// `((0 + 1e8) - 1e8) + 3` is 3 in the windows' order, 0 in the reverse one.
#[test]
fn window_scatter_adds_in_the_windows_order() {
    let x = f(&[0., 9., 0.], &[3]);
    let src = f(&[1.0e8, -1.0e8, 3.0], &[3]);
    let init = f(&[0.], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![3],
        strides: Some(vec![1]),
        padding: Some(vec![(1, 1)]),
    };
    // padded [0, 0, 9, 0, 0]: all three windows select the 9
    check(&ev(op, &[&x, &src, &init]), &[3], DType::F32, &[0., 3., 0.]);
}
