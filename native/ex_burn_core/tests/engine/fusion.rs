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
            ins(Op::Cos, &[0]),                       // 3
            ins(Op::Exp, &[3]),                       // 4
            ins(Op::Divide { out: None }, &[4, 1]),   // 5: exp(cos x) / y
            ins(Op::Neg, &[5]),                       // 6
            ins(Op::Tanh, &[6]),                      // 7
            ins(Op::Subtract { out: None }, &[2, 7]), // 8: k - tanh(..)
            ins(Op::Abs, &[8]),                       // 9
            ins(Op::Log, &[9]),                       // 10
            ins(scalar(2.0), &[]),                    // 11
            ins(Op::Divide { out: None }, &[11, 10]), // 12: 2 / log(..)
            ins(
                Op::Multiply {
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
        Op::Divide { out: None },
        &[&ev(Op::Exp, &[&ev(Op::Cos, &[&x])]), &y],
    );
    let e8 = ev(
        Op::Subtract { out: None },
        &[&k, &ev(Op::Tanh, &[&ev(Op::Neg, &[&e5])])],
    );
    let e10 = ev(Op::Log, &[&ev(Op::Abs, &[&e8])]);
    let e12 = ev(Op::Divide { out: None }, &[&f(&[2.0], &[]), &e10]);
    let e13 = ev(
        Op::Multiply {
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
