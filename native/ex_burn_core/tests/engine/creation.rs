use super::common::*;
use ex_burn_core::{DType, Op, Scalar};

#[test]
fn iota_flat_and_along_an_axis() {
    let a = ev(
        Op::Iota {
            shape: vec![2, 3],
            dtype: DType::S32,
            axis: None,
        },
        &[],
    );
    check(&a, &[2, 3], DType::S32, &[0., 1., 2., 3., 4., 5.]);
    let b = ev(
        Op::Iota {
            shape: vec![2, 3],
            dtype: DType::F32,
            axis: Some(0),
        },
        &[],
    );
    check(&b, &[2, 3], DType::F32, &[0., 0., 0., 1., 1., 1.]);
    let c = ev(
        Op::Iota {
            shape: vec![2, 3],
            dtype: DType::U8,
            axis: Some(1),
        },
        &[],
    );
    check(&c, &[2, 3], DType::U8, &[0., 1., 2., 0., 1., 2.]);
    let e = ev(
        Op::Iota {
            shape: vec![0],
            dtype: DType::S64,
            axis: None,
        },
        &[],
    );
    check(&e, &[0], DType::S64, &[]);
    let r0 = ev(
        Op::Iota {
            shape: vec![],
            dtype: DType::S64,
            axis: None,
        },
        &[],
    );
    check(&r0, &[], DType::S64, &[0.]);
}

#[test]
fn iota_wraps_in_narrow_types() {
    let a = ev(
        Op::Iota {
            shape: vec![300],
            dtype: DType::U8,
            axis: None,
        },
        &[],
    );
    assert_eq!(v(&a)[299], 43.0);
}

#[test]
fn eye_batched() {
    let e = ev(
        Op::Eye {
            shape: vec![2, 2, 3],
            dtype: wide_float(),
        },
        &[],
    );
    check(
        &e,
        &[2, 2, 3],
        wide_float(),
        &[1., 0., 0., 0., 1., 0., 1., 0., 0., 0., 1., 0.],
    );
    assert_eq!(
        ex_burn_core::eval(
            &Op::Eye {
                shape: vec![3],
                dtype: DType::F32
            },
            &[],
            dev()
        )
        .unwrap_err()
        .kind(),
        "shape"
    );
}

#[test]
fn full_of_every_kind() {
    check(
        &ev(
            Op::Full {
                shape: vec![2],
                dtype: DType::F16,
                value: Scalar::F(1.5),
            },
            &[],
        ),
        &[2],
        DType::F16,
        &[1.5, 1.5],
    );
    check(
        &ev(
            Op::Full {
                shape: vec![2],
                dtype: DType::S8,
                value: Scalar::I(-3),
            },
            &[],
        ),
        &[2],
        DType::S8,
        &[-3., -3.],
    );
    check(
        &ev(
            Op::Full {
                shape: vec![],
                dtype: DType::F32,
                value: Scalar::Nan,
            },
            &[],
        ),
        &[],
        DType::F32,
        &[f64::NAN],
    );
    let big = ev(
        Op::Full {
            shape: vec![1],
            dtype: DType::U64,
            value: Scalar::U(u64::MAX),
        },
        &[],
    );
    assert_eq!(big.to_bytes(None).unwrap(), vec![255u8; 8]);
}

#[test]
fn random_is_deterministic_and_in_range() {
    let op = |seed| Op::RandomUniform {
        shape: vec![1000],
        dtype: DType::F32,
        min: -2.0,
        max: 3.0,
        seed,
    };
    let a = v(&ev(op(7), &[]));
    assert_eq!(a, v(&ev(op(7), &[])));
    assert_ne!(a, v(&ev(op(8), &[])));
    assert!(a.iter().all(|&x| (-2.0..3.0).contains(&x)));
    let mean = a.iter().sum::<f64>() / 1000.0;
    assert!((mean - 0.5).abs() < 0.2, "mean {mean}");

    let n = v(&ev(
        Op::RandomNormal {
            shape: vec![4000],
            dtype: wide_float(),
            mean: 1.0,
            std: 2.0,
            seed: 1,
        },
        &[],
    ));
    let m = n.iter().sum::<f64>() / 4000.0;
    let var = n.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / 4000.0;
    assert!(
        (m - 1.0).abs() < 0.15 && (var.sqrt() - 2.0).abs() < 0.15,
        "mean {m} std {}",
        var.sqrt()
    );

    let ints = v(&ev(
        Op::RandomUniform {
            shape: vec![500],
            dtype: DType::S32,
            min: -3.0,
            max: 3.0,
            seed: 2,
        },
        &[],
    ));
    assert!(ints
        .iter()
        .all(|&x| (-3.0..3.0).contains(&x) && x.fract() == 0.0));
    assert!(ints.contains(&-3.0) && ints.contains(&2.0));
}
