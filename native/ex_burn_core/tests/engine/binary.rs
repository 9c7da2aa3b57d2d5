use crate::common::*;
use ex_burn_core::{DType, Op, Tensor};

fn add(out: Option<DType>) -> Op {
    Op::Binary {
        op: Arith::Add,
        out,
    }
}

#[test]
fn broadcasting_of_size_one_axes_and_ranks() {
    let a = f(&[1., 2., 3.], &[3, 1]);
    let b = f(&[10., 20.], &[2]);
    check(
        &ev(add(None), &[&a, &b]),
        &[3, 2],
        DType::F32,
        &[11., 21., 12., 22., 13., 23.],
    );
    let s0 = f(&[100.], &[]);
    check(&ev(add(None), &[&s0, &b]), &[2], DType::F32, &[110., 120.]);
    assert_eq!(ev_err(add(None), &[&f(&[1., 2., 3.], &[3]), &b]), "shape");
}

#[test]
fn broadcasting_after_chained_reshapes() {
    // Nx's vectorized outer product: reshapes of reshapes, then a two-sided broadcast
    let reshape = |x: &Tensor, shape: Vec<usize>| ev(Op::Reshape { shape }, &[x]);
    for dtype in [DType::S32, DType::F32] {
        let x = t(&[1., 2., 3., 0., -1., -2.], &[2, 3], dtype);
        let y = t(&[10., 20., -10., -20.], &[2, 2], dtype);
        let xr = reshape(&reshape(&x, vec![2, 3, 1]), vec![2, 1, 3, 1]);
        let yr = reshape(&reshape(&y, vec![2, 1, 2]), vec![1, 2, 1, 2]);
        check(
            &ev(
                Op::Binary {
                    op: Arith::Multiply,
                    out: None,
                },
                &[&xr, &yr],
            ),
            &[2, 2, 3, 2],
            dtype,
            &[
                10., 20., 20., 40., 30., 60., -10., -20., -20., -40., -30., -60., 0., 0., -10.,
                -20., -20., -40., 0., 0., 10., 20., 20., 40.,
            ],
        );
    }
}

#[test]
fn type_promotion_follows_nx() {
    let i8t = t(&[1., 2.], &[2], DType::S8);
    let u8t = t(&[1., 2.], &[2], DType::U8);
    let f16t = t(&[1., 2.], &[2], DType::F16);
    assert_eq!(ev(add(None), &[&i8t, &u8t]).dtype(), DType::S16);
    assert_eq!(ev(add(None), &[&i8t, &f16t]).dtype(), DType::F16);
    if supported(DType::BF16) {
        let bf16t = t(&[1., 2.], &[2], DType::BF16);
        assert_eq!(ev(add(None), &[&f16t, &bf16t]).dtype(), DType::F32);
    }
    assert_eq!(
        ev(
            Op::Binary {
                op: Arith::Divide,
                out: None
            },
            &[&i8t, &i8t]
        )
        .dtype(),
        DType::F32
    );
    // an explicit result type wins (Nx's `out`)
    assert_eq!(
        ev(add(Some(DType::S8)), &[&i8t, &s(&[1., 1.], &[2])]).dtype(),
        DType::S8
    );
}

#[test]
fn integer_arithmetic_wraps() {
    let a = t(&[127., -128., 100.], &[3], DType::S8);
    let b = t(&[1., -1., 100.], &[3], DType::S8);
    check(
        &ev(add(None), &[&a, &b]),
        &[3],
        DType::S8,
        &[-128., 127., -56.],
    );
    check(
        &ev(
            Op::Binary {
                op: Arith::Multiply,
                out: None,
            },
            &[&a, &b],
        ),
        &[3],
        DType::S8,
        &[127., -128., 16.],
    );
    let u = t(&[0., 250.], &[2], DType::U8);
    let one = t(&[1., 10.], &[2], DType::U8);
    check(
        &ev(
            Op::Binary {
                op: Arith::Subtract,
                out: None,
            },
            &[&u, &one],
        ),
        &[2],
        DType::U8,
        &[255., 240.],
    );
    check(&ev(add(None), &[&u, &one]), &[2], DType::U8, &[1., 4.]);
}

#[test]
fn quotient_truncates_and_remainder_takes_the_dividends_sign() {
    let a = s(&[7., -7., 7., -7., 6.], &[5]);
    let b = s(&[2., 2., -2., -2., 3.], &[5]);
    check(
        &ev(
            Op::Binary {
                op: Arith::Quotient,
                out: None,
            },
            &[&a, &b],
        ),
        &[5],
        DType::S64,
        &[3., -3., -3., 3., 2.],
    );
    check(
        &ev(
            Op::Binary {
                op: Arith::Remainder,
                out: None,
            },
            &[&a, &b],
        ),
        &[5],
        DType::S64,
        &[1., -1., 1., -1., 0.],
    );
    let fa = f(&[5.5, -5.5, 5.5, -5.5], &[4]);
    let fb = f(&[2., 2., -2., -2.], &[4]);
    check(
        &ev(
            Op::Binary {
                op: Arith::Remainder,
                out: None,
            },
            &[&fa, &fb],
        ),
        &[4],
        DType::F32,
        &[1.5, -1.5, 1.5, -1.5],
    );
    let ua = t(&[7., 200.], &[2], DType::U8);
    let ub = t(&[2., 7.], &[2], DType::U8);
    check(
        &ev(
            Op::Binary {
                op: Arith::Remainder,
                out: None,
            },
            &[&ua, &ub],
        ),
        &[2],
        DType::U8,
        &[1., 4.],
    );
    assert_eq!(
        ev_err(
            Op::Binary {
                op: Arith::Quotient,
                out: None
            },
            &[&fa, &fb]
        ),
        "dtype"
    );
}

#[test]
fn float_division_by_zero_gives_infinities() {
    let a = f(&[1., -1., 0.], &[3]);
    let z = f(&[0., 0., 0.], &[3]);
    check(
        &ev(
            Op::Binary {
                op: Arith::Divide,
                out: None,
            },
            &[&a, &z],
        ),
        &[3],
        DType::F32,
        &[f64::INFINITY, f64::NEG_INFINITY, f64::NAN],
    );
}

#[test]
fn pow_atan2_min_max() {
    let a = f(&[2., 9., -8.], &[3]);
    let b = f(&[3., 0.5, 2.], &[3]);
    close(
        &ev(
            Op::Binary {
                op: Arith::Pow,
                out: None,
            },
            &[&a, &b],
        ),
        &[8., 3., 64.],
        1e-6,
    );
    let ia = s(&[2., 3., -2.], &[3]);
    let ib = s(&[10., 3., 3.], &[3]);
    check(
        &ev(
            Op::Binary {
                op: Arith::Pow,
                out: None,
            },
            &[&ia, &ib],
        ),
        &[3],
        DType::S64,
        &[1024., 27., -8.],
    );
    close(
        &ev(
            Op::Binary {
                op: Arith::Atan2,
                out: None,
            },
            &[&f(&[1., -1.], &[2]), &f(&[1., -1.], &[2])],
        ),
        &[
            std::f64::consts::FRAC_PI_4,
            -3.0 * std::f64::consts::FRAC_PI_4,
        ],
        1e-6,
    );
    let x = f(&[1., f64::NAN, 3., -0.0], &[4]);
    let y = f(&[2., 1., f64::NAN, 0.0], &[4]);
    let mx = v(&ev(
        Op::Binary {
            op: Arith::Max,
            out: None,
        },
        &[&x, &y],
    ));
    assert_eq!(mx[0], 2.0);
    assert!(
        mx[1].is_nan() && mx[2].is_nan(),
        "max must propagate NaN: {mx:?}"
    );
    let mn = v(&ev(
        Op::Binary {
            op: Arith::Min,
            out: None,
        },
        &[&x, &y],
    ));
    assert_eq!(mn[0], 1.0);
    assert!(mn[1].is_nan() && mn[2].is_nan());
    check(
        &ev(
            Op::Binary {
                op: Arith::Max,
                out: None,
            },
            &[&ia, &ib],
        ),
        &[3],
        DType::S64,
        &[10., 3., 3.],
    );
}

#[test]
fn bitwise_and_shifts() {
    let a = t(&[12., -1., 5.], &[3], DType::S32);
    let b = t(&[10., 7., 1.], &[3], DType::S32);
    check(
        &ev(
            Op::Binary {
                op: Arith::BitwiseAnd,
                out: None,
            },
            &[&a, &b],
        ),
        &[3],
        DType::S32,
        &[8., 7., 1.],
    );
    check(
        &ev(
            Op::Binary {
                op: Arith::BitwiseOr,
                out: None,
            },
            &[&a, &b],
        ),
        &[3],
        DType::S32,
        &[14., -1., 5.],
    );
    check(
        &ev(
            Op::Binary {
                op: Arith::BitwiseXor,
                out: None,
            },
            &[&a, &b],
        ),
        &[3],
        DType::S32,
        &[6., -8., 4.],
    );
    check(
        &ev(
            Op::Binary {
                op: Arith::LeftShift,
                out: None,
            },
            &[&a, &b],
        ),
        &[3],
        DType::S32,
        &[12288., -128., 10.],
    );
    // arithmetic right shift on signed values
    check(
        &ev(
            Op::Binary {
                op: Arith::RightShift,
                out: None,
            },
            &[
                &t(&[-16., 16.], &[2], DType::S32),
                &t(&[2., 2.], &[2], DType::S32),
            ],
        ),
        &[2],
        DType::S32,
        &[-4., 4.],
    );
    let u = t(&[200.], &[1], DType::U8);
    check(
        &ev(
            Op::Binary {
                op: Arith::RightShift,
                out: None,
            },
            &[&u, &t(&[3.], &[1], DType::U8)],
        ),
        &[1],
        DType::U8,
        &[25.],
    );
    assert_eq!(
        ev_err(
            Op::Binary {
                op: Arith::BitwiseAnd,
                out: None
            },
            &[&f(&[1.], &[1]), &f(&[1.], &[1])]
        ),
        "dtype"
    );
}

#[test]
fn comparisons_and_logic_return_u8() {
    let a = f(&[1., 2., f64::NAN], &[3]);
    let b = f(&[2., 2., f64::NAN], &[3]);
    check(
        &ev(Op::Compare(Compare::Less), &[&a, &b]),
        &[3],
        DType::U8,
        &[1., 0., 0.],
    );
    check(
        &ev(Op::Compare(Compare::Equal), &[&a, &b]),
        &[3],
        DType::U8,
        &[0., 1., 0.],
    );
    check(
        &ev(Op::Compare(Compare::NotEqual), &[&a, &b]),
        &[3],
        DType::U8,
        &[1., 0., 1.],
    );
    check(
        &ev(Op::Compare(Compare::GreaterEqual), &[&a, &b]),
        &[3],
        DType::U8,
        &[0., 1., 0.],
    );
    // mixed types compare in the merged type: u8 255 vs s8 -1
    check(
        &ev(
            Op::Compare(Compare::Greater),
            &[&t(&[255.], &[1], DType::U8), &t(&[-1.], &[1], DType::S8)],
        ),
        &[1],
        DType::U8,
        &[1.],
    );
    let p = t(&[0., 1., 2., 0.], &[4], DType::S32);
    let q = t(&[0., 0., 3., 5.], &[4], DType::S32);
    check(
        &ev(Op::Logical(Logical::And), &[&p, &q]),
        &[4],
        DType::U8,
        &[0., 0., 1., 0.],
    );
    check(
        &ev(Op::Logical(Logical::Or), &[&p, &q]),
        &[4],
        DType::U8,
        &[0., 1., 1., 1.],
    );
    check(
        &ev(Op::Logical(Logical::Xor), &[&p, &q]),
        &[4],
        DType::U8,
        &[0., 1., 0., 1.],
    );
    // a comparison result feeds arithmetic as u8
    let c = ev(Op::Compare(Compare::Less), &[&a, &b]);
    check(&ev(add(None), &[&c, &c]), &[3], DType::U8, &[2., 0., 0.]);
}

#[test]
fn select_and_clip() {
    let p = t(&[1., 0., 5.], &[3], DType::U8);
    let x = s(&[1., 2., 3.], &[3]);
    let y = f(&[-1.], &[]);
    check(
        &ev(Op::Select { out: None }, &[&p, &x, &y]),
        &[3],
        DType::F32,
        &[1., -1., 3.],
    );
    let c = f(&[-5., 0.5, 7., f64::NAN], &[4]);
    check(
        &ev(Op::Clip, &[&c, &f(&[0.], &[]), &f(&[1.], &[])]),
        &[4],
        DType::F32,
        &[0., 0.5, 1., f64::NAN],
    );
    check(
        &ev(
            Op::Clip,
            &[&s(&[-5., 3., 9.], &[3]), &s(&[0.], &[]), &s(&[4.], &[])],
        ),
        &[3],
        DType::S64,
        &[0., 3., 4.],
    );
}

#[test]
fn empty_operands() {
    let e = f(&[], &[0, 2]);
    check(
        &ev(add(None), &[&e, &f(&[1., 2.], &[2])]),
        &[0, 2],
        DType::F32,
        &[],
    );
}

/// Comparisons and selects large enough for the host's row-by-row path (`op/host_map.rs`), with
/// operands broadcast along rows and columns, transposed, and holding NaN, infinities and
/// signed zeros, against the element-wise answer (IEEE comparisons: NaN compares unequal).
#[test]
fn large_broadcast_comparisons_and_selects_match_elementwise() {
    use ex_burn_core::op::Compare;
    let (rows, cols) = (300, 257);
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0];
    let value = |i: usize| {
        if i.is_multiple_of(97) {
            special[(i / 97) % special.len()]
        } else {
            ((i * 7919) % 41) as f64 - 20.0
        }
    };
    let xv: Vec<f64> = (0..rows * cols).map(value).collect();
    let x = f(&xv, &[rows, cols]);
    // per-row values kept as [rows, 1], per-column values as [cols]
    let rv: Vec<f64> = (0..rows).map(|i| value(i * 3 + 1)).collect();
    let cv: Vec<f64> = (0..cols).map(|j| value(j * 5 + 2)).collect();
    let r = f(&rv, &[rows, 1]);
    let c = f(&cv, &[cols]);
    // x^T stored transposed: a view with a column stride
    let xt = ev(
        Op::Transpose {
            axes: Some(vec![1, 0]),
        },
        &[&f(&xv, &[cols, rows])],
    );
    let xtv = |i: usize, j: usize| xv[j * rows + i];
    type Answer = fn(f64, f64) -> bool;
    let cases: [(Compare, Answer); 6] = [
        (Compare::Equal, |a, b| a == b),
        (Compare::NotEqual, |a, b| a != b),
        (Compare::Less, |a, b| a < b),
        (Compare::LessEqual, |a, b| a <= b),
        (Compare::Greater, |a, b| a > b),
        (Compare::GreaterEqual, |a, b| a >= b),
    ];
    for (cmp, want) in cases {
        for (what, a, b, pair) in [
            (
                "x against its rows",
                &x,
                &r,
                &(|i: usize, j: usize| (xv[i * cols + j], rv[i]))
                    as &dyn Fn(usize, usize) -> (f64, f64),
            ),
            ("columns against x", &c, &x, &|i: usize, j: usize| {
                (cv[j], xv[i * cols + j])
            }),
            ("x^T against x", &xt, &x, &|i: usize, j: usize| {
                (xtv(i, j), xv[i * cols + j])
            }),
        ] {
            let got = ev(Op::Compare(cmp), &[a, b]);
            assert_eq!(got.shape(), &[rows, cols]);
            let got = v(&got);
            for i in 0..rows {
                for j in 0..cols {
                    let (p, q) = pair(i, j);
                    assert_eq!(
                        got[i * cols + j] != 0.0,
                        want(p, q),
                        "{cmp:?} {what} at {i},{j}: {p} {q}"
                    );
                }
            }
            // a select on that mask: x where true, the row values where false
            let mask = ev(Op::Compare(cmp), &[a, b]);
            let sel = v(&ev(Op::Select { out: None }, &[&mask, &x, &r]));
            for i in 0..rows {
                for j in 0..cols {
                    let (p, q) = pair(i, j);
                    let w = if want(p, q) { xv[i * cols + j] } else { rv[i] };
                    let g = sel[i * cols + j];
                    assert!(
                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                        "select {cmp:?} {what} at {i},{j}: {g} vs {w}"
                    );
                }
            }
        }
    }
}
