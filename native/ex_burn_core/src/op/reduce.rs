//! Reductions over any set of axes, with `keep_axes`: sum, product, max, min, all, any,
//! argmax and argmin (with tie-breaking). Empty reductions give the identity element.

use super::util;
use super::{ArgKind, Op, ReduceKind, TieBreak};
use crate::dtype::Kind;
use crate::kernels::{Fold, Level, RowOperand, RowRegion, RowStep, Src};
use crate::tensor::{Prim, B};
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn::tensor::IntDType;

pub(super) fn eval(op: &Op, x: &Tensor) -> Result<Tensor> {
    match op {
        Op::Reduce {
            kind,
            axes,
            keep_axes,
            out,
        } => {
            let out = match kind {
                ReduceKind::Sum | ReduceKind::Product => out.unwrap_or(x.dtype().to_aggregate()),
                ReduceKind::Max | ReduceKind::Min => x.dtype(),
                ReduceKind::All | ReduceKind::Any => DType::U8,
            };
            reduce(*kind, x, axes, *keep_axes, out)
        }
        Op::Arg {
            kind,
            axis,
            keep_axis,
            tie_break,
            out,
        } => arg(
            x,
            *axis,
            *keep_axis,
            *tie_break,
            out.unwrap_or(DType::S64),
            *kind == ArgKind::Max,
        ),
        other => Err(Error::Unsupported(format!(
            "{} is not a reduction",
            other.name()
        ))),
    }
}

fn result_shape(shape: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keep) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

fn identity(red: ReduceKind, dtype: DType) -> Scalar {
    match red {
        ReduceKind::Sum | ReduceKind::Any => Scalar::I(0),
        ReduceKind::Product | ReduceKind::All => Scalar::I(1),
        ReduceKind::Max if dtype.is_float() => Scalar::NegInfinity,
        ReduceKind::Min if dtype.is_float() => Scalar::Infinity,
        ReduceKind::Max => util::extreme(dtype, false),
        ReduceKind::Min => util::extreme(dtype, true),
    }
}

/// `shape` with each run of adjacent `axes` (sorted) merged into one axis, and the merged
/// axes' positions.
fn merge_adjacent(shape: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let (mut merged, mut at) = (Vec::with_capacity(shape.len()), Vec::new());
    let mut i = 0;
    while i < shape.len() {
        if axes.contains(&i) {
            at.push(merged.len());
            let mut n = 1;
            while i < shape.len() && axes.contains(&i) {
                n *= shape[i];
                i += 1;
            }
            merged.push(n);
        } else {
            merged.push(shape[i]);
            i += 1;
        }
    }
    (merged, at)
}

fn reduce(
    red: ReduceKind,
    x: &Tensor,
    axes: &Option<Vec<usize>>,
    keep: bool,
    out: DType,
) -> Result<Tensor> {
    let axes = util::axes_sorted(axes, x.rank())?;
    let shape = result_shape(x.shape(), &axes, keep);
    if x.numel() == 0 {
        return util::full(&shape, out, identity(red, out), &x.dispatch_device());
    }
    if axes.is_empty() {
        return match red {
            ReduceKind::All | ReduceKind::Any => Ok(x.to_bool()),
            // Nx sums a scalar from 0, so -0.0 gives +0.0 (adding +0.0 changes nothing else)
            ReduceKind::Sum if x.rank() == 0 && out.is_float() => {
                let zero = util::full(&[], out, Scalar::F(0.0), &x.dispatch_device())?;
                let add = Op::Binary {
                    op: super::Arith::Add,
                    out: Some(out),
                };
                super::eval(&add, &[x.cast(out)?, zero], x.device())?
                    .pop()
                    .ok_or_else(|| Error::Execution("sum gave no result".into()))
            }
            _ => x.cast(out),
        };
    }
    if matches!(red, ReduceKind::All | ReduceKind::Any) {
        let mut p = x.bool_prim();
        for &a in &axes {
            p = if red == ReduceKind::All {
                B::bool_all_dim(p, a)
            } else {
                B::bool_any_dim(p, a)
            };
        }
        return Ok(util::bool_tensor(p, shape));
    }
    if red == ReduceKind::Sum && out == DType::F32 && axes == (0..axes.len()).collect::<Vec<_>>() {
        // over leading axes (a bias gradient): a device kernel where one applies
        if let Some(k) = x.kernels() {
            if let Some(p) = k.leading_sum(x.operand(), axes.len())? {
                let rest = x.shape()[axes.len()..].to_vec();
                return Tensor::from_kernel(p, rest).reshape(shape);
            }
        }
    }
    if red == ReduceKind::Sum && out == DType::F32 {
        // over axes on both sides of a run of kept ones (batch-norm statistics)
        let first = (0..x.rank()).find(|a| !axes.contains(a)).unwrap_or(0);
        let end = (first..x.rank())
            .find(|a| axes.contains(a))
            .unwrap_or(x.rank());
        let around = first > 0 && end < x.rank() && axes.len() == x.rank() - (end - first);
        if let (true, Some(k)) = (around, x.kernels()) {
            if let Some(p) = k.sum_around(x.operand(), first..end)? {
                let rest = x.shape()[first..end].to_vec();
                return Tensor::from_kernel(p, rest).reshape(shape);
            }
        }
    }
    if red == ReduceKind::Sum && super::sum32::applies(x, out) {
        return super::sum32::sum(x, &axes, shape);
    }
    if red == ReduceKind::Sum
        && out == DType::F32
        && super::wide::gpu_f32(x)
        && x.numel() <= super::wide::SMALL
    {
        let axes = Some(axes);
        return super::wide::in_f64(&[x], |w| reduce(red, &w[0], &axes, keep, DType::F64));
    }
    let t = x.cast(out)?;
    if matches!(red, ReduceKind::Max | ReduceKind::Min) && out == DType::F32 {
        if let Some(r) = row_extremum(&t, &axes, red == ReduceKind::Max, &shape)? {
            return Ok(r);
        }
    }
    let kind = t.kind();
    let mut p: Prim = t.prim();
    if axes.len() == x.rank() && matches!(red, ReduceKind::Sum | ReduceKind::Product) {
        p = match (kind, red) {
            (Kind::Float, ReduceKind::Sum) => B::float_sum(p),
            (Kind::Float, _) => B::float_prod(p),
            (_, ReduceKind::Sum) => B::int_sum(p),
            _ => B::int_prod(p),
        };
        return Ok(Tensor::from_prim(p, kind, shape));
    }
    // Adjacent reduced axes as one (a reshape, which only changes metadata on contiguous
    // data): one kernel launch per run of adjacent axes instead of one per axis. Float sums
    // and products then add in another order, so the CPU (whose f32 sums are f64 sums, and
    // whose results the conformance suites pin) keeps reducing axis by axis.
    let reduced = axes.clone();
    let exact = !(kind == Kind::Float && matches!(red, ReduceKind::Sum | ReduceKind::Product));
    let axes = if exact || !matches!(x.dispatch_device(), burn::DispatchDevice::Flex(_)) {
        let (merged_shape, merged_axes) = merge_adjacent(t.shape(), &axes);
        if merged_axes.len() < axes.len() {
            p = match kind {
                Kind::Float => B::float_reshape(p, merged_shape.into()),
                _ => B::int_reshape(p, merged_shape.into()),
            };
        }
        merged_axes
    } else {
        axes
    };
    for &a in &axes {
        p = match (kind, red) {
            (Kind::Float, ReduceKind::Sum) => B::float_sum_dim(p, a),
            (Kind::Float, ReduceKind::Product) => B::float_prod_dim(p, a),
            (Kind::Float, ReduceKind::Max) => B::float_max_dim(p, a),
            (Kind::Float, _) => B::float_min_dim(p, a),
            (_, ReduceKind::Sum) => B::int_sum_dim(p, a),
            (_, ReduceKind::Product) => B::int_prod_dim(p, a),
            (_, ReduceKind::Max) => B::int_max_dim(p, a),
            (_, _) => B::int_min_dim(p, a),
        };
    }
    let result = Tensor::from_prim(p, kind, shape);
    if kind == Kind::Float
        && matches!(red, ReduceKind::Max | ReduceKind::Min)
        && !x.device().is_host()
    {
        return with_nan(&t, &reduced, keep, result);
    }
    Ok(result)
}

/// The maximum or minimum of f32 `t` over trailing `axes` as one row-region kernel of the
/// device's (one fold over each row: NaN wins, as Nx's), of `shape`; `None` where the device
/// has no such kernel or the rows are longer than it takes.
fn row_extremum(t: &Tensor, axes: &[usize], max: bool, shape: &[usize]) -> Result<Option<Tensor>> {
    let (Some(k), Some(&lead)) = (t.kernels(), axes.first()) else {
        return Ok(None);
    };
    let rank = t.rank();
    if lead == 0
        || axes.len() != rank - lead
        || axes.iter().enumerate().any(|(j, &a)| a != lead + j)
    {
        return Ok(None);
    }
    let (rows, cols) = (
        t.shape()[..lead].iter().product::<usize>(),
        t.shape()[lead..].iter().product::<usize>(),
    );
    if cols > k.row_limit() {
        return Ok(None);
    }
    let fold = if max { Fold::Max } else { Fold::Min };
    let shapes = [shape.to_vec()];
    let region = RowRegion {
        steps: &[RowStep::Fold(fold, Src::Ext(0))],
        levels: &[Level::Row],
        shapes: &shapes,
        operands: vec![RowOperand {
            operand: t.operand(),
            level: Level::Full,
            donated: false,
        }],
        full: t.shape(),
        rows,
        cols,
        written: &[0],
    };
    Ok(k.row_region(&region)?
        .and_then(|mut r| r.pop())
        .map(|p| Tensor::from_kernel(p, shape.to_vec())))
}

/// `result`, a GPU maximum or minimum of `t` over `axes`, NaN wherever the values reduced
/// held a NaN, as Nx's are: the GPU backends' `max`/`min` skip NaN (CUDA's `fmaxf`), and a
/// row with a NaN came back as the largest of its other values.
fn with_nan(t: &Tensor, axes: &[usize], keep: bool, result: Tensor) -> Result<Tensor> {
    let nan = super::binary::compare(super::Compare::NotEqual, t, t)?;
    let any = reduce(ReduceKind::Any, &nan, &Some(axes.to_vec()), keep, DType::U8)?;
    let nans = util::full(
        result.shape(),
        result.dtype(),
        Scalar::Nan,
        &t.dispatch_device(),
    )?;
    Ok(util::select(&any, &nans, &result))
}

fn arg(
    x: &Tensor,
    axis: Option<usize>,
    keep: bool,
    tie: TieBreak,
    out: DType,
    max: bool,
) -> Result<Tensor> {
    if !out.is_int() {
        return Err(Error::Dtype(format!(
            "index type must be an integer type, got {out}"
        )));
    }
    if x.numel() == 0 {
        return Err(Error::Shape(format!(
            "cannot take the arg{} of an empty tensor",
            if max { "max" } else { "min" }
        )));
    }
    let (t, axis, shape) = match axis {
        None => {
            let n = x.numel();
            let shape = if keep { vec![1; x.rank()] } else { vec![] };
            (x.reshape(vec![n])?, 0, shape)
        }
        Some(a) => {
            util::axis(a, x.rank())?;
            (x.clone(), a, result_shape(x.shape(), &[a], keep))
        }
    };
    let t = order_preserving_signed(&t)?;
    let len = t.shape().get(axis).copied().unwrap_or(1);
    let t = if tie == TieBreak::High {
        util::flip(&t, &[axis])
    } else {
        t
    };
    // Indices are computed in s64 (flipping them needs a signed type) and cast at the end.
    let s64 = IntDType::I64;
    let p = t.prim();
    let mut idx = match (t.kind(), max) {
        (Kind::Float, true) => B::float_argmax(p, axis, s64),
        (Kind::Float, false) => B::float_argmin(p, axis, s64),
        (_, true) => B::int_cast(B::int_argmax(p, axis), s64),
        (_, false) => B::int_cast(B::int_argmin(p, axis), s64),
    };
    if t.kind() == Kind::Float {
        // Burn's kernels skip NaN; Nx answers the position of the last NaN (in the original
        // order), whichever the tie break.
        let bd = t.bool_dtype();
        let nan = B::bool_into_int(B::float_is_nan(t.prim(), bd), s64);
        let any = B::int_greater_elem(B::int_max_dim(nan.clone(), axis), 0i64.into(), bd);
        let last_nan = if tie == TieBreak::High {
            // `t` is flipped: the last NaN of the original is the first here.
            B::int_cast(B::int_argmax(nan, axis), s64)
        } else {
            let flipped = util::flip(
                &Tensor::from_prim(nan, Kind::Int, t.shape().to_vec()),
                &[axis],
            );
            let first = B::int_cast(B::int_argmax(flipped.prim(), axis), s64);
            B::int_add_scalar(B::int_neg(first), ((len - 1) as i64).into())
        };
        idx = B::int_mask_where(idx, any, last_nan);
    }
    if tie == TieBreak::High {
        // index in the original order = len - 1 - index in the flipped order
        idx = B::int_add_scalar(B::int_neg(idx), ((len - 1) as i64).into());
    }
    let idx = B::int_cast(idx, out.int_dtype()?);
    Ok(Tensor::from_prim(idx, Kind::Int, shape))
}

/// Signed integers compare like `t` does (the CPU backend's argmax/argmin take floats and
/// signed integers only): booleans and u8..u32 widen to s64; u64 is reinterpreted as s64 with
/// the sign bit flipped, which keeps the unsigned order.
fn order_preserving_signed(t: &Tensor) -> Result<Tensor> {
    match t.dtype() {
        _ if t.kind() == Kind::Float => Ok(t.clone()),
        DType::U64 => {
            let s = t.cast(DType::S64)?;
            let p = B::bitwise_xor_scalar(s.prim(), i64::MIN.into());
            Ok(Tensor::from_prim(p, Kind::Int, s.shape().to_vec()))
        }
        d if d.is_unsigned_int() || t.kind() == Kind::Bool => t.cast(DType::S64),
        _ => Ok(t.clone()),
    }
}
