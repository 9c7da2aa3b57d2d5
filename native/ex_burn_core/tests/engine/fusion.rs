//! Cache-blocked element-wise runs and CPU scalar kernels give the same values as op-by-op
//! evaluation.

use crate::common::*;
use ex_burn_core::program::Instr;
use ex_burn_core::{DType, Op, Program, Scalar, Tensor};

fn ins(op: Op, args: &[usize]) -> Instr {
    Instr {
        op,
        args: args.to_vec(),
    }
}

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
            ins(Op::Multiply { out: None }, &[0, 2]),
            ins(Op::Add { out: None }, &[3, 1]),
            ins(Op::Sin, &[4]),
            ins(Op::Abs, &[5]),
            ins(Op::Sqrt, &[6]),
            ins(scalar(0.5), &[]),
            ins(Op::Subtract { out: None }, &[7, 8]),
        ],
        vec![9, 3],
    )
    .unwrap()
}

fn eager_chain(x: &Tensor, y: &Tensor) -> (Tensor, Tensor) {
    let s = |v: f64| f(&[v], &[]);
    let m = ev(Op::Multiply { out: None }, &[x, &s(1.5)]);
    let a = ev(Op::Add { out: None }, &[&m, y]);
    let r = ev(Op::Sqrt, &[&ev(Op::Abs, &[&ev(Op::Sin, &[&a])])]);
    (ev(Op::Subtract { out: None }, &[&r, &s(0.5)]), m)
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
fn runs_with_differently_shaped_operands_run_unfused() {
    let x = big(200_000);
    let y = f(&[1., 2., 3., 4.], &[4]);
    let out = chain().run(vec![x.clone(), y.clone()], dev()).unwrap();
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
        (Op::Add { out: None }, false, |a, b| a + b),
        (Op::Subtract { out: None }, false, |a, b| a - b),
        (Op::Subtract { out: None }, true, |a, b| b - a),
        (Op::Multiply { out: None }, true, |a, b| a * b),
        (Op::Divide { out: None }, false, |a, b| a / b),
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
    let sum = ev(Op::Add { out: None }, &[&xi, &si]);
    check(&sum, &[n], DType::U8, &vec![44.; n]);
}
