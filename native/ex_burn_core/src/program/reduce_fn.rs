//! Folds of a function over a tensor: `reduce` over axes and `window_reduce` over windows.
//!
//! The function is a sub-program of (element, accumulator), element-wise by construction, so
//! it runs once per reduced position on whole slices: for `reduce` on the slice of all kept
//! positions, for `window_reduce` on the strided view of every window's k-th element. Elements
//! are folded in row-major order, as `Nx.BinaryBackend` does; the accumulator keeps its type.

use super::Program;
use crate::op::{scatter, shape, util};
use crate::{Device, Error, Result, Tensor};

/// Folds `body` over `axes` of `x` starting from the scalar `acc`.
pub(super) fn reduce(
    x: &Tensor,
    acc: &Tensor,
    axes: &Option<Vec<usize>>,
    keep: bool,
    body: &Program,
    device: Device,
) -> Result<Tensor> {
    scalar_acc(acc)?;
    let r = x.rank();
    let axes = util::axes_sorted(axes, r)?;
    let kept: Vec<usize> = (0..r).filter(|a| !axes.contains(a)).collect();
    let rest: Vec<usize> = kept.iter().map(|&a| x.shape()[a]).collect();
    let n: usize = axes.iter().map(|&a| x.shape()[a]).product();
    let perm: Vec<usize> = axes.iter().chain(&kept).copied().collect();
    let xt = util::permute(x, &perm)?.reshape([vec![n], rest.clone()].concat())?;
    let mut state = util::broadcast_to(acc, &rest)?;
    let lengths = [vec![1], rest.clone()].concat();
    let ones = vec![1; rest.len() + 1];
    for i in 0..n {
        let mut starts = vec![0; rest.len() + 1];
        starts[0] = i;
        let xi = shape::slice_static(&xt, &starts, &lengths, &ones)?.reshape(rest.clone())?;
        state = step(body, xi, state, device)?;
    }
    let shape: Vec<usize> = if keep {
        (0..r)
            .map(|a| if axes.contains(&a) { 1 } else { x.shape()[a] })
            .collect()
    } else {
        rest
    };
    state.reshape(shape)
}

/// Window geometry of `window_reduce`.
pub(super) struct Window<'a> {
    pub(super) dims: &'a [usize],
    pub(super) strides: Vec<usize>,
    pub(super) padding: Vec<(i64, i64)>,
    pub(super) dilations: Vec<usize>,
}

/// Folds `body` over each window of `x` (padded with the scalar `acc`).
pub(super) fn window_reduce(
    x: &Tensor,
    acc: &Tensor,
    w: &Window,
    body: &Program,
    device: Device,
) -> Result<Tensor> {
    scalar_acc(acc)?;
    let r = x.rank();
    if w.dims.len() != r || w.strides.len() != r || w.padding.len() != r || w.dilations.len() != r {
        return Err(Error::Argument(format!(
            "window dimensions, strides, padding and dilations need {r} entries"
        )));
    }
    if w.dims
        .iter()
        .chain(&w.strides)
        .chain(&w.dilations)
        .any(|&v| v == 0)
    {
        return Err(Error::Argument(
            "window dimensions, strides and dilations must be positive".into(),
        ));
    }
    let config: Vec<(i64, i64, i64)> = w.padding.iter().map(|&(lo, hi)| (lo, hi, 0)).collect();
    let padded = shape::pad(x, &acc.cast(x.dtype())?, &config)?;
    let counts: Vec<usize> = (0..r)
        .map(|i| {
            let span = (w.dims[i] - 1) * w.dilations[i] + 1;
            let size = padded.shape()[i];
            if size < span {
                0
            } else {
                (size - span) / w.strides[i] + 1
            }
        })
        .collect();
    let mut state = util::broadcast_to(acc, &counts)?;
    if counts.contains(&0) {
        return Ok(state);
    }
    let extent: Vec<usize> = (0..r).map(|i| (counts[i] - 1) * w.strides[i] + 1).collect();
    for o in scatter::window_offsets(w.dims) {
        let starts: Vec<usize> = (0..r).map(|i| o[i] * w.dilations[i]).collect();
        let view = shape::slice_static(&padded, &starts, &extent, &w.strides)?;
        state = step(body, view, state, device)?;
    }
    Ok(state)
}

/// One application of the body; the accumulator keeps its shape and type.
fn step(body: &Program, x: Tensor, acc: Tensor, device: Device) -> Result<Tensor> {
    let (shape, dtype) = (acc.shape().to_vec(), acc.dtype());
    let out = body
        .run(vec![x, acc], device)?
        .pop()
        .ok_or_else(|| Error::Execution("the fold body returned nothing".into()))?;
    let out = util::broadcast_to(&out, &shape)?;
    out.cast(dtype)
}

fn scalar_acc(acc: &Tensor) -> Result<()> {
    if acc.rank() != 0 {
        return Err(Error::Shape(format!(
            "the accumulator must be a scalar, got shape {:?}",
            acc.shape()
        )));
    }
    Ok(())
}
