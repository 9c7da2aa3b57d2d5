//! f32 products on the host: the `gemm` crate on strided views, writing into buffers ExBurn
//! allocates. Burn's CPU backend (burn-flex 0.21) makes every matmul result with
//! `FlexTensor::empty`, which zero-fills a byte vector and then copies it once more into an
//! aligned allocation (`Bytes::from_bytes_vec` enforces a 16-byte alignment that a byte
//! vector never reports): two passes over each result on one thread, on fresh pages, before
//! the GEMM writes it. In the CPU MLP step (`bench/cpu_peers.exs`) those passes and their
//! page faults were most of the time the compute threads waited.

use super::util::SharedPtr;
use super::view::View;
use crate::{DType, Device, Result, Tensor};
use rayon::prelude::*;

/// Products of at least this many multiply-adds per matrix let the GEMM use every compute
/// thread (burn-flex's threshold).
const PARALLEL_FROM: usize = 192 * 192 * 192;
/// Batches of smaller matrices are spread over the threads, one matrix each, from this much
/// work in all (burn-flex's threshold).
const BATCH_PARALLEL_FROM: usize = 128 * 128 * 128;

/// Products of fewer multiply-adds than this (and at least [`PARALLEL_FROM`]) are split into
/// one block of columns (or rows) per compute thread, each multiplied on its thread; larger
/// ones let the gemm crate spread its own blocks (which share the packed operands).
const SPLIT_BELOW: usize = 1 << 31;

/// Column (or row) blocks are multiples of this many elements.
const SPLIT_ALIGN: usize = 16;

/// `dst` (`[m, n]`, row-major) = `a` (`[m, k]`) times `b` (`[k, n]`), the larger of `m` and
/// `n` split into one block per compute thread, each block's product on one thread.
///
/// # Safety
/// As [`gemm_into`], with `dst` of `m * n` elements of row stride `n`.
unsafe fn split_product(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    (a, a_rc): (*const f32, (isize, isize)),
    (b, b_rc): (*const f32, (isize, isize)),
) {
    let threads = rayon::current_num_threads().max(1);
    let by_columns = n >= m;
    let along = if by_columns { n } else { m };
    let block = along.div_ceil(threads).div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN;
    // the blocks write disjoint parts of `dst` and only read `a` and `b`
    let shared = (
        SharedPtr(dst),
        SharedPtr(a.cast_mut()),
        SharedPtr(b.cast_mut()),
    );
    (0..along.div_ceil(block)).into_par_iter().for_each(|i| {
        let (dst, a, b) = (
            shared.0.get(),
            shared.1.get().cast_const(),
            shared.2.get().cast_const(),
        );
        let start = i * block;
        let len = block.min(along - start);
        // SAFETY: block `i` covers columns (rows) `start..start + len`, inside the matrices;
        // its part of `dst` is written by this block only.
        unsafe {
            if by_columns {
                gemm_into(
                    (m, len, k),
                    (dst.add(start), n as isize),
                    a,
                    a_rc,
                    b.offset(start as isize * b_rc.1),
                    b_rc,
                    gemm::Parallelism::None,
                )
            } else {
                gemm_into(
                    (len, n, k),
                    (dst.add(start * n), n as isize),
                    a.offset(start as isize * a_rc.0),
                    a_rc,
                    b,
                    b_rc,
                    gemm::Parallelism::None,
                )
            }
        }
    });
}

/// `dst` (`[m, n]`, unit column stride, row stride `dst_rs`) = `lhs` (`[m, k]`, strides `(row, column)`) times `rhs`
/// (`[k, n]`, strides `(row, column)`); `dst` is written, never read.
///
/// # Safety
/// Every element the strides reach from `lhs` and `rhs` must be readable, and every element
/// of `dst`'s `[m, n]` matrix must be valid for writing.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_into(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs): (*mut f32, isize),
    lhs: *const f32,
    (lhs_rs, lhs_cs): (isize, isize),
    rhs: *const f32,
    (rhs_rs, rhs_cs): (isize, isize),
    parallelism: gemm::Parallelism,
) {
    // SAFETY: the caller's guarantees are gemm's; with `read_dst` false gemm only writes dst.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs,
            false,
            lhs,
            lhs_cs,
            lhs_rs,
            rhs,
            rhs_cs,
            rhs_rs,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `[batch.., m, k] x [batch.., k, n]` (equal batch axes) of f32 host tensors of any layout,
/// into a new row-major tensor; `Ok(None)` when the operands are not that (another type or
/// device, other ranks or batch axes, a view outside its storage: Burn computes those).
pub(crate) fn matmul_f32(a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    let on_host = |t: &Tensor| t.dtype() == DType::F32 && t.device() == Device::Cpu;
    let rank = a.rank();
    if !on_host(a) || !on_host(b) || rank < 2 || b.rank() != rank {
        return Ok(None);
    }
    let batch = &a.shape()[..rank - 2];
    if b.shape()[..rank - 2] != *batch || a.shape()[rank - 1] != b.shape()[rank - 2] {
        return Ok(None);
    }
    let (m, k, n) = (
        a.shape()[rank - 2],
        a.shape()[rank - 1],
        b.shape()[rank - 1],
    );
    let (Some(av), Some(bv)) = (View::of_f32(a), View::of_f32(b)) else {
        return Ok(None);
    };
    let nb: usize = batch.iter().product();
    let mut shape = batch.to_vec();
    shape.extend([m, n]);
    let len = crate::size::numel(&shape)? as usize;
    if len == 0 || k == 0 {
        // nothing to multiply: Burn's zeros
        return Ok(None);
    }
    let (a_rc, b_rc) = (
        (av.strides[rank - 2], av.strides[rank - 1]),
        (bv.strides[rank - 2], bv.strides[rank - 1]),
    );
    let fits = (0..nb).all(|bi| {
        av.spans(av.base(bi, batch), [(m, a_rc.0), (k, a_rc.1)])
            && bv.spans(bv.base(bi, batch), [(k, b_rc.0), (n, b_rc.1)])
    });
    if !fits {
        return Ok(None);
    }
    let per_matrix = m.saturating_mul(n).saturating_mul(k);
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let one = |bi: usize, dst: *mut f32, parallelism: gemm::Parallelism| {
        // SAFETY: every element of matrix `bi` of both views lies inside its storage (checked
        // above), and `dst` points at that matrix's m * n elements of `out`'s capacity.
        unsafe {
            gemm_into(
                (m, n, k),
                (dst, n as isize),
                av.data.as_ptr().offset(av.base(bi, batch)),
                a_rc,
                bv.data.as_ptr().offset(bv.base(bi, batch)),
                b_rc,
                parallelism,
            )
        }
    };
    let spare = &mut out.spare_capacity_mut()[..len];
    if per_matrix < PARALLEL_FROM && nb > 1 && nb.saturating_mul(per_matrix) >= BATCH_PARALLEL_FROM
    {
        spare
            .par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(bi, c)| one(bi, c.as_mut_ptr().cast(), gemm::Parallelism::None));
    } else if (PARALLEL_FROM..SPLIT_BELOW).contains(&per_matrix) {
        for (bi, c) in spare.chunks_mut(m * n).enumerate() {
            let base = (av.base(bi, batch), bv.base(bi, batch));
            // SAFETY: as for `one`: every element of both matrices lies inside its storage and
            // `c` is this matrix's m * n elements of `out`'s capacity.
            unsafe {
                split_product(
                    (m, n, k),
                    c.as_mut_ptr().cast(),
                    (av.data.as_ptr().offset(base.0), a_rc),
                    (bv.data.as_ptr().offset(base.1), b_rc),
                )
            };
        }
    } else {
        let parallelism = if per_matrix >= PARALLEL_FROM {
            gemm::Parallelism::Rayon(0)
        } else {
            gemm::Parallelism::None
        };
        for (bi, c) in spare.chunks_mut(m * n).enumerate() {
            one(bi, c.as_mut_ptr().cast(), parallelism);
        }
    }
    // SAFETY: the products above wrote all `len` elements.
    unsafe { out.set_len(len) };
    let data = burn::tensor::TensorData::new(out, crate::tensor::prim_shape(&shape));
    Tensor::from_data(data, DType::F32, shape, Device::Cpu).map(Some)
}
