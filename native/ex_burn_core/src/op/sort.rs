//! Sorting (stable argsort, ascending or descending) and cumulative scans (with `reverse`).
//!
//! Burn's sorts are not stable, so `argsort` repairs ties: after an unstable sort it numbers
//! the runs of equal values and re-sorts by (run, original index), which is unique.

use super::binary;
use super::util;
use super::Compare;
use super::{CumulativeKind, Op};
use crate::dtype::Kind;
use crate::tensor::B;
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{FloatTensorOps, IntTensorOps};
use burn::tensor::IntDType;

pub(super) fn eval(op: &Op, x: &Tensor) -> Result<Tensor> {
    let x = if x.kind() == Kind::Bool {
        x.cast(DType::U8)?
    } else {
        x.clone()
    };
    match op {
        Op::Sort { axis, descending } => sort(&x, *axis, *descending),
        Op::Argsort {
            axis,
            descending,
            out,
        } => argsort(&x, *axis, *descending)?.cast(out.unwrap_or(DType::S64)),
        Op::Cumulative {
            kind,
            axis,
            reverse,
        } => scan(&x, *axis, *reverse, *kind),
        other => Err(Error::Unsupported(format!(
            "{} is not a sort or scan op",
            other.name()
        ))),
    }
}

fn sort(x: &Tensor, axis: usize, desc: bool) -> Result<Tensor> {
    util::axis(axis, x.rank())?;
    if x.numel() == 0 || x.rank() == 0 {
        return Ok(x.clone());
    }
    let prim = match x.kind() {
        Kind::Float => B::float_sort(x.prim(), axis, desc),
        _ => B::int_sort(x.prim(), axis, desc),
    };
    Ok(Tensor::from_prim(prim, x.kind(), x.shape().to_vec()))
}

/// Stable argsort (ties keep their original order in both directions), as s64.
pub(crate) fn argsort(x: &Tensor, axis: usize, desc: bool) -> Result<Tensor> {
    util::axis(axis, x.rank())?;
    let shape = x.shape().to_vec();
    if x.numel() == 0 || x.rank() == 0 {
        return util::full(&shape, DType::S64, Scalar::I(0), &x.dispatch_device());
    }
    let n = shape[axis];
    let (vals, idx) = match x.kind() {
        Kind::Float => B::float_sort_with_indices(x.prim(), axis, desc, IntDType::I64),
        _ => B::int_sort_with_indices(x.prim(), axis, desc),
    };
    let vals = Tensor::from_prim(vals, x.kind(), shape.clone());
    let idx = Tensor::from_prim(idx, Kind::Int, shape.clone()).cast(DType::S64)?;
    if n <= 1 {
        return Ok(idx);
    }
    // Run numbers: 0 for the first element, +1 at every change of value along the axis.
    let ones = vec![1; shape.len()];
    let mut lens = shape.clone();
    lens[axis] = n - 1;
    let zeros = vec![0; shape.len()];
    let mut from1 = zeros.clone();
    from1[axis] = 1;
    let prev = super::shape::slice_static(&vals, &zeros, &lens, &ones)?;
    let cur = super::shape::slice_static(&vals, &from1, &lens, &ones)?;
    let mut change = binary::compare_same(Compare::NotEqual, &cur, &prev);
    if x.kind() == Kind::Float {
        let both_nan = binary::bool_op(
            super::Arith::BitwiseAnd,
            &util::bool_tensor(B::float_is_nan(cur.prim(), cur.bool_dtype()), lens.clone()),
            &util::bool_tensor(
                B::float_is_nan(prev.prim(), prev.bool_dtype()),
                lens.clone(),
            ),
        );
        let same_nan = util::bool_tensor(
            <B as burn::tensor::ops::BoolTensorOps<B>>::bool_not(both_nan.prim()),
            lens.clone(),
        );
        change = binary::bool_op(super::Arith::BitwiseAnd, &change, &same_nan);
    }
    let mut first = shape.clone();
    first[axis] = 1;
    let head = util::full(&first, DType::S64, Scalar::I(0), &x.dispatch_device())?;
    let steps = util::cat(&[head, change.cast(DType::S64)?], axis);
    let runs = Tensor::from_prim(B::int_cumsum(steps.prim(), axis), Kind::Int, shape.clone());
    let key = B::int_add(
        B::int_mul_scalar(runs.prim(), (n as i64).into()),
        idx.prim(),
    );
    let order = B::int_argsort(key, axis, false);
    let order = Tensor::from_prim(order, Kind::Int, shape.clone()).cast(DType::S64)?;
    let res = B::int_gather(axis, idx.prim(), order.prim());
    Ok(Tensor::from_prim(res, Kind::Int, shape))
}

fn scan(x: &Tensor, axis: usize, reverse: bool, which: CumulativeKind) -> Result<Tensor> {
    util::axis(axis, x.rank())?;
    if x.numel() == 0 || x.rank() == 0 {
        return Ok(x.clone());
    }
    let t = if reverse {
        util::flip(x, &[axis])
    } else {
        x.clone()
    };
    let p = t.prim();
    let prim = match (t.kind(), which) {
        (Kind::Float, CumulativeKind::Sum) => B::float_cumsum(p, axis),
        (Kind::Float, CumulativeKind::Product) => B::float_cumprod(p, axis),
        (Kind::Float, CumulativeKind::Max) => B::float_cummax(p, axis),
        (Kind::Float, CumulativeKind::Min) => B::float_cummin(p, axis),
        (_, CumulativeKind::Sum) => B::int_cumsum(p, axis),
        (_, CumulativeKind::Product) => B::int_cumprod(p, axis),
        (_, CumulativeKind::Max) => B::int_cummax(p, axis),
        (_, CumulativeKind::Min) => B::int_cummin(p, axis),
    };
    let r = Tensor::from_prim(prim, t.kind(), t.shape().to_vec());
    Ok(if reverse { util::flip(&r, &[axis]) } else { r })
}
