//! `dot` as a general contraction with batch axes, lowered to one batched Burn matmul:
//! a -> [batch, free_a, contract], b -> [batch, contract, free_b], result axes are
//! batch ++ free_a ++ free_b (Nx's order).

use super::util;
use crate::dtype::Kind;
use crate::tensor::{numel, B};
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{FloatTensorOps, IntTensorOps};

fn free_axes(rank: usize, used: &[&[usize]]) -> Vec<usize> {
    (0..rank)
        .filter(|a| !used.iter().any(|u| u.contains(a)))
        .collect()
}

fn check(axes: &[usize], rank: usize, what: &str) -> Result<()> {
    let mut seen = vec![false; rank];
    for &a in axes {
        if a >= rank || seen[a] {
            return Err(Error::Argument(format!(
                "{what} axes {axes:?} are invalid for rank {rank}"
            )));
        }
        seen[a] = true;
    }
    Ok(())
}

/// Contracts `ca` axes of `a` with `cb` axes of `b`, batching over `ba`/`bb`.
pub(crate) fn dot(
    a: &Tensor,
    ca: &[usize],
    ba: &[usize],
    b: &Tensor,
    cb: &[usize],
    bb: &[usize],
    out: Option<DType>,
) -> Result<Tensor> {
    let out = out.unwrap_or_else(|| DType::merge(a.dtype(), b.dtype()));
    check(&[ca, ba].concat(), a.rank(), "left")?;
    check(&[cb, bb].concat(), b.rank(), "right")?;
    if ca.len() != cb.len() || ba.len() != bb.len() {
        return Err(Error::Argument(format!(
            "contract axes {ca:?}/{cb:?} or batch axes {ba:?}/{bb:?} differ in length"
        )));
    }
    let (sa, sb) = (a.shape(), b.shape());
    for (&x, &y) in ca.iter().zip(cb).chain(ba.iter().zip(bb)) {
        if sa[x] != sb[y] {
            return Err(Error::Shape(format!(
                "dot: axis {x} of {sa:?} ({}) does not match axis {y} of {sb:?} ({})",
                sa[x], sb[y]
            )));
        }
    }
    let fa = free_axes(a.rank(), &[ca, ba]);
    let fb = free_axes(b.rank(), &[cb, bb]);
    let dims = |s: &[usize], ax: &[usize]| ax.iter().map(|&i| s[i]).collect::<Vec<_>>();
    let (batch, free_a, free_b, k) = (
        dims(sa, ba),
        dims(sa, &fa),
        dims(sb, &fb),
        numel(&dims(sa, ca)),
    );
    let (nb, m, n) = (numel(&batch), numel(&free_a), numel(&free_b));
    let shape: Vec<usize> = [batch.clone(), free_a, free_b].concat();

    if nb * m * n == 0 || k == 0 {
        return util::full(&shape, out, Scalar::I(0), &a.dispatch_device());
    }
    let perm_a: Vec<usize> = [ba, &fa, ca].concat();
    let perm_b: Vec<usize> = [bb, cb, &fb].concat();
    let a3 = util::permute(&a.cast(out)?, &perm_a)?.reshape(vec![nb, m, k])?;
    let b3 = util::permute(&b.cast(out)?, &perm_b)?.reshape(vec![nb, k, n])?;
    let prim = match a3.kind() {
        Kind::Float => B::float_matmul(a3.prim(), b3.prim()),
        _ => B::int_matmul(a3.int_prim()?, b3.int_prim()?),
    };
    let kind = if out.is_float() {
        Kind::Float
    } else {
        Kind::Int
    };
    Ok(Tensor::from_prim(prim, kind, shape))
}
