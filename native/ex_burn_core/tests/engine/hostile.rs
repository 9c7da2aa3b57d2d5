//! Inputs found by the fuzz campaign (valid ops with hostile attributes): each is refused
//! with an error naming the problem, or answers what Nx answers, before anything large is
//! allocated. None of them may panic or abort.

use super::common::*;
use ex_burn_core::{DType, Op};

const HUGE: usize = usize::MAX;

fn conv_with(strides: Option<Vec<usize>>, padding: Option<Vec<(i64, i64)>>) -> Op {
    let mut op = conv();
    if let Op::Conv {
        strides: s,
        padding: p,
        ..
    } = &mut op
    {
        (*s, *p) = (strides, padding);
    }
    op
}

#[test]
fn huge_convolution_padding_is_refused_before_allocating() {
    let x = f(&[1., 2., 3., 4., 5.], &[1, 1, 5]);
    let k = f(&[1.], &[1, 1, 1]);
    let op = conv_with(Some(vec![1 << 40]), Some(vec![(1 << 40, 0)]));
    let kind = ev_err(op, &[&x, &k]);
    assert!(kind == "out_of_memory" || kind == "shape", "{kind}");
}

#[test]
fn a_stride_past_the_input_gives_one_window() {
    let x = f(&[1., 2., 3., 4., 5.], &[1, 1, 5]);
    let k = f(&[1., 1.], &[1, 1, 2]);
    check(
        &ev(conv_with(Some(vec![HUGE]), None), &[&x, &k]),
        &[1, 1, 1],
        DType::F32,
        &[3.],
    );
    let slice = Op::Slice {
        starts: vec![1],
        lengths: vec![3],
        strides: Some(vec![HUGE]),
        dynamic: vec![],
    };
    check(
        &ev(slice, &[&x.reshape(vec![5]).unwrap()]),
        &[1],
        DType::F32,
        &[2.],
    );
}

#[test]
fn huge_window_padding_and_windows_are_refused() {
    let x = f(&[1., 2., 3., 4.], &[2, 2]);
    let scatter = Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![1 << 32, 2],
        strides: None,
        padding: None,
    };
    let src = f(&[1.], &[1, 1]);
    let init = f(&[0.], &[]);
    let kind = ev_err(scatter, &[&x, &src, &init]);
    assert!(kind == "out_of_memory" || kind == "shape", "{kind}");

    let product = Op::Window {
        kind: WindowKind::Product,
        geometry: Geometry {
            window_dims: vec![2, 1],
            strides: None,
            padding: None,
            window_dilations: Some(vec![HUGE, 1]),
        },
    };
    // The dilated window is larger than the input: no windows.
    check(&ev(product, &[&x]), &[0, 2], DType::F32, &[]);

    let sum = Op::Window {
        kind: WindowKind::Sum,
        geometry: Geometry {
            window_dims: vec![1, 1],
            strides: Some(vec![1 << 40, 1 << 40]),
            padding: Some(vec![(1 << 40, 0), (1 << 40, 0)]),
            window_dilations: None,
        },
    };
    let kind = ev_err(sum, &[&x]);
    assert!(kind == "out_of_memory" || kind == "shape", "{kind}");
}

#[test]
fn indexing_an_empty_axis_or_a_scalar_is_an_error() {
    let empty = f(&[], &[1, 0, 3]);
    let idx = s(&[0.], &[1]);
    assert_eq!(ev_err(Op::Take { axis: 1 }, &[&empty, &idx]), "argument");
    let scalar = f(&[1.], &[]);
    assert_eq!(ev_err(Op::Take { axis: 0 }, &[&scalar, &idx]), "shape");
    assert_eq!(
        ev_err(Op::TakeAlongAxis { axis: 0 }, &[&scalar, &s(&[0.], &[])]),
        "shape"
    );
}

#[test]
fn scalars_do_not_concatenate_and_stacks_need_one_shape() {
    let a = f(&[1.], &[]);
    assert_eq!(ev_err(Op::Concatenate { axis: 0 }, &[&a, &a]), "shape");
    let v = f(&[1., 2.], &[2]);
    assert_eq!(ev_err(Op::Stack { axis: 1 }, &[&v, &a]), "shape");
    check(
        &ev(Op::Stack { axis: 0 }, &[&a, &a]),
        &[2],
        DType::F32,
        &[1., 1.],
    );
}

#[test]
fn iota_of_a_scalar_along_an_axis_is_zero() {
    let op = Op::Iota {
        shape: vec![],
        dtype: DType::S64,
        axis: Some(0),
    };
    check(&ev(op, &[]), &[], DType::S64, &[0.]);
    let bad = Op::Iota {
        shape: vec![2],
        dtype: DType::S64,
        axis: Some(HUGE),
    };
    assert_eq!(ev_err(bad, &[]), "argument");
}

#[test]
fn random_integers_saturate_and_parameters_must_be_finite() {
    let op = Op::RandomNormal {
        shape: vec![64],
        dtype: DType::S8,
        mean: 0.0,
        std: 1e30,
        seed: 3,
    };
    let got = v(&ev(op, &[]));
    assert!(got.iter().all(|&x| x == -128.0 || x == 127.0), "{got:?}");
    let nan = Op::RandomUniform {
        shape: vec![4],
        dtype: DType::S32,
        min: f64::NAN,
        max: 1.0,
        seed: 0,
    };
    assert_eq!(ev_err(nan, &[]), "argument");
}

#[test]
fn min_divided_by_minus_one_wraps_as_nx_stores_it() {
    for dtype in [DType::S8, DType::S16, DType::S32, DType::S64] {
        let min = -(2f64.powi(dtype.bits() as i32 - 1));
        let a = t(&[min, 7., min], &[3], dtype);
        let b = t(&[-1., -1., 3.], &[3], dtype);
        let q = v(&ev(
            Op::Binary {
                op: Arith::Quotient,
                out: None,
            },
            &[&a, &b],
        ));
        assert_eq!(q[..2], [min, -7.], "{dtype:?}");
        let r = v(&ev(
            Op::Binary {
                op: Arith::Remainder,
                out: None,
            },
            &[&a, &b],
        ));
        assert_eq!(r[..2], [0., 0.], "{dtype:?}");
    }
}
