use crate::common::*;
use ex_burn_core::{DType, Op};

fn seq(n: usize) -> Vec<f64> {
    (1..=n).map(|i| i as f64).collect()
}

#[test]
fn window_sum_and_max_2d() {
    let x = f(&seq(9), &[3, 3]);
    let ws = Op::WindowSum {
        window_dims: vec![2, 2],
        strides: None,
        padding: None,
        window_dilations: None,
    };
    check(&ev(ws, &[&x]), &[2, 2], DType::F32, &[12., 16., 24., 28.]);
    let wm = Op::WindowMax {
        window_dims: vec![2, 2],
        strides: Some(vec![1, 2]),
        padding: None,
        window_dilations: None,
    };
    check(&ev(wm, &[&x]), &[2, 1], DType::F32, &[5., 8.]);
}

#[test]
fn padding_uses_the_identity() {
    let x = s(&[1., 2., 3.], &[3]);
    let wmin = Op::WindowMin {
        window_dims: vec![2],
        strides: None,
        padding: Some(vec![(1, 1)]),
        window_dilations: None,
    };
    check(&ev(wmin, &[&x]), &[4], DType::S64, &[1., 1., 2., 3.]);
    let wp = Op::WindowProduct {
        window_dims: vec![2],
        strides: None,
        padding: Some(vec![(0, 1)]),
        window_dilations: None,
    };
    check(&ev(wp, &[&x]), &[3], DType::S64, &[2., 6., 3.]);
    let wmax = Op::WindowMax {
        window_dims: vec![3],
        strides: None,
        padding: Some(vec![(1, 1)]),
        window_dilations: None,
    };
    check(
        &ev(wmax, &[&f(&[-5., -6., -7.], &[3])]),
        &[3],
        DType::F32,
        &[-5., -5., -6.],
    );
}

#[test]
fn dilated_windows() {
    let x = f(&seq(6), &[6]);
    let ws = Op::WindowSum {
        window_dims: vec![2],
        strides: None,
        padding: None,
        window_dilations: Some(vec![3]),
    };
    check(&ev(ws, &[&x]), &[3], DType::F32, &[5., 7., 9.]);
}

#[test]
fn nchw_pooling_shape() {
    let x = f(&seq(32), &[1, 2, 4, 4]);
    let wm = Op::WindowMax {
        window_dims: vec![1, 1, 2, 2],
        strides: Some(vec![1, 1, 2, 2]),
        padding: None,
        window_dilations: None,
    };
    check(
        &ev(wm, &[&x]),
        &[1, 2, 2, 2],
        DType::F32,
        &[6., 8., 14., 16., 22., 24., 30., 32.],
    );
}
