//! Scalar literals of programs (rank-0 `full`s) are made once and kept, and float arithmetic
//! on them runs as scalar kernels with the same values as op-by-op evaluation, for literals
//! of every type the path takes (f32, f64, integers, wrapped unsigned ones) on either side.

use super::common::*;
use ex_burn_core::program::{literal_steps, Instr};
use ex_burn_core::{DType, Op, Program, Scalar, Tensor};

fn lit(value: Scalar, dtype: DType) -> Op {
    Op::Full {
        shape: vec![],
        dtype,
        value,
    }
}

fn arith(op: Arith, out: Option<DType>) -> Op {
    Op::Binary { op, out }
}

/// `x op literal` (or `literal op x`) as a program; a slice of all of `x` between the
/// literal and the op keeps the two out of one element-wise run, which a device that fuses
/// runs would compute as a whole (a reshape no longer does: such runs read through views).
fn program(op: &Op, literal: &Op, left: bool, shape: &[usize]) -> Program {
    let args = if left { [1, 2] } else { [2, 1] };
    Program::new(
        1,
        vec![
            Instr {
                op: literal.clone().into(),
                args: vec![],
            },
            Instr {
                op: Op::Slice {
                    starts: vec![0; shape.len()],
                    lengths: shape.to_vec(),
                    strides: None,
                    dynamic: vec![],
                }
                .into(),
                args: vec![0],
            },
            Instr {
                op: op.clone().into(),
                args: args.to_vec(),
            },
        ],
        vec![3],
    )
    .unwrap()
}

/// The same as one op on two tensors (the literal made as a tensor first).
fn op_by_op(op: &Op, literal: &Op, x: &Tensor, left: bool) -> Tensor {
    let l = ev(literal.clone(), &[]);
    if left {
        ev(op.clone(), &[&l, x])
    } else {
        ev(op.clone(), &[x, &l])
    }
}

fn same_values(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtype");
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    for (i, (x, y)) in v(a).iter().zip(v(b)).enumerate() {
        assert!(
            (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits(),
            "{what}: element {i}: {x:e} vs {y:e}"
        );
    }
}

#[test]
fn arithmetic_with_a_literal_matches_op_by_op_evaluation() {
    let xs = [
        1.5,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        3.0e38,
        1.0e-40,
        0.1,
        7.0,
        -2.5e-3,
        16777216.0,
    ];
    let literals = [
        (Scalar::F(0.1), DType::F32),
        (Scalar::F(0.1), DType::F64),
        (Scalar::F(-0.0), DType::F32),
        (Scalar::F(1.0e-5), DType::F32),
        (Scalar::I(3), DType::S64),
        (Scalar::I(16_777_217), DType::S64),
        (Scalar::I(-2), DType::U32),
        (Scalar::I(512), DType::S32),
        (Scalar::Infinity, DType::F32),
        (Scalar::Nan, DType::F64),
    ];
    let ops = [Arith::Add, Arith::Subtract, Arith::Multiply, Arith::Divide];
    let mut taken = 0;
    for xdtype in [DType::F32, wide_float()] {
        let x = t(&xs, &[xs.len()], xdtype);
        for &(value, dtype) in literals
            .iter()
            .filter(|l| l.1 != DType::F64 || f64_on_device())
        {
            for &f in &ops {
                for out in [None, Some(xdtype)] {
                    for left in [false, true] {
                        let (op, literal) = (arith(f, out), lit(value, dtype));
                        let before = literal_steps();
                        let p = program(&op, &literal, left, &[xs.len()]);
                        let got = p.run(vec![x.clone()], dev()).unwrap().remove(0);
                        let want = op_by_op(&op, &literal, &x, left);
                        let what = format!(
                            "{xdtype:?} {f:?} literal {value:?} {dtype:?} (out {out:?}, left {left})"
                        );
                        same_values(&got, &want, &what);
                        // the program kept the literal: a second run gives the same values
                        let again = p.run(vec![x.clone()], dev()).unwrap().remove(0);
                        same_values(&again, &want, &format!("{what}, second run"));
                        let used = literal_steps() - before;
                        // the path applies where the result has x's type (merged with the
                        // literal's, an f64 literal makes an f32 x's result f64 unless `out`
                        // says otherwise); a literal dividend is never a scalar kernel
                        let result = out.unwrap_or(if dtype == DType::F64 {
                            DType::F64
                        } else {
                            xdtype
                        });
                        let applies = result == xdtype && !(f == Arith::Divide && left);
                        assert_eq!(used, if applies { 2 } else { 0 }, "{what}: path");
                        taken += used;
                    }
                }
            }
        }
    }
    assert!(taken > 200, "only {taken} steps took the literal path");
}

#[test]
fn a_literal_read_elsewhere_is_the_same_tensor_every_run() {
    // a literal that `select` reads (not arithmetic) is still made once and kept
    let p = Program::new(
        2,
        vec![
            Instr {
                op: lit(Scalar::F(-1.0e9), DType::F32).into(),
                args: vec![],
            },
            Instr {
                op: Op::Select { out: None }.into(),
                args: vec![0, 1, 2],
            },
        ],
        vec![3, 2],
    )
    .unwrap();
    let pred = t(&[1.0, 0.0, 1.0], &[3], DType::U8);
    let x = f(&[1.0, 2.0, 3.0], &[3]);
    for _ in 0..2 {
        let out = p.run(vec![pred.clone(), x.clone()], dev()).unwrap();
        check(&out[0], &[3], DType::F32, &[1.0, -1.0e9, 3.0]);
        check(&out[1], &[], DType::F32, &[-1.0e9]);
    }
}
