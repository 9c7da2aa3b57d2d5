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

/// Products of at least this many multiply-adds per matrix are split over the compute threads
/// ([`split_product`]): four blocks of [`MIN_CELL_WORK`]. (burn-flex splits from 192^3; the
/// 512 x 1024 x 10 logits of an MLP, under that, took 0.36 ms on one of 16 cores.)
const PARALLEL_FROM: usize = 4 * MIN_CELL_WORK;
/// Batches of smaller matrices are spread over the threads, one matrix each, from this much
/// work in all (burn-flex's threshold).
const BATCH_PARALLEL_FROM: usize = 128 * 128 * 128;

/// Result blocks per compute thread in a split product: several, so that a thread that
/// finishes early (or was preempted) takes another and the threads finish together.
const CELLS_PER_THREAD: usize = 4;

/// A block of a split product does at least this many multiply-adds (fewer blocks than
/// [`CELLS_PER_THREAD`] per thread for smaller products).
const MIN_CELL_WORK: usize = 1 << 18;

/// Block rows and columns are multiples of this many elements.
const SPLIT_ALIGN: usize = 16;

/// The grid a split product's `[m, n]` result is cut into for `threads` compute threads:
/// `(row blocks, column blocks)`, their product a number of cells of at least
/// [`MIN_CELL_WORK`] each, at most [`CELLS_PER_THREAD`] per thread and a whole number per
/// thread where there are more cells than threads, blocks as near square as that allows (rows
/// over columns as `m` over `n`; between two equally near, the one of fewer row blocks).
///
/// Measured with the gemm crate alone (`bench/results/cpu_peers.md`): on a 16-core Xeon a
/// 2048^3 product took 18.3 ms in the crate's own split, 14.0 ms in 16 column blocks, 10.9
/// ms in 8 x 8 blocks (XLA 14.5 ms); 512 x 1024 x 1024 1.04 / 0.91 / 0.72 ms in 4 x 16 (XLA
/// 1.11). One block per thread left threads idle whenever one of them lagged.
fn grid((m, n, k): (usize, usize, usize), threads: usize) -> (usize, usize) {
    let work = m.saturating_mul(n).saturating_mul(k);
    let cells = (work / MIN_CELL_WORK).clamp(1, threads * CELLS_PER_THREAD);
    let mut cells = if cells >= threads {
        cells / threads * threads
    } else {
        cells
    };
    let (max_rows, max_cols) = (m.div_ceil(SPLIT_ALIGN), n.div_ceil(SPLIT_ALIGN));
    loop {
        // row blocks r, column blocks cells / r: square blocks when r / (cells / r) = m / n
        let want = ((cells as f64) * (m as f64) / (n as f64)).sqrt().ln();
        let best = (1..=cells.min(max_rows))
            .filter(|r| cells % r == 0 && cells / r <= max_cols)
            .min_by_key(|&r| {
                // (distances in millionths, so that exact ties go to fewer row blocks)
                let d = (((r as f64).ln() - want).abs() * 1e6).round() as u64;
                (d, r)
            });
        match best {
            Some(r) => return (r, cells / r),
            // too few rows or columns for this many blocks
            None if cells > 1 => cells = cells.div_ceil(2),
            None => return (1, 1),
        }
    }
}

/// `dst` (`[m, n]`, row-major) = `a` (`[m, k]`) times `b` (`[k, n]`), cut into the blocks of
/// [`grid`] ([`Cells`]), each block's product on one thread (the caller and the compute threads claim
/// blocks, [`crate::threads::for_each_claimed`]).
///
/// # Safety
/// As [`gemm_into`], with `dst` of `m * n` elements of row stride `n`.
unsafe fn split_product(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    (a, a_rc): (*const f32, (isize, isize)),
    (b, b_rc): (*const f32, (isize, isize)),
) -> Result<()> {
    let threads = rayon::current_num_threads().max(1);
    let cells = Cells::new((m, n), grid((m, n, k), threads));
    // the blocks write disjoint parts of `dst` and only read `a` and `b`
    let shared = (
        SharedPtr(dst),
        SharedPtr(a.cast_mut()),
        SharedPtr(b.cast_mut()),
    );
    let cell = |(): &mut (), cell: usize| {
        let (dst, a, b) = (
            shared.0.get(),
            shared.1.get().cast_const(),
            shared.2.get().cast_const(),
        );
        let (r0, rl, c0, cl) = cells.rect(cell);
        // SAFETY: the block covers rows `r0..r0 + rl` and columns `c0..c0 + cl`, inside the
        // matrices; its part of `dst` is written by this block only.
        unsafe {
            gemm_into(
                (rl, cl, k),
                (dst.add(r0 * n + c0), n as isize),
                a.offset(r0 as isize * a_rc.0),
                a_rc,
                b.offset(c0 as isize * b_rc.1),
                b_rc,
            )
        };
        Ok(())
    };
    crate::threads::for_each_claimed(cells.count(), || (), cell)
}

/// The blocks of a split product in the order they are claimed: the [`grid`]'s blocks row by
/// row, the last row of blocks cut into two rows of half the height where it is tall enough.
/// Each thread's last block is then more likely a small one, so the threads finish closer
/// together: with equal blocks the caller waited ~50 us for helpers' last blocks in product
/// loops of ~390 us on a 16-core Xeon.
struct Cells {
    /// The product's rows and columns.
    m: usize,
    n: usize,
    /// Block height and width.
    rb: usize,
    cb: usize,
    /// Rows and columns of blocks.
    rows: usize,
    cols: usize,
    /// The height of the first half of the last row of blocks (0: that row is not cut).
    half: usize,
}

impl Cells {
    /// The blocks of an `[m, n]` result cut into the `(rows, cols)` of [`grid`].
    fn new((m, n): (usize, usize), (rows, cols): (usize, usize)) -> Cells {
        let block =
            |len: usize, parts: usize| len.div_ceil(parts).div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN;
        let (rb, cb) = (block(m, rows), block(n, cols));
        let (rows, cols) = (m.div_ceil(rb), n.div_ceil(cb));
        let last = m - (rows - 1) * rb;
        let half = (last / 2).div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN;
        let half = if rows >= 2 && half < last { half } else { 0 };
        Cells {
            m,
            n,
            rb,
            cb,
            rows,
            cols,
            half,
        }
    }

    /// How many blocks there are.
    fn count(&self) -> usize {
        self.rows * self.cols + if self.half > 0 { self.cols } else { 0 }
    }

    /// Block `i`: its first row, rows, first column and columns.
    fn rect(&self, i: usize) -> (usize, usize, usize, usize) {
        let whole = if self.half > 0 {
            (self.rows - 1) * self.cols
        } else {
            self.rows * self.cols
        };
        let (r0, rl, c) = if i < whole {
            let r0 = (i / self.cols) * self.rb;
            (r0, self.rb.min(self.m - r0), i % self.cols)
        } else {
            // the last row of blocks, in two halves
            let (h, c) = ((i - whole) / self.cols, (i - whole) % self.cols);
            let base = (self.rows - 1) * self.rb;
            let rl = if h == 0 {
                self.half
            } else {
                self.m - base - self.half
            };
            (base + h * self.half, rl, c)
        };
        let c0 = c * self.cb;
        (r0, rl, c0, self.cb.min(self.n - c0))
    }
}

/// `dst` (`[m, n]`, unit column stride, row stride `dst_rs`) = `lhs` (`[m, k]`, strides `(row, column)`) times `rhs`
/// (`[k, n]`, strides `(row, column)`), on the calling thread; `dst` is written, never read.
///
/// # Safety
/// Every element the strides reach from `lhs` and `rhs` must be readable, and every element
/// of `dst`'s `[m, n]` matrix must be valid for writing.
pub(crate) unsafe fn gemm_into(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs): (*mut f32, isize),
    lhs: *const f32,
    (lhs_rs, lhs_cs): (isize, isize),
    rhs: *const f32,
    (rhs_rs, rhs_cs): (isize, isize),
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
            gemm::Parallelism::None,
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
    let one = |bi: usize, dst: *mut f32| {
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
            )
        }
    };
    let spare = &mut out.spare_capacity_mut()[..len];
    if per_matrix < PARALLEL_FROM && nb > 1 && nb.saturating_mul(per_matrix) >= BATCH_PARALLEL_FROM
    {
        crate::threads::for_each_chunk_mut(spare, m * n, |bi, c| one(bi, c.as_mut_ptr().cast()))?;
    } else if per_matrix >= PARALLEL_FROM {
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
            }?;
        }
    } else {
        for (bi, c) in spare.chunks_mut(m * n).enumerate() {
            one(bi, c.as_mut_ptr().cast());
        }
    }
    // SAFETY: the products above wrote all `len` elements.
    unsafe { out.set_len(len) };
    let data = burn::tensor::TensorData::new(out, crate::tensor::prim_shape(&shape));
    Tensor::from_data(data, DType::F32, shape, Device::Cpu).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_cover_the_result_in_near_square_blocks() {
        // as measured best on 16 threads (module docs)
        assert_eq!(grid((2048, 2048, 2048), 16), (8, 8));
        assert_eq!(grid((512, 1024, 1024), 16), (4, 16));
        assert_eq!(grid((4096, 1024, 1024), 16), (16, 4));
        assert_eq!(grid((128, 1024, 1024), 16), (2, 32));
        assert_eq!(grid((2048, 2048, 2048), 2), (2, 4));
        assert_eq!(grid((512, 10, 1024), 16), (16, 1));
        assert_eq!(grid((64, 64, 64), 16), (1, 1));
        for (m, n, k) in [
            (17, 5000, 300),
            (5000, 17, 300),
            (192, 192, 192),
            (784, 1024, 512),
        ] {
            for threads in [1, 2, 3, 12, 16, 64] {
                let (r, c) = grid((m, n, k), threads);
                assert!(r * c <= threads * CELLS_PER_THREAD, "{m} {n} {threads}");
                assert!(
                    r <= m.div_ceil(16) && c <= n.div_ceil(16),
                    "{m} {n} {threads}"
                );
                assert!(
                    r * c == 1 || m * n * k / (r * c) >= MIN_CELL_WORK,
                    "{m} {n} {threads}"
                );
            }
        }
        // a whole number of blocks per thread where there is room and work for them
        assert_eq!(grid((784, 1024, 512), 12), (6, 8));
        assert_eq!(grid((784, 1024, 512), 3), (3, 4));
    }

    #[test]
    fn blocks_cover_every_element_once() {
        for (m, n) in [
            (512, 1024),
            (784, 1024),
            (17, 5000),
            (5000, 17),
            (33, 33),
            (1, 1),
            (100, 3),
        ] {
            for threads in [1, 2, 3, 16] {
                let cells = Cells::new((m, n), grid((m, n, 4096), threads));
                let mut hits = vec![0u8; m * n];
                for i in 0..cells.count() {
                    let (r0, rl, c0, cl) = cells.rect(i);
                    assert!(rl > 0 && cl > 0, "{m} {n} {threads} block {i}");
                    for r in r0..r0 + rl {
                        for c in c0..c0 + cl {
                            hits[r * n + c] += 1;
                        }
                    }
                }
                assert!(hits.iter().all(|&h| h == 1), "{m} {n} {threads}");
            }
        }
        // 16 threads, 512 x 1024 x 1024: 4 x 16 blocks of 128 rows, the last row cut in two
        let cells = Cells::new((512, 1024), grid((512, 1024, 1024), 16));
        assert_eq!(cells.count(), 80);
        assert_eq!(cells.rect(47), (256, 128, 960, 64));
        assert_eq!(
            (cells.rect(48), cells.rect(79)),
            ((384, 64, 0, 64), (448, 64, 960, 64))
        );
    }

    #[test]
    fn split_products_equal_one_product() {
        for (m, n, k, a_col_major) in [
            (200, 300, 150, false),
            (200, 300, 150, true),
            (33, 1000, 257, false),
            (1000, 33, 257, true),
        ] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 53) % 97) as f32 - 48.0).collect();
            let a_rc = if a_col_major {
                (1, m as isize)
            } else {
                (k as isize, 1)
            };
            let (mut split, mut whole) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
            // SAFETY: both operands and results hold exactly these matrices.
            unsafe {
                split_product(
                    (m, n, k),
                    split.as_mut_ptr(),
                    (a.as_ptr(), a_rc),
                    (b.as_ptr(), (n as isize, 1)),
                )
                .unwrap();
                gemm_into(
                    (m, n, k),
                    (whole.as_mut_ptr(), n as isize),
                    a.as_ptr(),
                    a_rc,
                    b.as_ptr(),
                    (n as isize, 1),
                );
            }
            // integer values: every product and sum is exact, in any order
            assert_eq!(split, whole, "{m} x {n} x {k}");
        }
    }
}
