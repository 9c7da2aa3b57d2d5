//! f32 `window_scatter_max` / `window_scatter_min` on the CPU, with the values
//! [`WindowScatterGeometry`] defines (those of `Nx.BinaryBackend`): two passes over the
//! compute threads, each window's selection first, then each result element as the init value
//! plus the source values of the windows that selected it, in the windows' order.
//!
//! The op table's general path (`scatter.rs`) builds the same result from whole-tensor ops,
//! one pass per window offset; for the gradient of a 3 x 3 max pooling that is ~36 passes
//! over the input's size, and it adds the sources in another order.

use crate::kernels::{row_major_strides, WindowScatterGeometry};
use crate::Result;

/// Elements a parallel piece computes.
const PIECE: usize = 16 * 1024;

/// The result of the window scatter of `input` (row-major, of the geometry's shape) with one
/// `source` value per window (row-major over the windows) and `init`.
pub(crate) fn host(
    input: &[f32],
    source: &[f32],
    init: f32,
    g: &WindowScatterGeometry,
) -> Result<Vec<f32>> {
    let rank = g.shape.len();
    // row-major strides of the input, the windows and a window's elements
    let (in_st, win_st, el_st) = (
        row_major_strides(g.shape),
        row_major_strides(g.counts),
        row_major_strides(g.window),
    );
    let (windows, len) = (g.windows(), g.window_len());
    // pass 1: the element (row-major index inside its window) each window selects
    let mut chosen = vec![0u32; windows];
    crate::threads::for_each_chunk_mut(&mut chosen, PIECE, |piece, out| {
        let mut origin = vec![0usize; rank];
        for (j, c) in out.iter_mut().enumerate() {
            let w = piece * PIECE + j;
            // the window's first element, in padded coordinates
            for (a, o) in origin.iter_mut().enumerate() {
                *o = (w / win_st[a] % g.counts[a]) * g.strides[a];
            }
            let value = |q: usize| {
                // the element's padded coordinates, then the input's
                let mut offset = 0;
                for a in 0..rank {
                    let pp = origin[a] + q / el_st[a] % g.window[a];
                    match pp.checked_sub(g.lo[a]).filter(|&x| x < g.shape[a]) {
                        Some(x) => offset += x * in_st[a],
                        None => return init,
                    }
                }
                input[offset]
            };
            let (mut best, mut pick) = (value(0), 0u32);
            for q in 1..len {
                let x = value(q);
                if (g.max && x >= best) || (!g.max && x <= best) {
                    (best, pick) = (x, q as u32);
                }
            }
            *c = pick;
        }
    })?;
    // pass 2: each element, the sources of the windows that selected it, in their order
    let mut out = vec![init; g.shape.iter().product()];
    crate::threads::for_each_chunk_mut(&mut out, PIECE, |piece, out| {
        let mut ranges = vec![(0usize, 0usize); rank];
        let (mut w, mut pp) = (vec![0usize; rank], vec![0usize; rank]);
        'element: for (j, o) in out.iter_mut().enumerate() {
            let i = piece * PIECE + j;
            for a in 0..rank {
                pp[a] = i / in_st[a] % g.shape[a] + g.lo[a];
                match g.covering(a, pp[a]) {
                    Some(r) => ranges[a] = r,
                    None => continue 'element,
                }
                w[a] = ranges[a].0;
            }
            let mut acc = init;
            // the covering windows in row-major order (an odometer over `ranges`)
            loop {
                let (mut flat, mut q) = (0, 0);
                for a in 0..rank {
                    flat += w[a] * win_st[a];
                    q += (pp[a] - w[a] * g.strides[a]) * el_st[a];
                }
                if chosen[flat] as usize == q {
                    acc += source[flat];
                }
                let mut a = rank;
                loop {
                    if a == 0 {
                        *o = acc;
                        continue 'element;
                    }
                    a -= 1;
                    if w[a] < ranges[a].1 {
                        w[a] += 1;
                        break;
                    }
                    w[a] = ranges[a].0;
                }
            }
        }
    })?;
    Ok(out)
}
