//! Attention (`softmax(f(q kᵀ)) v` as Nx writes it) run as one step gives the values of the
//! same program run op by op (on the CPU the same bits); where its values are read elsewhere,
//! or the kernel does not take the operands, the program runs op by op.

use crate::common::*;
use ex_burn_core::program::{attention_steps, Instr};
use ex_burn_core::{DType, Device, Op, Program, Tensor};

fn dot(contract_a: usize, contract_b: usize) -> Op {
    dot_into(contract_a, contract_b, None)
}

fn dot_into(contract_a: usize, contract_b: usize, out: Option<DType>) -> Op {
    Op::Dot {
        contract_a: vec![contract_a],
        batch_a: vec![0, 1],
        contract_b: vec![contract_b],
        batch_b: vec![0, 1],
        out,
        precision: ex_burn_core::op::Precision::Default,
    }
}

/// Runs `p`, asserting that no attention ran as one step; its results and op-by-op ones.
fn run_unfused(p: &Program, x: &[Tensor], why: &str) -> (Vec<Tensor>, Vec<Tensor>) {
    let before = attention_steps();
    let got = p.run(x.to_vec(), dev()).expect("run");
    assert_eq!(attention_steps(), before, "fused although {why}");
    (got, op_by_op(p, x))
}

fn binary(op: Arith) -> Op {
    Op::Binary { op, out: None }
}

fn reduce(kind: ReduceKind) -> Op {
    Op::Reduce {
        kind,
        axes: Some(vec![3]),
        keep_axes: true,
        out: None,
    }
}

const B: usize = 2;
const H: usize = 3;
const SQ: usize = 37;
const SK: usize = 41;
const D: usize = 16;
const DV: usize = 8;

/// Inputs `q` as `[B, SQ, H, D]` (transposed to `[B, H, SQ, D]` inside, a strided view, as a
/// projection's heads are), `k` `[B, H, SK, D]`, `v` `[B, H, SK, DV]`; scores divided by 4 (or
/// multiplied by 0.25 with `multiply`), a causal mask (`masked`), softmax, product with `v`.
/// `extra_output`: the probabilities are an output too (read elsewhere: no fusion).
fn program(masked: bool, multiply: bool, extra_output: bool) -> Program {
    let mut instrs = vec![
        ins(
            Op::Transpose {
                axes: Some(vec![0, 2, 1, 3]),
            },
            &[0],
        ), // 3: q
        ins(dot(3, 3), &[3, 1]), // 4: scores
    ];
    let mut x = 4;
    let push = |instrs: &mut Vec<Instr>, op: Op, args: &[usize]| {
        instrs.push(ins(op, args));
        2 + instrs.len()
    };
    if multiply {
        let c = push(&mut instrs, lit(0.25, DType::F32), &[]);
        x = push(&mut instrs, binary(Arith::Multiply), &[c, x]);
    } else {
        let c = push(&mut instrs, lit(4.0, DType::F32), &[]);
        x = push(&mut instrs, binary(Arith::Divide), &[x, c]);
    }
    if masked {
        let rows = push(
            &mut instrs,
            Op::Iota {
                shape: vec![SQ, 1],
                dtype: DType::S32,
                axis: None,
            },
            &[],
        );
        let cols = push(
            &mut instrs,
            Op::Iota {
                shape: vec![1, SK],
                dtype: DType::S32,
                axis: None,
            },
            &[],
        );
        let causal = push(
            &mut instrs,
            Op::Compare(Compare::GreaterEqual),
            &[rows, cols],
        );
        let mask = push(
            &mut instrs,
            Op::Broadcast {
                shape: vec![B, H, SQ, SK],
                axes: Some(vec![2, 3]),
            },
            &[causal],
        );
        let fill = push(&mut instrs, lit(-1.0e9, DType::F32), &[]);
        x = push(&mut instrs, Op::Select { out: None }, &[mask, x, fill]);
    }
    let max = push(&mut instrs, reduce(ReduceKind::Max), &[x]);
    let shifted = push(&mut instrs, binary(Arith::Subtract), &[x, max]);
    let e = push(&mut instrs, Op::Unary(Unary::Exp), &[shifted]);
    let sum = push(&mut instrs, reduce(ReduceKind::Sum), &[e]);
    let p = push(&mut instrs, binary(Arith::Divide), &[e, sum]);
    let out = push(&mut instrs, dot(3, 2), &[p, 2]);
    let outputs = if extra_output {
        vec![out, p]
    } else {
        vec![out]
    };
    Program::new(3, instrs, outputs).expect("program")
}

fn inputs(dtype: DType) -> Vec<Tensor> {
    vec![
        t(&spread(B * SQ * H * D, 1, 4, -1), &[B, SQ, H, D], dtype),
        t(&spread(B * H * SK * D, 2, 4, -1), &[B, H, SK, D], dtype),
        t(&spread(B * H * SK * DV, 3, 6, -2), &[B, H, SK, DV], dtype),
    ]
}

fn max_rel_err(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / (1.0 + w.abs()))
        .fold(0.0, f64::max)
}

#[test]
fn attention_runs_as_one_step_with_the_values_of_op_by_op_evaluation() {
    for (masked, multiply) in [(true, false), (false, true), (true, true)] {
        let p = program(masked, multiply, false);
        let x = inputs(DType::F32);
        let before = attention_steps();
        let got = p.run(x.clone(), dev()).expect("run");
        let fused = attention_steps() - before;
        let want = op_by_op(&p, &x);
        assert_eq!(got[0].shape(), &[B, H, SQ, DV]);
        let (g, w) = (v(&got[0]), v(&want[0]));
        let err = max_rel_err(&g, &w);
        let same = g.iter().zip(&w).filter(|(a, b)| a == b).count();
        println!("attention masked={masked} multiply={multiply}: one step {fused}, max rel err {err:e}, {same} of {} equal", g.len());
        if dev() == Device::Cpu {
            // the same f32 operations in the same order: the same bits
            assert_eq!(fused, 1, "the attention ran op by op");
            assert_eq!(same, g.len(), "max relative error {err}");
        }
        assert!(err < 1e-6, "max relative error {err}");
    }
}

#[test]
fn attention_whose_probabilities_are_read_elsewhere_runs_op_by_op() {
    let p = program(true, false, true);
    let x = inputs(DType::F32);
    let (got, want) = run_unfused(&p, &x, "the probabilities are an output");
    assert_eq!(v(&got[0]), v(&want[0]));
    assert_eq!(v(&got[1]), v(&want[1]));
}

#[test]
fn attention_in_f64_runs_its_instructions_op_by_op() {
    let p = program(true, false, false);
    let x = inputs(DType::F64);
    let (got, want) = run_unfused(&p, &x, "the operands are f64");
    assert_eq!(got[0].dtype(), DType::F64);
    assert_eq!(v(&got[0]), v(&want[0]));
    // and the program runs again (values freed and kept as planned)
    let again = p.run(x, dev()).expect("second run");
    assert_eq!(v(&again[0]), v(&want[0]));
}

#[test]
fn attention_whose_product_has_another_result_type_runs_op_by_op() {
    let p = program(true, false, false);
    let mut instrs = p.instrs.clone();
    let last = instrs.len() - 1;
    instrs[last].op = Step::Op(dot_into(3, 2, Some(DType::F64)));
    let p = Program::new(3, instrs, p.outputs.clone()).expect("program");
    let (got, want) = run_unfused(&p, &inputs(DType::F32), "the product is f64");
    assert_eq!(got[0].dtype(), DType::F64);
    assert_eq!(v(&got[0]), v(&want[0]));
}
