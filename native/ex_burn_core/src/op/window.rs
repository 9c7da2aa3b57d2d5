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
    // read in place when contiguous (a copy of a large input costs more than the reduction)
    let data = x.f32_values()?;
    let out = match Pooling::of(x.shape(), g) {
        Some(p) => p.extremum(&data, max),
        None => extremum_any(&data, x.shape(), g, max),
    }?;
    let shape = g.out_shape.to_vec();
    let data = burn::tensor::TensorData::new(out, shape.clone());
    Tensor::from_data(data, crate::DType::F32, shape, x.device())
}

/// A pooling window on a CPU with AVX2: over the last two axes only (the others of size 1,
/// stride 1), without dilation, output rows of at least eight elements. The planes (all
/// leading axes) are independent images.
struct Pooling {
    planes: usize,
    /// Input rows and columns of a plane.
    h: usize,
    w: usize,
    /// Window rows and columns, and their strides.
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    /// Output rows and columns of a plane.
    oh: usize,
    ow: usize,
}

impl Pooling {
    fn of(shape: &[usize], g: &Placement) -> Option<Pooling> {
        let r = shape.len();
        if !super::util::simd().avx2 || r < 2 || g.dilations.iter().any(|&d| d != 1) {
            return None;
        }
        let lead = r - 2;
        let unit = (0..lead).all(|i| g.dims[i] == 1 && g.strides[i] == 1);
        let ow = g.out_shape[lead + 1];
        // (gather offsets of eight outputs are i32)
        let fits = g.strides[lead + 1] <= (i32::MAX / 8) as usize;
        (unit && ow >= pooling::LANES && fits).then(|| Pooling {
            planes: crate::tensor::numel(&shape[..lead]),
            h: shape[lead],
            w: shape[lead + 1],
            kh: g.dims[lead],
            kw: g.dims[lead + 1],
            sh: g.strides[lead],
            sw: g.strides[lead + 1],
            oh: g.out_shape[lead],
            ow,
        })
    }

    /// What [`extremum_any`] computes (each output the first of its window's elements, in
    /// row-major order, that no later one replaces: NaN or strictly greater, nothing
    /// replacing a NaN), eight outputs of a row at a time: the running extremum of a window
    /// is a chain of dependent comparisons, which one output at a time left latency-bound
    /// and mispredicting (13 ns an output on an EPYC core for 2 x 2 windows).
    fn extremum(&self, data: &[f32], max: bool) -> Result<Vec<f32>> {
        let &Pooling {
            h,
            w,
            kh,
            kw,
            sh,
            sw,
            oh,
            ow,
            ..
        } = self;
        let span = (kh - 1) * w + (ow - 1) * sw + kw;
        // written once, by the kernel (no zeroing pass first)
        let len = self.planes * oh * ow;
        let mut out: Vec<f32> = Vec::with_capacity(len);
        let per_task = MIN_PER_TASK.div_ceil(ow);
        let spare = &mut out.spare_capacity_mut()[..len];
        crate::threads::for_each_chunk_mut(spare, ow * per_task, |task, rows| {
            for (i, dst) in rows.chunks_mut(ow).enumerate() {
                let row = task * per_task + i;
                let (plane, y) = (row / oh, row % oh);
                let base = plane * h * w + y * sh * w;
                let window = &data[base..base + span];
                // eight outputs at a time; the last eight overlap the previous ones
                for x0 in (0..ow).step_by(pooling::LANES) {
                    let x0 = x0.min(ow - pooling::LANES);
                    // SAFETY: AVX2 was detected (`of`); output `x0 + k` (k < 8, x0 + 8 <=
                    // ow) reads `window[i * w + j + (x0 + k) * sw]`, below
                    // `(kh - 1) * w + kw + (ow - 1) * sw = span`, and writes `dst[x0 + k]`.
                    unsafe {
                        let dst = dst.as_mut_ptr().cast::<f32>();
                        pooling::eight(window.as_ptr(), (w, kh, kw, sw), x0, max, dst)
                    };
                }
            }
        })?;
        // SAFETY: every row's outputs `0..ow` were written (the last eight overlap).
        unsafe { out.set_len(len) };
        Ok(out)
    }
}

/// The AVX2 kernel of [`Pooling`].
mod pooling {
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;

    /// Outputs per vector.
    pub(super) const LANES: usize = 8;

    /// Outputs `x0 .. x0 + 8` of one output row: the window's elements in row-major order,
    /// each replacing the running value where it is NaN and the running value is not, or
    /// strictly greater (`max`; less for min). `_mm256_max_ps(v, acc)` is `v > acc ? v :
    /// acc` (`acc` on ties and NaN), the blend puts a NaN `v` over a number.
    ///
    /// # Safety
    /// AVX2; `window[i * w + j + (x0 + k) * sw]` readable for every `i < kh`, `j < kw`,
    /// `k < 8`, and `dst[x0 .. x0 + 8]` writable.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn eight(
        window: *const f32,
        (w, kh, kw, sw): (usize, usize, usize, usize),
        x0: usize,
        max: bool,
        dst: *mut f32,
    ) {
        let step = _mm256_set1_epi32(sw as i32);
        let lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), step);
        // SAFETY (loads, store): the caller's contract.
        let load = |off: usize| unsafe {
            let p = window.add(off + x0 * sw);
            if sw == 1 {
                _mm256_loadu_ps(p)
            } else {
                _mm256_i32gather_ps::<4>(p, lanes)
            }
        };
        let mut acc = load(0);
        for i in 0..kh {
            for j in 0..kw {
                if (i, j) == (0, 0) {
                    continue;
                }
                let v = load(i * w + j);
                let m = if max {
                    _mm256_max_ps(v, acc)
                } else {
                    _mm256_min_ps(v, acc)
                };
                let nan_over_number = _mm256_and_ps(
                    _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v),
                    _mm256_cmp_ps::<_CMP_ORD_Q>(acc, acc),
                );
                acc = _mm256_blendv_ps(m, v, nan_over_number);
            }
        }
        unsafe { _mm256_storeu_ps(dst.add(x0), acc) };
    }

    /// Not compiled for other architectures ([`super::Pooling::of`] needs AVX2).
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) unsafe fn eight(
        _: *const f32,
        _: (usize, usize, usize, usize),
        _: usize,
        _: bool,
        _: *mut f32,
    ) {
        unreachable!("pooling kernels need AVX2")
    }
}

/// [`extremum_f32`] for any window: the flat offsets of the window's positions, output rows in
/// parallel.
fn extremum_any(data: &[f32], shape: &[usize], g: &Placement, max: bool) -> Result<Vec<f32>> {
    let r = shape.len();
    let mut in_strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * shape[i + 1];
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
    let per_task = MIN_PER_TASK.div_ceil(row_len.max(1));
    crate::threads::for_each_chunk_mut(&mut out, row_len.max(1) * per_task, |task, rows| {
        for (i, dst) in rows.chunks_mut(row_len.max(1)).enumerate() {
            let row = task * per_task + i;
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
        }
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pooling kernel gives what the general path gives, bit for bit: NaNs (the first
    /// one's payload), signed zeros and ties included, with output rows that are and are not
    /// a multiple of eight.
    #[test]
    fn pooling_equals_the_general_path() {
        if !super::super::util::simd().avx2 {
            return;
        }
        let special = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            f32::NAN,
            -f32::NAN,
            2.5,
            f32::INFINITY,
        ];
        let mut seed = 12345u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            seed >> 8
        };
        let geometries: [(&[usize], [usize; 2], [usize; 2]); 6] = [
            (&[2, 3, 24, 24], [2, 2], [2, 2]),
            (&[2, 3, 9, 19], [3, 3], [1, 1]),
            (&[5, 40], [2, 3], [3, 2]),
            (&[1, 2, 1, 6, 31], [1, 4], [1, 3]),
            (&[3, 4, 16], [4, 2], [1, 1]),
            (&[2, 7, 33], [3, 3], [2, 2]),
        ];
        for (shape, [kh, kw], [sh, sw]) in geometries {
            let r = shape.len();
            let n: usize = shape.iter().product();
            let data: Vec<f32> = (0..n)
                .map(|_| {
                    let u = next();
                    if u % 4 == 0 {
                        special[(u / 4) as usize % special.len()]
                    } else {
                        (u % 7) as f32 - 3.0
                    }
                })
                .collect();
            let mut dims = vec![1; r];
            let mut strides = vec![1; r];
            (dims[r - 2], dims[r - 1], strides[r - 2], strides[r - 1]) = (kh, kw, sh, sw);
            let mut out_shape = shape.to_vec();
            out_shape[r - 2] = (shape[r - 2] - kh) / sh + 1;
            out_shape[r - 1] = (shape[r - 1] - kw) / sw + 1;
            let dilations = vec![1; r];
            let g = Placement {
                dims: &dims,
                strides: &strides,
                dilations: &dilations,
                out_shape: &out_shape,
            };
            let pooling = Pooling::of(shape, &g).expect("a pooling window");
            for max in [true, false] {
                let got = pooling.extremum(&data, max).unwrap();
                let want = extremum_any(&data, shape, &g, max).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{shape:?} {kh}x{kw} /{sh},{sw} max={max}"
                );
            }
        }
        // windows over a leading axis, dilated windows and short rows take the general path
        let placement = |dims: &'static [usize], dilations: &'static [usize], out| Placement {
            dims,
            strides: &[1, 1, 1],
            dilations,
            out_shape: out,
        };
        assert!(Pooling::of(&[2, 2, 9], &placement(&[2, 2, 2], &[1, 1, 1], &[1, 1, 8])).is_none());
        assert!(Pooling::of(&[2, 3, 9], &placement(&[1, 2, 2], &[1, 2, 1], &[2, 1, 8])).is_none());
        assert!(Pooling::of(&[2, 3, 8], &placement(&[1, 2, 2], &[1, 1, 1], &[2, 2, 7])).is_none());
    }
}
