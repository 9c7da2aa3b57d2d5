//! Cache-blocked element-wise runs and CPU scalar kernels give the same values as op-by-op
//! evaluation.

use super::common::*;
use ex_burn_core::program::Instr;
use ex_burn_core::{DType, Device, Op, Program, Scalar, Tensor};

fn scalar(v: f64) -> Op {
    Op::Full {
        shape: vec![],
        dtype: DType::F32,
        value: Scalar::F(v),
    }
}

fn big(n: usize) -> Tensor {
    let values: Vec<f64> = (0..n).map(|i| (i as f64 / n as f64) * 4.0 - 2.0).collect();
    f(&values, &[n / 4, 4])
}

/// ((x * 1.5 + y) |> sin |> abs |> sqrt) - 0.5, with (x * 1.5) also returned.
fn chain() -> Program {
    Program::new(
        2,
        vec![
            ins(scalar(1.5), &[]),
            ins(
                Op::Binary {
                    op: Arith::Multiply,
                    out: None,
                },
                &[0, 2],
            ),
            ins(
                Op::Binary {
                    op: Arith::Add,
                    out: None,
                },
                &[3, 1],
            ),
            ins(Op::Unary(Unary::Sin), &[4]),
            ins(Op::Unary(Unary::Abs), &[5]),
            ins(Op::Unary(Unary::Sqrt), &[6]),
            ins(scalar(0.5), &[]),
            ins(
                Op::Binary {
                    op: Arith::Subtract,
                    out: None,
                },
                &[7, 8],
            ),
        ],
        vec![9, 3],
    )
    .unwrap()
}

fn eager_chain(x: &Tensor, y: &Tensor) -> (Tensor, Tensor) {
    let s = |v: f64| f(&[v], &[]);
    let m = ev(
        Op::Binary {
            op: Arith::Multiply,
            out: None,
        },
        &[x, &s(1.5)],
    );
    let a = ev(
        Op::Binary {
            op: Arith::Add,
            out: None,
        },
        &[&m, y],
    );
    let r = ev(
        Op::Unary(Unary::Sqrt),
        &[&ev(
            Op::Unary(Unary::Abs),
            &[&ev(Op::Unary(Unary::Sin), &[&a])],
        )],
    );
    (
        ev(
            Op::Binary {
                op: Arith::Subtract,
                out: None,
            },
            &[&r, &s(0.5)],
        ),
        m,
    )
}

#[test]
fn a_large_element_wise_run_matches_op_by_op_evaluation() {
    // 300_000 elements: many chunks, and a last chunk that is not full
    let (x, y) = (big(300_000), big(300_000));
    let out = chain().run(vec![x.clone(), y.clone()], dev()).unwrap();
    let (want, want_m) = eager_chain(&x, &y);
    assert_eq!(out[0].shape(), &[75_000, 4]);
    assert_eq!(v(&out[0]), v(&want));
    assert_eq!(v(&out[1]), v(&want_m));
}

#[test]
fn runs_with_a_broadcast_row_operand_match_op_by_op_evaluation() {
    let x = big(200_000);
    let y = f(&[1., 2., 3., 4.], &[4]);
    let before = fused_so_far();
    let out = chain().run(vec![x.clone(), y.clone()], dev()).unwrap();
    if fuses() {
        assert_eq!(fused_so_far(), before + 1, "not fused");
    }
    let (want, _) = eager_chain(&x, &y);
    assert_eq!(v(&out[0]), v(&want));
}

#[test]
fn scalar_operands_on_either_side_give_broadcast_results() {
    let n = 10_000;
    let x = big(n);
    let xv = v(&x);
    let s = f(&[0.75], &[]);
    // (op, scalar on the left, reference)
    type Case = (Op, bool, fn(f32, f32) -> f32);
    let cases: [Case; 5] = [
        (
            Op::Binary {
                op: Arith::Add,
                out: None,
            },
            false,
            |a, b| a + b,
        ),
        (
            Op::Binary {
                op: Arith::Subtract,
                out: None,
            },
            false,
            |a, b| a - b,
        ),
        (
            Op::Binary {
                op: Arith::Subtract,
                out: None,
            },
            true,
            |a, b| b - a,
        ),
        (
            Op::Binary {
                op: Arith::Multiply,
                out: None,
            },
            true,
            |a, b| a * b,
        ),
        (
            Op::Binary {
                op: Arith::Divide,
                out: None,
            },
            false,
            |a, b| a / b,
        ),
    ];
    for (op, scalar_left, fun) in cases {
        let got = if scalar_left {
            ev(op.clone(), &[&s, &x])
        } else {
            ev(op.clone(), &[&x, &s])
        };
        let want: Vec<f64> = xv.iter().map(|&a| fun(a as f32, 0.75) as f64).collect();
        assert_eq!(v(&got), want, "{op:?} scalar_left={scalar_left}");
    }
    // integers wrap as in the broadcast path
    let xi = t(&vec![200.; n], &[n], DType::U8);
    let si = t(&[100.], &[], DType::U8);
    let sum = ev(
        Op::Binary {
            op: Arith::Add,
            out: None,
        },
        &[&xi, &si],
    );
    check(&sum, &[n], DType::U8, &vec![44.; n]);
}

/// Every op the f32 chunk loops handle, scalars on both sides, an external scalar input and
/// three live results: bit-identical to op-by-op evaluation.
#[test]
fn f32_chunk_loops_match_op_by_op_evaluation() {
    let n = 200_003;
    let (x, y) = (big(n + 1), big(n + 1));
    let k = f(&[0.3], &[]);
    let prog = Program::new(
        3,
        vec![
            ins(Op::Unary(Unary::Cos), &[0]), // 3
            ins(Op::Unary(Unary::Exp), &[3]), // 4
            ins(
                Op::Binary {
                    op: Arith::Divide,
                    out: None,
                },
                &[4, 1],
            ), // 5: exp(cos x) / y
            ins(Op::Unary(Unary::Neg), &[5]), // 6
            ins(Op::Unary(Unary::Tanh), &[6]), // 7
            ins(
                Op::Binary {
                    op: Arith::Subtract,
                    out: None,
                },
                &[2, 7],
            ), // 8: k - tanh(..)
            ins(Op::Unary(Unary::Abs), &[8]), // 9
            ins(Op::Unary(Unary::Log), &[9]), // 10
            ins(scalar(2.0), &[]),            // 11
            ins(
                Op::Binary {
                    op: Arith::Divide,
                    out: None,
                },
                &[11, 10],
            ), // 12: 2 / log(..)
            ins(
                Op::Binary {
                    op: Arith::Multiply,
                    out: Some(DType::F32),
                },
                &[12, 0],
            ), // 13
        ],
        vec![13, 5, 10],
    )
    .unwrap();
    let out = prog
        .run(vec![x.clone(), y.clone(), k.clone()], dev())
        .unwrap();
    let e5 = ev(
        Op::Binary {
            op: Arith::Divide,
            out: None,
        },
        &[
            &ev(Op::Unary(Unary::Exp), &[&ev(Op::Unary(Unary::Cos), &[&x])]),
            &y,
        ],
    );
    let e8 = ev(
        Op::Binary {
            op: Arith::Subtract,
            out: None,
        },
        &[
            &k,
            &ev(
                Op::Unary(Unary::Tanh),
                &[&ev(Op::Unary(Unary::Neg), &[&e5])],
            ),
        ],
    );
    let e10 = ev(Op::Unary(Unary::Log), &[&ev(Op::Unary(Unary::Abs), &[&e8])]);
    let e12 = ev(
        Op::Binary {
            op: Arith::Divide,
            out: None,
        },
        &[&f(&[2.0], &[]), &e10],
    );
    let e13 = ev(
        Op::Binary {
            op: Arith::Multiply,
            out: Some(DType::F32),
        },
        &[&e12, &x],
    );
    let bits = |t: &Tensor| -> Vec<u32> { v(t).iter().map(|&a| (a as f32).to_bits()).collect() };
    assert_eq!(out[0].shape(), x.shape());
    assert_eq!(bits(&out[0]), bits(&e13));
    assert_eq!(bits(&out[1]), bits(&e5));
    assert_eq!(bits(&out[2]), bits(&e10));
}

/// Runs fused on this thread so far: chunk loops on the CPU, kernels of the device kernels
/// elsewhere.
fn fused_so_far() -> u64 {
    ex_burn_core::program::loop_runs() + ex_burn_core::kernels::counts().fused_launches
}

/// Whether the test device fuses element-wise runs (the CPU, and CUDA with its kernels and
/// NVRTC).
fn fuses() -> bool {
    match dev() {
        Device::Cpu => true,
        _ => kernels_fuse(),
    }
}

/// Asserts that `got` equals `want` output by output: shapes, types, and every element bit for
/// bit or NaN in both (NaN payloads may differ).
fn same_bits_or_nan(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: outputs");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.shape(), b.shape(), "{what}: output {k}");
        assert_eq!(a.dtype(), b.dtype(), "{what}: output {k}");
        for (i, (p, q)) in v(a).iter().zip(v(b)).enumerate() {
            assert!(
                p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
                "{what}: output {k} element {i}: {p} vs {q}"
            );
        }
    }
}

fn bits(t: &Tensor) -> Vec<u64> {
    v(t).iter().map(|a| a.to_bits()).collect()
}

/// Values with ties, signed zeros, infinities and NaNs, so `max`, `min`, comparisons and
/// `select` meet every special case.
fn special(n: usize, shift: usize) -> Vec<f64> {
    let pool = [
        0.0,
        -0.0,
        1.5,
        -2.25,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        3.0,
    ];
    (0..n)
        .map(|i| {
            if i % 3 == 0 {
                pool[(i / 3 + shift) % pool.len()]
            } else {
                ((i * 7 + shift) % 11) as f64 - 5.0
            }
        })
        .collect()
}

/// A dense layer's relu and its gradient as Nx writes them (bias row, integer constant,
/// comparisons, `select` with constant branches, live constants), with a per-row column and a
/// boolean input mask: the f32 chunk loops give the op table's bits, special values included.
#[test]
fn broadcast_operands_comparisons_and_select_match_op_by_op_evaluation() {
    let (rows, cols) = (40_001, 8);
    let n = rows * cols;
    let x = f(&special(n, 0), &[rows, cols]);
    let g = f(&special(n, 3), &[rows, cols]);
    let bias = f(&special(cols, 1), &[cols]);
    let column = f(&special(rows, 2), &[rows, 1]);
    let mask = t(
        &(0..n)
            .map(|i| (i % 5 == 0) as u8 as f64)
            .collect::<Vec<_>>(),
        &[rows, cols],
        DType::U8,
    );
    let mask = ev(
        Op::Compare(Compare::NotEqual),
        &[&mask, &t(&[0.], &[], DType::U8)],
    );
    let int = |v: i64| Op::Full {
        shape: vec![],
        dtype: DType::S32,
        value: Scalar::I(v),
    };
    let f32 = Some(DType::F32);
    let prog = Program::new(
        5,
        vec![
            ins(
                Op::Binary {
                    op: Arith::Add,
                    out: f32,
                },
                &[0, 2],
            ), // 5: x + bias
            ins(int(0), &[]), // 6: 0 (s32), live
            ins(
                Op::Binary {
                    op: Arith::Max,
                    out: f32,
                },
                &[5, 6],
            ), // 7: relu
            ins(Op::Compare(Compare::Equal), &[5, 7]), // 8
            ins(scalar(1.0), &[]), // 9: live
            ins(scalar(0.0), &[]), // 10
            ins(Op::Select { out: f32 }, &[8, 9, 10]), // 11
            ins(Op::Compare(Compare::Equal), &[6, 7]), // 12
            ins(int(2), &[]), // 13
            ins(Op::Select { out: f32 }, &[12, 13, 9]), // 14
            ins(
                Op::Binary {
                    op: Arith::Divide,
                    out: f32,
                },
                &[11, 14],
            ), // 15
            ins(
                Op::Binary {
                    op: Arith::Multiply,
                    out: f32,
                },
                &[1, 15],
            ), // 16: gradient
            ins(
                Op::Binary {
                    op: Arith::Min,
                    out: None,
                },
                &[16, 3],
            ), // 17: per-row column
            ins(Op::Compare(Compare::GreaterEqual), &[17, 5]), // 18
            ins(Op::Select { out: None }, &[18, 7, 16]), // 19
            ins(Op::Select { out: None }, &[4, 19, 3]), // 20: boolean input mask
            ins(Op::Compare(Compare::Less), &[20, 9]), // 21
            ins(Op::Select { out: None }, &[21, 1, 20]), // 22
        ],
        vec![22, 16, 7, 6, 9],
    )
    .unwrap();
    let inputs = [x, g, bias, column, mask];
    let before = fused_so_far();
    let got = prog.run(inputs.to_vec(), dev()).unwrap();
    if fuses() {
        assert_eq!(fused_so_far(), before + 1, "not fused");
    }
    let want = op_by_op(&prog, &inputs);
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.shape(), b.shape(), "output {k}");
        assert_eq!(a.dtype(), b.dtype(), "output {k}");
        assert_eq!(bits(a), bits(b), "output {k}");
    }
}

/// A matrix transpose of a dot's result is computed as the dot of the swapped operands when
/// it is the result's only use, and the plain way otherwise: the same values either way.
#[test]
fn transposed_dot_results_match_op_by_op_evaluation() {
    let a = f(
        &special(6 * 4, 0)
            .iter()
            .map(|x| if x.is_finite() { *x } else { 1.0 })
            .collect::<Vec<_>>(),
        &[6, 4],
    );
    let b = f(
        &(0..6 * 5)
            .map(|i| i as f64 * 0.25 - 3.0)
            .collect::<Vec<_>>(),
        &[6, 5],
    );
    let dot = Op::Dot {
        contract_a: vec![0],
        batch_a: vec![],
        contract_b: vec![0],
        batch_b: vec![],
        out: None,
        precision: Default::default(),
    };
    let swap = Op::Transpose { axes: None };
    // 2: folded (only use); 4: read twice, not folded; 7: a program output, not folded
    let prog = Program::new(
        2,
        vec![
            ins(dot.clone(), &[0, 1]),        // 2
            ins(swap.clone(), &[2]),          // 3
            ins(dot.clone(), &[0, 1]),        // 4
            ins(swap.clone(), &[4]),          // 5
            ins(Op::Unary(Unary::Neg), &[4]), // 6
            ins(dot.clone(), &[0, 1]),        // 7
            ins(swap, &[7]),                  // 8
        ],
        vec![3, 5, 6, 7, 8],
    )
    .unwrap();
    let inputs = [a, b];
    let got = prog.run(inputs.to_vec(), dev()).unwrap();
    let want = op_by_op(&prog, &inputs);
    assert_eq!(got[0].shape(), &[5, 4]);
    for (k, (x, y)) in got.iter().zip(&want).enumerate() {
        assert_eq!(x.shape(), y.shape(), "output {k}");
        assert_eq!(v(x), v(y), "output {k}");
    }
}

/// `x ** 2` and `x ** 3` (integer exponents, as `Nx.pow` with a literal) are the products
/// rounded once (Nx's BinaryBackend: an f64 power rounded to f32), fused or not; other
/// exponents are `powf`. Bits equal op by op, and the cube equals the f64 reference.
#[test]
fn small_integer_powers_are_rounded_once_fused_or_not() {
    let n = 150_001;
    let xv: Vec<f64> = (0..n)
        .map(|i| ((i as f64) * 0.7093).sin() * 40.0 + (i % 7) as f64 * 1e-3)
        .collect();
    let x = f(&xv, &[n]);
    let int = |v: i64| Op::Full {
        shape: vec![],
        dtype: DType::S32,
        value: Scalar::I(v),
    };
    let prog = Program::new(
        1,
        vec![
            ins(int(2), &[]), // 1
            ins(
                Op::Binary {
                    op: Arith::Pow,
                    out: None,
                },
                &[0, 1],
            ), // 2: x ** 2
            ins(int(3), &[]), // 3
            ins(
                Op::Binary {
                    op: Arith::Pow,
                    out: None,
                },
                &[0, 3],
            ), // 4: x ** 3
            ins(scalar(1.5), &[]), // 5
            ins(Op::Unary(Unary::Abs), &[0]), // 6
            ins(
                Op::Binary {
                    op: Arith::Pow,
                    out: None,
                },
                &[6, 5],
            ), // 7: |x| ** 1.5
            ins(
                Op::Binary {
                    op: Arith::Add,
                    out: None,
                },
                &[2, 4],
            ), // 8
        ],
        vec![2, 4, 7, 8],
    )
    .unwrap();
    let before = fused_so_far();
    let got = prog.run(vec![x.clone()], dev()).unwrap();
    if dev() == Device::Cpu {
        assert_eq!(fused_so_far(), before + 1, "not fused");
        let cube: Vec<f64> = xv
            .iter()
            .map(|&a| {
                let w = a as f32 as f64;
                (w * w * w) as f32 as f64
            })
            .collect();
        assert_eq!(
            bits(&got[1]),
            cube.iter().map(|c| c.to_bits()).collect::<Vec<_>>()
        );
    }
    let want = op_by_op(&prog, &[x]);
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(bits(a), bits(b), "output {k}");
    }
}

/// A generated check of the f32 chunk loops: random element-wise programs (arithmetic,
/// `max`/`min`, powers, unary maps, comparisons feeding `select`, constants of f32 and s32,
/// bias rows, per-row columns, a boolean input mask, special values) give op-by-op values,
/// NaN wherever op-by-op gives NaN and the same bits everywhere else.
#[test]
fn generated_element_wise_programs_match_op_by_op_evaluation() {
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut fused = 0;
    for case in 0..24 {
        let (rows, cols) = (300 + next(300), 448 + next(64));
        let n = rows * cols;
        let mask = t(
            &(0..n)
                .map(|i| ((i * 7 + case) % 3 == 0) as u8 as f64)
                .collect::<Vec<_>>(),
            &[rows, cols],
            DType::U8,
        );
        let inputs = vec![
            f(&special(n, case), &[rows, cols]),
            f(&special(n, case + 5), &[rows, cols]),
            f(&special(cols, case + 1), &[cols]),
            f(&special(rows, case + 2), &[rows, 1]),
            ev(
                Op::Compare(Compare::NotEqual),
                &[&mask, &t(&[0.], &[], DType::U8)],
            ),
        ];
        // f32 values of the run's shape, and every f32 value (broadcast ones included)
        let (mut full, mut any): (Vec<usize>, Vec<usize>) = (vec![0, 1], vec![0, 1, 2, 3]);
        let mut instrs: Vec<Instr> = Vec::new();
        let push = |instrs: &mut Vec<Instr>, op: Op, args: &[usize]| {
            instrs.push(ins(op, args));
            inputs.len() + instrs.len() - 1
        };
        for _ in 0..10 + next(6) {
            let a = full[next(full.len())];
            let b = any[next(any.len())];
            let v = match next(9) {
                0 => {
                    let c = push(&mut instrs, scalar([0.5, -2.0, 3.0][next(3)]), &[]);
                    any.push(c);
                    push(
                        &mut instrs,
                        Op::Binary {
                            op: Arith::Multiply,
                            out: None,
                        },
                        &[a, c],
                    )
                }
                1 => {
                    let op = [
                        Op::Binary {
                            op: Arith::Add,
                            out: None,
                        },
                        Op::Binary {
                            op: Arith::Subtract,
                            out: None,
                        },
                        Op::Binary {
                            op: Arith::Divide,
                            out: None,
                        },
                        Op::Binary {
                            op: Arith::Max,
                            out: None,
                        },
                        Op::Binary {
                            op: Arith::Min,
                            out: None,
                        },
                    ][next(5)]
                    .clone();
                    if next(2) == 0 {
                        push(&mut instrs, op, &[a, b])
                    } else {
                        push(&mut instrs, op, &[b, a])
                    }
                }
                2 => {
                    let e = Op::Full {
                        shape: vec![],
                        dtype: DType::S32,
                        value: Scalar::I([2, 3][next(2)]),
                    };
                    let e = push(&mut instrs, e, &[]);
                    push(
                        &mut instrs,
                        Op::Binary {
                            op: Arith::Pow,
                            out: None,
                        },
                        &[a, e],
                    )
                }
                3 => {
                    let op = [
                        Op::Unary(Unary::Neg),
                        Op::Unary(Unary::Abs),
                        Op::Unary(Unary::Exp),
                        Op::Unary(Unary::Sqrt),
                        Op::Unary(Unary::Log),
                    ][next(5)]
                    .clone();
                    push(&mut instrs, op, &[a])
                }
                4 => {
                    let op = [
                        Op::Unary(Unary::Tanh),
                        Op::Unary(Unary::Sin),
                        Op::Unary(Unary::Cos),
                    ][next(3)]
                    .clone();
                    push(&mut instrs, op, &[a])
                }
                5 | 6 => {
                    let cmp = [
                        Op::Compare(Compare::Equal),
                        Op::Compare(Compare::Less),
                        Op::Compare(Compare::GreaterEqual),
                        Op::Compare(Compare::NotEqual),
                    ][next(4)]
                    .clone();
                    let m = push(&mut instrs, cmp, &[a, b]);
                    let other = any[next(any.len())];
                    push(&mut instrs, Op::Select { out: None }, &[m, a, other])
                }
                7 => push(&mut instrs, Op::Select { out: None }, &[4, a, b]),
                _ => {
                    let z = push(
                        &mut instrs,
                        Op::Full {
                            shape: vec![],
                            dtype: DType::S32,
                            value: Scalar::I(0),
                        },
                        &[],
                    );
                    push(
                        &mut instrs,
                        Op::Binary {
                            op: Arith::Max,
                            out: Some(DType::F32),
                        },
                        &[a, z],
                    )
                }
            };
            full.push(v);
            any.push(v);
        }
        // every f32 result (a comparison read after the run goes to the op table by design)
        let outputs = full[2..].to_vec();
        let prog = Program::new(inputs.len(), instrs, outputs).unwrap();
        let before = fused_so_far();
        let got = prog.run(inputs.clone(), dev()).unwrap();
        fused += fused_so_far() - before;
        let want = op_by_op(&prog, &inputs);
        same_bits_or_nan(&got, &want, &format!("case {case} ({prog:?})"));
    }
    if dev() == Device::Cpu {
        assert_eq!(fused, 24, "runs that took the chunk loops");
    } else if fuses() {
        // no size threshold on the GPU (the operand checks differ: computed scalars of
        // other types than f32 stay op by op there)
        println!(
            "generated programs: {fused} runs were fused kernels on {:?}",
            dev()
        );
        assert!(fused > 0, "no run was a fused kernel");
    }
}

/// A run whose first steps only read broadcast operands (a layer norm's `mean = sum / n`, per
/// row): the GPU kernel computes them for every element, the CPU runs them op by op; the
/// values equal op-by-op evaluation either way, and a small step read after the run keeps
/// the run op by op.
#[test]
fn runs_with_steps_on_broadcast_operands_only_match_op_by_op_evaluation() {
    let (rows, cols) = (37, 301);
    let x = f(&special(rows * cols, 3), &[rows, cols]);
    let lit = |v: f64, dtype: DType| Op::Full {
        shape: vec![],
        dtype,
        value: if dtype == DType::F32 {
            Scalar::F(v)
        } else {
            Scalar::I(v as i64)
        },
    };
    let bin = |op: Arith| Op::Binary {
        op,
        out: Some(DType::F32),
    };
    // the row sums come in as an input (a reduction in the program would make the whole a
    // row region on CUDA: tests/engine/rows.rs)
    let sums = ev(
        Op::Reduce {
            kind: ReduceKind::Sum,
            axes: Some(vec![1]),
            keep_axes: true,
            out: None,
        },
        &[&x],
    ); // 1: [rows, 1]
    for mean_live in [false, true] {
        let prog = Program::new(
            2,
            vec![
                ins(lit(cols as f64, DType::S32), &[]), // 2
                ins(bin(Arith::Divide), &[1, 2]),       // 3: mean, [rows, 1]
                ins(bin(Arith::Subtract), &[0, 3]),     // 4: centred
                ins(bin(Arith::Multiply), &[4, 4]),     // 5
                ins(lit(1.0e-5, DType::F32), &[]),      // 6
                ins(bin(Arith::Add), &[3, 6]),          // 7: [rows, 1]
                ins(Op::Unary(Unary::Rsqrt), &[7]),     // 8: [rows, 1]
                ins(bin(Arith::Multiply), &[5, 8]),     // 9
                ins(Op::Unary(Unary::Tanh), &[9]),      // 10
            ],
            if mean_live { vec![10, 3] } else { vec![10, 4] },
        )
        .unwrap();
        let before = fused_so_far();
        let got = prog.run(vec![x.clone(), sums.clone()], dev()).unwrap();
        let fused = fused_so_far() - before;
        let want = op_by_op(&prog, &[x.clone(), sums.clone()]);
        same_bits_or_nan(
            &got,
            &want,
            &format!("mean read after the run: {mean_live}"),
        );
        if matches!(dev(), Device::Cuda(_)) && fuses() {
            // with the mean read after the run, the run is not one kernel: it runs shape by
            // shape, the [rows, 1] steps as one kernel and the [rows, cols] steps as another
            assert_eq!(
                fused,
                if mean_live { 2 } else { 1 },
                "fused kernels (mean live: {mean_live})"
            );
        }
        if dev() == Device::Cpu {
            assert_eq!(fused, 0, "the CPU keeps such runs op by op");
        }
    }
}

/// `rsqrt` in a fused run is `1 / sqrt(x)` with both roundings, as op by op.
#[test]
fn rsqrt_in_a_fused_run_matches_op_by_op_evaluation() {
    let x = f(&special(200_000, 7), &[400, 500]);
    let prog = Program::new(
        1,
        vec![
            ins(Op::Unary(Unary::Abs), &[0]),   // 1
            ins(Op::Unary(Unary::Rsqrt), &[1]), // 2
            ins(Op::Unary(Unary::Rsqrt), &[0]), // 3: NaN below zero
            ins(
                Op::Binary {
                    op: Arith::Add,
                    out: None,
                },
                &[2, 3],
            ), // 4
        ],
        vec![4, 2],
    )
    .unwrap();
    let before = fused_so_far();
    let got = prog.run(vec![x.clone()], dev()).unwrap();
    if fuses() {
        assert_eq!(fused_so_far(), before + 1, "not fused");
    }
    let want = op_by_op(&prog, &[x]);
    same_bits_or_nan(&got, &want, "rsqrt");
}

/// Masks in arithmetic (Nx's `grad * (x == max)`), and a boolean mask broadcast over leading
/// axes (a causal mask over batch and heads) read by `select`: fused, the same values as op by
/// op.
#[test]
fn masks_in_arithmetic_and_broadcast_masks_match_op_by_op_evaluation() {
    let (b, rows, cols) = (4, 130, 257);
    let n = b * rows * cols;
    let x = f(&special(n, 11), &[b, rows, cols]);
    let y = f(&special(n, 12), &[b, rows, cols]);
    let causal = t(
        &(0..rows * cols)
            .map(|i| f64::from(u8::from(i / cols >= i % cols)))
            .collect::<Vec<_>>(),
        &[rows, cols],
        DType::U8,
    );
    let causal = ev(
        Op::Compare(Compare::NotEqual),
        &[&causal, &t(&[0.], &[], DType::U8)],
    );
    let bin = |op: Arith| Op::Binary { op, out: None };
    let prog = Program::new(
        3,
        vec![
            ins(
                Op::Broadcast {
                    shape: vec![b, rows, cols],
                    axes: Some(vec![1, 2]),
                },
                &[2],
            ), // 3: broadcast view of the mask
            ins(Op::Compare(Compare::Equal), &[0, 1]), // 4: mask
            ins(bin(Arith::Multiply), &[4, 0]),        // 5: mask * x
            ins(
                Op::Full {
                    shape: vec![],
                    dtype: DType::F32,
                    value: Scalar::F(-1.0e9),
                },
                &[],
            ), // 6
            ins(Op::Select { out: None }, &[3, 5, 6]), // 7
            ins(bin(Arith::Add), &[7, 4]),             // 8: + mask
        ],
        vec![8, 5],
    )
    .unwrap();
    let inputs = [x, y, causal];
    let before = fused_so_far();
    let got = prog.run(inputs.to_vec(), dev()).unwrap();
    if fuses() {
        assert_eq!(fused_so_far(), before + 1, "not fused");
    }
    let want = op_by_op(&prog, &inputs);
    same_bits_or_nan(&got, &want, "masks");
}

/// The backward pass of a cross-entropy over logits as Nx's `grad` writes it (the gradient
/// of `reduce_max`): a comparison whose mask is read after its run (by the sum counting the
/// row maxima), that `u32` count dividing f32 values in the next run, per-row and per-column
/// values broadcast to the logits' shape as views. Both runs fuse, and every output (the
/// mask and the count included) is op-by-op evaluation's, bit for bit and type for type.
#[test]
fn a_live_mask_and_an_integer_count_fuse_as_in_a_cross_entropy_gradient() {
    let (b, rows, cols) = (3, 40, 1201);
    let n = b * rows * cols;
    // logits with ties at each row's maximum, and special values
    let mut logits = special(n, 5);
    for r in 0..b * rows {
        logits[r * cols + (r * 7) % cols] = 9.0;
        if r % 3 == 0 {
            logits[r * cols + (r * 11 + 1) % cols] = 9.0;
        }
    }
    let j = f(&logits, &[b, rows, cols]);
    let k = ev(
        Op::Reduce {
            kind: ReduceKind::Max,
            axes: Some(vec![2]),
            keep_axes: true,
            out: None,
        },
        &[&j],
    );
    let per_row: Vec<f64> = (0..b * rows).map(|i| i as f64 * 0.25 - 3.0).collect();
    let per_col: Vec<f64> = (0..cols).map(|i| (i % 13) as f64 * 0.5 - 2.0).collect();
    let q = f(&special(n, 6), &[b, rows, cols]);
    let bin = |op: Arith| Op::Binary { op, out: None };
    let broadcast = |axes: Vec<usize>| Op::Broadcast {
        shape: vec![b, rows, cols],
        axes: Some(axes),
    };
    let prog = Program::new(
        5,
        vec![
            ins(broadcast(vec![0, 1, 2]), &[2]), // 5: per-row values as a view
            ins(broadcast(vec![2]), &[3]),       // 6: per-column values as a view
            ins(Op::Compare(Compare::Equal), &[0, 1]), // 7: mask, read after the run
            ins(bin(Arith::Multiply), &[5, 7]),  // 8
            ins(
                Op::Reduce {
                    kind: ReduceKind::Sum,
                    axes: Some(vec![2]),
                    keep_axes: true,
                    out: Some(DType::U32),
                },
                &[7],
            ), // 9: u32 count of each row's maxima
            ins(bin(Arith::Divide), &[8, 9]),    // 10: f32 / u32
            ins(bin(Arith::Add), &[4, 10]),      // 11
            ins(bin(Arith::Multiply), &[11, 6]), // 12
        ],
        vec![12, 7, 9],
    )
    .unwrap();
    let inputs = [j, k, f(&per_row, &[b, rows, 1]), f(&per_col, &[cols]), q];
    let before = fused_so_far();
    let got = prog.run(inputs.to_vec(), dev()).unwrap();
    if fuses() {
        assert_eq!(fused_so_far(), before + 2, "not fused");
    }
    let want = op_by_op(&prog, &inputs);
    same_bits_or_nan(&got, &want, "cross-entropy gradient");
    assert_eq!(got[1].kind(), want[1].kind(), "the mask's kind");
}

/// An optimizer's update over two parameters of different shapes, written as Polaris writes
/// it: each step mapped over both parameters in turn, the step's scalars (a count, a bias
/// correction, literals) computed in between, so that one element-wise run interleaves
/// tensors that do not broadcast together, and the bias correction is computed once per
/// parameter. The repeated scalars are computed once, the run runs as one fused run per
/// parameter (the scalars op by op), and the values are op-by-op evaluation's bit for bit.
#[test]
fn a_run_over_parameters_of_two_shapes_fuses_each_shape() {
    // large enough for the CPU's chunk loops: one fused run per shape everywhere
    two_parameter_update([600, 400], [500, 300], true);
    // small: op by op on the CPU (one kernel per shape where the device fuses any size)
    two_parameter_update([6, 4], [5, 3], dev() != Device::Cpu);
}

/// Runs the update of `a_run_over_parameters_of_two_shapes_fuses_each_shape` on parameters of
/// shapes `s1` and `s2`; asserts two fused runs when `fused` and the device fuses.
fn two_parameter_update(s1: [usize; 2], s2: [usize; 2], fused: bool) {
    let bin = |op: Arith| Op::Binary { op, out: None };
    let vals = |n: usize, k: f64| -> Vec<f64> {
        (0..n)
            .map(|i| ((i as f64 * 0.37 + k).sin()) * 0.5)
            .collect()
    };
    let (n1, n2) = (s1[0] * s1[1], s2[0] * s2[1]);
    let inputs = vec![
        f(&vals(n1, 0.1), &s1),
        f(&vals(n1, 0.2), &s1),
        f(&vals(n2, 0.3), &s2),
        f(&vals(n2, 0.4), &s2),
        t(&[3.0], &[], DType::S64),
    ];
    // values: 0 p1, 1 g1, 2 p2, 3 g2, 4 count; instruction k defines value 5 + k. The bias
    // correction is computed again for the second parameter, as Polaris does per parameter.
    let instrs = vec![
        ins(scalar(0.9), &[]),                // 5
        ins(scalar(0.1), &[]),                // 6
        ins(bin(Arith::Multiply), &[1, 6]),   // 7: g1 * 0.1
        ins(bin(Arith::Multiply), &[3, 6]),   // 8: g2 * 0.1
        ins(lit(1.0, DType::S64), &[]),       // 9
        ins(bin(Arith::Add), &[4, 9]),        // 10: count + 1
        ins(bin(Arith::Pow), &[5, 10]),       // 11: 0.9 ** (count + 1)
        ins(scalar(1.0), &[]),                // 12
        ins(bin(Arith::Subtract), &[12, 11]), // 13: 1 - 0.9 ** (count + 1)
        ins(bin(Arith::Divide), &[7, 13]),    // 14
        ins(lit(1.0, DType::S64), &[]),       // 15 = 9
        ins(bin(Arith::Add), &[4, 15]),       // 16 = 10
        ins(bin(Arith::Pow), &[5, 16]),       // 17 = 11
        ins(scalar(1.0), &[]),                // 18 = 12
        ins(bin(Arith::Subtract), &[18, 17]), // 19 = 13
        ins(bin(Arith::Divide), &[8, 19]),    // 20
        ins(bin(Arith::Multiply), &[14, 6]),  // 21
        ins(bin(Arith::Subtract), &[0, 21]),  // 22: new p1
        ins(bin(Arith::Multiply), &[20, 6]),  // 23
        ins(bin(Arith::Subtract), &[2, 23]),  // 24: new p2
    ];
    let outputs = vec![22, 24, 16, 19];
    let prog = Program::new(5, instrs.clone(), outputs.clone()).unwrap();
    assert_eq!(
        prog.instrs.len(),
        instrs.len() - 5,
        "the repeated bias correction is computed once"
    );
    let before = fused_so_far();
    let got = prog.run(inputs.clone(), dev()).unwrap();
    if fuses() {
        assert_eq!(
            fused_so_far(),
            before + if fused { 2 } else { 0 },
            "fused runs for shapes {s1:?} and {s2:?}"
        );
    }
    let mut values: Vec<Tensor> = inputs;
    for i in &instrs {
        let args: Vec<&Tensor> = i.args.iter().map(|&a| &values[a]).collect();
        let out = ev(i.op.clone(), &args);
        values.push(out);
    }
    let want: Vec<Tensor> = outputs.iter().map(|&o| values[o].clone()).collect();
    same_bits_or_nan(&got, &want, "grouped run");
}

/// Batch normalization's normalize step in NCHW as Nx writes it: the batch's mean, the
/// reciprocal deviation, the gain and the bias are per-channel values (`[1, c, 1, 1]`, one of
/// them `[c, 1, 1]`) that broadcast over the middle axis, then ReLU: one fused run, the bits of
/// op-by-op evaluation, special values included.
#[test]
fn per_channel_operands_of_a_batch_norm_fuse_and_match_op_by_op_evaluation() {
    let (n, c, h, w) = (4, 6, 80, 71);
    let x = f(&special(n * c * h * w, 0), &[n, c, h, w]);
    let per = |shift: usize, shape: &[usize]| f(&special(c, shift), shape);
    let (mean, inv, gain) = (
        per(1, &[1, c, 1, 1]),
        per(2, &[1, c, 1, 1]),
        per(5, &[c, 1, 1]),
    );
    let bias = per(4, &[1, c, 1, 1]);
    let arith = |op| Op::Binary { op, out: None };
    let prog = Program::new(
        5,
        vec![
            ins(arith(Arith::Subtract), &[0, 1]), // 5: x - mean
            ins(arith(Arith::Multiply), &[5, 2]), // 6: * inv
            ins(arith(Arith::Multiply), &[6, 3]), // 7: * gain
            ins(arith(Arith::Add), &[7, 4]),      // 8: + bias
            ins(scalar(0.0), &[]),                // 9
            ins(arith(Arith::Max), &[8, 9]),      // 10: relu
        ],
        vec![10, 5],
    )
    .unwrap();
    let inputs = [x, mean, inv, gain, bias];
    let before = fused_so_far();
    let got = prog.run(inputs.to_vec(), dev()).unwrap();
    if fuses() {
        assert_eq!(fused_so_far(), before + 1, "not fused");
    }
    same_bits_or_nan(&got, &op_by_op(&prog, &inputs), "batch norm");
}

/// A batch norm's gradient as Nx's `grad` writes it: per-channel sums broadcast back with
/// explicit axes, a per-channel value computed in the run and broadcast over the whole shape,
/// a reshaped gain. Where the device's kernels fuse, the run with its views is one kernel;
/// everywhere the values are op-by-op evaluation's bit for bit.
#[test]
fn runs_through_broadcasts_and_reshapes_match_op_by_op_evaluation() {
    let (n, c, h, w) = (4, 6, 30, 31);
    let x = f(&special(n * c * h * w, 0), &[n, c, h, w]);
    let gain = f(&special(c, 2), &[c]);
    let sums = f(&special(c, 5), &[c]);
    let arith = |op| Op::Binary { op, out: None };
    let broadcast = |shape: &[usize], axes: &[usize]| Op::Broadcast {
        shape: shape.to_vec(),
        axes: Some(axes.to_vec()),
    };
    let prog = Program::new(
        3,
        vec![
            ins(broadcast(&[1, c, 1, 1], &[1]), &[2]), // 3: the sums per channel
            ins(scalar(-0.5), &[]),                    // 4
            ins(arith(Arith::Multiply), &[4, 3]),      // 5: [1, c, 1, 1] in the run
            ins(broadcast(&[n, c, h, w], &[0, 1, 2, 3]), &[5]), // 6: over the whole shape
            ins(arith(Arith::Multiply), &[6, 0]),      // 7
            ins(
                Op::Reshape {
                    shape: vec![1, c, 1, 1],
                },
                &[1],
            ), // 8: the gain per channel
            ins(arith(Arith::Multiply), &[7, 8]),      // 9
            ins(Op::Unary(Unary::Neg), &[9]),          // 10
        ],
        vec![10, 7],
    )
    .unwrap();
    let inputs = [x, gain, sums];
    let before = fused_so_far();
    let got = prog.run(inputs.to_vec(), dev()).unwrap();
    if fuses() && dev() != Device::Cpu {
        assert_eq!(fused_so_far(), before + 1, "not one kernel");
    }
    same_bits_or_nan(&got, &op_by_op(&prog, &inputs), "views in a run");
}

/// A value computed in a run and broadcast onto a middle axis is not where the run would read
/// it (its own shape lines up with the last axis): such a run is not fused through the view,
/// and its values stay op-by-op evaluation's.
#[test]
fn a_broadcast_that_moves_a_run_value_to_another_axis_keeps_its_values() {
    let (n, c, h) = (4, 5, 3);
    let x = f(&special(n * c * h * c, 1), &[n, c, h, c]);
    let per = f(&special(c, 3), &[c]);
    let prog = Program::new(
        2,
        vec![
            ins(
                Op::Binary {
                    op: Arith::Multiply,
                    out: None,
                },
                &[1, 1],
            ), // 2: [c]
            ins(
                Op::Broadcast {
                    shape: vec![1, c, 1, 1],
                    axes: Some(vec![1]),
                },
                &[2],
            ), // 3: onto axis 1
            ins(
                Op::Binary {
                    op: Arith::Add,
                    out: None,
                },
                &[0, 3],
            ), // 4
            ins(Op::Unary(Unary::Abs), &[4]), // 5
        ],
        vec![5],
    )
    .unwrap();
    let inputs = [x, per];
    let got = prog.run(inputs.to_vec(), dev()).unwrap();
    same_bits_or_nan(&got, &op_by_op(&prog, &inputs), "broadcast onto axis 1");
}
