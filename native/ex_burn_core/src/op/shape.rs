//! Shape ops: transpose, reshape, squeeze, broadcast, slice (strided, dynamic starts),
//! put_slice, concatenate, stack, pad (negative and interior) and reverse.

use super::util;
use super::Op;
use crate::dtype::Kind;
use crate::kernels::{DeviceKernels, Start};
use crate::tensor::{Prim, B};
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};

pub(super) fn eval(op: &Op, x: &[Tensor]) -> Result<Tensor> {
    let t = &x[0];
    match op {
        Op::Transpose { axes } => {
            let perm = axes
                .clone()
                .unwrap_or_else(|| (0..t.rank()).rev().collect());
            util::permute(t, &perm)
        }
        Op::Reshape { shape } => super::strided_copy::reshape(t, shape),
        Op::Squeeze { axes } => {
            let axes = match axes {
                Some(a) => util::axes_sorted(&Some(a.clone()), t.rank())?,
                None => (0..t.rank()).filter(|&i| t.shape()[i] == 1).collect(),
            };
            if let Some(&a) = axes.iter().find(|&&a| t.shape()[a] != 1) {
                return Err(Error::Shape(format!(
                    "cannot squeeze axis {a} of size {} in {:?}",
                    t.shape()[a],
                    t.shape()
                )));
            }
            let shape = t
                .shape()
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect();
            t.reshape(shape)
        }
        Op::Broadcast { shape, axes } => broadcast(t, shape, axes.as_deref()),
        Op::Slice {
            starts,
            lengths,
            strides,
            dynamic,
        } => {
            let ones = vec![1; t.rank()];
            let strides = strides.as_deref().unwrap_or(&ones);
            if let Some(out) =
                slice_at_device_starts(t, starts, lengths, strides, dynamic, &x[1..])?
            {
                return Ok(out);
            }
            let starts = resolve_starts(starts, dynamic, &x[1..])?;
            slice(t, &starts, lengths, strides)
        }
        Op::PutSlice { starts, dynamic } => put_slice(t, &x[1], starts, dynamic, &x[2..]),
        Op::Concatenate { axis } => concatenate(x, *axis),
        Op::Stack { axis } => {
            util::axis(*axis, x[0].rank() + 1)?;
            if let Some(t) = x.iter().find(|t| t.shape() != x[0].shape()) {
                return Err(Error::Shape(format!(
                    "cannot stack tensors of shapes {:?} and {:?}",
                    x[0].shape(),
                    t.shape()
                )));
            }
            let parts = x
                .iter()
                .map(|t| {
                    let mut s = t.shape().to_vec();
                    s.insert(*axis, 1);
                    t.reshape(s)
                })
                .collect::<Result<Vec<_>>>()?;
            concatenate(&parts, *axis)
        }
        Op::Pad { config } => pad(t, &x[1], config),
        Op::Reverse { axes } => {
            let axes = util::axes_sorted(axes, t.rank())?;
            Ok(util::flip(t, &axes))
        }
        other => Err(Error::Unsupported(format!(
            "{} is not a shape op",
            other.name()
        ))),
    }
}

/// Reads the dynamic start scalars (a host read of one element each).
fn resolve_starts(starts: &[i64], dynamic: &[usize], inputs: &[Tensor]) -> Result<Vec<i64>> {
    let mut starts = starts.to_vec();
    for (k, &axis) in dynamic.iter().enumerate() {
        let t = inputs
            .get(k)
            .ok_or_else(|| Error::Argument(format!("missing dynamic start for axis {axis}")))?;
        if t.numel() != 1 {
            return Err(Error::Shape(format!(
                "start index must be a scalar, got shape {:?}",
                t.shape()
            )));
        }
        let v = t.cast(DType::S64)?.to_bytes(None)?;
        let arr: [u8; 8] = v
            .as_slice()
            .try_into()
            .map_err(|_| Error::Execution("bad start index".into()))?;
        if axis >= starts.len() {
            return Err(Error::Argument(format!("dynamic axis {axis} out of range")));
        }
        starts[axis] = i64::from_le_bytes(arr);
    }
    Ok(starts)
}

/// Nx broadcast: input axis i goes to result axis `axes[i]` (right-aligned when absent).
fn broadcast(t: &Tensor, shape: &[usize], axes: Option<&[usize]>) -> Result<Tensor> {
    let r = shape.len();
    let axes: Vec<usize> = match axes {
        Some(a) => a.to_vec(),
        None => {
            if t.rank() > r {
                return Err(Error::Shape(format!(
                    "cannot broadcast {:?} to {shape:?}",
                    t.shape()
                )));
            }
            (r - t.rank()..r).collect()
        }
    };
    if axes.len() != t.rank()
        || axes.iter().any(|&a| a >= r)
        || axes.windows(2).any(|w| w[0] >= w[1])
    {
        return Err(Error::Argument(format!(
            "broadcast axes {axes:?} do not fit {:?} -> {shape:?}",
            t.shape()
        )));
    }
    let mut view = vec![1; r];
    for (i, &a) in axes.iter().enumerate() {
        let d = t.shape()[i];
        if d != 1 && d != shape[a] {
            return Err(Error::Shape(format!(
                "cannot broadcast {:?} to {shape:?} on axes {axes:?}",
                t.shape()
            )));
        }
        view[a] = d;
    }
    util::broadcast_to(&t.reshape(view)?, shape)
}

/// Static strided slice with Nx's clamping of starts.
pub(crate) fn slice(
    t: &Tensor,
    starts: &[i64],
    lengths: &[usize],
    strides: &[usize],
) -> Result<Tensor> {
    let r = t.rank();
    if starts.len() != r || lengths.len() != r || strides.len() != r {
        return Err(Error::Argument(format!(
            "slice needs {r} starts, lengths and strides, got {}, {} and {}",
            starts.len(),
            lengths.len(),
            strides.len()
        )));
    }
    let mut spec = Vec::with_capacity(r);
    let mut shape = Vec::with_capacity(r);
    for i in 0..r {
        let d = t.shape()[i];
        let (len, st) = (lengths[i], strides[i]);
        if len > d {
            return Err(Error::Shape(format!(
                "slice length {len} exceeds axis {i} of size {d}"
            )));
        }
        if st == 0 {
            return Err(Error::Argument("slice strides must be positive".into()));
        }
        // A stride of at least the length takes one element: the same slice with a stride
        // that fits the backend's signed step.
        let st = st.min(len.max(1));
        let start = fit_start(starts[i], d, len);
        spec.push((start, start + len, st));
        shape.push(len.div_ceil(st));
    }
    slice_spec(t, &spec, shape)
}

/// A boolean tensor as f32 0.0/1.0 for a fused kernel. A broadcast view (axes of stride 0,
/// as a causal mask broadcast over batch and heads) is cast before it is broadcast, as a view
/// again: one small cast instead of a full-size tensor written and read back. The strides
/// come from the device kernels (elsewhere: a plain cast).
pub(crate) fn mask_f32(t: &Tensor) -> Result<Tensor> {
    let strides = match t.kernels() {
        Some(k) if t.kind() == Kind::Bool => k.strides(t.operand()),
        _ => None,
    };
    let Some(strides) = strides else {
        return t.cast(DType::F32);
    };
    let shape = t.shape();
    let broadcast = |(&d, &s): (&usize, &usize)| d > 1 && s == 0;
    if strides.len() != shape.len() || !shape.iter().zip(&strides).any(broadcast) {
        return t.cast(DType::F32);
    }
    let lens: Vec<usize> = shape
        .iter()
        .zip(&strides)
        .map(|(&d, &s)| if s == 0 { 1 } else { d })
        .collect();
    let rank = shape.len();
    let small = slice_static(t, &vec![0; rank], &lens, &vec![1; rank])?;
    util::broadcast_to(&small.cast(DType::F32)?, shape)
}

/// Slice with non-negative starts that already fit.
pub(crate) fn slice_static(
    t: &Tensor,
    starts: &[usize],
    lengths: &[usize],
    strides: &[usize],
) -> Result<Tensor> {
    let s: Vec<i64> = starts.iter().map(|&v| v as i64).collect();
    slice(t, &s, lengths, strides)
}

fn slice_spec(t: &Tensor, spec: &[(usize, usize, usize)], shape: Vec<usize>) -> Result<Tensor> {
    if crate::tensor::numel(&shape) == 0 {
        return util::full(&shape, t.dtype(), Scalar::I(0), &t.dispatch_device());
    }
    if t.rank() == 0 {
        return Ok(t.clone());
    }
    let s = util::slices(spec);
    let p = t.prim();
    let prim: Prim = match t.kind() {
        Kind::Float => B::float_slice(p, &s),
        Kind::Int => B::int_slice(p, &s),
        Kind::Bool => B::bool_slice(p, &s),
    };
    Ok(Tensor::from_prim(prim, t.kind(), shape))
}

/// Writes `value` into `t` at `spec` (start, end, step) positions.
fn assign(t: &Tensor, spec: &[(usize, usize, usize)], value: &Tensor) -> Result<Tensor> {
    if value.numel() == 0 {
        return Ok(t.clone());
    }
    if t.rank() == 0 {
        return value.reshape(vec![]);
    }
    let s = util::slices(spec);
    let prim = match t.kind() {
        Kind::Float => B::float_slice_assign(t.prim(), &s, value.prim()),
        Kind::Int => B::int_slice_assign(t.prim(), &s, value.int_prim()?),
        Kind::Bool => B::bool_slice_assign(t.prim(), &s, value.bool_prim()),
    };
    Ok(Tensor::from_prim(prim, t.kind(), t.shape().to_vec()))
}

/// `update` written into `t` at `starts` (Nx's `put_slice`: each start clamped so that the
/// window fits), where `dynamic[k]` is the axis whose start is the scalar tensor `given[k]`.
fn put_slice(
    t: &Tensor,
    update: &Tensor,
    starts: &[i64],
    dynamic: &[usize],
    given: &[Tensor],
) -> Result<Tensor> {
    let r = t.rank();
    if update.rank() != r || starts.len() != r {
        return Err(Error::Shape(format!(
            "put_slice: update {:?} and {} starts do not match tensor {:?}",
            update.shape(),
            starts.len(),
            t.shape()
        )));
    }
    let out = DType::merge(t.dtype(), update.dtype());
    // `t` itself where no cast is needed (not a clone: the device kernels may write into its
    // buffer when nothing else holds it, see `Program::release_target`)
    let cast = t.casts_to(out).then(|| t.cast(out)).transpose()?;
    let (t, u) = (cast.as_ref().unwrap_or(t), update.cast(out)?);
    for i in 0..r {
        let (d, l) = (t.shape()[i], u.shape()[i]);
        if l > d {
            return Err(Error::Shape(format!(
                "put_slice: update axis {i} ({l}) exceeds tensor ({d})"
            )));
        }
    }
    if let Some(k) = t.kernels() {
        // Starts computed on the device (a loop's position) are read by the kernel itself:
        // no wait for the device, and one kernel for every position.
        if let Some(read) = device_starts(k, t, dynamic, given)? {
            let at = window_starts(t, u.shape(), starts, dynamic, &read);
            if let Some(p) = k.put_slice(t.operand(), u.operand(), &at)? {
                return Ok(Tensor::from_kernel(p, t.shape().to_vec()));
            }
        }
    }
    let starts = resolve_starts(starts, dynamic, given)?;
    let spec: Vec<(usize, usize, usize)> = (0..r)
        .map(|i| {
            let s = fit_start(starts[i], t.shape()[i], u.shape()[i]);
            (s, s + u.shape()[i], 1)
        })
        .collect();
    if let Some(k) = t.kernels() {
        // one kernel writing every element once, where the device kernels have it
        let at: Vec<Start> = spec.iter().map(|w| Start::At(w.0)).collect();
        if let Some(p) = k.put_slice(t.operand(), u.operand(), &at)? {
            return Ok(Tensor::from_kernel(p, t.shape().to_vec()));
        }
    }
    assign(t, &spec, &u)
}

/// `t`'s window (Nx's `slice`) where some starts are computed on `t`'s device: taken by a
/// device kernel that reads them itself (no wait for the device, one kernel for every
/// position; the generation loop's read of its logits at the current position). `None` where
/// the device kernels do not take it (then the starts are read on the host).
fn slice_at_device_starts(
    t: &Tensor,
    starts: &[i64],
    lengths: &[usize],
    strides: &[usize],
    dynamic: &[usize],
    given: &[Tensor],
) -> Result<Option<Tensor>> {
    let r = t.rank();
    let Some(k) = t.kernels() else {
        return Ok(None);
    };
    // what does not fit is refused by the host path, with its message
    let fits = starts.len() == r
        && lengths.len() == r
        && strides.len() == r
        && lengths.iter().zip(t.shape()).all(|(&l, &d)| l <= d)
        && strides.iter().all(|&s| s > 0);
    if !fits {
        return Ok(None);
    }
    let Some(read) = device_starts(k, t, dynamic, given)? else {
        return Ok(None);
    };
    let at = window_starts(t, lengths, starts, dynamic, &read);
    let shape = lengths
        .iter()
        .zip(strides)
        .map(|(&l, &s)| l.div_ceil(s))
        .collect();
    Ok(k.slice(t.operand(), &at, lengths, strides)?
        .map(|p| Tensor::from_kernel(p, shape)))
}

/// The starts of a window of `lens` in `t`: the static `starts` clamped so that it fits, and
/// each of the `dynamic` axes read from its scalar in `read` by the kernel.
fn window_starts<'a>(
    t: &Tensor,
    lens: &[usize],
    starts: &[i64],
    dynamic: &[usize],
    read: &'a [Tensor],
) -> Vec<Start<'a>> {
    let mut at: Vec<Start> = (0..t.rank())
        .map(|i| Start::At(fit_start(starts[i], t.shape()[i], lens[i])))
        .collect();
    for (&axis, s) in dynamic.iter().zip(read) {
        at[axis] = Start::Read(s.operand());
    }
    at
}

/// Nx's clamp of a window's start: the window of `len` fits in an axis of `dim` (`len <= dim`).
fn fit_start(start: i64, dim: usize, len: usize) -> usize {
    start.clamp(0, (dim - len) as i64) as usize
}

/// The dynamic starts of `t`'s window as f32 scalars on `t`'s device, for a kernel of `k` to
/// read (see [`Start::Read`]): `None` when there are none, when the kernels do not know `t`'s
/// layout (a tensor they do not take: no start is cast for nothing), when one is not an
/// integer scalar on that device (u64 starts, which the host reads as s64, included), or when
/// an axis they index has 2^24 elements or more.
fn device_starts(
    k: &dyn DeviceKernels,
    t: &Tensor,
    dynamic: &[usize],
    given: &[Tensor],
) -> Result<Option<Vec<Tensor>>> {
    const EXACT: usize = 1 << 24;
    let usable = !dynamic.is_empty()
        && k.strides(t.operand()).is_some()
        && given.len() >= dynamic.len()
        && dynamic
            .iter()
            .all(|&a| a < t.rank() && t.shape()[a] < EXACT)
        && given[..dynamic.len()].iter().all(|s| {
            s.numel() == 1
                && s.kind() == Kind::Int
                && s.dtype() != DType::U64
                && s.device() == t.device()
        });
    if !usable {
        return Ok(None);
    }
    given[..dynamic.len()]
        .iter()
        .map(|s| s.cast(DType::F32))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn concatenate(x: &[Tensor], axis: usize) -> Result<Tensor> {
    let first = &x[0];
    if first.rank() == 0 {
        return Err(Error::Shape("cannot concatenate scalars (rank 0)".into()));
    }
    util::axis(axis, first.rank())?;
    let out = x
        .iter()
        .skip(1)
        .fold(first.dtype(), |acc, t| DType::merge(acc, t.dtype()));
    for t in x {
        let ok = t.rank() == first.rank()
            && t.shape()
                .iter()
                .zip(first.shape())
                .enumerate()
                .all(|(i, (a, b))| i == axis || a == b);
        if !ok {
            return Err(Error::Shape(format!(
                "cannot concatenate {:?} and {:?} on axis {axis}",
                first.shape(),
                t.shape()
            )));
        }
    }
    let parts = x
        .iter()
        .filter(|t| t.numel() > 0)
        .map(|t| t.cast(out))
        .collect::<Result<Vec<_>>>()?;
    let mut shape = first.shape().to_vec();
    shape[axis] = x.iter().map(|t| t.shape()[axis]).sum();
    if parts.is_empty() {
        return util::full(&shape, out, Scalar::I(0), &first.dispatch_device());
    }
    Ok(util::cat(&parts, axis))
}

/// Nx pad: interior padding first, then low/high (negative values crop).
pub(crate) fn pad(t: &Tensor, value: &Tensor, config: &[(i64, i64, i64)]) -> Result<Tensor> {
    let r = t.rank();
    if config.len() != r {
        return Err(Error::Argument(format!(
            "pad needs {r} (low, high, interior) triples, got {}",
            config.len()
        )));
    }
    if value.numel() != 1 {
        return Err(Error::Shape("pad value must be a scalar".into()));
    }
    let out = DType::merge(t.dtype(), value.dtype());
    let t = t.cast(out)?;
    if config.iter().all(|&c| c == (0, 0, 0)) {
        // Nx's gradient of a slice pads by nothing along the unsliced axes: no copy
        return Ok(t);
    }
    let mut grown = Vec::with_capacity(r);
    let mut place = Vec::with_capacity(r);
    let mut crop = Vec::with_capacity(r);
    for (i, &(lo, hi, interior)) in config.iter().enumerate() {
        if interior < 0 {
            return Err(Error::Argument(
                "interior padding must be non-negative".into(),
            ));
        }
        let d = t.shape()[i] as i64;
        let inner = if d == 0 { 0 } else { d + (d - 1) * interior };
        let (plo, phi) = (lo.max(0), hi.max(0));
        let size = plo + inner + phi;
        grown.push(size as usize);
        place.push((
            plo as usize,
            (plo + inner) as usize,
            (interior + 1) as usize,
        ));
        let (clo, chi) = ((-lo).max(0), (-hi).max(0));
        if clo + chi > size {
            return Err(Error::Shape(format!(
                "negative padding {config:?} removes more than axis {i} holds"
            )));
        }
        crop.push((clo as usize, (size - chi) as usize));
    }
    // the padded tensor is materialised before its crop: refuse what cannot be allocated
    // (GPU kernels would otherwise meet sizes past their index types)
    let bytes = crate::size::numel(&grown)?.saturating_mul(out.size() as u128);
    let _padded = crate::memory::reserve(t.device(), bytes, &|| {
        format!("the padded tensor {grown:?}")
    })?;
    let fill = util::broadcast_to(&value.cast(out)?.reshape(vec![])?, &grown)?;
    let fill = fill.cast(out)?;
    let filled = assign(&materialize(&fill)?, &place, &t)?;
    let starts: Vec<usize> = crop.iter().map(|c| c.0).collect();
    let lengths: Vec<usize> = crop.iter().map(|c| c.1 - c.0).collect();
    slice_static(&filled, &starts, &lengths, &vec![1; r])
}

/// Turns a broadcast view into a tensor that owns its memory (slice_assign writes into it).
fn materialize(t: &Tensor) -> Result<Tensor> {
    let zero = util::full_like(t, Scalar::I(0))?;
    super::binary::same(super::Arith::Add, t, &zero)
}
