//! Small helpers shared by the op families: axis checks, broadcasting, fills, selection.

use crate::dtype::Kind;
pub(crate) use crate::scalar::extreme;
use crate::tensor::{prim_shape, Prim, B};
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn::DispatchDevice;

/// Elements per piece of element-wise host work handed to a compute thread.
pub(crate) const HOST_PIECE: usize = 1 << 15;

/// SIMD features of this CPU that the hand-vectorised loops use (all false off x86-64).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Simd {
    /// 256-bit integer and float vectors.
    pub(crate) avx2: bool,
    /// Fused multiply-add.
    pub(crate) fma: bool,
}

/// This CPU's [`Simd`] features, detected once.
pub(crate) fn simd() -> Simd {
    static SIMD: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    *SIMD.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            Simd {
                avx2: std::arch::is_x86_feature_detected!("avx2"),
                fma: std::arch::is_x86_feature_detected!("fma"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Simd {
                avx2: false,
                fma: false,
            }
        }
    })
}

/// Checks one axis against a rank.
pub(crate) fn axis(axis: usize, rank: usize) -> Result<usize> {
    if axis < rank.max(1) || (rank == 0 && axis == 0) {
        Ok(axis)
    } else {
        Err(Error::Argument(format!(
            "axis {axis} is out of range for rank {rank}"
        )))
    }
}

/// Validates a list of axes (or all axes when `None`): in range and without duplicates,
/// returned sorted.
pub(crate) fn axes_sorted(axes: &Option<Vec<usize>>, rank: usize) -> Result<Vec<usize>> {
    let mut v = match axes {
        None => (0..rank).collect::<Vec<_>>(),
        Some(a) => a.clone(),
    };
    for &a in &v {
        if a >= rank {
            return Err(Error::Argument(format!(
                "axis {a} is out of range for rank {rank}"
            )));
        }
    }
    v.sort_unstable();
    if v.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::Argument(format!("repeated axes in {v:?}")));
    }
    Ok(v)
}

/// Validates a permutation of `0..rank`.
pub(crate) fn permutation(perm: &[usize], rank: usize) -> Result<()> {
    let mut seen = vec![false; rank];
    if perm.len() != rank {
        return Err(Error::Argument(format!(
            "permutation {perm:?} does not have {rank} axes"
        )));
    }
    for &p in perm {
        if p >= rank || seen[p] {
            return Err(Error::Argument(format!(
                "{perm:?} is not a permutation of 0..{rank}"
            )));
        }
        seen[p] = true;
    }
    Ok(())
}

/// Nx/NumPy broadcasting of two shapes (aligned on the right).
pub(crate) fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::Shape(format!(
                "cannot broadcast shapes {a:?} and {b:?}"
            )));
        };
    }
    Ok(out)
}

/// Broadcasts a tensor to `shape` (aligned on the right); zero-copy where the backend allows.
pub(crate) fn broadcast_to(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if t.shape() == shape {
        return Ok(t.clone());
    }
    let s = t.shape();
    if s.len() > shape.len() {
        return Err(Error::Shape(format!("cannot broadcast {s:?} to {shape:?}")));
    }
    let mut padded = vec![1; shape.len() - s.len()];
    padded.extend_from_slice(s);
    for (d, w) in padded.iter().zip(shape) {
        if *d != *w && *d != 1 {
            return Err(Error::Shape(format!("cannot broadcast {s:?} to {shape:?}")));
        }
    }
    let t = t.reshape(padded)?;
    if t.numel() == crate::tensor::numel(shape) {
        return t.reshape(shape.to_vec());
    }
    Ok(expand(&t, shape))
}

/// Same-rank expand of size-1 axes.
pub(crate) fn expand(t: &Tensor, shape: &[usize]) -> Tensor {
    let p = t.prim();
    let sh = prim_shape(shape);
    let prim = match t.kind() {
        Kind::Float => B::float_expand(p, sh),
        Kind::Int => B::int_expand(p, sh),
        Kind::Bool => B::bool_expand(p, sh),
    };
    Tensor::from_prim(prim, t.kind(), shape.to_vec())
}

/// A tensor of `shape` filled with `value`.
pub(crate) fn full(
    shape: &[usize],
    dtype: DType,
    value: Scalar,
    device: &DispatchDevice,
) -> Result<Tensor> {
    if dtype == DType::U64 && value.wrapped_bits(dtype) > i64::MAX as u64 {
        // Some backends read integer fills through i64; build values above it on the host.
        let v = value.wrapped_bits(dtype);
        let n = crate::tensor::numel(shape);
        let data = burn::tensor::TensorData::new(vec![v; n], prim_shape(shape));
        return Tensor::from_data(
            data,
            dtype,
            shape.to_vec(),
            crate::Device::from_dispatch(device),
        );
    }
    if crate::tensor::numel(shape) == 0 {
        // No kernel launch for empty tensors (GPU launches of zero threads are errors).
        let data =
            burn::tensor::TensorData::from_bytes_vec(vec![], prim_shape(shape), dtype.burn());
        return Tensor::from_data(
            data,
            dtype,
            shape.to_vec(),
            crate::Device::from_dispatch(device),
        );
    }
    let sh = prim_shape(shape);
    let s = value.burn_for(dtype);
    let prim = match dtype.kind() {
        Kind::Float => B::float_full(sh, s, device, dtype.float_dtype()?),
        _ => B::int_full(sh, s, device, dtype.int_dtype()?),
    };
    Ok(Tensor::from_prim(prim, dtype.kind(), shape.to_vec()))
}

/// A tensor like `t` (shape, dtype, device) filled with `value`.
pub(crate) fn full_like(t: &Tensor, value: Scalar) -> Result<Tensor> {
    full(t.shape(), t.dtype(), value, &t.dispatch_device())
}

/// A scalar `value` of `t`'s dtype and device, broadcast lazily by the caller.
pub(crate) fn scalar_like(t: &Tensor, value: f64) -> Result<Tensor> {
    let s = if t.dtype().is_float() {
        Scalar::F(value)
    } else {
        Scalar::I(value as i64)
    };
    full(&[], t.dtype(), s, &t.dispatch_device())
}

/// `where(cond, a, b)` for `a`, `b` of one dtype and `cond` a tensor of any kind, all of one
/// shape.
pub(crate) fn select(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
    let mask = cond.bool_prim();
    let prim = match a.kind() {
        Kind::Float => B::float_mask_where(b.prim(), mask, a.prim()),
        Kind::Int => B::int_mask_where(b.prim(), mask, a.prim()),
        Kind::Bool => B::bool_mask_where(b.prim(), mask, a.prim()),
    };
    Tensor::from_prim(prim, a.kind(), a.shape().to_vec())
}

/// Wraps a bool primitive with a logical shape.
pub(crate) fn bool_tensor(prim: Prim, shape: Vec<usize>) -> Tensor {
    Tensor::from_prim(prim, Kind::Bool, shape)
}

/// Permutes axes.
pub(crate) fn permute(t: &Tensor, perm: &[usize]) -> Result<Tensor> {
    permutation(perm, t.rank())?;
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(t.clone());
    }
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape()[p]).collect();
    let p = t.prim();
    let prim = match t.kind() {
        Kind::Float => B::float_permute(p, perm),
        Kind::Int => B::int_permute(p, perm),
        Kind::Bool => B::bool_permute(p, perm),
    };
    Ok(Tensor::from_prim(prim, t.kind(), shape))
}

/// Flips the given axes.
pub(crate) fn flip(t: &Tensor, axes: &[usize]) -> Tensor {
    if axes.is_empty() || t.numel() == 0 {
        return t.clone();
    }
    let p = t.prim();
    let prim = match t.kind() {
        Kind::Float => B::float_flip(p, axes),
        Kind::Int => B::int_flip(p, axes),
        Kind::Bool => B::bool_flip(p, axes),
    };
    Tensor::from_prim(prim, t.kind(), t.shape().to_vec())
}

/// Concatenates tensors of one kind along an axis.
pub(crate) fn cat(ts: &[Tensor], axis: usize) -> Tensor {
    let mut shape = ts[0].shape().to_vec();
    shape[axis] = ts.iter().map(|t| t.shape()[axis]).sum();
    let kind = ts[0].kind();
    let prims: Vec<Prim> = ts.iter().map(|t| t.prim()).collect();
    let prim = match kind {
        Kind::Float => B::float_cat(prims, axis),
        Kind::Int => B::int_cat(prims, axis),
        Kind::Bool => B::bool_cat(prims, axis),
    };
    Tensor::from_prim(prim, kind, shape)
}

/// Burn slice specs from (start, end, step) triples.
pub(crate) fn slices(spec: &[(usize, usize, usize)]) -> Vec<burn::tensor::Slice> {
    spec.iter()
        .map(|&(s, e, st)| burn::tensor::Slice::new(s as isize, Some(e as isize), st as isize))
        .collect()
}

/// `f` of `operands` computed on the host, its result moved back to the first operand's
/// device: work a device cannot do, or not exactly (the wgpu devices' f64, GPU integer
/// products, library functions a GPU computes an ulp off).
pub(crate) fn on_host(
    operands: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Result<Tensor>,
) -> Result<Tensor> {
    let device = operands.first().map_or(crate::Device::Cpu, |t| t.device());
    let host = operands
        .iter()
        .map(|t| t.to_device(crate::Device::Cpu))
        .collect::<Result<Vec<_>>>()?;
    f(&host)?.to_device(device)
}

/// The value of a one-element tensor (read back from its device; floats exactly, via f64 on
/// the host: the wgpu devices hold no f64).
pub(crate) fn read_scalar(t: &Tensor) -> Result<Scalar> {
    let t = if t.dtype().is_float() {
        t.to_device(crate::Device::Cpu)?.cast(DType::F64)?
    } else {
        t.clone()
    };
    let dtype = t.dtype();
    let n = dtype.size();
    let bytes = t.to_bytes(None)?;
    let src = bytes
        .get(..n)
        .ok_or_else(|| Error::Shape("expected a one-element tensor".into()))?;
    let mut w = [0u8; 8];
    w[..n].copy_from_slice(src);
    let bits = u64::from_le_bytes(w);
    let shift = 64 - 8 * n as u32;
    Ok(match dtype {
        DType::F64 => Scalar::F(f64::from_bits(bits)),
        DType::U64 => Scalar::U(bits),
        d if d.is_unsigned_int() => Scalar::I(bits as i64),
        // sign-extend the narrower two's-complement value
        _ => Scalar::I(((bits << shift) as i64) >> shift),
    })
}

/// A raw pointer handed to the compute threads, each of which reads it or writes its own
/// disjoint part of what it points at (the user's `unsafe` block says which part).
#[derive(Clone, Copy)]
pub(crate) struct SharedPtr<T>(pub(crate) *mut T);

// SAFETY: a `SharedPtr` is only dereferenced where the threads touch disjoint parts of the
// memory behind it, or only read it.
unsafe impl<T: Send> Send for SharedPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for SharedPtr<T> {}

impl<T> SharedPtr<T> {
    /// The pointer (a method, so that closures capture the whole `SharedPtr`).
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}
