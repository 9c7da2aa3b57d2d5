use super::common::*;
use ex_burn_core::op::TieBreak;
use ex_burn_core::{DType, Op};

fn sum(axes: Option<Vec<usize>>, keep: bool) -> Op {
    Op::Reduce {
        kind: ReduceKind::Sum,
        axes,
        keep_axes: keep,
        out: None,
    }
}

#[test]
fn sum_over_any_axes_with_keep_axes() {
    let x = f(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    check(&ev(sum(None, false), &[&x]), &[], DType::F32, &[21.]);
    check(
        &ev(sum(Some(vec![0]), false), &[&x]),
        &[3],
        DType::F32,
        &[5., 7., 9.],
    );
    check(
        &ev(sum(Some(vec![1]), true), &[&x]),
        &[2, 1],
        DType::F32,
        &[6., 15.],
    );
    check(
        &ev(sum(Some(vec![0, 1]), true), &[&x]),
        &[1, 1],
        DType::F32,
        &[21.],
    );
    let y = f(&(0..24).map(|i| i as f64).collect::<Vec<_>>(), &[2, 3, 4]);
    check(
        &ev(sum(Some(vec![0, 2]), false), &[&y]),
        &[3],
        DType::F32,
        &[60., 92., 124.],
    );
}

#[test]
fn integer_sums_accumulate_in_64_bits() {
    let x = t(&[100., 100., 100.], &[3], DType::S8);
    check(&ev(sum(None, false), &[&x]), &[], DType::S64, &[300.]);
    let u = t(&[200., 200.], &[2], DType::U8);
    check(&ev(sum(None, false), &[&u]), &[], DType::U64, &[400.]);
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::Product,
                axes: None,
                keep_axes: false,
                out: None,
            },
            &[&t(&[2., 3., 4.], &[3], DType::S32)],
        ),
        &[],
        DType::S64,
        &[24.],
    );
}

#[test]
fn empty_reductions_give_the_identity() {
    let e = f(&[], &[0, 3]);
    check(
        &ev(sum(Some(vec![0]), false), &[&e]),
        &[3],
        DType::F32,
        &[0., 0., 0.],
    );
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::Product,
                axes: None,
                keep_axes: false,
                out: None,
            },
            &[&e],
        ),
        &[],
        DType::F32,
        &[1.],
    );
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::Max,
                axes: None,
                keep_axes: false,
                out: None,
            },
            &[&e],
        ),
        &[],
        DType::F32,
        &[f64::NEG_INFINITY],
    );
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::Min,
                axes: None,
                keep_axes: false,
                out: None,
            },
            &[&t(&[], &[0], DType::S8)],
        ),
        &[],
        DType::S8,
        &[127.],
    );
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::All,
                axes: None,
                keep_axes: false,
                out: None,
            },
            &[&e],
        ),
        &[],
        DType::U8,
        &[1.],
    );
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::Any,
                axes: None,
                keep_axes: false,
                out: None,
            },
            &[&e],
        ),
        &[],
        DType::U8,
        &[0.],
    );
}

#[test]
fn max_min_all_any() {
    let x = s(&[3., -1., 7., 2., 9., -4.], &[2, 3]);
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::Max,
                axes: Some(vec![1]),
                keep_axes: false,
                out: None,
            },
            &[&x],
        ),
        &[2],
        DType::S64,
        &[7., 9.],
    );
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::Min,
                axes: Some(vec![0]),
                keep_axes: true,
                out: None,
            },
            &[&x],
        ),
        &[1, 3],
        DType::S64,
        &[2., -1., -4.],
    );
    let b = t(&[1., 0., 1., 1., 1., 1.], &[2, 3], DType::U8);
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::All,
                axes: Some(vec![1]),
                keep_axes: false,
                out: None,
            },
            &[&b],
        ),
        &[2],
        DType::U8,
        &[0., 1.],
    );
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::Any,
                axes: Some(vec![0]),
                keep_axes: false,
                out: None,
            },
            &[&b],
        ),
        &[3],
        DType::U8,
        &[1., 1., 1.],
    );
    check(
        &ev(
            Op::Reduce {
                kind: ReduceKind::All,
                axes: None,
                keep_axes: false,
                out: None,
            },
            &[&f(&[0.5, -1.], &[2])],
        ),
        &[],
        DType::U8,
        &[1.],
    );
}

#[test]
fn argmax_argmin_with_ties() {
    let x = f(&[1., 5., 5., 0., 0., 2.], &[2, 3]);
    let am = |axis, tie| Op::Arg {
        kind: ArgKind::Max,
        axis,
        keep_axis: false,
        tie_break: tie,
        out: None,
    };
    check(
        &ev(am(Some(1), TieBreak::Low), &[&x]),
        &[2],
        DType::S64,
        &[1., 2.],
    );
    check(
        &ev(am(Some(1), TieBreak::High), &[&x]),
        &[2],
        DType::S64,
        &[2., 2.],
    );
    check(&ev(am(None, TieBreak::Low), &[&x]), &[], DType::S64, &[1.]);
    check(&ev(am(None, TieBreak::High), &[&x]), &[], DType::S64, &[2.]);
    let amin = Op::Arg {
        kind: ArgKind::Min,
        axis: Some(1),
        keep_axis: true,
        tie_break: TieBreak::High,
        out: Some(DType::S32),
    };
    check(&ev(amin, &[&x]), &[2, 1], DType::S32, &[0., 1.]);
    let ai = Op::Arg {
        kind: ArgKind::Min,
        axis: Some(0),
        keep_axis: false,
        tie_break: TieBreak::Low,
        out: None,
    };
    check(
        &ev(ai, &[&s(&[3., 1., 1., 3.], &[4])]),
        &[],
        DType::S64,
        &[1.],
    );
    assert_eq!(ev_err(am(None, TieBreak::Low), &[&f(&[], &[0])]), "shape");
    // unsigned index types with tie_break: :high (the flip is done in a signed type)
    let hi_u32 = Op::Arg {
        kind: ArgKind::Max,
        axis: Some(1),
        keep_axis: false,
        tie_break: TieBreak::High,
        out: Some(DType::U32),
    };
    check(&ev(hi_u32, &[&x]), &[2], DType::U32, &[2., 2.]);
    // the last NaN wins, on every device and for either tie break (Nx.BinaryBackend's rule:
    // a NaN replaces the current extreme, even a NaN)
    let nan = f(&[2., f64::NAN, f64::INFINITY, f64::NAN, 1.], &[5]);
    for tie in [TieBreak::Low, TieBreak::High] {
        check(&ev(am(None, tie), &[&nan]), &[], DType::S64, &[3.]);
    }
    let amin_nan = Op::Arg {
        kind: ArgKind::Min,
        axis: None,
        keep_axis: false,
        tie_break: TieBreak::Low,
        out: None,
    };
    check(&ev(amin_nan, &[&nan]), &[], DType::S64, &[3.]);
}

#[test]
fn bad_axes_are_argument_errors() {
    let x = f(&[1., 2.], &[2]);
    assert_eq!(ev_err(sum(Some(vec![1]), false), &[&x]), "argument");
    assert_eq!(
        ev_err(sum(Some(vec![0, 0]), false), &[&f(&[1.; 4], &[2, 2])]),
        "argument"
    );
}

#[test]
fn f32_sums_are_the_f64_sum_rounded_once_in_every_layout() {
    if dev() != ex_burn_core::Device::Cpu {
        return;
    }
    let (c, h, w) = (7, 28, 28);
    let xs = spread(c * h * w, 11, 20, -6);
    // reference: per channel, the f64 sum of the f32 values, rounded once
    let want: Vec<f64> = (0..c)
        .map(|k| xs[k * h * w..(k + 1) * h * w].iter().sum::<f64>() as f32 as f64)
        .collect();
    let first = f(&xs, &[c, h, w]);
    let by_first = ev(sum(Some(vec![1, 2]), false), &[&first]);
    assert_eq!(v(&by_first), want, "channels first");
    // the same values channels-last (a permuted view, and a contiguous copy of it)
    let perm = Op::Transpose {
        axes: Some(vec![1, 2, 0]),
    };
    let last_view = ev(perm, &[&first]);
    let last = f(&v(&last_view), &[h, w, c]);
    for t in [&last_view, &last] {
        assert_eq!(
            v(&ev(sum(Some(vec![0, 1]), false), &[t])),
            want,
            "channels last"
        );
    }
    // non-contiguous reduced axes, middle axis, whole tensor
    let mid: Vec<f64> = (0..c * w)
        .map(|i| {
            let (k, j) = (i / w, i % w);
            (0..h).map(|r| xs[k * h * w + r * w + j]).sum::<f64>() as f32 as f64
        })
        .collect();
    assert_eq!(v(&ev(sum(Some(vec![1]), false), &[&first])), mid);
    let odd: Vec<f64> = (0..h)
        .map(|r| {
            (0..c)
                .flat_map(|k| (0..w).map(move |j| (k, j)))
                .map(|(k, j)| xs[k * h * w + r * w + j])
                .sum::<f64>() as f32 as f64
        })
        .collect();
    assert_eq!(v(&ev(sum(Some(vec![0, 2]), false), &[&first])), odd);
    let all = xs.iter().sum::<f64>() as f32 as f64;
    assert_eq!(v(&ev(sum(None, false), &[&first])), vec![all]);
}

/// Reductions over several axes, adjacent ones merged into one (a single kernel each run of
/// them), on contiguous and transposed inputs: every kind against a host reduction of the
/// same elements (exact: integer-valued floats and integers, max and min).
#[test]
fn reductions_over_runs_of_adjacent_axes_match_the_host() {
    let shape = [2usize, 3, 4, 5];
    let n: usize = shape.iter().product();
    // small integers (exact sums), some negative, in no particular order
    let vals: Vec<f64> = (0..n).map(|i| ((i * 7919) % 23) as f64 - 11.0).collect();
    let axes_sets: [&[usize]; 6] = [
        &[0, 1],
        &[1, 2],
        &[2, 3],
        &[0, 1, 3],
        &[1, 2, 3],
        &[0, 2, 3],
    ];
    let kinds = [
        ReduceKind::Sum,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::Product,
    ];
    for dtype in [DType::F32, DType::S64] {
        let x = t(&vals, &shape, dtype);
        // the same values, stored transposed: a permuted view of a [5, 4, 3, 2] tensor
        let mut tvals = vec![0.0; n];
        for (i, &v) in vals.iter().enumerate() {
            let (a, b, c, d) = (i / 60, i / 20 % 3, i / 5 % 4, i % 5);
            tvals[((d * 4 + c) * 3 + b) * 2 + a] = v;
        }
        let xt = ev(
            Op::Transpose {
                axes: Some(vec![3, 2, 1, 0]),
            },
            &[&t(&tvals, &[5, 4, 3, 2], dtype)],
        );
        for input in [&x, &xt] {
            for &axes in &axes_sets {
                for kind in kinds {
                    // products of at most 12 factors of magnitude <= 11 (no s64 overflow)
                    let count: usize = axes.iter().map(|&a| shape[a]).product();
                    if kind == ReduceKind::Product && count > 12 {
                        continue;
                    }
                    for keep in [false, true] {
                        let out_shape: Vec<usize> = (0..4)
                            .filter_map(|a| match (axes.contains(&a), keep) {
                                (true, true) => Some(1),
                                (true, false) => None,
                                _ => Some(shape[a]),
                            })
                            .collect();
                        let m: usize = out_shape.iter().product();
                        let mut want: Vec<Option<f64>> = vec![None; m];
                        for (i, &v) in vals.iter().enumerate() {
                            let idx = [i / 60, i / 20 % 3, i / 5 % 4, i % 5];
                            let o = (0..4)
                                .filter(|a| !axes.contains(a))
                                .fold(0, |o, a| o * shape[a] + idx[a]);
                            want[o] = Some(match (want[o], kind) {
                                (None, _) => v,
                                (Some(w), ReduceKind::Sum) => w + v,
                                (Some(w), ReduceKind::Max) => w.max(v),
                                (Some(w), ReduceKind::Min) => w.min(v),
                                (Some(w), _) => w * v,
                            });
                        }
                        let want: Vec<f64> = want.into_iter().map(Option::unwrap).collect();
                        let op = Op::Reduce {
                            kind,
                            axes: Some(axes.to_vec()),
                            keep_axes: keep,
                            out: None,
                        };
                        let got = ev(op, &[input]);
                        assert_eq!(got.shape(), &out_shape[..], "{kind:?} {axes:?} {dtype:?}");
                        let g = v(&got);
                        if kind == ReduceKind::Product && dtype == DType::F32 {
                            // f32 products of up to 20 factors round: compare relatively
                            for (a, b) in g.iter().zip(&want) {
                                assert!((a - b).abs() <= 1e-5 * b.abs(), "{kind:?} {axes:?}");
                            }
                        } else {
                            assert_eq!(g, want, "{kind:?} {axes:?} {dtype:?} keep {keep}");
                        }
                    }
                }
            }
        }
    }
}

/// Sums over leading axes of large f32 tensors (bias gradients; on CUDA two kernels of
/// ExBurn's: partial sums of row blocks, then their sums), contiguous and transposed, against
/// host sums (exact: small integers).
#[test]
fn large_sums_over_leading_axes_match_the_host() {
    let (a, b, c) = (64usize, 33usize, 301usize);
    let n = a * b * c;
    let vals: Vec<f64> = (0..n).map(|i| ((i * 7919) % 17) as f64 - 8.0).collect();
    let mut want = vec![0.0; c];
    for (i, &v) in vals.iter().enumerate() {
        want[i % c] += v;
    }
    let x = f(&vals, &[a, b, c]);
    // the same values stored as [c, a, b], read through a transpose
    let mut tvals = vec![0.0; n];
    for (i, &v) in vals.iter().enumerate() {
        let (p, q, r) = (i / (b * c), i / c % b, i % c);
        tvals[(r * a + p) * b + q] = v;
    }
    let xt = ev(
        Op::Transpose {
            axes: Some(vec![1, 2, 0]),
        },
        &[&f(&tvals, &[c, a, b])],
    );
    for input in [&x, &xt] {
        for keep in [false, true] {
            let got = ev(sum(Some(vec![0, 1]), keep), &[input]);
            let shape: &[usize] = if keep { &[1, 1, 301] } else { &[301] };
            check(&got, shape, DType::F32, &want);
        }
    }
}

/// Small f32 sums give the f64 sum of their elements rounded once, on every device (the CPU
/// accumulates every f32 sum in f64; a GPU those of at most 2^16 elements), as
/// Nx.BinaryBackend does: values whose f32 partial sums lose digits.
#[test]
fn small_f32_sums_accumulate_in_f64_where_the_device_computes_f64() {
    let (rows, cols) = (96, 500);
    let xs: Vec<f64> = (0..rows * cols)
        .map(|i| {
            let v = ((i * 7919) % 10007) as f64 / 10007.0 - 0.37;
            (v * (1.0 + (i % 13) as f64 * 1e3)) as f32 as f64
        })
        .collect();
    let x = f(&xs, &[rows, cols]);
    let got = v(&ev(sum(Some(vec![1]), false), &[&x]));
    // f32 accumulation elsewhere: a few f32 roundings of the magnitudes summed
    let tol = |row: &[f64]| 1e-5 * row.iter().map(|x| x.abs()).sum::<f64>();
    for (r, g) in got.iter().enumerate() {
        let row = &xs[r * cols..(r + 1) * cols];
        let want = row.iter().sum::<f64>() as f32 as f64;
        assert_rounded(*g, want, tol(row), &|| format!("row {r}"));
    }
    let all = v(&ev(sum(None, false), &[&x]))[0];
    assert_rounded(all, xs.iter().sum::<f64>() as f32 as f64, tol(&xs), &|| {
        "all".into()
    });
}

/// As Nx.BinaryBackend: the sum of a scalar starts from 0 (so -0.0 gives +0.0), a sum over no
/// axes of a larger tensor keeps its values, and products and extrema keep the sign of zero.
#[test]
fn sums_of_a_scalar_start_from_zero() {
    let bits = |t: &ex_burn_core::Tensor| t.to_bytes(None).unwrap();
    for dtype in [DType::F32, DType::F64] {
        if !supported(dtype) {
            continue;
        }
        let neg = t(&[-0.0], &[], dtype);
        let pos = t(&[0.0], &[], dtype);
        assert_eq!(
            bits(&ev(sum(None, false), &[&neg])),
            bits(&pos),
            "{dtype:?}"
        );
        assert_eq!(bits(&ev(sum(Some(vec![]), false), &[&neg])), bits(&pos));
        let prod = Op::Reduce {
            kind: ReduceKind::Product,
            axes: None,
            keep_axes: false,
            out: None,
        };
        assert_eq!(bits(&ev(prod, &[&neg])), bits(&neg));
        let pair = t(&[-0.0, 1.5], &[2], dtype);
        assert_eq!(bits(&ev(sum(Some(vec![]), false), &[&pair])), bits(&pair));
        let nan = t(&[f64::NAN], &[], dtype);
        assert!(v(&ev(sum(None, false), &[&nan]))[0].is_nan());
    }
}

/// f32 sums over the axes on both sides of kept ones (a batch normalization's statistics:
/// `[n, c, h, w]` over `[0, 2, 3]`; on a GPU one kernel of the device's), with and without
/// `keep_axes`, against the f64 sum: within f32 rounding of the partial sums.
#[test]
fn sums_around_kept_axes_match_the_f64_sum() {
    for (shape, axes) in [
        (vec![4, 3, 5, 7], vec![0, 2, 3]),
        (vec![64, 8, 14, 14], vec![0, 2, 3]),
        (vec![3, 2, 5, 4, 6], vec![0, 3, 4]),
        (vec![2, 3, 4, 5, 2], vec![0, 1, 4]),
        (vec![9, 1, 300], vec![0, 2]),
    ] {
        let n: usize = shape.iter().product();
        let xv: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 1013) as f64 / 101.0 - 5.0)
            .collect();
        let x = f(&xv, &shape);
        let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
        let out_len: usize = kept.iter().map(|&a| shape[a]).product();
        // the f64 sums of the (f32-exact) inputs, by kept index
        let mut want = vec![0f64; out_len];
        for (i, &v) in xv.iter().enumerate() {
            let (mut rest, mut at, mut scale) = (i, 0, 1);
            for a in (0..shape.len()).rev() {
                let c = rest % shape[a];
                rest /= shape[a];
                if kept.contains(&a) {
                    at += c * scale;
                    scale *= shape[a];
                }
            }
            want[at] += v as f32 as f64;
        }
        for keep in [false, true] {
            let got = ev(sum(Some(axes.clone()), keep), &[&x]);
            let want_shape: Vec<usize> = (0..shape.len())
                .filter_map(|a| match (kept.contains(&a), keep) {
                    (true, _) => Some(shape[a]),
                    (false, true) => Some(1),
                    (false, false) => None,
                })
                .collect();
            assert_eq!(got.shape(), want_shape, "{shape:?} over {axes:?}");
            let per = (n / out_len) as f64;
            for (j, (g, w)) in v(&got).iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-6 * per * 5.0 + 1e-4,
                    "{shape:?} over {axes:?} element {j}: {g} vs {w}"
                );
            }
        }
    }
}

/// A maximum or minimum over values holding a NaN is NaN, as in Nx, on every device (the GPU
/// backends' own `max`/`min` skip NaN), over one axis, several and all; rows without NaN keep
/// their extremum.
#[test]
fn extrema_over_a_nan_are_nan() {
    let mut xv: Vec<f64> = (0..24).map(|i| ((i * 5) % 11) as f64 - 5.0).collect();
    xv[7] = f64::NAN; // row 1 of [4, 6], element [0, 1, 3] of [2, 3, 4]
    for kind in [ReduceKind::Max, ReduceKind::Min] {
        let op = |axes: Option<Vec<usize>>| Op::Reduce {
            kind,
            axes,
            keep_axes: false,
            out: None,
        };
        let rows = v(&ev(op(Some(vec![1])), &[&f(&xv, &[4, 6])]));
        assert!(rows[1].is_nan(), "{kind:?}: {rows:?}");
        assert!(
            rows.iter().enumerate().all(|(i, r)| i == 1 || !r.is_nan()),
            "{kind:?}: {rows:?}"
        );
        let around = v(&ev(op(Some(vec![0, 2])), &[&f(&xv, &[2, 3, 4])]));
        assert!(
            around[1].is_nan() && !around[0].is_nan() && !around[2].is_nan(),
            "{kind:?}: {around:?}"
        );
        assert!(
            v(&ev(op(None), &[&f(&xv, &[4, 6])]))[0].is_nan(),
            "{kind:?}"
        );
    }
}
