//! Programs scheduled for memory. A gradient program that reads a softmax's exponentials and
//! probabilities again long after the forward pass gets a variant that recomputes them there
//! from the scores and the row maxima and sums (kept anyway), so they are not alive across
//! the stretch between; weight gradients (products that only feed outputs) move to just after
//! their operands exist, ending the activations' lifetimes early. The variant gives the same
//! values. It runs in place of the program on NVIDIA GPUs (where row regions fuse the
//! recomputation); `Program::scheduled` gives it on any device.

use super::common::*;
use ex_burn_core::{DType, Op, Program, Tensor};

fn bin(op: Arith) -> Op {
    Op::Binary {
        op,
        out: Some(DType::F32),
    }
}

/// `[b, n, n] x [n, n]` over the last axis.
fn product() -> Op {
    contraction(2, 0, Default::default())
}

/// Softmax of scores `x` (input 0), a product with `w` (input 2) and ten element-wise steps on
/// it (the "rest of the layer"), then the softmax's gradient for an upstream gradient `g`
/// (input 1), reading `e` (value 5) and `p` (value 7) again.
fn softmax_and_gradient() -> Program {
    let mut instrs = vec![
        ins(reduce_op(ReduceKind::Max, &[2], true, None), &[0]), // 3 m
        ins(bin(Arith::Subtract), &[0, 3]),                      // 4
        ins(Op::Unary(Unary::Exp), &[4]),                        // 5 e
        ins(reduce_op(ReduceKind::Sum, &[2], true, None), &[5]), // 6 z
        ins(bin(Arith::Divide), &[5, 6]),                        // 7 p
        ins(product(), &[7, 2]),                                 // 8
        ins(lit(0.5, DType::F32), &[]),                          // 9
    ];
    // 10..=19: the rest of the layer
    for k in 0..10 {
        let prev = if k == 0 { 8 } else { 9 + k };
        instrs.push(match k % 2 {
            0 => ins(Op::Unary(Unary::Tanh), &[prev]),
            _ => ins(bin(Arith::Multiply), &[prev, 9]),
        });
    }
    instrs.extend([
        ins(bin(Arith::Multiply), &[1, 7]), // 20 g * p
        ins(reduce_op(ReduceKind::Sum, &[2], true, None), &[20]), // 21
        ins(bin(Arith::Subtract), &[1, 21]), // 22
        ins(bin(Arith::Multiply), &[22, 7]), // 23 dx
        ins(bin(Arith::Multiply), &[23, 5]), // 24 dx * e
        ins(bin(Arith::Add), &[24, 0]),     // 25 (reads x: kept to the end)
        ins(bin(Arith::Add), &[25, 3]),     // 26 (reads m)
        ins(bin(Arith::Add), &[26, 6]),     // 27 (reads z)
    ]);
    Program::new(3, instrs, vec![19, 27]).unwrap()
}

fn inputs() -> Vec<Tensor> {
    let (b, n) = (3, 40);
    let x = spread(b * n * n, 7, 4, -1);
    let g = spread(b * n * n, 8, 4, -2);
    let w = spread(n * n, 9, 3, -4);
    vec![f(&x, &[b, n, n]), f(&g, &[b, n, n]), f(&w, &[n, n])]
}

/// The instruction that reads value `v` last.
fn last_read(prog: &Program, v: usize) -> usize {
    prog.instrs
        .iter()
        .rposition(|i| i.args.contains(&v))
        .unwrap()
}

#[test]
fn late_read_softmax_values_are_recomputed_with_equal_results() {
    let prog = softmax_and_gradient();
    let remat = prog.scheduled().expect("a rematerialised variant");
    // e and p are last read by the forward pass (the sum, the divide, the product) ...
    assert_eq!(last_read(remat, 5), 4, "e read only by the forward pass");
    assert_eq!(last_read(remat, 7), 5, "p read only by the forward product");
    // ... and the scores, the row maxima and sums stay what they were
    assert_eq!(
        remat.instrs.len(),
        prog.instrs.len() + 3,
        "x - m, exp and / z once, shared by the later reads"
    );
    let inputs = inputs();
    let want = op_by_op(&prog, &inputs);
    for (which, p) in [("program", &prog), ("variant", remat)] {
        let got = p.run(inputs.clone(), dev()).unwrap();
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.shape(), b.shape(), "{which}: output {k} shape");
            for (i, (x, y)) in v(a).iter().zip(v(b)).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                    "{which}: output {k} element {i}: {x} vs {y}"
                );
            }
        }
    }
}

#[test]
fn values_are_not_recomputed_from_values_that_would_be_dead() {
    // p's only operand chain reaches `t`, a product that is dead after the forward pass: p
    // must be kept, no variant
    let instrs = vec![
        ins(product(), &[0, 1]),          // 2 t
        ins(Op::Unary(Unary::Exp), &[2]), // 3 p
        ins(product(), &[3, 1]),          // 4
    ];
    let mut instrs = instrs;
    for k in 0..20 {
        instrs.push(ins(Op::Unary(Unary::Tanh), &[4 + k])); // 5..=24
    }
    instrs.push(ins(bin(Arith::Multiply), &[24, 3])); // 25: late read of p
    let prog = Program::new(2, instrs.clone(), vec![25]).unwrap();
    assert!(prog.scheduled().is_none());
    // read late by a product only, a value is kept: recomputing it would be one more pass
    let mut late_product = instrs;
    let last = late_product.len() - 1;
    late_product[last] = ins(product(), &[24, 3]);
    let prog = Program::new(2, late_product, vec![25]).unwrap();
    assert!(prog.scheduled().is_none());
    // an output is kept anyway: not recomputed
    let mut instrs = vec![ins(Op::Unary(Unary::Exp), &[0])]; // 1
    for k in 0..20 {
        instrs.push(ins(Op::Unary(Unary::Tanh), &[1 + k])); // 2..=21
    }
    instrs.push(ins(bin(Arith::Add), &[21, 1])); // 22: late read of an output
    let prog = Program::new(1, instrs, vec![1, 22]).unwrap();
    assert!(prog.scheduled().is_none());
}

/// `[a, b] x [c, b]` over the last axes (a product with the second operand transposed).
fn by_transposed() -> Op {
    contraction(1, 1, Default::default())
}

/// `[a, b] x [a, c]` over the first axes (a weight gradient).
fn over_rows() -> Op {
    contraction(0, 0, Default::default())
}

#[test]
fn weight_gradients_move_to_just_after_their_operands() {
    // a two-layer network's forward and backward pass, written as Nx's gradient writes it:
    // the weight gradients (products that only feed outputs) at the end
    let mut instrs = vec![
        ins(matmul_op(ex_burn_core::op::Precision::Default), &[0, 1]), // 3 h = x w1
        ins(Op::Unary(Unary::Tanh), &[3]),                             // 4 a
        ins(matmul_op(ex_burn_core::op::Precision::Default), &[4, 2]), // 5 o = a w2
        ins(lit(0.5, DType::F32), &[]),                                // 6
        ins(bin(Arith::Multiply), &[5, 6]),                            // 7 g (dL/do)
        ins(by_transposed(), &[7, 2]),                                 // 8 dA = g w2ᵀ
        ins(bin(Arith::Multiply), &[4, 4]),                            // 9
        ins(lit(1.0, DType::F32), &[]),                                // 10
        ins(bin(Arith::Subtract), &[10, 9]),                           // 11
        ins(bin(Arith::Multiply), &[8, 11]),                           // 12 dH
    ];
    // more of the backward pass (what the rest of a layer would be)
    for k in 0..8 {
        instrs.push(ins(Op::Unary(Unary::Tanh), &[12 + k])); // 13..=20
    }
    instrs.extend([
        ins(by_transposed(), &[20, 1]), // 21 dX = (..dH) w1ᵀ
        ins(over_rows(), &[4, 7]),      // 22 dW2 = aᵀ g
        ins(over_rows(), &[0, 12]),     // 23 dW1 = xᵀ dH
    ]);
    let prog = Program::new(3, instrs, vec![21, 22, 23]).unwrap();
    let lean = prog.scheduled().expect("a scheduled variant");
    // dW2 runs before dA's product (its operands exist from g on), dW1 before dX's
    let at = |p: &Program, op: Op, args: &[usize]| {
        p.instrs
            .iter()
            .position(|i| i.op == Step::from(op.clone()) && i.args == args)
    };
    assert_eq!(at(lean, over_rows(), &[4, 7]), Some(5), "dW2 moved up");
    assert_eq!(at(lean, by_transposed(), &[7, 2]), Some(6), "dA after it");
    assert_eq!(lean.instrs.len(), prog.instrs.len(), "nothing added");
    // the activation `a` is no longer read after dX's product
    let a_last = lean
        .instrs
        .iter()
        .rposition(|i| i.args.contains(&4))
        .unwrap();
    assert!(a_last < 10, "a last read at {a_last}");
    let (n, k, m, c) = (6, 5, 4, 3);
    let inputs = vec![
        f(&spread(n * k, 1, 3, -1), &[n, k]),
        f(&spread(k * m, 2, 3, -1), &[k, m]),
        f(&spread(m * c, 3, 3, -1), &[m, c]),
    ];
    let want = op_by_op(&prog, &inputs);
    for (which, p) in [("program", &prog), ("variant", lean)] {
        let got = p.run(inputs.clone(), dev()).unwrap();
        for (o, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.shape(), b.shape(), "{which}: output {o} shape");
            for (x, y) in v(a).iter().zip(v(b)) {
                assert!(
                    (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                    "{which}: output {o}: {x} vs {y}"
                );
            }
        }
    }
}

/// A value many late instructions read (an optimizer step's bias correction, read by every
/// parameter's update) is kept rather than recomputed at each: with two late reads it is
/// recomputed, with twenty it is not, and both programs give op-by-op evaluation's values.
#[test]
fn values_read_late_by_many_instructions_are_kept() {
    let with_late_reads = |reads: usize| {
        // 0 x, 1 s; 2 v = exp(s); 3..=22 a chain on x; then `reads` products with v
        let mut instrs = vec![ins(Op::Unary(Unary::Exp), &[1])];
        instrs.push(ins(Op::Unary(Unary::Tanh), &[0]));
        for k in 0..19 {
            instrs.push(ins(Op::Unary(Unary::Tanh), &[3 + k]));
        }
        for k in 0..reads {
            instrs.push(ins(bin(Arith::Multiply), &[22 + k, 2]));
        }
        Program::new(2, instrs, vec![22 + reads]).unwrap()
    };
    let inputs = vec![
        f(&spread(64, 3, 4, -1), &[8, 8]),
        f(&spread(64, 5, 4, -2), &[8, 8]),
    ];
    let few = with_late_reads(2);
    let remat = few.scheduled().expect("two late reads: recomputed");
    assert!(remat.instrs.len() > few.instrs.len());
    let many = with_late_reads(20);
    assert!(many.scheduled().is_none(), "twenty late reads: kept");
    for prog in [&few, &many] {
        let want = op_by_op(prog, &inputs);
        let got = prog.run(inputs.clone(), dev()).unwrap();
        assert_eq!(v(&got[0]), v(&want[0]));
    }
}
