//! f32 2-D convolutions on the host: each image's patches unfolded (im2col) a tile of output
//! positions at a time into a buffer of the compute thread, multiplied by the kernel with the
//! `gemm` crate straight into the result's `[features, positions]` rows. Tiles of every image
//! are spread over the compute threads, each product on one thread, so a batch keeps every
//! core busy; Burn's CPU backend converted each input to channels-last first and split a batch
//! of small images poorly over many cores.

use super::host_gemm::gemm_into;
use crate::kernels::Conv2dGeometry;
use crate::{DType, Device, Result, Tensor};

/// Elements of a thread's unfolded tile, at most (4 MiB of f32).
const TILE_ELEMENTS: usize = 1 << 20;

/// Output positions of a tile, at least (smaller tiles cost more in setup than they compute).
const MIN_TILE: usize = 16;

/// The convolution of `x` (`[n, c, h, w]`) with kernel `k` (`[o, c, kh, kw]`) as
/// `[n, o, oh, ow]`; `Ok(None)` where this path does not apply (not f32 on the host).
pub(super) fn conv2d_f32(x: &Tensor, k: &Tensor, g: &Conv2dGeometry) -> Result<Option<Tensor>> {
    let host = x.device() == Device::Cpu && k.device() == Device::Cpu;
    if !host || x.dtype() != DType::F32 || k.dtype() != DType::F32 || x.rank() != 4 {
        return Ok(None);
    }
    let (&[n, c, h, w], &[o, kc, kh, kw]) = (x.shape(), k.shape()) else {
        return Ok(None);
    };
    if kc != c || n == 0 || o == 0 || c == 0 {
        return Ok(None);
    }
    let span = |k: usize, d: usize| (k - 1) * d + 1;
    let (ph, pw) = (h + 2 * g.padding[0], w + 2 * g.padding[1]);
    let (sh, sw) = (span(kh, g.dilations[0]), span(kw, g.dilations[1]));
    if ph < sh || pw < sw {
        return Ok(None);
    }
    let oh = (ph - sh) / g.strides[0] + 1;
    let ow = (pw - sw) / g.strides[1] + 1;
    let (positions, depth) = (oh * ow, c * kh * kw);
    let (xv, kv) = (x.f32_values()?, k.f32_values()?);
    let threads = rayon::current_num_threads().max(1);
    // tiles: at most TILE_ELEMENTS unfolded, and at least two per thread over the batch
    let cap = (TILE_ELEMENTS / depth.max(1)).max(MIN_TILE);
    let share = (n * positions).div_ceil(2 * threads).max(MIN_TILE);
    let tile = cap.min(share).min(positions).max(1);
    let tiles = positions.div_ceil(tile);
    // written once, by the products below (zeroing it first took a serial pass over the
    // result on the calling thread: a seventh of a CNN's convolution on one core)
    let len = n * o * positions;
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let out_ptr = super::util::SharedPtr(out.as_mut_ptr());
    let geometry = Geometry {
        c,
        h,
        w,
        kh,
        kw,
        ow,
        g,
    };
    crate::threads::for_each_claimed(
        n * tiles,
        move || vec![0f32; depth * tile],
        |cols, item| {
            let (img, t) = (item / tiles, item % tiles);
            let first = t * tile;
            let len = tile.min(positions - first);
            let image = &xv[img * c * h * w..(img + 1) * c * h * w];
            geometry.unfold(image, first, len, &mut cols[..depth * len]);
            // SAFETY: `cols` holds `depth x len` values (row stride `len`), the kernel
            // `o x depth`; the destination block, rows `img * o ..` of `positions` values from
            // column `first`, is written by this item only and lies inside `out`'s capacity
            // (the product writes it without reading it).
            unsafe {
                let dst = out_ptr.get().add(img * o * positions + first);
                gemm_into(
                    (o, len, depth),
                    (dst, positions as isize),
                    kv.as_ptr(),
                    (depth as isize, 1),
                    cols.as_ptr(),
                    (len as isize, 1),
                );
            }
            Ok(())
        },
    )?;
    // SAFETY: the items cover every image's `o x positions` block (all tiles of all images),
    // each element written by its tile's product.
    unsafe { out.set_len(len) };
    Tensor::from_host_f32(out, vec![n, o, oh, ow]).map(Some)
}

/// What unfolding an image needs.
struct Geometry<'a> {
    c: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    ow: usize,
    g: &'a Conv2dGeometry,
}

impl Geometry<'_> {
    /// Writes the patches of output positions `first..first + len` of `image` (`[c, h, w]`)
    /// into `cols` (`[c * kh * kw, len]`), zero where the padding is read.
    fn unfold(&self, image: &[f32], first: usize, len: usize, cols: &mut [f32]) {
        let (s, p, d) = (self.g.strides, self.g.padding, self.g.dilations);
        let mut row = 0;
        for ch in 0..self.c {
            let plane = &image[ch * self.h * self.w..(ch + 1) * self.h * self.w];
            for i in 0..self.kh {
                for j in 0..self.kw {
                    let dst = &mut cols[row * len..(row + 1) * len];
                    // the tile's positions, output row by output row
                    let (mut q, mut pos) = (0, first);
                    while q < len {
                        let (y, x0) = (pos / self.ow, pos % self.ow);
                        let seg = (self.ow - x0).min(len - q);
                        let out = &mut dst[q..q + seg];
                        // rows above zero wrap past the plane's height
                        let iy = (y * s[0] + i * d[0]).wrapping_sub(p[0]);
                        if iy < self.h {
                            let src = &plane[iy * self.w..(iy + 1) * self.w];
                            self.row_segment(src, x0, j * d[1], out);
                        } else {
                            out.fill(0.0);
                        }
                        q += seg;
                        pos += seg;
                    }
                    row += 1;
                }
            }
        }
    }

    /// Fills `out` with the input row `src` read at `x * stride + shift - pad` for output
    /// columns `x0..`, zero where that falls in the padding.
    fn row_segment(&self, src: &[f32], x0: usize, shift: usize, out: &mut [f32]) {
        let (st, pad) = (self.g.strides[1], self.g.padding[1]);
        // columns whose input index lies inside the row: lo <= x < hi
        let lo = pad.saturating_sub(shift).div_ceil(st);
        let hi = (self.w + pad)
            .checked_sub(shift)
            .map_or(0, |room| room.div_ceil(st));
        let (a, b) = (
            lo.clamp(x0, x0 + out.len()) - x0,
            hi.clamp(x0, x0 + out.len()) - x0,
        );
        out[..a].fill(0.0);
        if a < b {
            let first = (x0 + a) * st + shift - pad;
            if st == 1 {
                out[a..b].copy_from_slice(&src[first..first + (b - a)]);
            } else {
                for (k, v) in out[a..b].iter_mut().enumerate() {
                    *v = src[first + k * st];
                }
            }
        }
        out[b.max(a)..].fill(0.0);
    }
}
