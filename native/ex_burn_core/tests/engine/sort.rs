use super::common::*;
use ex_burn_core::{DType, Op};

#[test]
fn sort_both_directions() {
    let x = f(&[3., 1., 2., 5., 4., 0.], &[2, 3]);
    check(
        &ev(
            Op::Sort {
                axis: 1,
                descending: false,
            },
            &[&x],
        ),
        &[2, 3],
        DType::F32,
        &[1., 2., 3., 0., 4., 5.],
    );
    check(
        &ev(
            Op::Sort {
                axis: 0,
                descending: true,
            },
            &[&x],
        ),
        &[2, 3],
        DType::F32,
        &[5., 4., 2., 3., 1., 0.],
    );
}

#[test]
fn argsort_is_stable_in_both_directions() {
    let x = s(&[2., 1., 2., 1., 2., 0., 1.], &[7]);
    check(
        &ev(
            Op::Argsort {
                axis: 0,
                descending: false,
                out: None,
            },
            &[&x],
        ),
        &[7],
        DType::S64,
        &[5., 1., 3., 6., 0., 2., 4.],
    );
    check(
        &ev(
            Op::Argsort {
                axis: 0,
                descending: true,
                out: None,
            },
            &[&x],
        ),
        &[7],
        DType::S64,
        &[0., 2., 4., 1., 3., 6., 5.],
    );
    // many ties, several rows
    let n = 64;
    let vals: Vec<f64> = (0..2 * n).map(|i| (i % 3) as f64).collect();
    let r = v(&ev(
        Op::Argsort {
            axis: 1,
            descending: false,
            out: Some(DType::S32),
        },
        &[&f(&vals, &[2, n])],
    ));
    for (row, vals) in r.chunks(n).zip(vals.chunks(n)) {
        let mut expect: Vec<f64> = Vec::new();
        for key in 0..3 {
            expect.extend((0..n).filter(|&i| vals[i] == key as f64).map(|i| i as f64));
        }
        assert_eq!(row, expect.as_slice());
    }
}

#[test]
fn cumulative_ops_and_reverse() {
    let x = s(&[1., 2., 3., 4.], &[4]);
    check(
        &ev(
            Op::Cumulative {
                kind: CumulativeKind::Sum,
                axis: 0,
                reverse: false,
            },
            &[&x],
        ),
        &[4],
        DType::S64,
        &[1., 3., 6., 10.],
    );
    check(
        &ev(
            Op::Cumulative {
                kind: CumulativeKind::Sum,
                axis: 0,
                reverse: true,
            },
            &[&x],
        ),
        &[4],
        DType::S64,
        &[10., 9., 7., 4.],
    );
    check(
        &ev(
            Op::Cumulative {
                kind: CumulativeKind::Product,
                axis: 0,
                reverse: false,
            },
            &[&x],
        ),
        &[4],
        DType::S64,
        &[1., 2., 6., 24.],
    );
    let y = f(&[3., 1., 4., 1., 5.], &[5]);
    check(
        &ev(
            Op::Cumulative {
                kind: CumulativeKind::Max,
                axis: 0,
                reverse: false,
            },
            &[&y],
        ),
        &[5],
        DType::F32,
        &[3., 3., 4., 4., 5.],
    );
    check(
        &ev(
            Op::Cumulative {
                kind: CumulativeKind::Min,
                axis: 0,
                reverse: true,
            },
            &[&y],
        ),
        &[5],
        DType::F32,
        &[1., 1., 1., 1., 5.],
    );
    let m = f(&[1., 2., 3., 4.], &[2, 2]);
    check(
        &ev(
            Op::Cumulative {
                kind: CumulativeKind::Sum,
                axis: 0,
                reverse: false,
            },
            &[&m],
        ),
        &[2, 2],
        DType::F32,
        &[1., 2., 4., 6.],
    );
}
