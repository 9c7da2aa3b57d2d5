use super::common::*;
use ex_burn_core::{DType, Op};

#[test]
fn softmax_and_log_softmax() {
    let x = f(&[1., 2., 3., 1., 1., 1.], &[2, 3]);
    let e: Vec<f64> = [1f64, 2., 3.].iter().map(|v| v.exp()).collect();
    let z: f64 = e.iter().sum();
    let want = [e[0] / z, e[1] / z, e[2] / z, 1. / 3., 1. / 3., 1. / 3.];
    close(&ev(Op::Softmax { axis: 1 }, &[&x]), &want, 1e-6);
    let lw: Vec<f64> = want.iter().map(|v| v.ln()).collect();
    close(&ev(Op::LogSoftmax { axis: 1 }, &[&x]), &lw, 1e-5);
    assert_eq!(
        ev(Op::Softmax { axis: 0 }, &[&s(&[1., 2.], &[2])]).dtype(),
        DType::F32
    );
}

#[test]
fn relu_float_and_int() {
    check(
        &ev(Op::Unary(Unary::Relu), &[&f(&[-1., 2.], &[2])]),
        &[2],
        DType::F32,
        &[0., 2.],
    );
    check(
        &ev(Op::Unary(Unary::Relu), &[&s(&[-1., 2.], &[2])]),
        &[2],
        DType::S64,
        &[0., 2.],
    );
}
