use super::common::*;
use ex_burn_core::{DType, Op};

fn seq(n: usize) -> Vec<f64> {
    (1..=n).map(|i| i as f64).collect()
}

#[test]
fn window_sum_and_max_2d() {
    let x = f(&seq(9), &[3, 3]);
    let ws = Op::Window {
        kind: WindowKind::Sum,
        geometry: Geometry {
            window_dims: vec![2, 2],
            strides: None,
            padding: None,
            window_dilations: None,
        },
    };
    check(&ev(ws, &[&x]), &[2, 2], DType::F32, &[12., 16., 24., 28.]);
    let wm = Op::Window {
        kind: WindowKind::Max,
        geometry: Geometry {
            window_dims: vec![2, 2],
            strides: Some(vec![1, 2]),
            padding: None,
            window_dilations: None,
        },
    };
    check(&ev(wm, &[&x]), &[2, 1], DType::F32, &[5., 8.]);
}

#[test]
fn padding_uses_the_identity() {
    let x = s(&[1., 2., 3.], &[3]);
    let wmin = Op::Window {
        kind: WindowKind::Min,
        geometry: Geometry {
            window_dims: vec![2],
            strides: None,
            padding: Some(vec![(1, 1)]),
            window_dilations: None,
        },
    };
    check(&ev(wmin, &[&x]), &[4], DType::S64, &[1., 1., 2., 3.]);
    let wp = Op::Window {
        kind: WindowKind::Product,
        geometry: Geometry {
            window_dims: vec![2],
            strides: None,
            padding: Some(vec![(0, 1)]),
            window_dilations: None,
        },
    };
    check(&ev(wp, &[&x]), &[3], DType::S64, &[2., 6., 3.]);
    let wmax = Op::Window {
        kind: WindowKind::Max,
        geometry: Geometry {
            window_dims: vec![3],
            strides: None,
            padding: Some(vec![(1, 1)]),
            window_dilations: None,
        },
    };
    check(
        &ev(wmax, &[&f(&[-5., -6., -7.], &[3])]),
        &[3],
        DType::F32,
        &[-5., -5., -6.],
    );
}

#[test]
fn dilated_windows() {
    let x = f(&seq(6), &[6]);
    let ws = Op::Window {
        kind: WindowKind::Sum,
        geometry: Geometry {
            window_dims: vec![2],
            strides: None,
            padding: None,
            window_dilations: Some(vec![3]),
        },
    };
    check(&ev(ws, &[&x]), &[3], DType::F32, &[5., 7., 9.]);
}

#[test]
fn nchw_pooling_shape() {
    let x = f(&seq(32), &[1, 2, 4, 4]);
    let wm = Op::Window {
        kind: WindowKind::Max,
        geometry: Geometry {
            window_dims: vec![1, 1, 2, 2],
            strides: Some(vec![1, 1, 2, 2]),
            padding: None,
            window_dilations: None,
        },
    };
    check(
        &ev(wm, &[&x]),
        &[1, 2, 2, 2],
        DType::F32,
        &[6., 8., 14., 16., 22., 24., 30., 32.],
    );
}

/// The reference window extremum of a row-major f32 tensor: every window in full, NaN
/// propagating, padding by the identity.
#[allow(clippy::too_many_arguments)]
fn reference_extremum(
    x: &[f64],
    shape: &[usize],
    dims: &[usize],
    strides: &[usize],
    pad: &[(usize, usize)],
    dil: &[usize],
    max: bool,
) -> (Vec<usize>, Vec<f64>) {
    let r = shape.len();
    let padded: Vec<usize> = (0..r).map(|i| shape[i] + pad[i].0 + pad[i].1).collect();
    let out: Vec<usize> = (0..r)
        .map(|i| (padded[i] - ((dims[i] - 1) * dil[i] + 1)) / strides[i] + 1)
        .collect();
    let at = |idx: &[usize]| -> f64 {
        let mut flat = 0;
        for i in 0..r {
            let p = idx[i] as isize - pad[i].0 as isize;
            if p < 0 || p >= shape[i] as isize {
                return if max {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                };
            }
            flat = flat * shape[i] + p as usize;
        }
        x[flat]
    };
    let n_out: usize = out.iter().product();
    let n_win: usize = dims.iter().product();
    let mut values = Vec::with_capacity(n_out);
    for o in 0..n_out {
        let mut oi = vec![0; r];
        let mut rest = o;
        for i in (0..r).rev() {
            oi[i] = rest % out[i];
            rest /= out[i];
        }
        let mut acc: Option<f64> = None;
        for w in 0..n_win {
            let mut wi = vec![0; r];
            let mut rest = w;
            for i in (0..r).rev() {
                wi[i] = rest % dims[i];
                rest /= dims[i];
            }
            let idx: Vec<usize> = (0..r)
                .map(|i| oi[i] * strides[i] + wi[i] * dil[i])
                .collect();
            let v = at(&idx);
            acc = Some(match acc {
                None => v,
                Some(a) if a.is_nan() => a,
                Some(_) if v.is_nan() => v,
                Some(a) => {
                    if max {
                        a.max(v)
                    } else {
                        a.min(v)
                    }
                }
            });
        }
        values.push(acc.unwrap());
    }
    (out, values)
}

/// f32 window max and min (the host's one-pass kernel): strides, asymmetric padding,
/// dilation, NaN and infinities, against a direct reference.
#[test]
fn f32_window_extrema_match_a_direct_reference() {
    let shape = [2, 3, 7, 6];
    let n: usize = shape.iter().product();
    let x: Vec<f64> = (0..n)
        .map(|i| match i % 17 {
            3 => f64::NAN,
            5 => f64::INFINITY,
            11 => f64::NEG_INFINITY,
            _ => ((i * 37) % 23) as f64 - 11.5,
        })
        .collect();
    let xt = f(&x, &shape);
    // (window, strides, padding, dilations)
    type Case = ([usize; 4], [usize; 4], [(usize, usize); 4], [usize; 4]);
    let cases: [Case; 3] = [
        ([1, 1, 2, 2], [1, 1, 2, 2], [(0, 0); 4], [1; 4]),
        (
            [1, 2, 3, 2],
            [1, 1, 2, 1],
            [(0, 0), (1, 0), (2, 1), (0, 3)],
            [1; 4],
        ),
        (
            [2, 1, 2, 3],
            [1, 2, 3, 1],
            [(0, 1), (0, 0), (1, 1), (2, 0)],
            [1, 1, 2, 2],
        ),
    ];
    for (dims, strides, pad, dil) in cases {
        for max in [true, false] {
            let (window_dims, s, p, d) = (
                dims.to_vec(),
                Some(strides.to_vec()),
                Some(pad.iter().map(|&(a, b)| (a as i64, b as i64)).collect()),
                Some(dil.to_vec()),
            );
            let op = if max {
                Op::Window {
                    kind: WindowKind::Max,
                    geometry: Geometry {
                        window_dims,
                        strides: s,
                        padding: p,
                        window_dilations: d,
                    },
                }
            } else {
                Op::Window {
                    kind: WindowKind::Min,
                    geometry: Geometry {
                        window_dims,
                        strides: s,
                        padding: p,
                        window_dilations: d,
                    },
                }
            };
            let (out_shape, want) =
                reference_extremum(&x, &shape, &dims, &strides, &pad, &dil, max);
            let got = ev(op, &[&xt]);
            assert_eq!(got.shape(), out_shape.as_slice(), "{dims:?} {max}");
            let g = v(&got);
            for (k, (a, b)) in g.iter().zip(&want).enumerate() {
                assert!(
                    a == b || (a.is_nan() && b.is_nan()),
                    "{dims:?} max={max} at {k}: {a} vs {b}"
                );
            }
        }
    }
}
