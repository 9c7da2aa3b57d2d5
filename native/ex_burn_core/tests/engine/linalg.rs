use super::common::*;
use ex_burn_core::op::Transform;
use ex_burn_core::{DType, Op};

fn solve(lower: bool, left_side: bool, transform_a: Transform) -> Op {
    Op::TriangularSolve {
        lower,
        left_side,
        transform_a,
    }
}

#[test]
fn lower_left_side_solve() {
    let a = f(&[1., 0., 0., 1., 1., 0., 1., 2., 1.], &[3, 3]);
    let b = f(&[0., 2., 3., 0., 0., 0.], &[3, 2]);
    let x = ev(solve(true, true, Transform::None), &[&a, &b]);
    check(&x, &[3, 2], DType::F32, &[0., 2., 3., -2., -6., 2.]);
}

#[test]
fn batched_vector_right_hand_sides() {
    let a = f(&[1., 0., 2., 3., 4., 0., 5., 6.], &[2, 2, 2]);
    let b = f(&[2., -1., 3., 7.], &[2, 2]);
    let x = ev(solve(true, true, Transform::None), &[&a, &b]);
    close(&x, &[2., -5. / 3., 0.75, 0.5416667], 1e-6);
}

#[test]
fn upper_transposed_and_right_side_variants_agree_with_products() {
    if !f64_on_device() {
        return;
    }
    // a upper triangular; check a x = b, a^T x = b and x a = b by multiplying back
    let a = t(&[2., 1., 3., 0., 1., 4., 0., 0., 5.], &[3, 3], DType::F64);
    let b = t(&[1., 2., 3.], &[3], DType::F64);
    let x = v(&ev(solve(false, true, Transform::None), &[&a, &b]));
    let av = v(&a);
    let row = |i: usize| (0..3).map(|j| av[i * 3 + j] * x[j]).sum::<f64>();
    for (i, want) in [1., 2., 3.].iter().enumerate() {
        assert!((row(i) - want).abs() < 1e-12, "a x = b row {i}");
    }
    // a^T x = b, with a^T lower triangular
    let xt = v(&ev(solve(false, true, Transform::Transpose), &[&a, &b]));
    for i in 0..3 {
        let got: f64 = (0..3).map(|j| av[j * 3 + i] * xt[j]).sum();
        assert!((got - [1., 2., 3.][i]).abs() < 1e-12, "a^T x = b row {i}");
    }
    // x a = b for a row vector x
    let xr = v(&ev(solve(false, false, Transform::None), &[&a, &b]));
    for j in 0..3 {
        let got: f64 = (0..3).map(|i| xr[i] * av[i * 3 + j]).sum();
        assert!((got - [1., 2., 3.][j]).abs() < 1e-12, "x a = b column {j}");
    }
}

#[test]
fn integer_operands_and_non_square_matrices_are_refused() {
    let a = s(&[1., 0., 1., 1.], &[2, 2]);
    assert_eq!(
        ev_err(solve(true, true, Transform::None), &[&a, &a]),
        "dtype"
    );
    let rect = f(&[1., 0., 0., 1., 1., 0.], &[2, 3]);
    let b = f(&[1., 1.], &[2]);
    assert_eq!(
        ev_err(solve(true, true, Transform::None), &[&rect, &b]),
        "shape"
    );
}
