use super::common::*;
use ex_burn_core::{DType, Op};

fn scatter_max(strides: Vec<usize>) -> Op {
    Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![2, 3],
        strides: Some(strides),
        padding: None,
    }
}

#[test]
fn window_scatter_max_adds_source_at_each_window_maximum() {
    let x = s(
        &[
            7., 2., 5., 3., 10., 2., 3., 8., 9., 3., 4., 2., 1., 5., 7., 5., 6., 1., 0., 6., 2.,
            7., 2., 8.,
        ],
        &[4, 6],
    );
    let src = s(&[2., 6., 3., 1.], &[2, 2]);
    let init = s(&[0.], &[]);
    let out = ev(scatter_max(vec![2, 3]), &[&x, &src, &init]);
    #[rustfmt::skip]
    let want = [
        0., 0., 0., 0., 6., 0.,
        0., 0., 2., 0., 0., 0.,
        0., 0., 3., 0., 0., 0.,
        0., 0., 0., 0., 0., 1.,
    ];
    check(&out, &[4, 6], DType::S64, &want);
}

#[test]
fn overlapping_windows_accumulate_and_init_fills_the_rest() {
    let x = f(&[1., 5., 2., 4.], &[4]);
    let src = f(&[10., 20., 30.], &[3]);
    let init = f(&[0.5], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![2],
        strides: None,
        padding: None,
    };
    // windows [1,5] [5,2] [2,4] pick 5, 5, 4
    check(
        &ev(op, &[&x, &src, &init]),
        &[4],
        DType::F32,
        &[0.5, 30.5, 0.5, 30.5],
    );
}

#[test]
fn window_scatter_min_breaks_ties_towards_the_last_element() {
    let x = f(&[3., 1., 1., 2.], &[4]);
    let src = f(&[7.], &[1]);
    let init = f(&[0.], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Min,
        window_dims: vec![4],
        strides: None,
        padding: None,
    };
    check(
        &ev(op, &[&x, &src, &init]),
        &[4],
        DType::F32,
        &[0., 0., 7., 0.],
    );
}

#[test]
fn padding_is_filled_with_init_and_cropped() {
    let x = f(&[-1., -2.], &[2]);
    let src = f(&[5., 6.], &[2]);
    let init = f(&[0.], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![2],
        strides: Some(vec![1]),
        padding: Some(vec![(1, 0)]),
    };
    // padded [0, -1, -2]: the first window picks the padding (dropped), the second picks -1
    check(&ev(op, &[&x, &src, &init]), &[2], DType::F32, &[6., 0.]);
}

#[test]
fn a_source_of_the_wrong_shape_is_refused() {
    let x = f(&[1., 2., 3.], &[3]);
    let src = f(&[1.], &[1]);
    let init = f(&[0.], &[]);
    let op = Op::WindowScatter {
        kind: ScatterKind::Max,
        window_dims: vec![2],
        strides: None,
        padding: None,
    };
    assert_eq!(ev_err(op, &[&x, &src, &init]), "shape");
}
