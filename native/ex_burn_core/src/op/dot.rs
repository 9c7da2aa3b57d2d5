//! `dot` as a general contraction with batch axes, lowered to one batched Burn matmul:
//! a -> [batch, free_a, contract], b -> [batch, contract, free_b], result axes are
//! batch ++ free_a ++ free_b (Nx's order).
//!
//! GPU backends: with the CUDA kernels installed (`native/ex_burn_cuda`, through
//! [`crate::kernels`]), large f32/f16/bf16 products run on cuBLAS when it loads (f32 on TF32
//! tensor cores, or in full f32 for `Precision::Highest`). Otherwise
//! Burn's matmul kernels take f16/bf16/f32 only, so f64 and integer products there are computed
//! as a broadcast multiply and a sum over the contracted axis; f32 products use TF32 tensor
//! cores unless `Precision::Highest` asks for split products.

use super::binary;
use super::Arith;
use super::{util, Precision};
use crate::dtype::Kind;
use crate::tensor::{numel, Prim, B};
use crate::{DType, Error, Result, Scalar, Tensor};
use burn::tensor::ops::{FloatTensorOps, IntTensorOps};

/// The axes of a contraction.
pub(crate) struct Contraction<'a> {
    /// Contracted axes of the left operand.
    pub contract_a: &'a [usize],
    /// Batch axes of the left operand.
    pub batch_a: &'a [usize],
    /// Contracted axes of the right operand.
    pub contract_b: &'a [usize],
    /// Batch axes of the right operand.
    pub batch_b: &'a [usize],
}

/// Above this many multiply-adds the broadcast fallback would need too much memory.
const FALLBACK_LIMIT: usize = 1 << 27;

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

/// Contracts `a` and `b` as `spec` says, computing in `out` (default: the merged type).
pub(crate) fn dot(
    a: &Tensor,
    b: &Tensor,
    spec: &Contraction,
    out: Option<DType>,
    precision: Precision,
) -> Result<Tensor> {
    let (ca, ba, cb, bb) = (spec.contract_a, spec.batch_a, spec.contract_b, spec.batch_b);
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
    let on_gpu = !a.device().is_host();
    if on_gpu && !out.is_float() {
        // GPU matmuls take floats only, and integer products through broadcast sums gave
        // wrong batched results on CUDA: integer dots run on the host, exactly.
        return util::on_host(&[a, b], |h| dot(&h[0], &h[1], spec, Some(out), precision));
    }
    let perm_a: Vec<usize> = [ba, &fa, ca].concat();
    let perm_b: Vec<usize> = [bb, cb, &fb].concat();
    let (a, b) = (a.cast(out)?, b.cast(out)?);
    // exact small f32 products: f64 products summed in f64, rounded once
    if out == DType::F32 && nb * m * n * k <= super::wide::EXACT_F32_WORK {
        let a3 = util::permute(&a, &perm_a)?.reshape(vec![nb, m, k])?;
        let b3 = util::permute(&b, &perm_b)?.reshape(vec![nb, k, n])?;
        let r = if !on_gpu {
            small_f32(&a3, &b3)?
        } else if super::wide::f64_device(a.device()) {
            // on the device (`wide`)
            super::wide::in_f64(&[&a3, &b3], |w| broadcast_product(&w[0], &w[1]))?
        } else {
            // the wgpu devices compute no f64: on the host (at most 2^16 multiply-adds)
            util::on_host(&[&a3, &b3], |h| small_f32(&h[0], &h[1]))?
        };
        return r.reshape(shape);
    }
    if direct_matmul(&fa, ca, &fb, on_gpu, out) {
        // One axis per group: the permuted views are the matmul's operands as they are (the
        // CPU GEMM reads them through their strides; reshaping would copy a transposed view).
        let (a, b) = (util::permute(&a, &perm_a)?, util::permute(&b, &perm_b)?);
        let b = row_major_copy(&b, m, CopyWhen::ColumnMajor)?.unwrap_or(b);
        let a = row_major_copy(&a, n, CopyWhen::AliasedColumns)?.unwrap_or(a);
        return matmul(&a, &b)?.reshape(shape);
    }
    let t = crate::profile::start_detail();
    let a3 = util::permute(&a, &perm_a)?.reshape(vec![nb, m, k])?;
    let b3 = util::permute(&b, &perm_b)?.reshape(vec![nb, k, n])?;
    crate::profile::record(t, || "dot: operands as [nb, m, k], [nb, k, n]".into());
    let res = if let Some(r) = gpu_library_matmul(&a3, &b3, precision)? {
        r
    } else if on_gpu && !matches!(out, DType::F16 | DType::BF16 | DType::F32) {
        broadcast_product(&a3, &b3)?
    } else if on_gpu
        && out == DType::F32
        && precision == Precision::Highest
        && a3.device().check_dtype(DType::BF16).is_ok()
    {
        // (a GPU without bf16, a wgpu device, multiplies f32 without reduced-precision units)
        split_product(&a3, &b3)?
    } else {
        matmul(&a3, &b3)?
    };
    res.reshape(shape)
}

/// The product by the device kernels (the GPU vendor's GEMM library: cuBLAS with the CUDA
/// kernels) where they take it; `None`: Burn's kernels compute it.
fn gpu_library_matmul(a3: &Tensor, b3: &Tensor, precision: Precision) -> Result<Option<Tensor>> {
    let Some(k) = a3.kernels() else {
        return Ok(None);
    };
    Ok(k.matmul(a3.operand(), b3.operand(), precision)?.map(|p| {
        // the kernels take rank-3 operands only
        let (sa, sb) = (a3.shape(), b3.shape());
        Tensor::from_kernel(p, vec![sa[0].max(sb[0]), sa[1], sb[2]])
    }))
}

/// Whether a float contraction on the CPU can run as one matmul of the permuted operands
/// (batch axes first, then `[m, k]` and `[k, n]`), without reshaping them: one free axis on
/// each side and one contracted axis; the CPU GEMM walks batch axes through their strides.
fn direct_matmul(fa: &[usize], ca: &[usize], fb: &[usize], on_gpu: bool, out: DType) -> bool {
    !on_gpu
        && matches!(out, DType::F32 | DType::F64 | DType::F16)
        && fa.len() == 1
        && ca.len() == 1
        && fb.len() == 1
}

/// Products of at least this many multiply-adds copy a column-major f32 operand to row-major
/// first where [`row_major_copy`] says so.
const COPY_FROM: usize = 1 << 24;

/// Which column-major operands [`row_major_copy`] copies.
#[derive(Clone, Copy, PartialEq)]
enum CopyWhen {
    /// Every one (a right operand: a transposed weight, `g . W^T` in a backward pass). The
    /// CPU GEMM packs such a right operand markedly slower than a row-major one, and for
    /// products this large a blocked transpose costs less than the difference.
    ColumnMajor,
    /// Those whose columns lie a multiple of 256 elements (1 KiB) apart (a left operand:
    /// `h^T . g`, the weight gradient of a layer of 512, 1024 or 4096 units). The GEMM reads
    /// such a left operand's columns where they are; at a stride of 4 KiB they share cache
    /// sets. The gemm crate alone, the product cut as `split_product` cuts it, min of 30
    /// (`bench/results/cpu_peers.md`): 1024 x 1024 x 512 on a 16-core Xeon 1.13-1.20 ms read in
    /// place, 0.86-1.02 ms with the copy; on two EPYC cores, with columns 512 to 2048 elements
    /// apart, 1-10% faster with the copy; columns 784 apart 5-10% slower with it on the Xeon.
    AliasedColumns,
}

/// A row-major copy of the f32 host matrix `t` (`[rows, cols]`, an operand of a product with
/// `other` elements on the other operand's free axis) when it is stored column-major, `which`
/// takes it and the product is large. `None`: use `t` as it is.
fn row_major_copy(t: &Tensor, other: usize, which: CopyWhen) -> Result<Option<Tensor>> {
    if t.rank() != 2 || t.device() != crate::Device::Cpu {
        return Ok(None);
    }
    let (rows, cols) = (t.shape()[0], t.shape()[1]);
    if rows.saturating_mul(cols).saturating_mul(other) < COPY_FROM {
        return Ok(None);
    }
    let Some((data, offset, strides)) = t.host_f32_strided() else {
        return Ok(None);
    };
    if strides.len() != 2 || strides[0] != 1 || strides[1] != rows as isize {
        return Ok(None);
    }
    if which == CopyWhen::AliasedColumns && rows % 256 != 0 {
        return Ok(None);
    }
    // column-major [rows, cols] is row-major [cols, rows] at `offset`
    let src = data
        .get(offset..offset + rows * cols)
        .ok_or_else(|| Error::Execution("dot: operand view outside its storage".into()))?;
    // written once, by the transpose's threads (no zeroing pass on this thread first)
    let mut out: Vec<f32> = Vec::with_capacity(rows * cols);
    transpose_into(
        src,
        cols,
        rows,
        &mut out.spare_capacity_mut()[..rows * cols],
    )?;
    // SAFETY: `transpose_into` writes every element of its destination.
    unsafe { out.set_len(rows * cols) };
    Tensor::from_host_f32(out, vec![rows, cols]).map(Some)
}

/// Writes the transpose of the row-major `[rows, cols]` matrix `src` into `dst` (`[cols,
/// rows]`), in 8 x 8 tiles, tile columns spread over the CPU compute threads. Eight rows per
/// tile, because rows of a power-of-two width (weights of 1024 or 4096 columns) lie a multiple
/// of 4 KiB apart and share one set of the 8-way L1 cache: a 32-row tile evicted its own lines
/// (a 1024 x 1024 transpose took 1.3 ms on two EPYC cores, 0.42 ms with 8 x 8 tiles).
fn transpose_into(
    src: &[f32],
    rows: usize,
    cols: usize,
    dst: &mut [std::mem::MaybeUninit<f32>],
) -> Result<()> {
    const T: usize = 8;
    crate::threads::for_each_chunk_mut(dst, T * rows, |cb, block| {
        // `block` holds dst rows c0..c0 + T, i.e. source columns c0..
        let c0 = cb * T;
        let cn = T.min(cols - c0);
        for r0 in (0..rows).step_by(T) {
            let rn = T.min(rows - r0);
            for c in 0..cn {
                let out = &mut block[c * rows + r0..c * rows + r0 + rn];
                for (r, o) in out.iter_mut().enumerate() {
                    o.write(src[(r0 + r) * cols + c0 + c]);
                }
            }
        }
    })
}

/// `[.., m, k] x [.., k, n]` (equal batch axes first) in the operands' type.
fn matmul(a3: &Tensor, b3: &Tensor) -> Result<Tensor> {
    let out = a3.dtype();
    if a3.kind() != Kind::Float && !matches!(out, DType::S32 | DType::S64) {
        // The CPU backend multiplies s32 and s64 only; products of other integer types wrap
        // identically when computed in s64 and narrowed back.
        return matmul(&a3.cast(DType::S64)?, &b3.cast(DType::S64)?)?.cast(out);
    }
    if let Some(t) = super::host_gemm::matmul_f32(a3, b3)? {
        return Ok(t);
    }
    let prim = match a3.kind() {
        Kind::Float => B::float_matmul(a3.prim(), b3.prim()),
        _ => B::int_matmul(a3.int_prim()?, b3.int_prim()?),
    };
    let (r, rank) = (a3.shape(), a3.rank());
    let mut shape = r[..rank - 1].to_vec();
    shape.push(b3.shape()[rank - 1]);
    let kind = if a3.kind() == Kind::Float {
        Kind::Float
    } else {
        Kind::Int
    };
    Ok(Tensor::from_prim(prim, kind, shape))
}

/// `[nb, m, k] x [nb, k, n]` of f32 host tensors, each result the f64 sum of exact f64
/// products, rounded once.
fn small_f32(a3: &Tensor, b3: &Tensor) -> Result<Tensor> {
    let (nb, m, k, n) = (a3.shape()[0], a3.shape()[1], a3.shape()[2], b3.shape()[2]);
    let (av, bv) = (a3.to_f32_vec()?, b3.to_f32_vec()?);
    let mut out = vec![0f32; nb * m * n];
    for (bi, block) in out.chunks_mut(m * n).enumerate() {
        let (a, b) = (&av[bi * m * k..][..m * k], &bv[bi * k * n..][..k * n]);
        for (i, row) in block.chunks_mut(n).enumerate() {
            for (j, o) in row.iter_mut().enumerate() {
                let s: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
                *o = s as f32;
            }
        }
    }
    let shape = vec![nb, m, n];
    Tensor::from_host_f32(out, shape)
}

/// [nb, m, k] x [nb, k, n] as sum_k of [nb, m, k, 1] * [nb, 1, k, n].
fn broadcast_product(a3: &Tensor, b3: &Tensor) -> Result<Tensor> {
    let (nb, m, k, n) = (a3.shape()[0], a3.shape()[1], a3.shape()[2], b3.shape()[2]);
    if nb * m * k * n > FALLBACK_LIMIT {
        return Err(Error::Unsupported(format!(
            "dot in {} of this size ({nb}x{m}x{k}x{n}) on this GPU: Burn's GPU matmul takes f16, bf16 \
             and f32 only; cast to f32 (precision: :highest for full f32 accuracy)",
            a3.dtype()
        )));
    }
    let a4 = a3.reshape(vec![nb, m, k, 1])?;
    let b4 = b3.reshape(vec![nb, 1, k, n])?;
    let prod = binary::binary(Arith::Multiply, &a4, &b4, a3.dtype())?;
    let p = match prod.kind() {
        Kind::Float => B::float_sum_dim(prod.prim(), 2),
        _ => B::int_sum_dim(prod.prim(), 2),
    };
    Ok(Tensor::from_prim(p, prod.kind(), vec![nb, m, n]))
}

/// Full-f32 product from TF32 tensor-core products: each operand splits exactly into
/// `hi = f32(bf16(x))` (8 significant bits, exact in TF32) and `lo = x - hi`, and
/// a*b = hi_a*hi_b + hi_a*lo_b + lo_a*hi_b + lo_a*lo_b, each product in TF32. Casts do the
/// split, so fused kernels cannot contract it away (an FMA would undo a Veltkamp split).
fn split_product(a3: &Tensor, b3: &Tensor) -> Result<Tensor> {
    let split = |t: &Tensor| -> Result<(Prim, Prim)> {
        let hi = t.cast(DType::BF16)?.cast(DType::F32)?.prim();
        let lo = B::float_sub(t.prim(), hi.clone());
        Ok((hi, lo))
    };
    let (ah, al) = split(a3)?;
    let (bh, bl) = split(b3)?;
    let small = B::float_add(
        B::float_matmul(al.clone(), bl.clone()),
        B::float_add(
            B::float_matmul(ah.clone(), bl),
            B::float_matmul(al, bh.clone()),
        ),
    );
    let sum = B::float_add(B::float_matmul(ah, bh), small);
    let (nb, m, n) = (a3.shape()[0], a3.shape()[1], b3.shape()[2]);
    Ok(Tensor::from_prim(sum, Kind::Float, vec![nb, m, n]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn transpose_into_is_the_transpose_for_every_shape_of_tiles() {
        for (rows, cols) in [
            (1, 1),
            (7, 9),
            (8, 8),
            (13, 37),
            (64, 1024),
            (1024, 3),
            (33, 257),
        ] {
            let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            // NaN where the transpose would miss an element
            let mut dst = vec![std::mem::MaybeUninit::new(f32::NAN); rows * cols];
            super::transpose_into(&src, rows, cols, &mut dst).unwrap();
            // SAFETY: every element was initialised (NaN, or the transpose's value).
            let dst: Vec<f32> = dst.iter().map(|v| unsafe { v.assume_init() }).collect();
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        dst[c * rows + r],
                        src[r * cols + c],
                        "{rows}x{cols} at {r},{c}"
                    );
                }
            }
        }
    }
}
