use super::common::*;
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

// ---- integers exactly as Nx computes them (big integers stored modulo 2^bits) ----

pub(crate) const INTS: [DType; 8] = [
    DType::S8,
    DType::S16,
    DType::S32,
    DType::S64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];

/// `v` stored in integer type `dtype` (its low bits, two's complement), as Nx stores it.
pub(crate) fn wrap(v: i128, dtype: DType) -> i128 {
    let bits = dtype.bits();
    let low = v.rem_euclid(1i128 << bits);
    if dtype.is_signed_int() && low >= 1i128 << (bits - 1) {
        low - (1i128 << bits)
    } else {
        low
    }
}

/// An integer tensor of `dtype` holding `values` (wrapped to the type), exactly.
pub(crate) fn ints(values: &[i128], dtype: DType) -> Tensor {
    let n = dtype.size();
    let bytes: Vec<u8> = values
        .iter()
        .flat_map(|&v| (wrap(v, dtype) as u64).to_le_bytes()[..n].to_vec())
        .collect();
    Tensor::from_bytes(&bytes, &[values.len()], dtype, dev()).expect("tensor")
}

/// The values of an integer tensor, exactly.
pub(crate) fn int_values(t: &Tensor) -> Vec<i128> {
    let dtype = t.dtype();
    let bytes = t.to_bytes(None).expect("read");
    bytes
        .chunks(dtype.size())
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            wrap(u64::from_le_bytes(w) as i128, dtype)
        })
        .collect()
}

/// 0, ±1, ±2, the extremes and their neighbours, 2^(bits-1) and its neighbours, a pattern.
pub(crate) fn edges(dtype: DType) -> Vec<i128> {
    let bits = dtype.bits();
    let half = 1i128 << (bits - 1);
    let mut v: Vec<i128> = [
        0,
        1,
        -1,
        2,
        -2,
        3,
        half,
        half - 1,
        half + 5,
        -half,
        (1 << bits) - 1,
        (((1i128 << bits) - 1) / 3) | 1,
    ]
    .iter()
    .map(|&x| wrap(x, dtype))
    .collect();
    v.dedup();
    v
}

fn binary_op(f: Arith) -> Op {
    Op::Binary { op: f, out: None }
}

/// Nx's shift of `x` (a value of `dtype`) by `s >= 0`: big-integer shifts, stored modulo 2^bits.
fn nx_shift(left: bool, x: i128, s: i128, dtype: DType) -> i128 {
    match (left, s >= 128) {
        (true, true) => 0,
        (true, false) => wrap(x.wrapping_shl(s as u32), dtype),
        (false, true) => {
            if x < 0 {
                -1
            } else {
                0
            }
        }
        (false, false) => wrap(x >> s as u32, dtype),
    }
}

#[test]
fn shifts_by_any_amount_are_nx_big_integer_shifts() {
    for dtype in INTS {
        let bits = dtype.bits() as i128;
        let xs = edges(dtype);
        // every amount, one element each (the amounts' own range decides the path): varied
        // amounts past the width, varied amounts below it, one amount for all
        let cases: Vec<Vec<i128>> = vec![
            (0..=70).collect(),
            (0..bits).collect(),
            vec![bits],
            vec![65],
            vec![bits - 1],
            vec![3],
        ];
        for amounts in cases {
            let (mut a, mut b) = (vec![], vec![]);
            for &x in &xs {
                for &s in &amounts {
                    a.push(x);
                    b.push(s);
                }
            }
            let (ta, tb) = (ints(&a, dtype), ints(&b, dtype));
            // a single amount also as a broadcast scalar
            let scalars = if amounts.len() == 1 {
                vec![ints(&amounts, dtype).reshape(vec![]).unwrap()]
            } else {
                vec![]
            };
            for left in [true, false] {
                let f = if left {
                    Arith::LeftShift
                } else {
                    Arith::RightShift
                };
                let want: Vec<i128> = a
                    .iter()
                    .zip(&b)
                    .map(|(&x, &s)| nx_shift(left, x, s, dtype))
                    .collect();
                let got = int_values(&ev(binary_op(f), &[&ta, &tb]));
                assert_eq!(got, want, "{f:?} {dtype} by {amounts:?}");
                for sc in &scalars {
                    let got = int_values(&ev(binary_op(f), &[&ta, sc]));
                    assert_eq!(got, want, "{f:?} {dtype} by scalar {amounts:?}");
                }
            }
        }
    }
}

#[test]
fn u64_right_shifts_are_logical() {
    // issue 30: 0x8000000000000005 >> 2 sign-extended to 0xE000000000000001
    let x = ints(
        &[0x8000_0000_0000_0005, u64::MAX as i128, 1 << 63],
        DType::U64,
    );
    let by = |s: &[i128]| ints(s, DType::U64);
    let got = int_values(&ev(binary_op(Arith::RightShift), &[&x, &by(&[2, 1, 63])]));
    assert_eq!(got, [0x2000_0000_0000_0001, (u64::MAX >> 1) as i128, 1]);
    let two = by(&[2]).reshape(vec![]).unwrap();
    let got = int_values(&ev(binary_op(Arith::RightShift), &[&x, &two]));
    assert_eq!(
        got,
        [0x2000_0000_0000_0001, (u64::MAX >> 2) as i128, 1 << 61]
    );
}

#[test]
fn negative_shift_amounts_and_exponents_are_refused() {
    for dtype in [DType::S8, DType::S32, DType::S64] {
        let x = ints(&[1, 2, 3], dtype);
        let negative = ints(&[1, -1, 2], dtype);
        for f in [Arith::LeftShift, Arith::RightShift, Arith::Pow] {
            assert_eq!(ev_err(binary_op(f), &[&x, &negative]), "argument", "{f:?}");
        }
    }
}

/// `x^e` stored in `dtype` (square and multiply modulo 2^128, whose low bits are exact).
fn nx_pow(x: i128, e: u128, dtype: DType) -> i128 {
    let (mut result, mut square, mut e) = (1i128, x, e);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(square);
        }
        square = square.wrapping_mul(square);
        e >>= 1;
    }
    wrap(result, dtype)
}

#[test]
fn integer_powers_wrap_for_every_exponent() {
    for dtype in INTS {
        let mut bases = edges(dtype);
        bases.extend([5, 7, -3].map(|b| wrap(b, dtype)));
        // exponents past 2^32 (Burn's CPU kernel reads them as u32; GPU kernels go
        // through floats) and the type's largest
        let mut exps: Vec<i128> = (0..=9).collect();
        exps.extend([63, 64, 65, (1 << 32) + 1, 1 << 33]);
        exps.extend([(1i128 << (dtype.bits() - 1)) - 1, wrap(-1, dtype)]);
        let exps: Vec<i128> = exps
            .into_iter()
            .map(|e| wrap(e, dtype))
            .filter(|&e| e >= 0)
            .collect();
        let (mut a, mut b) = (vec![], vec![]);
        for &x in &bases {
            for &e in &exps {
                a.push(x);
                b.push(e);
            }
        }
        let want: Vec<i128> = a
            .iter()
            .zip(&b)
            .map(|(&x, &e)| nx_pow(x, e as u128, dtype))
            .collect();
        let got = int_values(&ev(
            binary_op(Arith::Pow),
            &[&ints(&a, dtype), &ints(&b, dtype)],
        ));
        assert_eq!(got, want, "pow {dtype}");
        // one exponent for all
        for e in [0, 1, 3, 64] {
            let x = ints(&bases, dtype);
            let got = int_values(&ev(
                binary_op(Arith::Pow),
                &[&x, &ints(&[e], dtype).reshape(vec![]).unwrap()],
            ));
            let want: Vec<i128> = bases.iter().map(|&x| nx_pow(x, e as u128, dtype)).collect();
            assert_eq!(got, want, "pow {dtype} by {e}");
        }
    }
}

#[test]
fn u64_with_signed_operands_use_their_values() {
    // Nx merges u64 and s64 to s64 but computes on the operands' values
    let us = edges(DType::U64);
    let ss = edges(DType::S64);
    let (mut a, mut b) = (vec![], vec![]);
    for &x in &us {
        for &y in &ss {
            a.push(x);
            b.push(y);
        }
    }
    let (ta, tb) = (ints(&a, DType::U64), ints(&b, DType::S64));
    let pairs = || a.iter().zip(&b).map(|(&x, &y)| (x, y));
    type Holds = fn(&i128, &i128) -> bool;
    let cmps: [(Compare, Holds); 6] = [
        (Compare::Equal, i128::eq),
        (Compare::NotEqual, i128::ne),
        (Compare::Less, i128::lt),
        (Compare::LessEqual, i128::le),
        (Compare::Greater, i128::gt),
        (Compare::GreaterEqual, i128::ge),
    ];
    for (c, holds) in cmps {
        let want: Vec<i128> = pairs().map(|(x, y)| holds(&x, &y) as i128).collect();
        assert_eq!(int_values(&ev(Op::Compare(c), &[&ta, &tb])), want, "{c:?}");
        let want: Vec<i128> = pairs().map(|(x, y)| holds(&y, &x) as i128).collect();
        assert_eq!(
            int_values(&ev(Op::Compare(c), &[&tb, &ta])),
            want,
            "{c:?} swapped"
        );
    }
    let s64 = |v: i128| wrap(v, DType::S64);
    type Nx = fn(i128, i128) -> Option<i128>;
    let results: [(Arith, Nx); 5] = [
        (Arith::Min, |x, y| Some(x.min(y))),
        (Arith::Max, |x, y| Some(x.max(y))),
        (Arith::Quotient, |x, y| (y != 0).then(|| x / y)),
        (Arith::Remainder, |x, y| (y != 0).then(|| x % y)),
        (Arith::RightShift, |x, y| {
            (0..64).contains(&y).then(|| x >> y as u32)
        }),
    ];
    for (f, nx) in results {
        for (ta, tb, swap) in [(&ta, &tb, false), (&tb, &ta, true)] {
            let (mut xs, mut ys, mut want) = (vec![], vec![], vec![]);
            for (x, y) in pairs() {
                let (x, y) = if swap { (y, x) } else { (x, y) };
                if let Some(r) = nx(x, y) {
                    xs.push(x);
                    ys.push(y);
                    want.push(s64(r));
                }
            }
            let (dx, dy) = (ta.dtype(), tb.dtype());
            let got = ev(binary_op(f), &[&ints(&xs, dx), &ints(&ys, dy)]);
            assert_eq!(got.dtype(), DType::S64);
            assert_eq!(int_values(&got), want, "{f:?} {dx} {dy}");
        }
    }
}

#[test]
fn integer_division_to_floats_divides_the_f64_values() {
    // Nx divides the integers' f64 values and rounds the quotient to f32 once; dividing
    // their f32 roundings gives 1381989.625 here
    let a = ints(&[1_080_715_965, 7, -9], DType::S32);
    let b = ints(&[782, 2, 4], DType::S32);
    let got = ev(binary_op(Arith::Divide), &[&a, &b]);
    let want = if rounds_from_f64() {
        1_381_989.75
    } else {
        1_381_989.625
    };
    check(&got, &[3], DType::F32, &[want, 3.5, -2.25]);
}

#[test]
fn integer_shifts_in_chunked_programs_match_op_by_op() {
    use ex_burn_core::Program;
    // long enough for a program to run its element-wise run in chunks
    let n = 300_000;
    let xs: Vec<i128> = (0..n as i128)
        .map(|i| wrap(i.wrapping_mul(0x9E37_79B9_7F4A_7C15), DType::U64))
        .collect();
    let amounts: Vec<i128> = (0..n as i128).map(|i| i % 70).collect();
    let prog = Program::new(
        2,
        vec![
            ins(binary_op(Arith::RightShift), &[0, 1]),
            ins(lit(12.0, DType::U64), &[]),
            ins(binary_op(Arith::RightShift), &[0, 3]),
            ins(binary_op(Arith::LeftShift), &[2, 1]),
        ],
        vec![2, 4, 5],
    )
    .unwrap();
    let inputs = vec![ints(&xs, DType::U64), ints(&amounts, DType::U64)];
    let got = prog.run(inputs.clone(), dev()).unwrap();
    let shr: Vec<i128> = xs
        .iter()
        .zip(&amounts)
        .map(|(&x, &s)| nx_shift(false, x, s, DType::U64))
        .collect();
    let shl: Vec<i128> = shr
        .iter()
        .zip(&amounts)
        .map(|(&x, &s)| nx_shift(true, x, s, DType::U64))
        .collect();
    let by12: Vec<i128> = xs.iter().map(|&x| x >> 12).collect();
    assert_eq!(int_values(&got[0]), shr);
    assert_eq!(int_values(&got[1]), by12);
    assert_eq!(int_values(&got[2]), shl);
    let by_op = op_by_op(&prog, &inputs);
    for (g, o) in got.iter().zip(&by_op) {
        assert_eq!(int_values(g), int_values(o));
    }
}

/// Float remainders are `fmod`, exact (the remainder of two floats is a float of their type),
/// with the dividend's sign, as Nx.BinaryBackend computes them: f32 and f64.
#[test]
fn float_remainders_are_exact() {
    let mut seed = 0x853c_49e6_748f_ea9bu64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0
    };
    let (a, b): (Vec<f64>, Vec<f64>) = (0..4000).map(|_| (next(), next())).unzip();
    let rem = Op::Binary {
        op: Arith::Remainder,
        out: None,
    };
    let (a32, b32): (Vec<f32>, Vec<f32>) = (
        a.iter().map(|&x| x as f32).collect(),
        b.iter().map(|&x| x as f32).collect(),
    );
    let want32: Vec<f64> = a32.iter().zip(&b32).map(|(p, q)| (p % q) as f64).collect();
    let got32 = v(&ev(rem.clone(), &[&f(&a, &[4000]), &f(&b, &[4000])]));
    assert_eq!(got32, want32);
    let want64: Vec<f64> = a.iter().zip(&b).map(|(p, q)| p % q).collect();
    let got64 = v(&ev(
        rem,
        &[&t(&a, &[4000], DType::F64), &t(&b, &[4000], DType::F64)],
    ));
    assert_eq!(got64, want64);
}

/// `max` / `min` pick as Nx's (and the fused kernels') do, bit for bit: `a` where `a > b`
/// (`a < b`) or `a` is NaN, else `b` (so of two zeros the second, of two NaN the first), over
/// a full operand against a broadcast row and a transposed view, with NaN, infinities and
/// signed zeros (one device kernel on a GPU, four ops elsewhere).
#[test]
fn max_and_min_pick_bit_for_bit() {
    let (rows, cols) = (64, 130);
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0];
    let value = |i: usize, salt: usize| {
        if (i + salt).is_multiple_of(7) {
            special[((i + salt) / 7) % special.len()]
        } else {
            ((i * 7919 + salt) % 9) as f64 - 4.0
        }
    };
    let xv: Vec<f64> = (0..rows * cols).map(|i| value(i, 0)).collect();
    let rv: Vec<f64> = (0..cols).map(|i| value(i, 3)).collect();
    let tv: Vec<f64> = (0..rows * cols).map(|i| value(i, 5)).collect();
    let x = f(&xv, &[rows, cols]);
    let row = ev(
        Op::Broadcast {
            shape: vec![rows, cols],
            axes: Some(vec![1]),
        },
        &[&f(&rv, &[cols])],
    );
    // [cols, rows] transposed to [rows, cols]: element (r, c) is tv[c * rows + r]
    let t = ev(
        Op::Transpose {
            axes: Some(vec![1, 0]),
        },
        &[&f(&tv, &[cols, rows])],
    );
    for (other, at) in [
        (
            &row,
            &(|_r: usize, c: usize| rv[c]) as &dyn Fn(usize, usize) -> f64,
        ),
        (&t, &|r: usize, c: usize| tv[c * rows + r]),
    ] {
        for (op, wins) in [
            (Arith::Max, (|a: f32, b: f32| a > b) as fn(f32, f32) -> bool),
            (Arith::Min, |a: f32, b: f32| a < b),
        ] {
            let got = ev(Op::Binary { op, out: None }, &[&x, other]);
            let got = v(&got);
            for (i, g) in got.iter().enumerate() {
                let (a, b) = (xv[i] as f32, at(i / cols, i % cols) as f32);
                let want = if wins(a, b) || a.is_nan() { a } else { b };
                let g = *g as f32;
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{op:?} element {i}: {a} and {b} gave {g}, want {want}"
                );
            }
        }
    }
}
