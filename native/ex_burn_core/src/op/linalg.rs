//! Linear-algebra ops Burn lacks, composed from the op table on the device.
//!
//! `triangular_solve` reduces every variant (upper, right side, transposed `a`) to a
//! lower-triangular left-side solve by transposes and flips, then runs forward substitution
//! one row at a time over all batch entries and right-hand sides at once, in f64 (as
//! `Nx.BinaryBackend` does), rounding once at the end.

use super::binary;
use super::dot::{self, Contraction};
use super::Arith;
use super::Transform;
use super::{shape, util, Precision};
use crate::{DType, Error, Result, Tensor};

/// Solves `a x = b` (`left_side`) or `x a = b` for triangular `a` of shape `[..., n, n]`;
/// `b` is `[..., n, m]`, `[..., m, n]` (right side) or `[..., n]`.
pub(super) fn triangular_solve(
    a: &Tensor,
    b: &Tensor,
    lower: bool,
    left_side: bool,
    transform: Transform,
) -> Result<Tensor> {
    if !a.dtype().is_float() || a.dtype() != b.dtype() {
        return Err(Error::Dtype(format!(
            "expects float operands of one type, got {} and {}",
            a.dtype(),
            b.dtype()
        )));
    }
    let ra = a.rank();
    if ra < 2 || a.shape()[ra - 1] != a.shape()[ra - 2] {
        return Err(Error::Shape(format!(
            "a must be a (batch of) square matrices, got {:?}",
            a.shape()
        )));
    }
    let n = a.shape()[ra - 1];
    let batch: Vec<usize> = a.shape()[..ra - 2].to_vec();
    let nb: usize = batch.iter().product();
    let vector = b.rank() == ra - 1;
    let batch_ok = b.rank() >= ra - 2 && b.shape()[..ra - 2] == batch[..];
    if !(vector || b.rank() == ra) || !batch_ok {
        return Err(Error::Shape(format!(
            "b of shape {:?} does not match a of shape {:?} (a vector or matrix per matrix of a)",
            b.shape(),
            a.shape()
        )));
    }
    let b3 = match (vector, left_side) {
        (true, true) => b.reshape(vec![nb, n, 1])?,
        (true, false) => b.reshape(vec![nb, 1, n])?,
        (false, _) => {
            let rb = b.rank();
            b.reshape(vec![nb, b.shape()[rb - 2], b.shape()[rb - 1]])?
        }
    };
    let mut a3 = a.reshape(vec![nb, n, n])?;
    let mut lower = lower;
    if transform == Transform::Transpose {
        a3 = swap(&a3)?;
        lower = !lower;
    }
    // x a = b  <=>  a^T x^T = b^T
    let mut b3 = if left_side { b3 } else { swap(&b3)? };
    if !left_side {
        a3 = swap(&a3)?;
        lower = !lower;
    }
    if b3.shape()[1] != n {
        return Err(Error::Shape(format!(
            "b of shape {:?} does not match a of shape {:?}",
            b.shape(),
            a.shape()
        )));
    }
    // An upper-triangular system is a lower one with rows and columns reversed.
    if !lower {
        a3 = util::flip(&a3, &[1, 2]);
        b3 = util::flip(&b3, &[1]);
    }
    // Substitution accumulates rounding row after row: narrower floats compute in f64, on the
    // host where the device computes no f64 (the wgpu devices).
    let (work, device) = (DType::F64, a.device());
    let mut x = if super::wide::rounds_from_f64(device) {
        forward_substitution(&a3.cast(work)?, &b3.cast(work)?)?.cast(a.dtype())?
    } else {
        util::on_host(&[&a3, &b3], |h| {
            forward_substitution(&h[0].cast(work)?, &h[1].cast(work)?)?.cast(a.dtype())
        })?
    };
    if !lower {
        x = util::flip(&x, &[1]);
    }
    let x = if left_side { x } else { swap(&x)? };
    x.reshape(b.shape().to_vec())
}

/// Solves `a x = b` for lower-triangular `a` of shape `[nb, n, n]` and `b` of `[nb, n, m]`.
fn forward_substitution(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (nb, n, m) = (b.shape()[0], b.shape()[1], b.shape()[2]);
    let dtype = b.dtype();
    let row = |t: &Tensor, i: usize, cols: (usize, usize)| {
        shape::slice_static(t, &[0, i, cols.0], &[nb, 1, cols.1 - cols.0], &[1, 1, 1])
    };
    let spec = Contraction {
        contract_a: &[2],
        batch_a: &[0],
        contract_b: &[1],
        batch_b: &[0],
    };
    let mut rows: Vec<Tensor> = Vec::with_capacity(n);
    for i in 0..n {
        let mut rhs = row(b, i, (0, m))?;
        if i > 0 {
            let coeffs = row(a, i, (0, i))?;
            let solved = util::cat(&rows, 1);
            let known = dot::dot(&coeffs, &solved, &spec, Some(dtype), Precision::Highest)?;
            rhs = binary::binary(Arith::Subtract, &rhs, &known, dtype)?;
        }
        let diag = row(a, i, (i, i + 1))?;
        rows.push(binary::binary(Arith::Divide, &rhs, &diag, dtype)?);
    }
    if rows.is_empty() {
        return Ok(b.clone());
    }
    Ok(util::cat(&rows, 1))
}

/// Swaps the last two axes of a rank-3 tensor.
fn swap(t: &Tensor) -> Result<Tensor> {
    util::permute(t, &[0, 2, 1])
}
