//! Row regions on the CPU: each row (a softmax's, a layer norm's, a cross-entropy's) taken
//! through every step of the region while it sits in the core's cache, rows spread over the
//! compute threads. Op by op, each step is a pass over the whole tensor and each reduction a
//! pass of its own. Narrow rows go through the steps a block at a time (up to
//! [`BLOCK_ELEMENTS`] elements): each step is one loop over the block's rows instead of one
//! call per row, which for a classifier's 10 classes cost more than the values (a log-softmax
//! and its gradient over 512 x 10 logits: 146-156 us a region on two cores, now 52-55 us).
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

/// Longest rows the CPU takes as regions (256 KiB of f32 per value of a row: a few such
/// values stay in a core's L2 cache).
pub(in crate::program::fuse) const MAX_COLS: usize = 64 * 1024;

/// Rows of at least this many elements take Burn's vector max/min kernel in the CPU's
/// reduction (`EXTREMUM_SIMD_ROW_THRESHOLD` in burn-flex 0.21's `ops/reduce.rs`), shorter
/// ones a scan; the region chooses as it does, so that ties of signed zeros resolve alike.
const VECTOR_EXTREMUM_FROM: usize = 512;

/// Below this many elements a region runs on the calling thread.
const PARALLEL_FROM: usize = 1 << 15;

/// The same for regions with a transcendental step (`exp`, `log`, `tanh`, ...: tens of
/// nanoseconds an element, where arithmetic takes one): a classifier's log-softmax over
/// 512 x 10 logits took 90-100 us on one Xeon core inside an MLP step.
const PARALLEL_FROM_TRANSCENDENTAL: usize = 1 << 9;

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
    match op::strided_copy::contiguous_f32_values(b)? {
        Some(v) => Ok(v),
        None => b.to_f32_vec(),
    }
}

impl Plan {
    /// Whether a step computes a transcendental function (many times an addition's cost).
    fn transcendental(&self) -> bool {
        use crate::kernels::Map;
        self.steps.iter().any(|s| {
            matches!(
                s,
                Step::Map(Stage::Unary(
                    Map::Exp | Map::Log | Map::Exact(_) | Map::Tanh | Map::Sin | Map::Cos,
                    _
                )) | Step::Map(Stage::Binary(Map::Pow, _, _))
            )
        })
    }

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
        let parallel_from = if self.transcendental() {
            PARALLEL_FROM_TRANSCENDENTAL
        } else {
            PARALLEL_FROM
        };
        let per_task = (parallel_from / cols.max(1)).max(1);
        let per_block = (BLOCK_ELEMENTS / cols.max(1)).clamp(1, per_task);
        // rows after which an operand's values start over (a causal mask under every head's
        // scores): no block reads across that point
        let periods: Vec<usize> = ext
            .iter()
            .filter_map(|e| match e {
                Values::Elements(_, period) => Some((period / cols.max(1)).max(1)),
                _ => None,
            })
            .collect();
        let uses = Uses::of(self, &ext);
        // each thread's buffers, made once and reused for every group of rows it takes
        let new_scratch = || Scratch::new(self, per_block, &uses);
        let run = |scratch: &mut Scratch, first: usize| -> Result<()> {
            let end = (first + per_task).min(rows);
            let mut r = first;
            while r < end {
                let nr = periods
                    .iter()
                    .fold(per_block.min(end - r), |n, &p| n.min(p - r % p));
                self.block(r, nr, &ext, &uses, scratch)?;
                let n = nr * cols;
                for ((&k, p), &each) in written.iter().zip(&ptrs).zip(&per_element) {
                    // SAFETY: each output has room for `rows` rows (of `cols` values where
                    // `each`, else one value); rows `r..r + nr` are written by this task only.
                    unsafe {
                        match (self.levels[k], each) {
                            (Level::Full, _) => std::ptr::copy_nonoverlapping(
                                scratch.full[k].as_ptr(),
                                p.get().add(r * cols),
                                n,
                            ),
                            (_, true) => {
                                for (i, &x) in scratch.per_row[k][..nr].iter().enumerate() {
                                    let row = p.get().add((r + i) * cols);
                                    for c in 0..cols {
                                        *row.add(c) = x;
                                    }
                                }
                            }
                            (_, false) => std::ptr::copy_nonoverlapping(
                                scratch.per_row[k].as_ptr(),
                                p.get().add(r),
                                nr,
                            ),
                        }
                    }
                }
                r += nr;
            }
            Ok(())
        };
        if rows * cols >= parallel_from && rows > 1 {
            let task = |scratch: &mut Scratch, t: usize| run(scratch, t * per_task);
            crate::threads::for_each_claimed(rows.div_ceil(per_task), new_scratch, task)?;
        } else {
            let mut scratch = new_scratch();
            (0..rows)
                .step_by(per_task)
                .try_for_each(|first| run(&mut scratch, first))?;
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

    /// Computes every step of rows `r0..r0 + nr` into `s`: each full-level step's values
    /// (`nr` rows of `cols`), each other step's value per row. Element-wise steps go over the
    /// block's rows at once (for narrow rows, one call per step instead of one per row and
    /// step); folds reduce each row on its own, as the CPU reduction does.
    fn block(
        &self,
        r0: usize,
        nr: usize,
        ext: &[Values],
        uses: &Uses,
        s: &mut Scratch,
    ) -> Result<()> {
        let cols = self.cols;
        let n = nr * cols;
        // the block's values of the operands that full-level steps read per element
        for (j, e) in ext.iter().enumerate() {
            match e {
                Values::PerRow(v) if uses.ext_spread[j] && nr > 1 => {
                    spread(&v[r0..r0 + nr], cols, &mut s.ext_spread[j])
                }
                _ => {}
            }
        }
        for (k, step) in self.steps.iter().enumerate() {
            let level = self.levels[k];
            let (done, rest) = s.full.split_at_mut(k);
            let (rows_done, rows_rest) = s.per_row.split_at_mut(k);
            let (spread_done, _) = s.spread.split_at_mut(k);
            // an operand as a step of `level` reads it: `n` values of a full-level step, `nr`
            // of another
            let arg = |src: Src, full: bool| -> Result<Arg> {
                Ok(match src {
                    Src::Const(c) => Arg::Scalar(c),
                    Src::Stage(i) if self.levels[i] == Level::Full => {
                        if !full {
                            return Err(crate::Error::Execution(
                                "a row region's per-row step reads a per-element value".into(),
                            ));
                        }
                        Arg::Slice(&done[i][..n])
                    }
                    Src::Stage(i) if !full => Arg::Slice(&rows_done[i][..nr]),
                    Src::Stage(i) if nr == 1 => Arg::Scalar(rows_done[i][0]),
                    Src::Stage(i) => Arg::Slice(&spread_done[i][..n]),
                    Src::Ext(j) => match &ext[j] {
                        Values::Elements(v, period) if full => {
                            let at = (r0 * cols) % period;
                            Arg::Slice(&v[at..at + n])
                        }
                        Values::Elements(..) => {
                            return Err(crate::Error::Execution(
                                "a row region's per-row step reads a per-element operand".into(),
                            ))
                        }
                        Values::PerRow(v) if !full => Arg::Slice(&v[r0..r0 + nr]),
                        Values::PerRow(v) if nr == 1 => Arg::Scalar(v[r0]),
                        Values::PerRow(_) => Arg::Slice(&s.ext_spread[j][..n]),
                        Values::One(c) => Arg::Scalar(*c),
                    },
                })
            };
            let full = level == Level::Full;
            let out: &mut [f32] = if full {
                &mut rest[0][..n]
            } else {
                &mut rows_rest[0][..nr]
            };
            match *step {
                Step::Map(Stage::Const(c)) => out.fill(c),
                Step::Map(Stage::Unary(m, a)) => run_step(m, arg(a, full)?, None, out),
                Step::Map(Stage::Binary(m, a, b)) => {
                    run_step(m, arg(a, full)?, Some(arg(b, full)?), out)
                }
                Step::Map(Stage::Select(p, t, f)) => {
                    select(arg(p, full)?, arg(t, full)?, arg(f, full)?, out)
                }
                Step::Fold(fold, src) => {
                    let Arg::Slice(v) = arg(src, true)? else {
                        return Err(crate::Error::Execution(
                            "a row region folds a value that is not per element".into(),
                        ));
                    };
                    for (x, row) in out.iter_mut().zip(v.chunks_exact(cols)) {
                        *x = match fold {
                            Fold::Sum => sum32::sum_all(row),
                            Fold::Max => extremum(row, true),
                            Fold::Min => extremum(row, false),
                        };
                    }
                }
                Step::Same(src) | Step::Map(Stage::Same(src)) => match arg(src, full)? {
                    Arg::Slice(v) => out.copy_from_slice(v),
                    Arg::Scalar(c) => out.fill(c),
                },
            }
            if !full && uses.spread[k] && nr > 1 {
                spread(&s.per_row[k][..nr], cols, &mut s.spread[k]);
            }
        }
        Ok(())
    }
}

/// Rows of at most this many elements in all go through a region's steps together.
const BLOCK_ELEMENTS: usize = 1024;

/// `values` (one per row) repeated over their rows of `cols` elements, into `out`.
fn spread(values: &[f32], cols: usize, out: &mut [f32]) {
    for (row, &x) in out.chunks_exact_mut(cols).zip(values) {
        row.fill(x);
    }
}

/// Which per-row values full-level steps read per element (spread over their rows when a
/// block holds several rows): of the steps, and of the external operands.
struct Uses {
    spread: Vec<bool>,
    ext_spread: Vec<bool>,
}

impl Uses {
    fn of(plan: &Plan, ext: &[Values]) -> Uses {
        let mut uses = Uses {
            spread: vec![false; plan.steps.len()],
            ext_spread: vec![false; ext.len()],
        };
        for (k, step) in plan.steps.iter().enumerate() {
            if plan.levels[k] != Level::Full {
                continue;
            }
            let srcs: Vec<Src> = match *step {
                Step::Map(Stage::Const(_)) => vec![],
                Step::Map(Stage::Unary(_, a)) => vec![a],
                Step::Map(Stage::Binary(_, a, b)) => vec![a, b],
                Step::Map(Stage::Select(p, t, f)) => vec![p, t, f],
                Step::Fold(_, a) | Step::Same(a) | Step::Map(Stage::Same(a)) => vec![a],
            };
            for src in srcs {
                match src {
                    Src::Stage(i) if plan.levels[i] != Level::Full => uses.spread[i] = true,
                    Src::Ext(j) if matches!(ext[j], Values::PerRow(_)) => uses.ext_spread[j] = true,
                    _ => {}
                }
            }
        }
        uses
    }
}

/// Per-task buffers for a block of rows: each full-level step's values, each other step's
/// value per row, and those per-row values (of steps and external operands) spread over
/// their rows where full-level steps read them (`uses`; only for blocks of several rows).
struct Scratch {
    full: Vec<Vec<f32>>,
    per_row: Vec<Vec<f32>>,
    spread: Vec<Vec<f32>>,
    ext_spread: Vec<Vec<f32>>,
}

impl Scratch {
    fn new(plan: &Plan, per_block: usize, uses: &Uses) -> Scratch {
        let n = per_block * plan.cols;
        let sized = |want: bool, len: usize| if want { vec![0f32; len] } else { Vec::new() };
        let spread = |wanted: &[bool]| -> Vec<Vec<f32>> {
            wanted
                .iter()
                .map(|&w| sized(w && per_block > 1, n))
                .collect()
        };
        Scratch {
            full: plan
                .levels
                .iter()
                .map(|&l| sized(l == Level::Full, n))
                .collect(),
            per_row: plan
                .levels
                .iter()
                .map(|&l| sized(l != Level::Full, per_block))
                .collect(),
            spread: spread(&uses.spread),
            ext_spread: spread(&uses.ext_spread),
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
