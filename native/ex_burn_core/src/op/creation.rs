//! Creation ops: iota, eye, full and seeded random tensors.
//!
//! Random numbers come from a counter-based generator (SplitMix64) on the host, so a seed gives
//! the same tensor on every device and every run.

use super::util;
use super::Op;
use crate::dtype::Kind;
use crate::rng::SplitMix64;
use crate::tensor::{prim_shape, B};
use crate::{DType, Device, Error, Result, Scalar, Tensor};
use burn::tensor::ops::IntTensorOps;
use burn::tensor::{IntDType, TensorData};

pub(super) fn eval(op: &Op, device: Device) -> Result<Tensor> {
    let dev = device.to_dispatch()?;
    if let Some(dtype) = op.created_dtype() {
        device.check_dtype(dtype)?;
    }
    match op {
        Op::Iota { shape, dtype, axis } => iota(shape, *dtype, *axis, device),
        Op::Eye { shape, dtype } => eye(shape, *dtype, device),
        Op::Full {
            shape,
            dtype,
            value,
        } => util::full(shape, *dtype, *value, &dev),
        Op::RandomUniform {
            shape,
            dtype,
            min,
            max,
            seed,
        } => {
            finite_params("random_uniform", &[("min", *min), ("max", *max)])?;
            let (lo, span) = (*min, *max - *min);
            random(shape, *dtype, *seed, device, |g| lo + span * g.uniform())
        }
        Op::RandomNormal {
            shape,
            dtype,
            mean,
            std,
            seed,
        } => {
            finite_params("random_normal", &[("mean", *mean), ("std", *std)])?;
            let (m, s) = (*mean, *std);
            random(shape, *dtype, *seed, device, |g| m + s * g.normal())
        }
        other => Err(Error::Unsupported(format!(
            "{} is not a creation op",
            other.name()
        ))),
    }
}

/// Distribution parameters must be finite numbers.
fn finite_params(op: &str, params: &[(&str, f64)]) -> Result<()> {
    match params.iter().find(|(_, v)| !v.is_finite()) {
        Some((name, v)) => Err(Error::Argument(format!(
            "{op}: {name} must be a finite number, got {v}"
        ))),
        None => Ok(()),
    }
}

/// Counts 0, 1, ... along `axis` (or over all elements in row-major order).
pub(crate) fn iota(
    shape: &[usize],
    dtype: DType,
    axis: Option<usize>,
    device: Device,
) -> Result<Tensor> {
    let dev = device.to_dispatch()?;
    let n = crate::tensor::numel(shape);
    if let Some(a) = axis {
        util::axis(a, shape.len())?;
    }
    // Empty tensors and scalars (whose one element is 0 along any axis).
    if n == 0 || shape.is_empty() {
        return util::full(shape, dtype, Scalar::I(0), &dev);
    }
    let counts = match axis {
        None => {
            let p = B::int_arange(0..n as i64, &dev, IntDType::I64);
            Tensor::from_prim(p, Kind::Int, shape.to_vec())
        }
        Some(a) => {
            util::axis(a, shape.len())?;
            let len = shape[a];
            let p = B::int_arange(0..len as i64, &dev, IntDType::I64);
            let mut view = vec![1; shape.len()];
            view[a] = len;
            let t = Tensor::from_prim(p, Kind::Int, view);
            util::broadcast_to(&t, shape)?
        }
    };
    counts.cast(dtype)
}

/// Ones where the last two indices agree, zeros elsewhere (rank >= 2).
fn eye(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    let r = shape.len();
    if r < 2 {
        return Err(Error::Shape(format!(
            "eye needs a shape of rank >= 2, got {shape:?}"
        )));
    }
    let rows = iota(shape, DType::S64, Some(r - 2), device)?;
    let cols = iota(shape, DType::S64, Some(r - 1), device)?;
    super::binary::compare_same(super::Compare::Equal, &rows, &cols).cast(dtype)
}

fn random(
    shape: &[usize],
    dtype: DType,
    seed: u64,
    device: Device,
    mut sample: impl FnMut(&mut SplitMix64) -> f64,
) -> Result<Tensor> {
    let n = crate::tensor::numel(shape);
    let mut g = SplitMix64::new(seed);
    // Integer samples floor toward negative infinity, so `[min, max)` holds for any sign, and
    // saturate at the type's range (a normal sample can fall anywhere).
    let range = if dtype.is_signed_int() {
        let m = 2f64.powi(dtype.bits() as i32 - 1);
        Some((-m, m - 1.0))
    } else if dtype.is_unsigned_int() {
        Some((0.0, 2f64.powi(dtype.bits() as i32) - 1.0))
    } else {
        None
    };
    let values: Vec<f64> = (0..n)
        .map(|_| sample(&mut g))
        .map(|v| match range {
            Some((lo, hi)) => v.floor().clamp(lo, hi),
            None => v,
        })
        .collect();
    let data = TensorData::new(values, prim_shape(shape)).convert_dtype(dtype.burn());
    Tensor::from_data(data, dtype, shape.to_vec(), device)
}
