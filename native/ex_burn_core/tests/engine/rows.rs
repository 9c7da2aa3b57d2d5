//! Row regions (element-wise steps and reductions over the same trailing axes: softmax, layer
//! norm and their gradients) give the values of op-by-op evaluation. On CUDA they run as one
//! kernel each; sums may differ from Burn's reduction kernel in the last bits (another order
//! of additions), everything else is exact. On the CPU they run row by row, and every value
//! is op-by-op evaluation's, bit for bit. Elsewhere the same programs run op by op.

use super::common::*;
use ex_burn_core::{DType, Op, Program, Tensor};

fn bin(op: Arith) -> Op {
    Op::Binary {
        op,
        out: Some(DType::F32),
    }
}

/// Deterministic values in [-4, 4), with a few specials when `special` (an infinite entry in
/// the first row, a NaN in the second, a third row of -inf).
fn data(n: usize, cols: usize, seed: u64, special: bool) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut out: Vec<f64> = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f64 / (1u64 << 24) as f64) * 8.0 - 4.0
        })
        .collect();
    if special && n >= 4 * cols {
        out[1] = f64::INFINITY;
        out[cols + 2] = f64::NAN;
        for x in &mut out[2 * cols..3 * cols] {
            *x = f64::NEG_INFINITY;
        }
    }
    out
}

/// Row regions this thread ran as one kernel.
fn regions() -> u64 {
    ex_burn_core::program::row_regions()
}

/// Whether the test device runs row regions as kernels.
fn fuses_rows() -> bool {
    matches!(dev(), ex_burn_core::Device::Cuda(_)) && kernels_fuse()
}

/// Whether the test device runs row regions whole: as kernels, or row by row on the CPU.
fn runs_regions() -> bool {
    fuses_rows() || dev() == ex_burn_core::Device::Cpu
}

/// Runs `prog` and op by op; asserts equal shapes and values within `tol` (relative to
/// max(1, |want|); NaN where NaN; on the CPU the same bits) and that `regions` regions ran
/// where the device runs them.
fn agrees(prog: &Program, inputs: &[Tensor], tol: f64, want_regions: u64, what: &str) {
    let exact = dev() == ex_burn_core::Device::Cpu;
    let before = regions();
    let got = prog.run(inputs.to_vec(), dev()).unwrap();
    let ran = regions() - before;
    let want = op_by_op(prog, inputs);
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.shape(), b.shape(), "{what}: output {k} shape");
        assert_eq!(a.dtype(), b.dtype(), "{what}: output {k} type");
        if exact {
            assert_eq!(
                a.to_bytes(None).unwrap(),
                b.to_bytes(None).unwrap(),
                "{what}: output {k} bits"
            );
        }
        for (i, (p, q)) in v(a).iter().zip(v(b)).enumerate() {
            let ok = if q.is_nan() {
                p.is_nan()
            } else if q.is_infinite() {
                *p == q
            } else {
                (p - q).abs() <= tol * q.abs().max(1.0)
            };
            assert!(ok, "{what}: output {k} element {i}: {p} vs {q}");
        }
    }
    if runs_regions() {
        assert_eq!(ran, want_regions, "{what}: row regions run whole");
    } else {
        assert_eq!(ran, 0, "{what}: no row regions off CUDA and the CPU");
    }
}

/// Masked, scaled softmax over the last axis (attention's), for row lengths that take one
/// element per thread, several, and 1,024-thread blocks; with the intermediates read after
/// the region or not.
#[test]
fn softmax_regions_match_op_by_op_evaluation() {
    for (lead, cols) in [
        (vec![3, 2, 37], 37),
        (vec![5, 7], 300),
        (vec![9], 1500),
        (vec![4], 5000),
    ] {
        let rows: usize = lead.iter().product();
        let shape: Vec<usize> = lead.iter().copied().chain([cols]).collect();
        let rank = shape.len();
        // a causal-style mask over the last two axes, broadcast to the whole shape
        let inner = lead[lead.len() - 1];
        let mask_values: Vec<f64> = (0..inner * cols)
            .map(|i| f64::from(u8::from(i % cols <= i / cols + 3)))
            .collect();
        let mask = ev(
            Op::Compare(Compare::NotEqual),
            &[&f(&mask_values, &[inner, cols]), &f(&[0.0], &[])],
        );
        let mask = ev(
            Op::Broadcast {
                shape: shape.clone(),
                axes: Some(vec![rank - 2, rank - 1]),
            },
            &[&mask],
        );
        let last = rank - 1;
        // NaN only where the row's max is not read after the region: Burn's max kernel on
        // CUDA skips NaN where Nx (and the region) answers NaN
        for (outputs, nan) in [(vec![11], true), (vec![11, 7, 10, 6], false)] {
            let mut values = data(rows * cols, cols, cols as u64, true);
            if !nan {
                values[cols + 2] = 0.5;
            }
            let x = f(&values, &shape);
            let prog = Program::new(
                2,
                vec![
                    ins(lit(8.0, DType::F32), &[]),    // 2
                    ins(bin(Arith::Divide), &[0, 2]),  // 3
                    ins(lit(-1.0e9, DType::F32), &[]), // 4
                    ins(
                        Op::Select {
                            out: Some(DType::F32),
                        },
                        &[1, 3, 4],
                    ), // 5
                    ins(lit(0.0, DType::F32), &[]),    // 6
                    ins(reduce_op(ReduceKind::Max, &[last], true, None), &[5]), // 7
                    ins(bin(Arith::Subtract), &[5, 7]), // 8
                    ins(Op::Unary(Unary::Exp), &[8]),  // 9
                    ins(reduce_op(ReduceKind::Sum, &[last], true, None), &[9]), // 10
                    ins(bin(Arith::Divide), &[9, 10]), // 11
                ],
                outputs.clone(),
            )
            .unwrap();
            let what = format!("softmax {shape:?} -> {outputs:?}");
            agrees(&prog, &[x.clone(), mask.clone()], 2.0e-6, 1, &what);
        }
    }
}

/// A layer norm over the last axis with a per-column scale and shift, its per-row mean and
/// `rsqrt` read after the region.
#[test]
fn layer_norm_regions_match_op_by_op_evaluation() {
    for (rows, cols) in [(64, 768), (13, 100)] {
        let x = f(&data(rows * cols, cols, 7, false), &[rows, cols]);
        let g = f(&data(cols, cols, 8, false), &[cols]);
        let b = f(&data(cols, cols, 9, false), &[cols]);
        let prog = Program::new(
            3,
            vec![
                ins(
                    reduce_op(ReduceKind::Sum, &[1], true, Some(DType::F32)),
                    &[0],
                ), // 3
                ins(lit(cols as f64, DType::S32), &[]), // 4
                ins(bin(Arith::Divide), &[3, 4]),       // 5: mean
                ins(bin(Arith::Subtract), &[0, 5]),     // 6
                ins(lit(2.0, DType::S32), &[]),         // 7
                ins(bin(Arith::Pow), &[6, 7]),          // 8
                ins(
                    reduce_op(ReduceKind::Sum, &[1], true, Some(DType::F32)),
                    &[8],
                ), // 9
                ins(bin(Arith::Divide), &[9, 4]),       // 10
                ins(lit(1.0e-5, DType::F32), &[]),      // 11
                ins(bin(Arith::Add), &[11, 10]),        // 12
                ins(Op::Unary(Unary::Rsqrt), &[12]),    // 13
                ins(bin(Arith::Multiply), &[6, 13]),    // 14
                ins(bin(Arith::Multiply), &[14, 1]),    // 15
                ins(bin(Arith::Add), &[15, 2]),         // 16
            ],
            vec![16, 5, 13, 6],
        )
        .unwrap();
        agrees(
            &prog,
            &[x, g, b],
            1.0e-5,
            1,
            &format!("layer norm [{rows}, {cols}]"),
        );
    }
}

/// The shape of softmax's and reduce_max's gradients in Nx: sums without kept axes
/// broadcast back, a mask of the maxima counted into an integer type, a division by the
/// count.
#[test]
fn gradient_shaped_regions_match_op_by_op_evaluation() {
    let (rows, cols) = (24, 130);
    // values with ties: several maxima per row
    let y: Vec<f64> = data(rows * cols, cols, 3, false)
        .iter()
        .map(|v| v.round())
        .collect();
    let y = f(&y, &[rows, cols]);
    let g = f(&data(rows * cols, cols, 4, false), &[rows, cols]);
    let prog = Program::new(
        2,
        vec![
            ins(reduce_op(ReduceKind::Max, &[1], true, None), &[0]), // 2: [rows, 1]
            ins(Op::Compare(Compare::Equal), &[0, 2]),               // 3: mask
            ins(
                reduce_op(ReduceKind::Sum, &[1], true, Some(DType::U32)),
                &[3],
            ), // 4: count
            ins(reduce_op(ReduceKind::Sum, &[1], false, None), &[1]), // 5: [rows]
            ins(
                Op::Broadcast {
                    shape: vec![rows, cols],
                    axes: Some(vec![0]),
                },
                &[5],
            ), // 6
            ins(bin(Arith::Multiply), &[1, 6]),                      // 7
            ins(Op::Unary(Unary::Neg), &[7]),                        // 8
            ins(bin(Arith::Multiply), &[8, 3]),                      // 9
            ins(bin(Arith::Divide), &[9, 4]),                        // 10
            ins(reduce_op(ReduceKind::Min, &[1], false, None), &[10]), // 11: [rows]
            ins(
                Op::Reshape {
                    shape: vec![rows, 1],
                },
                &[11],
            ), // 12
            ins(bin(Arith::Subtract), &[10, 12]),                    // 13
        ],
        vec![13, 11, 6],
    )
    .unwrap();
    agrees(&prog, &[y, g], 1.0e-5, 1, "gradient-shaped region");
}

/// What a region cannot hold ends it or keeps it op by op: a mask read after the region, a
/// reduction over leading axes, a sum into f64.
#[test]
fn regions_stop_where_they_cannot_hold_an_instruction() {
    let (rows, cols) = (16, 64);
    let x = f(&data(rows * cols, cols, 5, false), &[rows, cols]);
    // the mask (3) is read after the region: op by op
    let masked = Program::new(
        1,
        vec![
            ins(reduce_op(ReduceKind::Max, &[1], true, None), &[0]), // 1
            ins(Op::Compare(Compare::Equal), &[0, 1]),               // 2
            ins(bin(Arith::Multiply), &[0, 2]),                      // 3
        ],
        vec![3, 2],
    )
    .unwrap();
    agrees(&masked, std::slice::from_ref(&x), 0.0, 0, "mask read after");
    // a reduction over the leading axis first, then a row region from the next instruction
    let leading = Program::new(
        1,
        vec![
            ins(reduce_op(ReduceKind::Sum, &[0], true, None), &[0]), // 1: [1, cols]
            ins(bin(Arith::Multiply), &[0, 0]),                      // 2
            ins(reduce_op(ReduceKind::Sum, &[1], true, None), &[2]), // 3
            ins(bin(Arith::Divide), &[2, 3]),                        // 4
        ],
        vec![4, 1],
    )
    .unwrap();
    agrees(
        &leading,
        std::slice::from_ref(&x),
        1.0e-6,
        1,
        "leading-axis sum first",
    );
    if !f64_on_device() {
        return;
    }
    // a sum into f64 is not a region's
    let wide = Program::new(
        1,
        vec![
            ins(bin(Arith::Multiply), &[0, 0]), // 1
            ins(
                reduce_op(ReduceKind::Sum, &[1], true, Some(DType::F64)),
                &[1],
            ), // 2
        ],
        vec![2],
    )
    .unwrap();
    agrees(&wide, std::slice::from_ref(&x), 1.0e-12, 0, "f64 sum");
}

/// Results written over an operand's buffer on CUDA, where nothing else holds it.
fn reused() -> u64 {
    ex_burn_core::kernels::counts().reused_buffers
}

/// A softmax over a product made inside the program, which the region reads for the last
/// time: on CUDA the probabilities are written over the product's buffer (one buffer less),
/// with the values of op-by-op evaluation; when the product is also returned, or is an
/// input the caller holds, it is left alone (and still equal).
#[test]
fn regions_write_over_operands_they_read_last() {
    let (rows, k, cols) = (24, 16, 256);
    let a = f(&data(rows * k, k, 3, false), &[rows, k]);
    let b = f(&data(k * cols, cols, 4, false), &[k, cols]);
    let softmax = |outputs: Vec<usize>| {
        Program::new(
            2,
            vec![
                ins(matmul_op(ex_burn_core::op::Precision::Highest), &[0, 1]), // 2
                ins(reduce_op(ReduceKind::Max, &[1], true, None), &[2]),       // 3
                ins(bin(Arith::Subtract), &[2, 3]),                            // 4
                ins(Op::Unary(Unary::Exp), &[4]),                              // 5
                ins(reduce_op(ReduceKind::Sum, &[1], true, None), &[5]),       // 6
                ins(bin(Arith::Divide), &[5, 6]),                              // 7
            ],
            outputs,
        )
        .unwrap()
    };
    for (outputs, over) in [(vec![7], 1), (vec![7, 2], 0)] {
        let prog = softmax(outputs.clone());
        let before = reused();
        agrees(
            &prog,
            &[a.clone(), b.clone()],
            1e-5,
            1,
            "softmax of a product",
        );
        let want = if fuses_rows() { over } else { 0 };
        assert_eq!(
            reused() - before,
            want,
            "outputs {outputs:?}: results written over"
        );
    }
    // the caller's own tensor as the region's operand: never written over
    let x = f(&data(rows * cols, cols, 5, false), &[rows, cols]);
    let keep = v(&x);
    let prog = Program::new(
        1,
        vec![
            ins(reduce_op(ReduceKind::Max, &[1], true, None), &[0]), // 1
            ins(bin(Arith::Subtract), &[0, 1]),                      // 2
            ins(Op::Unary(Unary::Exp), &[2]),                        // 3
        ],
        vec![3],
    )
    .unwrap();
    let before = reused();
    agrees(&prog, std::slice::from_ref(&x), 1e-6, 1, "exp(x - max)");
    assert_eq!(reused() - before, 0, "an input is not written over");
    assert_eq!(v(&x), keep, "the input is unchanged");
}

/// Maxima and minima of rows of signed zeros (ties whose sign depends on the order of the
/// comparisons), shorter and longer than the CPU reduction's vector kernel takes, one row
/// with a NaN: the region's values are op-by-op evaluation's (on the CPU, the same bits).
#[test]
fn extrema_of_signed_zeros_match_op_by_op_evaluation() {
    for cols in [100, 511, 512, 1500] {
        let rows = 6;
        let mut values: Vec<f64> = (0..rows * cols)
            .map(|i| match (i * 7) % 5 {
                0 | 1 => 0.0,
                2 | 3 => -0.0,
                _ => -((i % 3) as f64) - 1.0,
            })
            .collect();
        values[cols + 5] = f64::NAN;
        let x = f(&values, &[rows, cols]);
        let prog = Program::new(
            1,
            vec![
                ins(reduce_op(ReduceKind::Max, &[1], true, None), &[0]), // 1
                ins(reduce_op(ReduceKind::Min, &[1], true, None), &[0]), // 2
                ins(bin(Arith::Subtract), &[0, 1]),                      // 3
                ins(bin(Arith::Add), &[3, 2]),                           // 4
            ],
            vec![4, 1, 2],
        )
        .unwrap();
        agrees(
            &prog,
            std::slice::from_ref(&x),
            0.0,
            1,
            &format!("extrema of signed zeros, {cols} columns"),
        );
    }
}

/// Operands broadcast from the region's trailing axes (a `[s, s]` mask read by
/// `[b, heads, s, s]` scores; a bias shorter than a row when a region folds two axes): the
/// values of op-by-op evaluation.
#[test]
fn operands_of_trailing_axes_match_op_by_op_evaluation() {
    let full = [3, 4, 6, 10];
    let n: usize = full.iter().product();
    let x = f(&data(n, 10, 11, false), &full);
    let m = f(&data(60, 10, 12, false), &[6, 10]);
    let b = f(&data(10, 10, 13, false), &[10]);
    for axes in [vec![3], vec![2, 3]] {
        let bcast = |from: usize| Op::Broadcast {
            shape: full.to_vec(),
            axes: Some((4 - from..4).collect()),
        };
        let prog = Program::new(
            3,
            vec![
                ins(bcast(2), &[1]),                                      // 3
                ins(bin(Arith::Multiply), &[0, 3]),                       // 4
                ins(bcast(1), &[2]),                                      // 5
                ins(bin(Arith::Add), &[4, 5]),                            // 6
                ins(reduce_op(ReduceKind::Max, &axes, true, None), &[6]), // 7
                ins(bin(Arith::Subtract), &[6, 7]),                       // 8
                ins(reduce_op(ReduceKind::Sum, &axes, true, None), &[8]), // 9
                ins(bin(Arith::Divide), &[8, 9]),                         // 10
            ],
            vec![10, 9],
        )
        .unwrap();
        agrees(
            &prog,
            &[x.clone(), m.clone(), b.clone()],
            1.0e-6,
            1,
            &format!("trailing operands, folding {axes:?}"),
        );
    }
}
