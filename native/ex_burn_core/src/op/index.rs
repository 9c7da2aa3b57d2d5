//! Indexing ops: gather, take, take_along_axis, indexed_add and indexed_put.
//!
//! Indices out of range are refused (`Error::Argument`, as Nx's `BinaryBackend` raises; one
//! device read of their bounds per op), so a bad index never reads or writes outside a tensor
//! and never silently picks a clamped element. Multi-axis gathers and scatters permute the indexed axes to the front
//! and use Burn's `gather_nd`/`scatter_nd`.

use super::util;
use super::Op;
use crate::dtype::Kind;
use crate::tensor::{Prim, B};
use crate::{DType, Error, Result, Tensor};
use burn::tensor::ops::{FloatTensorOps, IntTensorOps};
use burn::tensor::IndexingUpdateOp;

pub(super) fn eval(op: &Op, x: &[Tensor]) -> Result<Tensor> {
    match op {
        Op::Gather { axes } => gather(&x[0], &x[1], axes),
        Op::Take { axis } => take(&x[0], &x[1], *axis),
        Op::TakeAlongAxis { axis } => take_along_axis(&x[0], &x[1], *axis),
        Op::IndexedAdd { axes, out } => {
            scatter(&x[0], &x[1], &x[2], axes, *out, IndexingUpdateOp::Add)
        }
        Op::IndexedPut { axes, out } => {
            scatter(&x[0], &x[1], &x[2], axes, *out, IndexingUpdateOp::Assign)
        }
        other => Err(Error::Unsupported(format!(
            "{} is not an indexing op",
            other.name()
        ))),
    }
}

fn check_index_type(idx: &Tensor) -> Result<()> {
    if idx.dtype().is_float() {
        return Err(Error::Dtype(format!(
            "indices must be integers, got {}",
            idx.dtype()
        )));
    }
    Ok(())
}

/// Clamps `idx` (any shape) into `[0, max]` where `max` broadcasts against it (aligned on
/// the right); returns s64 indices.
/// `idx` (its last axis indexing `axes` of a tensor of `shape`) as s64, after checking every
/// index is in range (the message is Nx's).
fn in_bounds(idx: &Tensor, axes: &[usize], shape: &[usize]) -> Result<Tensor> {
    let max: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
    let idx = idx.cast(DType::S64)?;
    let k = max.len().max(1);
    let m = idx.numel() / k;
    if m == 0 {
        return Ok(idx);
    }
    let flat = idx.reshape(vec![m, k])?;
    let lo = B::int_min_dim(flat.prim(), 0);
    let hi = B::int_max_dim(flat.prim(), 0);
    let both = Tensor::from_prim(B::int_cat(vec![lo, hi], 0), Kind::Int, vec![2, k]);
    let bytes = both.to_bytes(None)?;
    let v: Vec<i64> = bytes
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        .collect();
    for (j, &size) in max.iter().enumerate() {
        let (lo, hi) = (v[j], v[k + j]);
        if lo < 0 || hi >= size as i64 {
            let bad = if lo < 0 { lo } else { hi };
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            return Err(Error::Argument(format!(
                "index {bad} is out of bounds for axis {} in shape {{{}}}",
                axes[j],
                dims.join(", ")
            )));
        }
    }
    Ok(idx)
}

/// Moves `axes` to the front (in the given order); returns the tensor and the permutation.
fn axes_first(t: &Tensor, axes: &[usize]) -> Result<(Tensor, Vec<usize>)> {
    let mut seen = vec![false; t.rank()];
    for &a in axes {
        if a >= t.rank() || seen[a] {
            return Err(Error::Argument(format!(
                "axes {axes:?} are invalid for rank {}",
                t.rank()
            )));
        }
        seen[a] = true;
    }
    let perm: Vec<usize> = axes
        .iter()
        .copied()
        .chain((0..t.rank()).filter(|a| !axes.contains(a)))
        .collect();
    Ok((util::permute(t, &perm)?, perm))
}

fn as_storable(t: &Tensor) -> Result<Tensor> {
    if t.kind() == Kind::Bool {
        t.cast(DType::U8)
    } else {
        Ok(t.clone())
    }
}

fn gather(x: &Tensor, idx: &Tensor, axes: &[usize]) -> Result<Tensor> {
    check_index_type(idx)?;
    let k = axes.len();
    if idx.rank() == 0 || idx.shape()[idx.rank() - 1] != k {
        return Err(Error::Shape(format!(
            "gather: the last axis of indices {:?} must have size {k} (one per gathered axis)",
            idx.shape()
        )));
    }
    indexable("gather", x)?;
    let (xp, _) = axes_first(&as_storable(x)?, axes)?;
    empty_axis("gather", x, axes, idx.numel() / k.max(1))?;
    let mut shape: Vec<usize> = idx.shape()[..idx.rank() - 1].to_vec();
    shape.extend_from_slice(&xp.shape()[k..]);
    if crate::tensor::numel(&shape) == 0 || x.numel() == 0 {
        return util::full(&shape, x.dtype(), crate::Scalar::I(0), &x.dispatch_device());
    }
    let idx = in_bounds(idx, axes, x.shape())?;
    let prim: Prim = match xp.kind() {
        Kind::Float => B::float_gather_nd(xp.prim(), idx.prim()),
        _ => B::int_gather_nd(xp.prim(), idx.prim()),
    };
    Ok(Tensor::from_prim(prim, xp.kind(), shape))
}

/// Indexed ops read along an axis: scalars have none.
fn indexable(op: &str, x: &Tensor) -> Result<()> {
    if x.rank() == 0 {
        return Err(Error::Shape(format!("{op}: a scalar has no axis to index")));
    }
    Ok(())
}

/// Any index into an axis of size 0 is out of bounds.
fn empty_axis(op: &str, x: &Tensor, axes: &[usize], indices: usize) -> Result<()> {
    match axes.iter().find(|&&a| x.shape()[a] == 0) {
        Some(a) if indices > 0 => Err(Error::Argument(format!(
            "{op}: index out of bounds for axis {a} of size 0 in shape {:?}",
            x.shape()
        ))),
        _ => Ok(()),
    }
}

fn take(x: &Tensor, idx: &Tensor, axis: usize) -> Result<Tensor> {
    check_index_type(idx)?;
    indexable("take", x)?;
    util::axis(axis, x.rank())?;
    empty_axis("take", x, &[axis], idx.numel())?;
    let x = as_storable(x)?;
    let mut shape: Vec<usize> = x.shape()[..axis].to_vec();
    shape.extend_from_slice(idx.shape());
    shape.extend_from_slice(&x.shape()[axis + 1..]);
    if crate::tensor::numel(&shape) == 0 || x.numel() == 0 {
        return util::full(&shape, x.dtype(), crate::Scalar::I(0), &x.dispatch_device());
    }
    let flat = in_bounds(&idx.reshape(vec![idx.numel()])?, &[axis], x.shape())?;
    let prim = match x.kind() {
        Kind::Float => B::float_select(x.prim(), axis, flat.prim()),
        _ => B::int_select(x.prim(), axis, flat.prim()),
    };
    let mut tmp = x.shape().to_vec();
    tmp[axis] = idx.numel();
    Tensor::from_prim(prim, x.kind(), tmp).reshape(shape)
}

fn take_along_axis(x: &Tensor, idx: &Tensor, axis: usize) -> Result<Tensor> {
    check_index_type(idx)?;
    indexable("take_along_axis", x)?;
    util::axis(axis, x.rank())?;
    empty_axis("take_along_axis", x, &[axis], idx.numel())?;
    if idx.rank() != x.rank() {
        return Err(Error::Shape(format!(
            "take_along_axis: indices {:?} must have the rank of the tensor {:?}",
            idx.shape(),
            x.shape()
        )));
    }
    let x = as_storable(x)?;
    let mut xs = x.shape().to_vec();
    let mut is = idx.shape().to_vec();
    for i in 0..x.rank() {
        if i != axis {
            let b = util::broadcast_shape(&[xs[i]], &[is[i]])?[0];
            xs[i] = b;
            is[i] = b;
        }
    }
    let xb = util::broadcast_to(&x, &xs)?;
    let ib = util::broadcast_to(idx, &is)?;
    if ib.numel() == 0 || xb.numel() == 0 {
        return util::full(&is, x.dtype(), crate::Scalar::I(0), &x.dispatch_device());
    }
    let ib = in_bounds(&ib.reshape(vec![ib.numel()])?, &[axis], x.shape())?
        .reshape(ib.shape().to_vec())?;
    let prim = match xb.kind() {
        Kind::Float => B::float_gather(axis, xb.prim(), ib.prim()),
        _ => B::int_gather(axis, xb.prim(), ib.prim()),
    };
    Ok(Tensor::from_prim(prim, xb.kind(), is))
}

fn scatter(
    x: &Tensor,
    idx: &Tensor,
    upd: &Tensor,
    axes: &[usize],
    out: Option<DType>,
    how: IndexingUpdateOp,
) -> Result<Tensor> {
    check_index_type(idx)?;
    let k = axes.len();
    if idx.rank() == 0 || idx.shape()[idx.rank() - 1] != k {
        return Err(Error::Shape(format!(
            "the last axis of indices {:?} must have size {k} (one per indexed axis)",
            idx.shape()
        )));
    }
    let out = out.unwrap_or_else(|| DType::merge(x.dtype(), upd.dtype()));
    let (xp, perm) = axes_first(&x.cast(out)?, axes)?;
    let mut want: Vec<usize> = idx.shape()[..idx.rank() - 1].to_vec();
    want.extend_from_slice(&xp.shape()[k..]);
    if upd.shape() != want.as_slice() {
        return Err(Error::Shape(format!(
            "updates of shape {:?} do not match indices {:?} (expected {want:?})",
            upd.shape(),
            idx.shape()
        )));
    }
    if upd.numel() == 0 || x.numel() == 0 {
        return x.cast(out);
    }
    let idx = in_bounds(idx, axes, x.shape())?;
    let u = upd.cast(out)?;
    let res = if matches!(how, IndexingUpdateOp::Add) {
        add_rows(&xp, &idx, &u, k)?
    } else {
        let prim = match xp.kind() {
            Kind::Float => B::float_scatter_nd(xp.prim(), idx.prim(), u.prim(), how),
            _ => B::int_scatter_nd(xp.prim(), idx.prim(), u.prim(), how),
        };
        Tensor::from_prim(prim, xp.kind(), xp.shape().to_vec())
    };
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    util::permute(&res, &inverse)
}

/// [`add_rows`] of f32 values by the device kernels, where they have them: the same sums in
/// the same order as `select_add`, from many more threads (an embedding's gradient, a loss's
/// gradient at the picked logits). `x2` is `[rows, rest..]`, `flat` the row numbers (s64, in
/// range), `u2` `[m, rest..]`.
fn device_add_rows(x2: &Tensor, flat: &Prim, u2: &Tensor) -> Result<Option<Tensor>> {
    let Some(k) = x2.kernels() else {
        return Ok(None);
    };
    if x2.dtype() != DType::F32 || u2.dtype() != DType::F32 || x2.rank() == 0 {
        return Ok(None);
    }
    let (rows, m) = (x2.shape()[0], u2.shape()[0]);
    let cols = x2.numel() / rows.max(1);
    let x = x2.reshape(vec![rows, cols])?;
    let u = u2.reshape(vec![m, cols])?;
    // row numbers (non-negative) as two f32 values exact below 2^24: r = hi * 2^24 + lo (bit
    // operations: Burn's CUDA remainder of s64 does not compile)
    let as_f32 = |p: Prim| Tensor::from_prim(p, Kind::Int, vec![m]).cast(DType::F32);
    let hi = as_f32(B::bitwise_right_shift_scalar(flat.clone(), 24.into()))?;
    let lo = as_f32(B::bitwise_and_scalar(
        flat.clone(),
        ((1i64 << 24) - 1).into(),
    ))?;
    Ok(
        k.add_rows(x.operand(), (hi.operand(), lo.operand()), u.operand())?
            .map(|p| Tensor::from_kernel(p, vec![rows, cols])),
    )
}

/// Scatter-add, on every device: Burn's GPU `scatter_nd` adds without atomics, so repeated
/// indices lose updates (measured on CUDA). `select_add` along a flattened leading axis walks
/// the updates in order within one thread per slice element, so repeats accumulate.
fn add_rows(xp: &Tensor, idx: &Tensor, u: &Tensor, k: usize) -> Result<Tensor> {
    let lead = &xp.shape()[..k];
    let rest = &xp.shape()[k..];
    let m = crate::tensor::numel(&idx.shape()[..idx.rank() - 1]);
    let idx2 = idx.reshape(vec![m, k])?;
    let mut flat: Option<Prim> = None;
    let mut stride = 1i64;
    for j in (0..k).rev() {
        let col = crate::op::shape::slice_static(&idx2, &[0, j], &[m, 1], &[1, 1])?
            .reshape(vec![m])?
            .prim();
        let term = B::int_mul_scalar(col, stride.into());
        flat = Some(match flat {
            Some(f) => B::int_add(f, term),
            None => term,
        });
        stride *= lead[j] as i64;
    }
    let flat =
        flat.ok_or_else(|| Error::Shape("scatter needs at least one indexed axis".into()))?;
    let rows: usize = lead.iter().product();
    let x2 = xp.reshape([&[rows], rest].concat())?;
    let u2 = u.reshape([&[m], rest].concat())?;
    if let Some(out) = device_add_rows(&x2, &flat, &u2)? {
        return out.reshape(xp.shape().to_vec());
    }
    let prim = match xp.kind() {
        Kind::Float => B::float_select_add(x2.prim(), 0, flat, u2.prim()),
        _ => B::int_select_add(x2.int_prim()?, 0, flat, u2.int_prim()?),
    };
    Ok(Tensor::from_prim(prim, x2.kind(), xp.shape().to_vec()))
}
