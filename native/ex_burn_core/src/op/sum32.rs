//! f32 sums on the CPU accumulate in f64 and round once to f32.
//!
//! This is what `Nx.BinaryBackend` computes (its f32 arithmetic is Elixir's f64, rounded per
//! op), so ExBurn's sums and means agree with it to the last bit in practice, and the result
//! no longer depends on the layout or on the order Burn's kernels happen to add in: the same
//! values summed over a channels-first or a channels-last tensor give the same f32 (an f64
//! accumulator of f32 values loses no more than 2^-29 of an f32 ulp per addition, so the two
//! orders round to the same f32 except when the exact sum sits on a rounding boundary).
//! Memory-bound like Burn's own sum: one read of the input, no temporaries of its size.

use super::util;
use crate::tensor::prim_shape;
use crate::{DType, Device, Result, Tensor};
use burn::tensor::TensorData;

/// Below this many elements one thread sums everything.
const PER_THREAD: usize = 1 << 16;

/// Whether [`sum`] computes this reduction: a non-empty f32 host tensor summed into f32.
pub(super) fn applies(x: &Tensor, out: DType) -> bool {
    x.dtype() == DType::F32 && out == DType::F32 && x.device() == Device::Cpu && x.numel() > 0
}

/// The sum of `x` over `axes` (sorted, non-empty) with result shape `shape`.
pub(super) fn sum(x: &Tensor, axes: &[usize], shape: Vec<usize>) -> Result<Tensor> {
    let r = x.rank();
    let dims = x.shape();
    let contiguous = axes.windows(2).all(|w| w[1] == w[0] + 1);
    // Reduced axes as one block: [outer, reduced, inner] in row-major order.
    let (values, outer, red, inner) = if contiguous {
        let (a, b) = (axes[0], axes[axes.len() - 1]);
        let prod = |s: &[usize]| s.iter().product::<usize>();
        (
            x.f32_values()?,
            prod(&dims[..a]),
            prod(&dims[a..=b]),
            prod(&dims[b + 1..]),
        )
    } else {
        let kept: Vec<usize> = (0..r).filter(|i| !axes.contains(i)).collect();
        let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
        let red: usize = axes.iter().map(|&a| dims[a]).product();
        let outer: usize = kept.iter().map(|&a| dims[a]).product();
        (
            std::borrow::Cow::Owned(util::permute(x, &perm)?.to_f32_vec()?),
            outer,
            red,
            1,
        )
    };
    let mut out = vec![0f32; outer * inner];
    let threads = rayon::current_num_threads()
        .min(values.len() / PER_THREAD)
        .max(1);
    if inner == 1 {
        // Each result sums a contiguous run.
        let per = outer.div_ceil(threads).max(1);
        crate::threads::for_each_chunk_mut(&mut out, per, |i, chunk| {
            for (j, o) in chunk.iter_mut().enumerate() {
                let at = (i * per + j) * red;
                *o = round(kernels::run_sum(&values[at..at + red]));
            }
        })?;
    } else {
        // Each result sums a column: rows of `inner` added into an f64 row, by column blocks.
        let per = inner.div_ceil(threads).max(1);
        let parts: Vec<(usize, Vec<f32>)> =
            crate::threads::map_claimed(inner.div_ceil(per), |block| {
                let c0 = block * per;
                let w = per.min(inner - c0);
                let mut part = vec![0f32; outer * w];
                let mut acc = vec![0f64; w];
                for o in 0..outer {
                    acc.fill(0.0);
                    for k in 0..red {
                        let at = (o * red + k) * inner + c0;
                        kernels::add_row(&mut acc, &values[at..at + w]);
                    }
                    for (p, a) in part[o * w..(o + 1) * w].iter_mut().zip(&acc) {
                        *p = round(*a);
                    }
                }
                Ok((c0, part))
            })?;
        for (c0, part) in &parts {
            let w = part.len() / outer;
            for o in 0..outer {
                out[o * inner + c0..o * inner + c0 + w].copy_from_slice(&part[o * w..(o + 1) * w]);
            }
        }
    }
    let data = TensorData::new(out, prim_shape(&shape));
    Tensor::from_data(data, DType::F32, shape, Device::Cpu)
}

/// The sum of every element of `v` as [`sum`] computes it for one run of values (the whole
/// tensor): accumulated in f64, rounded once.
pub(crate) fn sum_all(v: &[f32]) -> f32 {
    round(kernels::run_sum(v))
}

/// An f64 sum rounded to f32; NaN is the positive quiet NaN (what Nx writes; x86 adds give
/// the negative one for `Inf + -Inf`).
fn round(s: f64) -> f32 {
    if s.is_nan() {
        f32::NAN
    } else {
        s as f32
    }
}

/// The loops, compiled for the widest vector unit the CPU has (checked at run time).
mod kernels {
    /// `acc[i] += row[i]` in f64.
    #[inline(always)]
    fn add_row_any(acc: &mut [f64], row: &[f32]) {
        for (a, &v) in acc.iter_mut().zip(row) {
            *a += v as f64;
        }
    }

    /// The f64 sum of a run of f32 values (eight accumulators, so the additions pipeline).
    #[inline(always)]
    fn run_sum_any(v: &[f32]) -> f64 {
        let mut acc = [0f64; 8];
        let mut chunks = v.chunks_exact(8);
        for c in &mut chunks {
            for (a, &x) in acc.iter_mut().zip(c) {
                *a += x as f64;
            }
        }
        let tail: f64 = chunks.remainder().iter().map(|&x| x as f64).sum();
        acc.iter().sum::<f64>() + tail
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        #[target_feature(enable = "avx512f")]
        pub(super) unsafe fn add_row_512(acc: &mut [f64], row: &[f32]) {
            super::add_row_any(acc, row)
        }

        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn add_row_256(acc: &mut [f64], row: &[f32]) {
            super::add_row_any(acc, row)
        }

        #[target_feature(enable = "avx512f")]
        pub(super) unsafe fn run_sum_512(v: &[f32]) -> f64 {
            super::run_sum_any(v)
        }

        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn run_sum_256(v: &[f32]) -> f64 {
            super::run_sum_any(v)
        }
    }

    /// `acc[i] += row[i]` in f64.
    pub(super) fn add_row(acc: &mut [f64], row: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F (checked above).
                return unsafe { x86::add_row_512(acc, row) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked above).
                return unsafe { x86::add_row_256(acc, row) };
            }
        }
        add_row_any(acc, row)
    }

    /// The f64 sum of a run of f32 values.
    pub(super) fn run_sum(v: &[f32]) -> f64 {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F (checked above).
                return unsafe { x86::run_sum_512(v) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked above).
                return unsafe { x86::run_sum_256(v) };
            }
        }
        run_sum_any(v)
    }
}
