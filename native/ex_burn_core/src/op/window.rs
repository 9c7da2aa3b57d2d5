//! Window reductions (sum, product, max, min) over windows of every axis, with strides,
//! low/high padding (by the reduction's identity) and window dilations.
//!
//! On the CPU each axis is unfolded into its windows with Burn's `unfold` view (the window
//! axis goes to the end), a dilation is a strided slice of that axis, and the window axes are
//! then reduced. GPU backends mishandle overlapping views, so there the result is built from
//! one strided slice per window offset, combined element-wise.

use super::util;
use super::{Geometry, WindowKind};
use crate::dtype::Kind;
use crate::tensor::{Prim, B};
use crate::{Error, Result, Scalar, Tensor};
use burn::tensor::ops::{FloatTensorOps, IntTensorOps};

pub(super) fn eval(kind: WindowKind, geometry: &Geometry, x: &Tensor) -> Result<Tensor> {
    let Geometry {
        window_dims: dims,
        strides,
        padding,
        window_dilations: dil,
    } = geometry;
    let r = x.rank();
    let ones = vec![1; r];
    let strides = strides.clone().unwrap_or_else(|| ones.clone());
    let dil = dil.clone().unwrap_or_else(|| ones.clone());
    let padding = padding.clone().unwrap_or_else(|| vec![(0, 0); r]);
    if dims.len() != r || strides.len() != r || dil.len() != r || padding.len() != r {
        return Err(Error::Argument(format!(
            "window dimensions, strides, padding and dilations need {r} entries"
        )));
    }
    if dims.iter().chain(&strides).chain(&dil).any(|&v| v == 0) {
        return Err(Error::Argument(
            "window dimensions, strides and dilations must be positive".into(),
        ));
    }
    let x = if x.kind() == Kind::Bool {
        x.cast(crate::DType::U8)?
    } else {
        x.clone()
    };
    let red = kind;
    let identity = match (red, x.dtype().is_float()) {
        (WindowKind::Sum, _) => Scalar::I(0),
        (WindowKind::Product, _) => Scalar::I(1),
        (WindowKind::Max, true) => Scalar::NegInfinity,
        (WindowKind::Min, true) => Scalar::Infinity,
        (WindowKind::Max, false) => util::extreme(x.dtype(), false),
        (WindowKind::Min, false) => util::extreme(x.dtype(), true),
    };
    let x = if padding.iter().any(|&p| p != (0, 0)) {
        let value = util::full(&[], x.dtype(), identity, &x.dispatch_device())?;
        let config: Vec<_> = padding.iter().map(|&(lo, hi)| (lo, hi, 0)).collect();
        super::shape::pad(&x, &value, &config)?
    } else {
        x
    };
    let mut out_shape = Vec::with_capacity(r);
    for i in 0..r {
        let span = (dims[i] - 1).saturating_mul(dil[i]).saturating_add(1);
        let d = x.shape()[i];
        out_shape.push(if d < span {
            0
        } else {
            (d - span) / strides[i] + 1
        });
    }
    if crate::tensor::numel(&out_shape) == 0 || r == 0 {
        return util::full(&out_shape, x.dtype(), identity, &x.dispatch_device());
    }
    if !x.device().is_host() {
        return by_offsets(&x, dims, &strides, &dil, &out_shape, red);
    }
    if matches!(red, WindowKind::Max | WindowKind::Min) && x.dtype() == crate::DType::F32 {
        let placement = Placement {
            dims,
            strides: &strides,
            dilations: &dil,
            out_shape: &out_shape,
        };
        return extremum_f32(&x, &placement, red == WindowKind::Max);
    }
    // Unfold axis i in place into its windows; Burn appends the window axis at the end, so
    // after all axes the layout is [windows_0.., window_0..].
    let mut t = x.clone();
    for i in 0..r {
        let span = (dims[i] - 1) * dil[i] + 1;
        if span == 1 && strides[i] == 1 {
            // A unit window: the axis stays as is and the window axis has size 1 (no copy).
            let mut s = t.shape().to_vec();
            s.push(1);
            t = t.reshape(s)?;
            continue;
        }
        let p = t.prim();
        let prim: Prim = match t.kind() {
            Kind::Float => B::float_unfold(p, i, span, strides[i]),
            _ => B::int_unfold(p, i, span, strides[i]),
        };
        // GPU backends mis-handle unfolds of unfolded views; give them contiguous input.
        t = Tensor::wrap(prim, t.kind()).contiguous();
        if dil[i] > 1 {
            let rank = t.rank();
            let zeros = vec![0; rank];
            let lens = t.shape().to_vec();
            let mut steps = vec![1; rank];
            steps[rank - 1] = dil[i];
            t = super::shape::slice_static(&t, &zeros, &lens, &steps)?;
        }
    }
    let mut p = t.prim();
    for a in r..2 * r {
        p = match (t.kind(), red) {
            (Kind::Float, WindowKind::Sum) => B::float_sum_dim(p, a),
            (Kind::Float, WindowKind::Product) => B::float_prod_dim(p, a),
            (Kind::Float, WindowKind::Max) => B::float_max_dim(p, a),
            (Kind::Float, WindowKind::Min) => B::float_min_dim(p, a),
            (_, WindowKind::Sum) => B::int_sum_dim(p, a),
            (_, WindowKind::Product) => B::int_prod_dim(p, a),
            (_, WindowKind::Max) => B::int_max_dim(p, a),
            (_, WindowKind::Min) => B::int_min_dim(p, a),
        };
    }
    Ok(Tensor::from_prim(p, t.kind(), out_shape))
}

/// The reduction as a fold over window offsets: for each offset, the strided slice of `x`
/// that offset selects for every output position, combined element-wise.
fn by_offsets(
    x: &Tensor,
    dims: &[usize],
    strides: &[usize],
    dil: &[usize],
    out_shape: &[usize],
    red: WindowKind,
) -> Result<Tensor> {
    use super::binary::same;
    use super::Arith;
    let f = match red {
        WindowKind::Sum => Arith::Add,
        WindowKind::Product => Arith::Multiply,
        WindowKind::Max => Arith::Max,
        WindowKind::Min => Arith::Min,
    };
    let lengths: Vec<usize> = out_shape
        .iter()
        .zip(strides)
        .map(|(&o, &s)| (o - 1) * s + 1)
        .collect();
    let total: usize = dims.iter().product();
    let mut acc: Option<Tensor> = None;
    for k in 0..total {
        let mut rest = k;
        let mut starts = vec![0; dims.len()];
        for i in (0..dims.len()).rev() {
            starts[i] = (rest % dims[i]) * dil[i];
            rest /= dims[i];
        }
        let piece = super::shape::slice_static(x, &starts, &lengths, strides)?;
        acc = Some(match acc {
            None => piece,
            Some(a) => same(f, &a, &piece)?,
        });
    }
    acc.ok_or_else(|| Error::Argument("empty window".into()))
}

/// Where the windows of a window op lie in its (padded) input.
/// Outputs of `window_max`/`window_min` a compute thread takes at a time, at least.
const MIN_PER_TASK: usize = 4096;

struct Placement<'a> {
    dims: &'a [usize],
    strides: &'a [usize],
    dilations: &'a [usize],
    out_shape: &'a [usize],
}

/// `window_max` (`max`) or `window_min` of an f32 tensor on the host in one pass: each output
/// element reads its window straight from the input, output rows in parallel (unfolding copied
/// the input once per windowed axis and reduced it in as many passes). NaN propagates: an
/// element is replaced by a later one that is NaN or strictly greater (less); ties keep the
/// first.
fn extremum_f32(x: &Tensor, g: &Placement, max: bool) -> Result<Tensor> {
    use rayon::prelude::*;
    // read in place when contiguous (a copy of a large input costs more than the reduction)
    let data = x.f32_values()?;
    let r = x.rank();
    let mut in_strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * x.shape()[i + 1];
    }
    // the flat offset of every window position, in row-major window order
    let mut offsets = vec![0usize];
    for ((&stride, &d), &dims) in in_strides.iter().zip(g.dilations).zip(g.dims) {
        let step = d * stride;
        offsets = offsets
            .iter()
            .flat_map(|&o| (0..dims).map(move |w| o + w * step))
            .collect();
    }
    let last = r - 1;
    let row_len = g.out_shape[last];
    let col_step = g.strides[last] * in_strides[last];
    let rows = crate::tensor::numel(&g.out_shape[..last]);
    let mut out = vec![0f32; rows * row_len];
    let better = |v: f32, acc: f32| v.is_nan() || if max { v > acc } else { v < acc };
    // rows handed out in groups of at least MIN_PER_TASK outputs (rows are short: a task per
    // row costs more than its work)
    out.par_chunks_mut(row_len)
        .with_min_len(MIN_PER_TASK.div_ceil(row_len.max(1)))
        .enumerate()
        .for_each(|(row, dst)| {
            // the input offset of this output row's first window
            let (mut rest, mut base) = (row, 0);
            for i in (0..last).rev() {
                base += (rest % g.out_shape[i]) * g.strides[i] * in_strides[i];
                rest /= g.out_shape[i];
            }
            for (j, d) in dst.iter_mut().enumerate() {
                let start = base + j * col_step;
                let mut acc = data[start + offsets[0]];
                if !acc.is_nan() {
                    for &o in &offsets[1..] {
                        let v = data[start + o];
                        if better(v, acc) {
                            acc = v;
                            if v.is_nan() {
                                break;
                            }
                        }
                    }
                }
                *d = acc;
            }
        });
    let shape = g.out_shape.to_vec();
    let data = burn::tensor::TensorData::new(out, shape.clone());
    Tensor::from_data(data, crate::DType::F32, shape, x.device())
}
