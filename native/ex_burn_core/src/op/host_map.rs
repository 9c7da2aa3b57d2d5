//! Comparisons and selects of f32 host tensors whose operands are broadcast views, walked row
//! by row through their strides on the compute threads. Burn's CPU backend (burn-flex 0.21)
//! compares broadcast operands element by element through a generic strided iterator, many
//! times slower than without the broadcast, as in an `equal` of a tensor with its row maxima
//! kept as `[.., 1]` (the gradient of `reduce_max` in every softmax's backward pass;
//! `bench/results/cpu_peers.md`); its `mask_where` on broadcast views is slower than its
//! arithmetic too.

use super::view::View;
use super::Compare;
use crate::dtype::Kind;
use crate::tensor::{prim_shape, B};
use crate::{DType, Device, Result, Tensor};
use burn::tensor::ops::BoolTensorOps;
use burn::tensor::TensorData;

/// Results of at least this many elements are worth this path (smaller ones keep Burn's).
const FROM: usize = 1 << 16;

/// Rows of the result handed to a compute thread at a time.
const ROWS_PER_TASK: usize = 64;

/// `c` of two f32 host tensors of equal shape (views of any strides), as a boolean tensor;
/// `Ok(None)` where this path does not apply (another type or device, a small or rank-0
/// result, a view outside its storage).
pub(crate) fn compare_f32(c: Compare, a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    let shape = a.shape().to_vec();
    let (Some(av), Some(bv)) = (f32_view(a, &shape), f32_view(b, &shape)) else {
        return Ok(None);
    };
    if b.shape() != shape.as_slice() {
        return Ok(None);
    }
    if plain(&av, &shape) && plain(&bv, &shape) {
        // Burn's own kernel is vectorised for contiguous operands
        return Ok(None);
    }
    let out = match c {
        Compare::Equal => compare_rows(&av, &bv, &shape, |x, y| x == y),
        Compare::NotEqual => compare_rows(&av, &bv, &shape, |x, y| x != y),
        Compare::Less => compare_rows(&av, &bv, &shape, |x, y| x < y),
        Compare::LessEqual => compare_rows(&av, &bv, &shape, |x, y| x <= y),
        Compare::Greater => compare_rows(&av, &bv, &shape, |x, y| x > y),
        Compare::GreaterEqual => compare_rows(&av, &bv, &shape, |x, y| x >= y),
    }?;
    let data = TensorData::new(out, prim_shape(&shape));
    let prim = B::bool_from_data(data, &Device::Cpu.to_dispatch()?);
    Ok(Some(super::util::bool_tensor(prim, shape)))
}

/// Where `pred` (a boolean host tensor) is true `t`, else `f` (f32 host tensors), all of one
/// shape (views of any strides); `Ok(None)` where this path does not apply.
pub(crate) fn select_f32(pred: &Tensor, t: &Tensor, f: &Tensor) -> Result<Option<Tensor>> {
    let shape = t.shape().to_vec();
    if pred.kind() != Kind::Bool
        || pred.shape() != shape.as_slice()
        || f.shape() != shape.as_slice()
    {
        return Ok(None);
    }
    let (Some(tv), Some(fv)) = (f32_view(t, &shape), f32_view(f, &shape)) else {
        return Ok(None);
    };
    let Some(pv) = View::of_bool(pred) else {
        return Ok(None);
    };
    if !pv.fits(&shape) || (plain(&pv, &shape) && plain(&tv, &shape) && plain(&fv, &shape)) {
        return Ok(None);
    }
    let out = rows(&shape, 0f32, |row, out: &mut [f32]| {
        let w = out.len();
        let (pp, pt, pf) = (
            row_of(&pv, &shape, row),
            row_of(&tv, &shape, row),
            row_of(&fv, &shape, row),
        );
        let pick = |p: u8, x: f32, y: f32| if p != 0 { x } else { y };
        match (pp.lane(&pv, w), pt.lane(&tv, w), pf.lane(&fv, w)) {
            (Lane::Slice(p), Lane::Slice(x), Lane::Slice(y)) => {
                for (((o, &p), &x), &y) in out.iter_mut().zip(p).zip(x).zip(y) {
                    *o = pick(p, x, y);
                }
            }
            (Lane::Slice(p), Lane::Slice(x), Lane::Same(y)) => {
                for ((o, &p), &x) in out.iter_mut().zip(p).zip(x) {
                    *o = pick(p, x, y);
                }
            }
            (Lane::Slice(p), Lane::Same(x), Lane::Slice(y)) => {
                for ((o, &p), &y) in out.iter_mut().zip(p).zip(y) {
                    *o = pick(p, x, y);
                }
            }
            _ => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = pick(pv.data[pp.at(j)], tv.data[pt.at(j)], fv.data[pf.at(j)]);
                }
            }
        }
    })?;
    let data = TensorData::new(out, prim_shape(&shape));
    Tensor::from_data(data, DType::F32, shape, Device::Cpu).map(Some)
}

/// The strided view of an f32 host tensor of `shape` when this path takes it: large enough,
/// rank >= 1, every element inside its storage.
fn f32_view<'a>(t: &'a Tensor, shape: &[usize]) -> Option<View<'a, f32>> {
    let n: usize = shape.iter().product();
    if t.dtype() != DType::F32 || t.device() != Device::Cpu || shape.is_empty() || n < FROM {
        return None;
    }
    View::of_f32(t).filter(|v| v.fits(shape))
}

/// Whether the view is the plain row-major layout of `shape` (no broadcast, no gaps).
fn plain<T: Copy>(v: &View<T>, shape: &[usize]) -> bool {
    let mut want = 1isize;
    for (&len, &s) in shape.iter().zip(&v.strides).rev() {
        if len > 1 && s != want {
            return false;
        }
        want *= len as isize;
    }
    true
}

/// `f` of two views row by row into booleans; rows read as slices or a repeated value where
/// their last-axis stride is 1 or 0, so that those loops vectorise.
fn compare_rows(
    av: &View<f32>,
    bv: &View<f32>,
    shape: &[usize],
    f: impl Fn(f32, f32) -> bool + Sync,
) -> Result<Vec<bool>> {
    rows(shape, false, |row, out: &mut [bool]| {
        let (pa, pb) = (row_of(av, shape, row), row_of(bv, shape, row));
        match (pa.lane(av, out.len()), pb.lane(bv, out.len())) {
            (Lane::Slice(x), Lane::Slice(y)) => {
                for ((o, &x), &y) in out.iter_mut().zip(x).zip(y) {
                    *o = f(x, y);
                }
            }
            (Lane::Slice(x), Lane::Same(y)) => {
                for (o, &x) in out.iter_mut().zip(x) {
                    *o = f(x, y);
                }
            }
            (Lane::Same(x), Lane::Slice(y)) => {
                for (o, &y) in out.iter_mut().zip(y) {
                    *o = f(x, y);
                }
            }
            _ => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = f(av.data[pa.at(j)], bv.data[pb.at(j)]);
                }
            }
        }
    })
}

/// A row's values: a contiguous slice, one repeated value, or neither.
enum Lane<'a, T> {
    Slice(&'a [T]),
    Same(T),
    Strided,
}

/// Where row `row` of a view starts and how it steps along the last axis.
struct Row {
    base: isize,
    step: isize,
}

impl Row {
    /// The storage index of element `j` of the row (inside the storage: checked by `fits`).
    fn at(&self, j: usize) -> usize {
        (self.base + j as isize * self.step) as usize
    }

    /// The row's `width` values as a [`Lane`].
    fn lane<'a, T: Copy>(&self, v: &View<'a, T>, width: usize) -> Lane<'a, T> {
        match self.step {
            1 => Lane::Slice(&v.data[self.at(0)..self.at(0) + width]),
            0 => Lane::Same(v.data[self.at(0)]),
            _ => Lane::Strided,
        }
    }
}

fn row_of<T: Copy>(v: &View<T>, shape: &[usize], row: usize) -> Row {
    let r = shape.len();
    Row {
        base: v.base(row, &shape[..r - 1]),
        step: v.strides[r - 1],
    }
}

/// A new row-major buffer of `shape`, each row of the last axis written by `fill(row, out)` on
/// the compute threads.
fn rows<T: Copy + Send + Sync>(
    shape: &[usize],
    init: T,
    fill: impl Fn(usize, &mut [T]) + Sync,
) -> Result<Vec<T>> {
    let width = shape[shape.len() - 1];
    let n: usize = shape.iter().product();
    let mut out = vec![init; n];
    crate::threads::for_each_chunk_mut(&mut out, width * ROWS_PER_TASK, |task, chunk| {
        for (i, row) in chunk.chunks_mut(width).enumerate() {
            fill(task * ROWS_PER_TASK + i, row);
        }
    })?;
    Ok(out)
}
