//! Attention (`softmax(f(q kᵀ)) v` as Nx writes it) run as one step gives the values of the
//! same program run op by op (on the CPU the same bits); where its values are read elsewhere,
//! or the kernel does not take the operands, the program runs op by op.

use super::common::*;
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
    reduce_op(kind, &[3], true, None)
}

/// Batch, heads, query rows, keys, head size of `q`/`k`, head size of `v`.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    h: usize,
    sq: usize,
    sk: usize,
    d: usize,
    dv: usize,
}

/// Sizes whose products are small (full f32 on GPUs: their kernel of one query row per
/// block takes them).
const SMALL: Dims = Dims {
    b: 2,
    h: 3,
    sq: 37,
    sk: 41,
    d: 16,
    dv: 8,
};

/// A step of GPT-2 small's generation: one new query row against a cache of 160 positions
/// (full f32 on GPUs, the kernel of one query row per block).
const DECODE: Dims = Dims {
    b: 1,
    h: 12,
    sq: 1,
    sk: 160,
    d: 64,
    dv: 64,
};

/// Sizes whose products are exact op by op on every device (left to the instructions).
const TINY: Dims = Dims {
    b: 1,
    h: 2,
    sq: 5,
    sk: 7,
    d: 8,
    dv: 4,
};

/// Sizes whose products use TF32 on GPUs once `device_kernels::set_min_work(1 << 20)` (see
/// [`tf32_products`]): they cross the GPU kernel's blocks of 64 query rows and 32 keys and
/// pad its head sizes to 8.
const LARGE: Dims = Dims {
    b: 2,
    h: 4,
    sq: 100,
    sk: 130,
    d: 36,
    dv: 26,
};

/// Makes GPU products of 2^20 multiply-adds and more use TF32 (as the dot tests do), so that
/// [`LARGE`] products run as GPT-2's do.
fn tf32_products() {
    crate::device_kernels::set_min_work(1 << 20);
}

/// Relative difference allowed between a program and its op-by-op evaluation where fused
/// kernels (GPUs) sum in another order; none on the CPU.
fn unfused_tolerance() -> f64 {
    if dev() == Device::Cpu {
        0.0
    } else {
        1e-5
    }
}

/// Inputs `q` as `[b, sq, h, d]` (transposed to `[b, h, sq, d]` inside, a strided view, as a
/// projection's heads are), `k` `[b, h, sk, d]`, `v` `[b, h, sk, dv]`; scores divided by 4 (or
/// multiplied by 0.25 with `multiply`), a causal mask (`masked`), softmax, product with `v`.
/// `extra_output`: the probabilities are an output too (read elsewhere: no fusion).
fn program(dims: Dims, masked: bool, multiply: bool, extra_output: bool) -> Program {
    let Dims { b, h, sq, sk, .. } = dims;
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
                shape: vec![sq, 1],
                dtype: DType::S32,
                axis: None,
            },
            &[],
        );
        let cols = push(
            &mut instrs,
            Op::Iota {
                shape: vec![1, sk],
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
                shape: vec![b, h, sq, sk],
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

fn inputs(dims: Dims, dtype: DType) -> Vec<Tensor> {
    let Dims {
        b,
        h,
        sq,
        sk,
        d,
        dv,
    } = dims;
    vec![
        t(&spread(b * sq * h * d, 1, 4, -1), &[b, sq, h, d], dtype),
        t(&spread(b * h * sk * d, 2, 4, -1), &[b, h, sk, d], dtype),
        t(&spread(b * h * sk * dv, 3, 6, -2), &[b, h, sk, dv], dtype),
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
    for dims in [SMALL, DECODE, TINY] {
        for (masked, multiply) in [(true, false), (false, true), (true, true)] {
            let p = program(dims, masked, multiply, false);
            let x = inputs(dims, DType::F32);
            let before = attention_steps();
            let got = p.run(x.clone(), dev()).expect("run");
            let fused = attention_steps() - before;
            let want = op_by_op(&p, &x);
            assert_eq!(got[0].shape(), &[dims.b, dims.h, dims.sq, dims.dv]);
            let (g, w) = (v(&got[0]), v(&want[0]));
            let err = max_rel_err(&g, &w);
            let same = g.iter().zip(&w).filter(|(a, b)| a == b).count();
            println!(
                "attention {}x{} masked={masked} multiply={multiply}: one step {fused}, \
                 max rel err {err:e}, {same} of {} equal",
                dims.sq,
                dims.sk,
                g.len()
            );
            let exact = dims.b * dims.h * dims.sq * dims.sk * dims.d.min(dims.dv)
                <= ex_burn_core::op::EXACT_F32_WORK;
            match dev() {
                // exact products op by op (f64 sums rounded once): left to them
                Device::Cpu | Device::Cuda(_) if exact => {
                    assert_eq!(fused, 0, "exact products ran in a kernel");
                    assert_eq!(same, g.len(), "max relative error {err}");
                }
                // the same f32 operations in the same order: the same bits
                Device::Cpu => {
                    assert_eq!(fused, 1, "the attention ran op by op");
                    assert_eq!(same, g.len(), "max relative error {err}");
                }
                // full f32 products op by op: the kernel of one row per block
                Device::Cuda(_) => {
                    assert_eq!(fused, 1, "the attention ran op by op");
                    assert!(err <= unfused_tolerance(), "max relative error {err}");
                }
                _ => {}
            }
        }
    }
}

/// The program's values in f64 on the CPU (the reference of the accuracy test).
fn reference(p: &Program, x: &[Tensor]) -> Vec<f64> {
    let wide: Vec<Tensor> = x
        .iter()
        .map(|t| {
            t.to_device(Device::Cpu)
                .and_then(|t| t.cast(DType::F64))
                .expect("f64 copy")
        })
        .collect();
    v(&p.run(wide, Device::Cpu).expect("f64 run")[0])
}

#[test]
fn attention_as_one_step_is_as_accurate_as_op_by_op_evaluation_on_every_device() {
    // GPUs multiply in TF32 in both forms (the kernel's products, cuBLAS's): each form is
    // compared with the program in f64, and the one step may not be less accurate (the sizes
    // cross the GPU kernel's blocks of 64 query rows and 32 keys, and pad its head sizes)
    tf32_products();
    for (masked, multiply) in [(true, false), (false, true)] {
        let p = program(LARGE, masked, multiply, false);
        let x = inputs(LARGE, DType::F32);
        let want = reference(&p, &x);
        let before = attention_steps();
        let got = v(&p.run(x.clone(), dev()).expect("run")[0]);
        let fused = attention_steps() - before;
        let unfused = v(&op_by_op(&p, &x)[0]);
        let (e1, e2) = (max_rel_err(&got, &want), max_rel_err(&unfused, &want));
        println!(
            "attention accuracy masked={masked} multiply={multiply}: one step {fused}, \
             error {e1:e} (op by op {e2:e})"
        );
        if matches!(dev(), Device::Cpu | Device::Cuda(_)) {
            assert_eq!(fused, 1, "the attention ran op by op");
        }
        assert!(e1 <= 3.0 * e2 + 1e-6, "one step {e1:e}, op by op {e2:e}");
    }
}

/// `p` with its mask's fill (the literal -1e9) replaced by `fill`, and `>=` by `>` when
/// `strict`.
fn refilled(p: &Program, fill: f64, strict: bool) -> Program {
    let mut instrs = p.instrs.clone();
    for i in instrs.iter_mut() {
        if strict && i.op == Step::Op(Op::Compare(Compare::GreaterEqual)) {
            i.op = Step::Op(Op::Compare(Compare::Greater));
        }
        if i.op == Step::Op(lit(-1.0e9, DType::F32)) {
            i.op = Step::Op(lit(fill, DType::F32));
        }
    }
    Program::new(3, instrs, p.outputs.clone()).expect("program")
}

#[test]
fn masked_blocks_are_skipped_only_where_that_is_exact() {
    // GPUs skip blocks of keys masked for every query row of a block when the fill's
    // exponential is 0 in every row. A fill of 0 is not far below the rows' maxima: those
    // blocks count, and the values are those of op-by-op evaluation all the same. (SMALL:
    // the kernel of one row per block on GPUs, which skips nothing.)
    tf32_products();
    for dims in [LARGE, SMALL] {
        let x = inputs(dims, DType::F32);
        let p = refilled(&program(dims, true, false, false), 0.0, false);
        let want = reference(&p, &x);
        let got = v(&p.run(x.clone(), dev()).expect("run")[0]);
        let unfused = v(&op_by_op(&p, &x)[0]);
        let (e1, e2) = (max_rel_err(&got, &want), max_rel_err(&unfused, &want));
        println!(
            "attention {}x{} with fill 0: error {e1:e} (op by op {e2:e})",
            dims.sq, dims.sk
        );
        assert!(e1 <= 3.0 * e2 + 1e-6, "one step {e1:e}, op by op {e2:e}");
        // a value that is not finite behind the mask: 0 times it is NaN op by op, and here
        let p = program(dims, true, false, false);
        let Dims { b, h, sk, dv, .. } = dims;
        let mut vals = v(&x[2]);
        vals[(sk - 1) * dv] = f64::INFINITY; // batch 0, head 0, last key (masked for every row), column 0
        let x = vec![
            x[0].clone(),
            x[1].clone(),
            t(&vals, &[b, h, sk, dv], DType::F32),
        ];
        let got = v(&p.run(x.clone(), dev()).expect("run")[0]);
        let want = v(&op_by_op(&p, &x)[0]);
        let nans = want.iter().filter(|w| w.is_nan()).count();
        assert_eq!(
            nans, dims.sq,
            "column 0 of the first batch matrix is NaN op by op"
        );
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.is_nan(), w.is_nan(), "element {i}: {g} vs {w}");
        }
    }
}

#[test]
fn attention_rows_without_a_finite_score_are_nan_as_op_by_op() {
    // a strict causal mask filled with -inf: the first query row has no score left
    tf32_products();
    for dims in [LARGE, SMALL] {
        let p = refilled(&program(dims, true, false, false), f64::NEG_INFINITY, true);
        let x = inputs(dims, DType::F32);
        let before = attention_steps();
        let got = v(&p.run(x.clone(), dev()).expect("run")[0]);
        if matches!(dev(), Device::Cpu | Device::Cuda(_)) {
            assert_eq!(attention_steps() - before, 1, "the attention ran op by op");
        }
        let want = v(&op_by_op(&p, &x)[0]);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // row 0 of every batch matrix is NaN in both; the others finite
            assert_eq!(g.is_nan(), w.is_nan(), "element {i}: {g} vs {w}");
            assert_eq!(
                (i / dims.dv).is_multiple_of(dims.sq),
                w.is_nan(),
                "element {i}: {w}"
            );
        }
    }
}

#[test]
fn attention_whose_probabilities_are_read_elsewhere_runs_op_by_op() {
    let p = program(SMALL, true, false, true);
    let x = inputs(SMALL, DType::F32);
    let (got, want) = run_unfused(&p, &x, "the probabilities are an output");
    for k in 0..2 {
        let err = max_rel_err(&v(&got[k]), &v(&want[k]));
        assert!(
            err <= unfused_tolerance(),
            "output {k}: max relative error {err}"
        );
    }
}

#[test]
fn attention_in_f64_runs_its_instructions_op_by_op() {
    if !f64_on_device() {
        return;
    }
    let p = program(SMALL, true, false, false);
    let x = inputs(SMALL, DType::F64);
    let (got, want) = run_unfused(&p, &x, "the operands are f64");
    assert_eq!(got[0].dtype(), DType::F64);
    assert_eq!(v(&got[0]), v(&want[0]));
    // and the program runs again (values freed and kept as planned)
    let again = p.run(x, dev()).expect("second run");
    assert_eq!(v(&again[0]), v(&want[0]));
}

#[test]
fn attention_whose_product_has_another_result_type_runs_op_by_op() {
    if !f64_on_device() {
        return;
    }
    let p = program(SMALL, true, false, false);
    let mut instrs = p.instrs.clone();
    let last = instrs.len() - 1;
    instrs[last].op = Step::Op(dot_into(3, 2, Some(DType::F64)));
    let p = Program::new(3, instrs, p.outputs.clone()).expect("program");
    let (got, want) = run_unfused(&p, &inputs(SMALL, DType::F32), "the product is f64");
    assert_eq!(got[0].dtype(), DType::F64);
    let err = max_rel_err(&v(&got[0]), &v(&want[0]));
    assert!(err <= unfused_tolerance(), "max relative error {err}");
}

/// GPT-2-small's attention (8 batches x 12 heads, 512 tokens, heads of 64, causal mask) run a
/// few times: a workload for GPU profilers (`ncu --kernel-name exburn_attention`), not a check.
#[test]
#[ignore]
fn gpt2_sized_attention_for_profilers() {
    let dims = Dims {
        b: 8,
        h: 12,
        sq: 512,
        sk: 512,
        d: 64,
        dv: 64,
    };
    let p = program(dims, true, false, false);
    let x = inputs(dims, DType::F32);
    for _ in 0..4 {
        let out = p.run(x.clone(), dev()).expect("run");
        assert!(v(&out[0]).iter().all(|x| x.is_finite()));
    }
}
