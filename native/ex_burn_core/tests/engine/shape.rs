use super::common::*;
use ex_burn_core::{DType, Op};

fn x23() -> ex_burn_core::Tensor {
    f(&[1., 2., 3., 4., 5., 6.], &[2, 3])
}

#[test]
fn transpose_reshape_squeeze() {
    check(
        &ev(Op::Transpose { axes: None }, &[&x23()]),
        &[3, 2],
        DType::F32,
        &[1., 4., 2., 5., 3., 6.],
    );
    let y = f(&(0..24).map(|i| i as f64).collect::<Vec<_>>(), &[2, 3, 4]);
    let p = ev(
        Op::Transpose {
            axes: Some(vec![2, 0, 1]),
        },
        &[&y],
    );
    assert_eq!(p.shape(), &[4, 2, 3]);
    assert_eq!(&v(&p)[..6], &[0., 4., 8., 12., 16., 20.]);
    check(
        &ev(Op::Reshape { shape: vec![3, 2] }, &[&x23()]),
        &[3, 2],
        DType::F32,
        &[1., 2., 3., 4., 5., 6.],
    );
    check(
        &ev(Op::Reshape { shape: vec![] }, &[&f(&[7.], &[1, 1])]),
        &[],
        DType::F32,
        &[7.],
    );
    assert_eq!(ev_err(Op::Reshape { shape: vec![4] }, &[&x23()]), "shape");
    let z = f(&[1., 2.], &[1, 2, 1]);
    assert_eq!(ev(Op::Squeeze { axes: None }, &[&z]).shape(), &[2]);
    assert_eq!(
        ev(
            Op::Squeeze {
                axes: Some(vec![2])
            },
            &[&z]
        )
        .shape(),
        &[1, 2]
    );
    assert_eq!(
        ev_err(
            Op::Squeeze {
                axes: Some(vec![1])
            },
            &[&z]
        ),
        "shape"
    );
}

/// Reshapes of transposed and sliced views read the elements in row-major order of the view
/// (on CUDA such layouts are copied by a kernel of ExBurn's before the reshape).
#[test]
fn reshapes_of_permuted_and_sliced_views() {
    let n = 2 * 3 * 40 * 50;
    let y = f(
        &(0..n).map(|i| i as f64).collect::<Vec<_>>(),
        &[2, 3, 40, 50],
    );
    for perm in [vec![0, 2, 1, 3], vec![3, 1, 0, 2], vec![0, 1, 3, 2]] {
        let p = ev(
            Op::Transpose {
                axes: Some(perm.clone()),
            },
            &[&y],
        );
        let shape: Vec<usize> = perm.iter().map(|&a| [2, 3, 40, 50][a]).collect();
        let want: Vec<f64> = (0..n)
            .map(|i| {
                // the view's coordinates, in the original's axes
                let mut rest = i;
                let mut at = [0usize; 4];
                for k in (0..4).rev() {
                    at[perm[k]] = rest % shape[k];
                    rest /= shape[k];
                }
                (((at[0] * 3 + at[1]) * 40 + at[2]) * 50 + at[3]) as f64
            })
            .collect();
        let merged = vec![shape[0] * shape[1], shape[2] * shape[3]];
        check(
            &ev(
                Op::Reshape {
                    shape: merged.clone(),
                },
                &[&p],
            ),
            &merged,
            DType::F32,
            &want,
        );
        check(
            &ev(Op::Reshape { shape: vec![n] }, &[&p]),
            &[n],
            DType::F32,
            &want,
        );
    }
    // a slice of the last axis, flattened
    let s = ev(
        Op::Slice {
            starts: vec![0, 0, 0, 10],
            lengths: vec![2, 3, 40, 20],
            strides: None,
            dynamic: vec![],
        },
        &[&y],
    );
    let want: Vec<f64> = (0..n / 50 * 20)
        .map(|i| ((i / 20) * 50 + 10 + i % 20) as f64)
        .collect();
    check(
        &ev(
            Op::Reshape {
                shape: vec![240, 20],
            },
            &[&s],
        ),
        &[240, 20],
        DType::F32,
        &want,
    );
    check(
        &ev(Op::Reshape { shape: vec![4800] }, &[&s]),
        &[4800],
        DType::F32,
        &want,
    );
}

#[test]
fn broadcast_with_axes() {
    let v3 = f(&[1., 2., 3.], &[3]);
    check(
        &ev(
            Op::Broadcast {
                shape: vec![2, 3],
                axes: None,
            },
            &[&v3],
        ),
        &[2, 3],
        DType::F32,
        &[1., 2., 3., 1., 2., 3.],
    );
    check(
        &ev(
            Op::Broadcast {
                shape: vec![3, 2],
                axes: Some(vec![0]),
            },
            &[&v3],
        ),
        &[3, 2],
        DType::F32,
        &[1., 1., 2., 2., 3., 3.],
    );
    check(
        &ev(
            Op::Broadcast {
                shape: vec![2],
                axes: None,
            },
            &[&f(&[5.], &[])],
        ),
        &[2],
        DType::F32,
        &[5., 5.],
    );
}

#[test]
fn slices_strided_clamped_and_dynamic() {
    let x = f(&(0..10).map(|i| i as f64).collect::<Vec<_>>(), &[10]);
    let sl = |starts, lengths, strides| Op::Slice {
        starts,
        lengths,
        strides,
        dynamic: vec![],
    };
    check(
        &ev(sl(vec![2], vec![5], None), &[&x]),
        &[5],
        DType::F32,
        &[2., 3., 4., 5., 6.],
    );
    check(
        &ev(sl(vec![1], vec![7], Some(vec![3])), &[&x]),
        &[3],
        DType::F32,
        &[1., 4., 7.],
    );
    // starts are clamped so the slice fits, as Nx does for dynamic starts
    check(
        &ev(sl(vec![8], vec![4], None), &[&x]),
        &[4],
        DType::F32,
        &[6., 7., 8., 9.],
    );
    let dynamic = Op::Slice {
        starts: vec![0, 0],
        lengths: vec![1, 2],
        strides: None,
        dynamic: vec![0, 1],
    };
    check(
        &ev(
            dynamic,
            &[&x23(), &s(&[1.], &[]), &t(&[5.], &[], DType::S32)],
        ),
        &[1, 2],
        DType::F32,
        &[5., 6.],
    );
    check(
        &ev(sl(vec![0], vec![0], None), &[&x]),
        &[0],
        DType::F32,
        &[],
    );
}

#[test]
fn put_slice_clamps_and_promotes() {
    let x = s(&[0., 0., 0., 0.], &[2, 2]);
    let u = f(&[1.5, 2.5], &[1, 2]);
    let op = Op::PutSlice {
        starts: vec![5, 0],
        dynamic: vec![],
    };
    check(&ev(op, &[&x, &u]), &[2, 2], DType::F32, &[0., 0., 1.5, 2.5]);
}

/// `put_slice` at starts held in tensors (a key/value cache written at a loop's position):
/// every start, in range, negative or past the end (clamped as Nx does), of each integer
/// type, gives what the same starts known in advance give. On a GPU the starts are read by
/// the kernel on the device.
#[test]
fn put_slice_at_dynamic_starts_clamps_as_static_starts() {
    let (layers, heads, max, hd) = (2, 3, 10, 4);
    let cache = f(
        &(0..layers * heads * max * hd)
            .map(|i| -(i as f64))
            .collect::<Vec<_>>(),
        &[layers, heads, max, hd],
    );
    let update = f(
        &(0..heads * 2 * hd)
            .map(|i| 100.0 + i as f64)
            .collect::<Vec<_>>(),
        &[1, heads, 2, hd],
    );
    for pos in [-3i64, 0, 4, 8, 9, 40, i64::from(i32::MAX)] {
        for layer in [0i64, 1, 7] {
            let fixed = ev(
                Op::PutSlice {
                    starts: vec![layer, 0, pos, 0],
                    dynamic: vec![],
                },
                &[&cache, &update],
            );
            for dtype in [DType::S32, DType::S64, DType::U8] {
                if dtype == DType::U8 && !(0..256).contains(&pos) {
                    continue;
                }
                let (l, p) = (
                    t(&[layer as f64], &[], DType::S64),
                    t(&[pos as f64], &[], dtype),
                );
                let got = ev(
                    Op::PutSlice {
                        starts: vec![0, 0, 0, 0],
                        dynamic: vec![0, 2],
                    },
                    &[&cache, &update, &l, &p],
                );
                assert_eq!(got.shape(), fixed.shape());
                assert_eq!(
                    v(&got),
                    v(&fixed),
                    "layer {layer}, position {pos} as {dtype:?}"
                );
            }
        }
    }
}

#[test]
fn slice_at_dynamic_starts_clamps_as_static_starts() {
    // a generation loop's read of one position's logits, and strided windows
    let (rows, cols) = (10, 6);
    let x = f(
        &(0..2 * rows * cols)
            .map(|i| i as f64 * 0.5 - 7.0)
            .collect::<Vec<_>>(),
        &[2, rows, cols],
    );
    for pos in [-3i64, 0, 4, 8, 9, 40, i64::from(i32::MAX)] {
        for (lengths, strides) in [
            (vec![2, 1, cols], None),
            (vec![1, 3, 4], Some(vec![1, 2, 3])),
        ] {
            let fixed = ev(
                Op::Slice {
                    starts: vec![0, pos, 1],
                    lengths: lengths.clone(),
                    strides: strides.clone(),
                    dynamic: vec![],
                },
                &[&x],
            );
            for dtype in [DType::S32, DType::S64, DType::U8] {
                if dtype == DType::U8 && !(0..256).contains(&pos) {
                    continue;
                }
                let p = t(&[pos as f64], &[], dtype);
                let got = ev(
                    Op::Slice {
                        starts: vec![0, 0, 1],
                        lengths: lengths.clone(),
                        strides: strides.clone(),
                        dynamic: vec![1],
                    },
                    &[&x, &p],
                );
                assert_eq!(got.shape(), fixed.shape());
                assert_eq!(
                    v(&got),
                    v(&fixed),
                    "position {pos} as {dtype:?}, lengths {lengths:?}, strides {strides:?}"
                );
            }
        }
    }
}

#[test]
fn concatenate_and_stack() {
    let a = f(&[1., 2.], &[1, 2]);
    let b = s(&[3., 4., 5., 6.], &[2, 2]);
    check(
        &ev(Op::Concatenate { axis: 0 }, &[&a, &b]),
        &[3, 2],
        DType::F32,
        &[1., 2., 3., 4., 5., 6.],
    );
    let e = f(&[], &[0, 2]);
    check(
        &ev(Op::Concatenate { axis: 0 }, &[&e, &a]),
        &[1, 2],
        DType::F32,
        &[1., 2.],
    );
    let c = f(&[3., 4.], &[2]);
    let d = f(&[1., 2.], &[2]);
    check(
        &ev(Op::Stack { axis: 1 }, &[&d, &c]),
        &[2, 2],
        DType::F32,
        &[1., 3., 2., 4.],
    );
    assert_eq!(
        ev_err(Op::Concatenate { axis: 1 }, &[&a, &f(&[1.; 3], &[3, 1])]),
        "shape"
    );
}

#[test]
fn pad_positive_negative_and_interior() {
    let x = f(&[1., 2., 3.], &[3]);
    let zero = f(&[0.], &[]);
    check(
        &ev(
            Op::Pad {
                config: vec![(1, 2, 0)],
            },
            &[&x, &zero],
        ),
        &[6],
        DType::F32,
        &[0., 1., 2., 3., 0., 0.],
    );
    check(
        &ev(
            Op::Pad {
                config: vec![(0, 0, 1)],
            },
            &[&x, &f(&[9.], &[])],
        ),
        &[5],
        DType::F32,
        &[1., 9., 2., 9., 3.],
    );
    check(
        &ev(
            Op::Pad {
                config: vec![(-1, 1, 1)],
            },
            &[&x, &zero],
        ),
        &[5],
        DType::F32,
        &[0., 2., 0., 3., 0.],
    );
    let m = f(&[1., 2., 3., 4.], &[2, 2]);
    let r = ev(
        Op::Pad {
            config: vec![(1, 0, 0), (0, -1, 0)],
        },
        &[&m, &f(&[-1.], &[])],
    );
    check(&r, &[3, 1], DType::F32, &[-1., 1., 3.]);
}

#[test]
fn reverse_axes() {
    check(
        &ev(
            Op::Reverse {
                axes: Some(vec![1]),
            },
            &[&x23()],
        ),
        &[2, 3],
        DType::F32,
        &[3., 2., 1., 6., 5., 4.],
    );
    check(
        &ev(Op::Reverse { axes: None }, &[&x23()]),
        &[2, 3],
        DType::F32,
        &[6., 5., 4., 3., 2., 1.],
    );
}

/// `put_slice` into a broadcast zero (the gradient Nx derives for a slice), into a transposed
/// view and with a transposed update, against indices computed on the host: on CUDA these
/// run as one kernel reading both operands through their strides.
#[test]
fn put_slice_into_broadcasts_and_strided_views() {
    let (d0, d1, d2) = (3, 40, 96);
    let zero = ev(
        Op::Broadcast {
            shape: vec![d0, d1, d2],
            axes: None,
        },
        &[&f(&[0.0], &[])],
    );
    let un = d0 * d1 * 32;
    let upd = f(
        &(0..un).map(|i| i as f64 + 1.0).collect::<Vec<_>>(),
        &[d0, d1, 32],
    );
    let put = |starts: Vec<i64>| Op::PutSlice {
        starts,
        dynamic: vec![],
    };
    for start in [0usize, 32, 64] {
        let got = ev(put(vec![0, 0, start as i64]), &[&zero, &upd]);
        let want: Vec<f64> = (0..d0 * d1 * d2)
            .map(|i| {
                let (r, c) = (i / d2, i % d2);
                if (start..start + 32).contains(&c) {
                    (r * 32 + c - start) as f64 + 1.0
                } else {
                    0.0
                }
            })
            .collect();
        check(&got, &[d0, d1, d2], DType::F32, &want);
    }
    // a transposed target [d2, d1] and a transposed update [8, 5], window at [10, 7]
    let base = f(
        &(0..d1 * d2).map(|i| -(i as f64)).collect::<Vec<_>>(),
        &[d1, d2],
    );
    let swap = Op::Transpose { axes: None };
    let target = ev(swap.clone(), &[&base]);
    let small = f(
        &(0..40).map(|i| 1000.0 + i as f64).collect::<Vec<_>>(),
        &[5, 8],
    );
    let update = ev(swap, &[&small]);
    let got = ev(put(vec![10, 7]), &[&target, &update]);
    let want: Vec<f64> = (0..d2 * d1)
        .map(|i| {
            let (r, c) = (i / d1, i % d1);
            if (10..18).contains(&r) && (7..12).contains(&c) {
                1000.0 + ((c - 7) * 8 + (r - 10)) as f64
            } else {
                -((c * d2 + r) as f64)
            }
        })
        .collect();
    check(&got, &[d2, d1], DType::F32, &want);
}
