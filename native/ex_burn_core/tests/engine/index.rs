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

#[test]
fn indexed_add_of_rows_adds_each_update_in_order() {
    // an embedding's gradient: token rows (many repeated) added into zeros or into values,
    // each element's f32 additions in the order of the updates
    let (rows, cols, m) = (37, 5, 400);
    let mut state = 7u64;
    let ids: Vec<usize> = (0..m)
        .map(|j| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            // a third of the updates hit row 3
            if j % 3 == 0 {
                3
            } else {
                (state >> 33) as usize % rows
            }
        })
        .collect();
    let upd = spread(m * cols, 11, 40, -20);
    let base = spread(rows * cols, 12, 10, -3);
    let ids_t = s(&ids.iter().map(|&i| i as f64).collect::<Vec<_>>(), &[m, 1]);
    let upd_t = f(&upd, &[m, cols]);
    let zeros = ev(
        Op::Broadcast {
            shape: vec![rows, cols],
            axes: Some(vec![]),
        },
        &[&f(&[0.0], &[])],
    );
    for (x, start) in [
        (zeros, vec![0f32; rows * cols]),
        (
            f(&base, &[rows, cols]),
            base.iter().map(|&b| b as f32).collect(),
        ),
    ] {
        let mut want = start;
        for (j, &r) in ids.iter().enumerate() {
            for c in 0..cols {
                want[r * cols + c] += upd[j * cols + c] as f32;
            }
        }
        let got = ev(
            Op::IndexedAdd {
                axes: vec![0],
                out: None,
            },
            &[&x, &ids_t, &upd_t],
        );
        assert_eq!(got.shape(), &[rows, cols]);
        let got: Vec<f32> = v(&got).iter().map(|&g| g as f32).collect();
        assert_eq!(got, want);
    }
}

#[test]
fn indexed_add_of_elements_adds_each_update_in_order() {
    // a loss's gradient at one picked element per sample (indices over every axis), and
    // positions past 2^24 (one axis of 2^24 + 8 elements)
    for (shape, picks) in [
        (
            vec![6, 9],
            vec![[2usize, 3], [0, 0], [2, 3], [5, 8], [2, 3], [1, 4]],
        ),
        (
            vec![1, (1 << 24) + 8],
            vec![[0, (1 << 24) + 7], [0, 5], [0, (1 << 24) + 7], [0, 1 << 24]],
        ),
    ] {
        let m = picks.len();
        let upd = spread(m, 3, 30, -10);
        let cols = shape[1];
        let mut want = std::collections::BTreeMap::new();
        for (j, p) in picks.iter().enumerate() {
            *want.entry(p[0] * cols + p[1]).or_insert(0f32) += upd[j] as f32;
        }
        let zeros = ev(
            Op::Broadcast {
                shape: shape.clone(),
                axes: Some(vec![]),
            },
            &[&f(&[0.0], &[])],
        );
        let idx = s(
            &picks
                .iter()
                .flat_map(|p| [p[0] as f64, p[1] as f64])
                .collect::<Vec<_>>(),
            &[m, 2],
        );
        let got = ev(
            Op::IndexedAdd {
                axes: vec![0, 1],
                out: None,
            },
            &[&zeros, &idx, &f(&upd, &[m])],
        );
        assert_eq!(got.shape(), shape.as_slice());
        let got = v(&got);
        for (k, &g) in got.iter().enumerate() {
            assert_eq!(
                g as f32,
                want.get(&k).copied().unwrap_or(0.0),
                "element {k}"
            );
        }
    }
}
