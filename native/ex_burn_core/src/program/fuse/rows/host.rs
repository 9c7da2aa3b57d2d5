//! Row regions on the CPU: each row (a softmax's, a layer norm's, a cross-entropy's) taken
//! through every step of the region while it sits in the core's cache, rows spread over the
//! compute threads. Op by op, each step is a pass over the whole tensor and each reduction a
//! pass of its own.
//!
//! The values are those of op-by-op evaluation, bit for bit: element-wise steps are the fused
//! runs' loops (the op table's element functions), a sum is [`sum32::sum_all`] of the row (what
//! the CPU's sum over trailing axes computes for each row), and a max or min is the CPU
//! reduction's own (Burn's vector kernel for rows of [`VECTOR_EXTREMUM_FROM`] and more, a scan
//! for shorter ones, NaN wherever the row holds one). One exception, as for the fused runs:
//! where two NaNs of different signs meet in an addition or the like, which one the result
//! carries depends on the operand order of the compiled instruction (a NaN either way;
//! `tests/engine/generated.rs`).

use super::super::map32::{run_step, select};
use super::{Plan, Step};
use crate::kernels::{Fold, Level, Src, Stage};
use crate::op::f32_map::Arg;
use crate::op::util::SharedPtr;
use crate::op::{self, sum32, Op};
use crate::{DType, Device, Result, Tensor};
use burn::tensor::TensorData;
use rayon::prelude::*;

/// Longest rows the CPU takes as regions (256 KiB of f32 per value of a row: a few such
/// values stay in a core's L2 cache).
pub(in crate::program::fuse) const MAX_COLS: usize = 64 * 1024;

/// Rows of at least this many elements take Burn's vector max/min kernel in the CPU's
/// reduction (`EXTREMUM_SIMD_ROW_THRESHOLD` in burn-flex 0.21's `ops/reduce.rs`), shorter
/// ones a scan; the region chooses as it does, so that ties of signed zeros resolve alike.
const VECTOR_EXTREMUM_FROM: usize = 512;

/// Below this many elements a region runs on the calling thread.
const PARALLEL_FROM: usize = 1 << 15;

/// An external operand's values as the rows read them.
enum Values<'a> {
    /// Per element: values repeating with period `.1` (a multiple of the row length) over the
    /// region's elements in row-major order, row `r` at `(r * cols) % period`. The period is
    /// the region's size for an operand of its shape, a row's length for one row read by
    /// every row, in between for a `[s, s]` causal mask read by `[b, heads, s, s]` scores.
    Elements(std::borrow::Cow<'a, [f32]>, usize),
    /// One value per row.
    PerRow(std::borrow::Cow<'a, [f32]>),
    /// One value.
    One(f32),
}

/// `t`'s values broadcast to `shape` (Nx's rule: trailing axes aligned), in row-major order.
fn expand(t: &Tensor, shape: &[usize]) -> Result<Vec<f32>> {
    let op = Op::Broadcast {
        shape: shape.to_vec(),
        axes: None,
    };
    let b = op::eval(&op, std::slice::from_ref(t), Device::Cpu)?;
    let b = b
        .first()
        .ok_or_else(|| crate::Error::Execution("broadcast gave no result".into()))?;
    // (a broadcast view: copied on the compute threads where its rows allow)
    match op::strided_copy::contiguous_f32_values(b) {
        Some(v) => Ok(v),
        None => b.to_f32_vec(),
    }
}

impl Plan {
    /// How the rows read external operand `j`.
    fn values(&self, j: usize) -> Result<Values<'_>> {
        let e = &self.ext[j];
        let t = &e.tensor;
        let n = t.numel();
        let (rows, cols) = (self.rows, self.cols);
        Ok(match e.level {
            _ if n == 1 => Values::One(t.to_f32_vec()?[0]),
            Level::Scalar => {
                return Err(crate::Error::Execution(format!(
                    "a row region's scalar operand holds {n} values"
                )))
            }
            Level::Row if n == rows => Values::PerRow(t.f32_values()?),
            Level::Row => {
                // one value per row: the region's shape with its row axes, the rest 1
                let mut shape = self.full.clone();
                let mut left = cols;
                for d in shape.iter_mut().rev() {
                    if left <= 1 {
                        break;
                    }
                    left /= (*d).max(1);
                    *d = 1;
                }
                Values::PerRow(std::borrow::Cow::Owned(expand(t, &shape)?))
            }
            Level::Full if self.trailing(t.shape()) && n.is_multiple_of(cols) => {
                Values::Elements(t.f32_values()?, n)
            }
            Level::Full if self.trailing(t.shape()) && cols.is_multiple_of(n) => {
                // shorter than a row: the row it repeats into
                let row = t.f32_values()?.repeat(cols / n);
                Values::Elements(std::borrow::Cow::Owned(row), cols)
            }
            Level::Full => {
                Values::Elements(std::borrow::Cow::Owned(expand(t, &self.full)?), rows * cols)
            }
        })
    }

    /// Whether `s`, leading unit axes aside, is the region's trailing axes: its values
    /// repeat over the region's elements in row-major order.
    fn trailing(&self, s: &[usize]) -> bool {
        let lead = s.iter().take_while(|&&d| d == 1).count();
        let s = &s[lead..];
        s.len() <= self.full.len() && self.full[self.full.len() - s.len()..] == *s
    }

    /// Runs the region on the host: the written steps' tensors, in order (`written`:
    /// full-size or per-row steps of f32 values).
    pub(super) fn on_host(&self, written: &[usize]) -> Result<Vec<Tensor>> {
        let (rows, cols) = (self.rows, self.cols);
        let ext = (0..self.ext.len())
            .map(|j| self.values(j))
            .collect::<Result<Vec<_>>>()?;
        // per written step: one value per element (a per-row value broadcast over its row
        // included), else one per row
        let per_element: Vec<bool> = written
            .iter()
            .map(|&k| {
                self.levels[k] == Level::Full
                    || (cols > 1 && self.shapes[k].iter().product::<usize>() == rows * cols)
            })
            .collect();
        let mut outs: Vec<Vec<f32>> = per_element
            .iter()
            .map(|&e| Vec::with_capacity(if e { rows * cols } else { rows }))
            .collect();
        let ptrs: Vec<SharedPtr<f32>> =
            outs.iter_mut().map(|o| SharedPtr(o.as_mut_ptr())).collect();
        let per_task = (PARALLEL_FROM / cols.max(1)).max(1);
        let run = |first: usize| -> Result<()> {
            let mut scratch = Scratch::new(self, cols);
            for r in first..(first + per_task).min(rows) {
                self.row(r, &ext, &mut scratch)?;
                for ((&k, p), &each) in written.iter().zip(&ptrs).zip(&per_element) {
                    // SAFETY: each output has room for `rows` rows (of `cols` values where
                    // `each`, else one value); row `r` is written by this task only.
                    unsafe {
                        match (self.levels[k], each) {
                            (Level::Full, _) => std::ptr::copy_nonoverlapping(
                                scratch.full[k].as_ptr(),
                                p.get().add(r * cols),
                                cols,
                            ),
                            (_, true) => {
                                for c in 0..cols {
                                    *p.get().add(r * cols + c) = scratch.one[k];
                                }
                            }
                            (_, false) => *p.get().add(r) = scratch.one[k],
                        }
                    }
                }
            }
            Ok(())
        };
        if rows * cols >= PARALLEL_FROM && rows > 1 {
            (0..rows)
                .step_by(per_task)
                .collect::<Vec<_>>()
                .into_par_iter()
                .try_for_each(run)?;
        } else {
            (0..rows).step_by(per_task).try_for_each(run)?;
        }
        written
            .iter()
            .zip(outs)
            .zip(per_element)
            .map(|((&k, mut v), each)| {
                // SAFETY: every row of every output was written above.
                unsafe { v.set_len(if each { rows * cols } else { rows }) };
                let shape = self.shapes[k].clone();
                Tensor::from_data(
                    TensorData::new(v, shape.clone()),
                    DType::F32,
                    shape,
                    Device::Cpu,
                )
            })
            .collect()
    }

    /// Computes every step of row `r` into `s`.
    fn row(&self, r: usize, ext: &[Values], s: &mut Scratch) -> Result<()> {
        let cols = self.cols;
        for (k, step) in self.steps.iter().enumerate() {
            let (done, rest) = s.full.split_at_mut(k);
            let out = &mut rest[0];
            let one = &s.one;
            let arg = |src: Src| -> Arg {
                match src {
                    Src::Const(c) => Arg::Scalar(c),
                    Src::Stage(i) if self.levels[i] == Level::Full => Arg::Slice(&done[i][..cols]),
                    Src::Stage(i) => Arg::Scalar(one[i]),
                    Src::Ext(j) => match &ext[j] {
                        Values::Elements(v, period) => {
                            let at = (r * cols) % period;
                            Arg::Slice(&v[at..at + cols])
                        }
                        Values::PerRow(v) => Arg::Scalar(v[r]),
                        Values::One(c) => Arg::Scalar(*c),
                    },
                }
            };
            let level = self.levels[k];
            let value = match *step {
                Step::Map(Stage::Const(c)) => Some(c),
                Step::Map(stage) => {
                    let mut cell = [0f32];
                    let dst: &mut [f32] = if level == Level::Full {
                        &mut out[..cols]
                    } else {
                        &mut cell
                    };
                    match stage {
                        Stage::Const(_) => {}
                        Stage::Unary(m, a) => run_step(m, arg(a), None, dst),
                        Stage::Binary(m, a, b) => run_step(m, arg(a), Some(arg(b)), dst),
                        Stage::Select(p, t, f) => select(arg(p), arg(t), arg(f), dst),
                    }
                    (level != Level::Full).then_some(cell[0])
                }
                Step::Fold(fold, src) => {
                    let Arg::Slice(v) = arg(src) else {
                        return Err(crate::Error::Execution(
                            "a row region folds a value that is not per element".into(),
                        ));
                    };
                    Some(match fold {
                        Fold::Sum => sum32::sum_all(v),
                        Fold::Max => extremum(v, true),
                        Fold::Min => extremum(v, false),
                    })
                }
                Step::Same(src) => match arg(src) {
                    Arg::Slice(v) => {
                        out[..cols].copy_from_slice(v);
                        None
                    }
                    Arg::Scalar(c) => Some(c),
                },
            };
            if let Some(c) = value {
                s.one[k] = c;
            }
        }
        Ok(())
    }
}

/// Per-task buffers: each full-level step's row, each other step's value.
struct Scratch {
    full: Vec<Vec<f32>>,
    one: Vec<f32>,
}

impl Scratch {
    fn new(plan: &Plan, cols: usize) -> Scratch {
        Scratch {
            full: plan
                .levels
                .iter()
                .map(|&l| {
                    if l == Level::Full {
                        vec![0f32; cols]
                    } else {
                        Vec::new()
                    }
                })
                .collect(),
            one: vec![0f32; plan.steps.len()],
        }
    }
}

/// The max (`max`) or min of a row as the CPU's reduction over trailing axes computes it:
/// NaN (the positive quiet NaN) where the row holds one, else Burn's vector kernel for long
/// rows and a left-to-right scan keeping the first of equal values for short ones.
fn extremum(v: &[f32], max: bool) -> f32 {
    if v.len() >= VECTOR_EXTREMUM_FROM {
        let e = if max {
            burn_flex::simd::kernels::max_f32(v)
        } else {
            burn_flex::simd::kernels::min_f32(v)
        };
        if e.is_nan() || v.iter().any(|x| x.is_nan()) {
            return f32::NAN;
        }
        return e;
    }
    let mut best = v[0];
    for &x in v {
        if x.is_nan() {
            return f32::NAN;
        }
        if (max && x > best) || (!max && x < best) {
            best = x;
        }
    }
    best
}
