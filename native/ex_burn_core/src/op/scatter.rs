//! `window_scatter_max` / `window_scatter_min` (XLA's select-and-scatter, the gradient of max
//! and min pooling): each window of the input, padded with the init value, selects its largest
//! (smallest) element, the last one on ties as `Nx.BinaryBackend` does, and the source value
//! of that window is added there; untouched positions keep the init value.
//!
//! f32 on the CPU and on devices with kernels for it: [`super::window_scatter32`] and
//! [`crate::kernels::DeviceKernels::window_scatter`], the sources added in the windows' order
//! after the init value as `Nx.BinaryBackend` adds them. Otherwise composed from the op table
//! on the device: the K = prod(window) strided views of the padded
//! input are stacked and reduced with `argmax`/`argmin`; for each window offset, the source
//! values whose window chose that offset are placed back with interior padding and summed.

use super::binary;
use super::reduce;
use super::{shape, util, ArgKind, Op, ScatterKind, TieBreak};
use super::{Arith, Compare};
use crate::kernels::{WindowScatterCall, WindowScatterGeometry};
use crate::{DType, Device, Error, Result, Scalar, Tensor};

/// Runs a window scatter op on `[input, source, init]` (all of one type).
pub(super) fn eval(op: &Op, x: &[Tensor]) -> Result<Tensor> {
    let (dims, strides, padding, max) = match op {
        Op::WindowScatter {
            kind,
            window_dims,
            strides,
            padding,
        } => (window_dims, strides, padding, *kind == ScatterKind::Max),
        other => {
            return Err(Error::Unsupported(format!(
                "{} is not a window scatter op",
                other.name()
            )))
        }
    };
    let (t, source, init) = (&x[0], &x[1], &x[2]);
    let r = t.rank();
    let strides = strides.clone().unwrap_or_else(|| vec![1; r]);
    let padding = padding.clone().unwrap_or_else(|| vec![(0, 0); r]);
    if dims.len() != r || strides.len() != r || padding.len() != r {
        return Err(Error::Argument(format!(
            "window dimensions, strides and padding need {r} entries"
        )));
    }
    if dims.iter().chain(&strides).any(|&v| v == 0) || padding.iter().any(|p| p.0 < 0 || p.1 < 0) {
        return Err(Error::Argument(
            "window dimensions and strides must be positive, padding non-negative".into(),
        ));
    }
    let dtype = t.dtype();
    let padded_shape: Vec<usize> = (0..r)
        .map(|i| t.shape()[i] + (padding[i].0 + padding[i].1) as usize)
        .collect();
    if (0..r).any(|i| dims[i] > padded_shape[i]) {
        return Err(Error::Shape(format!(
            "window {dims:?} is larger than the padded input {padded_shape:?}"
        )));
    }
    let counts: Vec<usize> = (0..r)
        .map(|i| (padded_shape[i].saturating_sub(dims[i])) / strides[i] + 1)
        .collect();
    if counts != source.shape() {
        return Err(Error::Shape(format!(
            "source shape {:?} does not match the {counts:?} windows of {:?}",
            source.shape(),
            t.shape()
        )));
    }
    let init = init.cast(dtype)?;
    if t.numel() == 0 || source.numel() == 0 {
        return util::broadcast_to(&init, t.shape());
    }
    if dtype == DType::F32 {
        let lo: Vec<usize> = padding.iter().map(|p| p.0 as usize).collect();
        let geometry = WindowScatterGeometry {
            shape: t.shape(),
            counts: &counts,
            window: dims,
            strides: &strides,
            lo: &lo,
            max,
        };
        if let Some(r) = f32_windows(t, &source.cast(dtype)?, &init, geometry)? {
            return Ok(r);
        }
    }
    let out_init = util::broadcast_to(&init, t.shape())?;
    let config: Vec<(i64, i64, i64)> = padding.iter().map(|&(lo, hi)| (lo, hi, 0)).collect();
    let padded = shape::pad(t, &init, &config)?;

    let offsets = window_offsets(dims);
    let span: Vec<usize> = (0..r).map(|i| (counts[i] - 1) * strides[i] + 1).collect();
    let mut views = Vec::with_capacity(offsets.len());
    for o in &offsets {
        let v = shape::slice_static(&padded, o, &span, &strides)?;
        views.push(v.reshape([counts.clone(), vec![1]].concat())?);
    }
    let stacked = util::cat(&views, r);
    let pick = Op::Arg {
        kind: if max { ArgKind::Max } else { ArgKind::Min },
        axis: Some(r),
        keep_axis: false,
        tie_break: TieBreak::High,
        out: Some(DType::S64),
    };
    let chosen = reduce::eval(&pick, &stacked)?;

    let source = source.cast(dtype)?;
    let zero = util::full(&[], dtype, Scalar::I(0), &t.dispatch_device())?;
    let zeros = util::full_like(&source, Scalar::I(0))?;
    let mut acc = util::full(&padded_shape, dtype, Scalar::I(0), &t.dispatch_device())?;
    for (k, o) in offsets.iter().enumerate() {
        let key = util::full(&[], DType::S64, Scalar::I(k as i64), &t.dispatch_device())?;
        let mask = binary::compare(Compare::Equal, &chosen, &key)?;
        let contrib = util::select(&mask, &source, &zeros);
        let place: Vec<(i64, i64, i64)> = (0..r)
            .map(|i| {
                let hi = padded_shape[i] - o[i] - span[i];
                (o[i] as i64, hi as i64, strides[i] as i64 - 1)
            })
            .collect();
        let placed = shape::pad(&contrib, &zero, &place)?;
        acc = binary::binary(Arith::Add, &acc, &placed, dtype)?;
    }
    let lo: Vec<usize> = padding.iter().map(|p| p.0 as usize).collect();
    let cropped = shape::slice_static(&acc, &lo, t.shape(), &vec![1; r])?;
    binary::binary(Arith::Add, &cropped, &out_init, dtype)
}

/// The f32 window scatter by the device's kernels or, on the CPU, by
/// [`super::window_scatter32`]: the values [`WindowScatterGeometry`] defines. `None`: another
/// device without such kernels (the composed path below computes it).
fn f32_windows(
    t: &Tensor,
    source: &Tensor,
    init: &Tensor,
    geometry: WindowScatterGeometry,
) -> Result<Option<Tensor>> {
    if let Some(k) = t.kernels() {
        let call = WindowScatterCall {
            input: t.operand(),
            source: source.operand(),
            init: init.operand(),
            geometry,
        };
        return Ok(k
            .window_scatter(&call)?
            .map(|p| Tensor::from_kernel(p, t.shape().to_vec())));
    }
    if t.device() != Device::Cpu {
        return Ok(None);
    }
    let init = util::read_scalar(init)?.to_f64() as f32;
    let values =
        super::window_scatter32::host(&host_values(t)?, &host_values(source)?, init, &geometry)?;
    Tensor::from_host_f32(values, t.shape().to_vec()).map(Some)
}

/// The values of an f32 host tensor in row-major order: read in place when it is contiguous,
/// else copied once.
fn host_values(x: &Tensor) -> Result<std::borrow::Cow<'_, [f32]>> {
    Ok(match x.host_f32() {
        Some(v) => std::borrow::Cow::Borrowed(v),
        None => std::borrow::Cow::Owned(x.to_f32_vec()?),
    })
}

/// Every offset inside a window, in row-major order (the order ties are broken in).
pub(crate) fn window_offsets(dims: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for &d in dims {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                (0..d).map(move |i| {
                    let mut p = prefix.clone();
                    p.push(i);
                    p
                })
            })
            .collect();
    }
    out
}
