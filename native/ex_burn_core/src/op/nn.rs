//! Neural-network helpers of the op table: softmax and log_softmax along an axis.

use super::util;
use crate::dtype::Kind;
use crate::tensor::B;
use crate::{Result, Tensor};
use burn::tensor::ops::ActivationOps;

/// Softmax (or log-softmax) along `axis`; integer input computes in f32.
pub(super) fn softmax(x: &Tensor, axis: usize, log: bool) -> Result<Tensor> {
    util::axis(axis, x.rank())?;
    let t = x.cast(x.dtype().to_floating())?;
    if t.numel() == 0 {
        return Ok(t);
    }
    let axis = if t.rank() == 0 { 0 } else { axis };
    let p = if log {
        B::log_softmax(t.prim(), axis)
    } else {
        B::softmax(t.prim(), axis)
    };
    Ok(Tensor::from_prim(p, Kind::Float, t.shape().to_vec()))
}
