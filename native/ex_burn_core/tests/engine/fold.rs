//! `reduce` and `window_reduce` with a function sub-program.

use super::common::*;
use ex_burn_core::program::Instr;
use ex_burn_core::{DType, Op, Program};

/// (x, acc) -> op(x, acc)
fn body(op: Op) -> Program {
    Program::new(
        2,
        vec![Instr {
            op: op.into(),
            args: vec![0, 1],
        }],
        vec![2],
    )
    .unwrap()
}

#[test]
fn reduce_folds_the_function_over_the_axes() {
    let x = s(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let acc = s(&[10.], &[]);
    let sum = |axes: Option<Vec<usize>>, keep_axes| Step::Reduce {
        axes,
        keep_axes,
        body: body(Op::Binary {
            op: Arith::Add,
            out: None,
        }),
    };
    check(&ev(sum(None, false), &[&x, &acc]), &[], DType::S64, &[31.]);
    check(
        &ev(sum(Some(vec![0]), false), &[&x, &acc]),
        &[3],
        DType::S64,
        &[15., 17., 19.],
    );
    check(
        &ev(sum(Some(vec![1]), true), &[&x, &acc]),
        &[2, 1],
        DType::S64,
        &[16., 25.],
    );
    let prod = Step::Reduce {
        axes: Some(vec![1]),
        keep_axes: false,
        body: body(Op::Binary {
            op: Arith::Multiply,
            out: None,
        }),
    };
    check(
        &ev(prod, &[&x, &s(&[1.], &[])]),
        &[2],
        DType::S64,
        &[6., 120.],
    );
}

#[test]
fn window_reduce_folds_each_window() {
    let x = f(&[1., 5., 2., 4., 3., 0.], &[6]);
    let max = Step::WindowReduce {
        window_dims: vec![2],
        strides: Some(vec![2]),
        padding: None,
        window_dilations: None,
        body: body(Op::Binary {
            op: Arith::Max,
            out: None,
        }),
    };
    check(
        &ev(max, &[&x, &f(&[f64::NEG_INFINITY], &[])]),
        &[3],
        DType::F32,
        &[5., 4., 3.],
    );
    // padded with the accumulator, dilated windows
    let sum = Step::WindowReduce {
        window_dims: vec![2],
        strides: None,
        padding: Some(vec![(1, 0)]),
        window_dilations: Some(vec![2]),
        body: body(Op::Binary {
            op: Arith::Add,
            out: None,
        }),
    };
    // padded [0, 1, 5, 2, 4, 3, 0] (the last 0 is x's); windows (i, i + 2)
    check(
        &ev(sum, &[&x, &f(&[0.], &[])]),
        &[5],
        DType::F32,
        &[5., 3., 9., 5., 4.],
    );
}

#[test]
fn a_body_that_is_not_a_binary_function_is_rejected() {
    let unary = Program::new(1, vec![], vec![0]).unwrap();
    let op = Step::Reduce {
        axes: None,
        keep_axes: false,
        body: unary,
    };
    assert_eq!(Program::single(op, 2).unwrap_err().kind(), "argument");
}
