//! Ops Burn's CPU backend implements for some types only, computed exactly in a wider type.

use super::common::*;
use ex_burn_core::op::TieBreak;
use ex_burn_core::{DType, Op};

#[test]
fn argmax_and_argmin_of_unsigned_integers() {
    for dtype in [DType::U8, DType::U16, DType::U32, DType::U64] {
        let x = t(&[3., 200., 7., 200., 0.], &[5], dtype);
        let max = Op::Arg {
            kind: ArgKind::Max,
            axis: None,
            keep_axis: false,
            tie_break: TieBreak::High,
            out: Some(DType::S64),
        };
        check(&ev(max, &[&x]), &[], DType::S64, &[3.]);
        let min = Op::Arg {
            kind: ArgKind::Min,
            axis: Some(0),
            keep_axis: true,
            tie_break: TieBreak::Low,
            out: None,
        };
        check(&ev(min, &[&x]), &[1], DType::S64, &[4.]);
    }
    // values above i64::MAX keep their unsigned order
    let big = ex_burn_core::Tensor::from_bytes(
        &[u64::MAX.to_le_bytes(), 1u64.to_le_bytes()].concat(),
        &[2],
        DType::U64,
        dev(),
    )
    .unwrap();
    let max = Op::Arg {
        kind: ArgKind::Max,
        axis: None,
        keep_axis: false,
        tie_break: TieBreak::Low,
        out: None,
    };
    check(&ev(max, &[&big]), &[], DType::S64, &[0.]);
}

#[test]
fn integer_dot_products_of_narrow_types_wrap_like_nx() {
    for dtype in [
        DType::S8,
        DType::U8,
        DType::S16,
        DType::U16,
        DType::U32,
        DType::U64,
    ] {
        let a = t(&[100., 100., 1., 2.], &[2, 2], dtype);
        let b = t(&[2., 0., 1., 1.], &[2, 2], dtype);
        let out = ev(matmul_op(Default::default()), &[&a, &b]);
        // [[300, 100], [4, 2]], wrapped to the type
        let wrap = |v: f64| match dtype {
            DType::S8 => v as i64 as i8 as f64,
            DType::U8 => v as i64 as u8 as f64,
            _ => v,
        };
        check(&out, &[2, 2], dtype, &[wrap(300.), wrap(100.), 4., 2.]);
    }
}
