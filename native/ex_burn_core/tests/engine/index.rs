use super::common::*;
use ex_burn_core::{DType, Op};

fn m() -> ex_burn_core::Tensor {
    f(&[1., 2., 3., 4., 5., 6.], &[2, 3])
}

#[test]
fn gather_full_and_partial_indices() {
    let idx = s(&[0., 1., 1., 2.], &[2, 2]);
    check(
        &ev(Op::Gather { axes: vec![0, 1] }, &[&m(), &idx]),
        &[2],
        DType::F32,
        &[2., 6.],
    );
    let rows = s(&[1., 0.], &[2, 1]);
    check(
        &ev(Op::Gather { axes: vec![0] }, &[&m(), &rows]),
        &[2, 3],
        DType::F32,
        &[4., 5., 6., 1., 2., 3.],
    );
    let cols = s(&[2.], &[1, 1]);
    check(
        &ev(Op::Gather { axes: vec![1] }, &[&m(), &cols]),
        &[1, 2],
        DType::F32,
        &[3., 6.],
    );
    // out-of-range indices are refused, as Nx does (never clamped to another element)
    let far = s(&[9., -4.], &[1, 2]);
    assert_eq!(
        ev_err(Op::Gather { axes: vec![0, 1] }, &[&m(), &far]),
        "argument"
    );
    let below = s(&[1., -1.], &[1, 2]);
    assert_eq!(
        ev_err(Op::Gather { axes: vec![0, 1] }, &[&m(), &below]),
        "argument"
    );
    assert_eq!(
        ev_err(Op::Take { axis: 0 }, &[&m(), &s(&[5.], &[1])]),
        "argument"
    );
}

#[test]
fn take_and_take_along_axis() {
    let idx = t(&[2., 0., 2.], &[3], DType::S32);
    check(
        &ev(Op::Take { axis: 1 }, &[&m(), &idx]),
        &[2, 3],
        DType::F32,
        &[3., 1., 3., 6., 4., 6.],
    );
    let idx2 = s(&[1., 1., 0., 0.], &[2, 2]);
    check(
        &ev(Op::Take { axis: 0 }, &[&f(&[10., 20.], &[2]), &idx2]),
        &[2, 2],
        DType::F32,
        &[20., 20., 10., 10.],
    );
    let along = s(&[2., 0., 1., 1.], &[2, 2]);
    check(
        &ev(Op::TakeAlongAxis { axis: 1 }, &[&m(), &along]),
        &[2, 2],
        DType::F32,
        &[3., 1., 5., 5.],
    );
    assert_eq!(
        ev_err(Op::Take { axis: 0 }, &[&m(), &f(&[0.], &[1])]),
        "dtype"
    );
}

#[test]
fn indexed_add_and_put() {
    let z = s(&[0.; 6], &[2, 3]);
    let idx = s(&[0., 1., 1., 2., 0., 1.], &[3, 2]);
    let upd = s(&[5., 7., 1.], &[3]);
    check(
        &ev(
            Op::IndexedAdd {
                axes: vec![0, 1],
                out: None,
            },
            &[&z, &idx, &upd],
        ),
        &[2, 3],
        DType::S64,
        &[0., 6., 0., 0., 0., 7.],
    );
    // repeated indices accumulate in floats too
    check(
        &ev(
            Op::IndexedAdd {
                axes: vec![0, 1],
                out: None,
            },
            &[&f(&[0.; 6], &[2, 3]), &idx, &f(&[5., 7., 1.5], &[3])],
        ),
        &[2, 3],
        DType::F32,
        &[0., 6.5, 0., 0., 0., 7.],
    );
    let put = ev(
        Op::IndexedPut {
            axes: vec![0, 1],
            out: None,
        },
        &[&m(), &s(&[1., 0.], &[1, 2]), &f(&[-1.], &[1])],
    );
    check(&put, &[2, 3], DType::F32, &[1., 2., 3., -1., 5., 6.]);
    // whole-row updates along one axis
    let rows = ev(
        Op::IndexedAdd {
            axes: vec![0],
            out: None,
        },
        &[&m(), &s(&[1.], &[1, 1]), &f(&[10., 10., 10.], &[1, 3])],
    );
    check(&rows, &[2, 3], DType::F32, &[1., 2., 3., 14., 15., 16.]);
    // updates along a non-leading axis
    let cols = ev(
        Op::IndexedPut {
            axes: vec![1],
            out: None,
        },
        &[&m(), &s(&[2.], &[1, 1]), &f(&[0., 0.], &[1, 2])],
    );
    check(&cols, &[2, 3], DType::F32, &[1., 2., 0., 4., 5., 0.]);
    assert_eq!(
        ev_err(
            Op::IndexedAdd {
                axes: vec![0, 1],
                out: None
            },
            &[&z, &idx, &s(&[1.], &[1])]
        ),
        "shape"
    );
}
