//! Row regions on NVIDIA GPUs: consecutive element-wise instructions and reductions over the
//! same trailing axes (a softmax, a layer norm, and their gradients) as one kernel.
//!
//! The region's shape `full` splits into `rows` (the leading axes) and `cols` (the reduced
//! trailing axes). One block of threads computes one row: every element-wise step of the
//! row's elements stays in registers, each reduction is a sum, max or min across the block,
//! and values that only vary per row (the row's max, `1 / sqrt(var + eps)`) are computed once
//! per row. Op by op, the same computation makes one pass over memory per op and one kernel
//! per reduction. Element-wise steps compute what the op table computes (the stages of
//! [`map32`]); sums add in another order than Burn's reduction kernel (rounding may differ in
//! the last bits); `max`/`min` let NaN win, as Nx's.

use super::map32::{self, Src, Stage, Ty};
use super::Run;
use crate::op::util::broadcast_shape;
use crate::op::{Op, ReduceKind};
use crate::{DType, Error, Result, Tensor};

thread_local! {
    /// Row regions this thread ran as one kernel (see [`row_regions`]).
    static REGIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many row regions the programs run on this thread executed as one kernel: lets tests
/// tell a fused region from op-by-op evaluation.
pub fn row_regions() -> u64 {
    REGIONS.with(|c| c.get())
}

/// Threads per block at most.
const MAX_BLOCK: usize = 256;

/// Elements of a row one thread computes at most (kept in registers): rows up to 512 with a
/// warp per row, 4,096 with 256 threads, 16,384 with 1,024.
const MAX_PER_THREAD: usize = 16;

/// How a row kernel's threads cover the rows: `threads` per block, `lanes` of them per row
/// (a warp, or the whole block), each computing `per` elements of its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Threads {
    /// Threads per block.
    pub threads: usize,
    /// Threads per row: 32 (a warp per row, `threads / 32` rows per block) or `threads`.
    pub lanes: usize,
    /// Row elements per thread.
    pub per: usize,
}

impl Threads {
    /// Rows one block computes at a time.
    pub(super) fn rows_per_block(&self) -> usize {
        self.threads / self.lanes
    }
}

/// Row elements of full-size operands one thread of a warp-per-row kernel holds at most:
/// with more (the gradient of softmax reads seven operands), registers spill and a block per
/// row is faster (on an H200: 190 us against 460 us for [96 * 512, 512]).
const WARP_REGISTERS: usize = 48;

/// What a value of the region varies with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Level {
    /// One value for the whole region (a constant).
    Scalar,
    /// One value per row.
    Row,
    /// One value per element.
    Full,
}

/// A fold over each row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Fold {
    Sum,
    Max,
    Min,
}

/// One instruction of the region.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step {
    /// An element-wise stage (of any level).
    Map(Stage),
    /// A fold of a full-level value over its row.
    Fold(Fold, Src),
    /// A reshape or broadcast: the same numbers.
    Same(Src),
}

/// An external tensor operand and how the kernel reads it.
pub(super) struct External {
    /// The operand (f32; masks cast to f32).
    pub(super) tensor: Tensor,
    /// Per element, or once per row.
    pub(super) level: Level,
    /// The program's value it is (`tensor` itself unless it is a mask cast to f32).
    value: Option<usize>,
    /// Whether the program handed its own tensor over (read for the last time here): a
    /// result may be written over its buffer.
    donated: bool,
}

/// A region compiled for one kernel.
pub(super) struct Plan {
    /// The instructions.
    pub(super) steps: Vec<Step>,
    /// Each step's level.
    pub(super) levels: Vec<Level>,
    /// Each step's shape (as Nx has it).
    pub(super) shapes: Vec<Vec<usize>>,
    /// Each step's type.
    tys: Vec<Ty>,
    /// External operands.
    pub(super) ext: Vec<External>,
    /// The region's shape.
    pub(super) full: Vec<usize>,
    /// Rows (the product of the leading axes) and their length (of the reduced axes).
    pub(super) rows: usize,
    pub(super) cols: usize,
}

/// The outcome of planning at an instruction.
pub(super) enum Attempt {
    /// A region of this many instructions.
    Region(Plan, usize),
    /// No region starts here; none starts before this many instructions either.
    Skip(usize),
}

/// The shape of `op`'s result on operands of `shapes`, for the ops a region can hold.
fn result_shape(op: &Op, shapes: &[&[usize]]) -> Option<Vec<usize>> {
    match op {
        Op::Full { shape, .. } if shape.is_empty() => Some(vec![]),
        Op::Full { .. } => None,
        Op::Reduce {
            kind: ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min,
            axes: Some(axes),
            keep_axes,
            ..
        } => {
            let s = shapes.first()?;
            if axes.iter().any(|&a| a >= s.len()) {
                return None;
            }
            Some(
                s.iter()
                    .enumerate()
                    .filter_map(|(i, &d)| match (axes.contains(&i), keep_axes) {
                        (false, _) => Some(d),
                        (true, true) => Some(1),
                        (true, false) => None,
                    })
                    .collect(),
            )
        }
        Op::Broadcast { shape, .. } | Op::Reshape { shape } => Some(shape.clone()),
        Op::Select { .. } | Op::Compare(_) | Op::Binary { .. } | Op::Unary(_) => {
            let mut out: Vec<usize> = Vec::new();
            for s in shapes {
                out = broadcast_shape(&out, s).ok()?;
            }
            Some(out)
        }
        _ => None,
    }
}

/// The axes a reduction folds, when they are the trailing axes `lead..` of `input`.
fn trailing(op: &Op, input: &[usize]) -> Option<usize> {
    let Op::Reduce {
        kind: ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min,
        axes: Some(axes),
        ..
    } = op
    else {
        return None;
    };
    let mut sorted = axes.clone();
    sorted.sort_unstable();
    let lead = *sorted.first()?;
    (sorted == (lead..input.len()).collect::<Vec<_>>()).then_some(lead)
}

/// The geometry of a region: its shape and how many leading axes index rows.
struct Geometry {
    full: Vec<usize>,
    lead: usize,
}

impl Geometry {
    /// Whether `s` holds one value per row in row order: the leading axes alone, or the full
    /// rank with unit trailing axes.
    fn row_shaped(&self, s: &[usize]) -> bool {
        s == &self.full[..self.lead]
            || (s.len() == self.full.len()
                && s[..self.lead] == self.full[..self.lead]
                && s[self.lead..].iter().all(|&d| d == 1))
    }

    /// Whether `s` is row-shaped and broadcasts to the full shape (unit trailing axes).
    fn row_aligned(&self, s: &[usize]) -> bool {
        s.len() == self.full.len() && self.row_shaped(s)
    }

    /// Whether a broadcast of a per-row value of shape `from` to `shape` on `axes` keeps it
    /// per row: every non-unit axis goes to the leading axis of its length, in order.
    fn broadcast_keeps_rows(
        &self,
        from: &[usize],
        shape: &[usize],
        axes: Option<&[usize]>,
    ) -> bool {
        if !(shape == self.full.as_slice() || self.row_shaped(shape)) {
            return false;
        }
        let axes: Vec<usize> = match axes {
            Some(a) => a.to_vec(),
            None if from.len() <= shape.len() => (shape.len() - from.len()..shape.len()).collect(),
            None => return false,
        };
        axes.len() == from.len()
            && axes.windows(2).all(|w| w[0] < w[1])
            && from
                .iter()
                .zip(&axes)
                .all(|(&d, &a)| d == 1 || (a < self.lead && shape.get(a) == Some(&d)))
    }
}

/// Value `a` of `values` (defined before the region).
fn external(values: &[Option<Tensor>], a: usize) -> Result<&Tensor> {
    values
        .get(a)
        .and_then(|v| v.as_ref())
        .ok_or_else(|| Error::Execution(format!("value {a} was freed")))
}

/// The level at which an external operand of shape `s` is read: per row when it broadcasts to
/// the region's shape with unit trailing axes, per element when it broadcasts otherwise.
fn external_level(g: &Geometry, s: &[usize]) -> Option<Level> {
    if broadcast_shape(s, &g.full).ok()? != g.full {
        return None;
    }
    let offset = g.full.len() - s.len();
    let per_row = s
        .iter()
        .enumerate()
        .all(|(i, &d)| d == 1 || i + offset < g.lead);
    Some(if per_row { Level::Row } else { Level::Full })
}

/// Plans the longest region starting at `instrs[0]` (value number `first`; earlier values
/// in `values`): element-wise instructions, reductions (sum, max, min) over the trailing
/// axes of one shape, and reshapes and broadcasts of per-row values, with at least one
/// reduction.
pub(super) fn plan(run: &Run, values: &[Option<Tensor>]) -> Result<Attempt> {
    let (instrs, first) = (run.instrs, run.first);
    // Pass 1: the shapes, and the geometry from the first reduction over trailing axes.
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    let mut geometry: Option<Geometry> = None;
    for ins in instrs {
        let Some(op) = ins.op.as_op() else { break };
        let args = ins
            .args
            .iter()
            .map(|&a| {
                if a >= first {
                    Ok(shapes[a - first].clone())
                } else {
                    Ok(external(values, a)?.shape().to_vec())
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&[usize]> = args.iter().map(|s| s.as_slice()).collect();
        let Some(shape) = result_shape(op, &refs) else {
            break;
        };
        if geometry.is_none() {
            if let Some(lead) = refs.first().and_then(|s| trailing(op, s)) {
                geometry = Some(Geometry {
                    full: args[0].clone(),
                    lead,
                });
            }
        }
        shapes.push(shape);
    }
    let Some(g) = geometry else {
        return Ok(Attempt::Skip(shapes.len().max(1)));
    };
    let rows: usize = g.full[..g.lead].iter().product();
    let cols: usize = g.full[g.lead..].iter().product();
    if rows == 0 || cols == 0 || cols.div_ceil(1024) > MAX_PER_THREAD {
        return Ok(Attempt::Skip(shapes.len().max(1)));
    }
    // Pass 2: each instruction's step, level and type, up to the first that does not fit.
    let mut plan = Plan {
        steps: Vec::new(),
        levels: Vec::new(),
        shapes: Vec::new(),
        tys: Vec::new(),
        ext: Vec::new(),
        full: g.full.clone(),
        rows,
        cols,
    };
    let mut ext_ids: Vec<usize> = Vec::new();
    for (k, ins) in instrs.iter().enumerate().take(shapes.len()) {
        let Some(op) = ins.op.as_op() else { break };
        match plan.step(op, &ins.args, &shapes[k], run, &g, &mut ext_ids, values)? {
            Some((step, level, ty)) => {
                plan.steps.push(step);
                plan.levels.push(level);
                plan.tys.push(ty);
                plan.shapes.push(shapes[k].clone());
            }
            None => break,
        }
    }
    let len = plan.steps.len();
    if !plan.steps.iter().any(|s| matches!(s, Step::Fold(..))) {
        return Ok(Attempt::Skip(len.max(1)));
    }
    Ok(Attempt::Region(plan, len))
}

impl Plan {
    /// The step of one instruction, its level and type; `None` where it does not fit.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        op: &Op,
        args: &[usize],
        shape: &[usize],
        run: &Run,
        g: &Geometry,
        ext_ids: &mut Vec<usize>,
        values: &[Option<Tensor>],
    ) -> Result<Option<(Step, Level, Ty)>> {
        if let Op::Full { dtype, value, .. } = op {
            return Ok(super::literal_f32(*value, *dtype)
                .map(|v| (Step::Map(Stage::Const(v)), Level::Scalar, Ty::Const(*dtype))));
        }
        // operands: source, level, type, shape
        let mut ops: Vec<(Src, Level, Ty, Vec<usize>)> = Vec::with_capacity(args.len());
        for &a in args {
            if a >= run.first {
                let k = a - run.first;
                let src = match self.steps[k] {
                    Step::Map(Stage::Const(c)) => Src::Const(c),
                    _ => Src::Stage(k),
                };
                ops.push((src, self.levels[k], self.tys[k], self.shapes[k].clone()));
                continue;
            }
            if let Some((v, dtype)) = run.literal(a) {
                // a literal of the program: a constant of the kernel
                ops.push((Src::Const(v), Level::Scalar, Ty::Const(dtype), vec![]));
                continue;
            }
            let t = external(values, a)?;
            let Some(ty) = Ty::of_operand(t) else {
                return Ok(None);
            };
            let Some(level) = external_level(g, t.shape()) else {
                return Ok(None);
            };
            let j = match ext_ids.iter().position(|&e| e == a) {
                Some(j) => j,
                None => {
                    ext_ids.push(a);
                    // masks are read as 1.0/0.0
                    let tensor = ty.operand(t, t.device())?;
                    let value = (ty == Ty::F32).then_some(a);
                    self.ext.push(External {
                        tensor,
                        level,
                        value,
                        donated: false,
                    });
                    self.ext.len() - 1
                }
            };
            ops.push((Src::Ext(j), level, ty, t.shape().to_vec()));
        }
        let same = |level: Level, ty: Ty| Ok(Some((Step::Same(ops[0].0), level, ty)));
        match op {
            Op::Reduce { kind, out, .. } => {
                let (src, level, ty, s) = &ops[0];
                if *level != Level::Full || s != &g.full || trailing(op, s) != Some(g.lead) {
                    return Ok(None);
                }
                let (fold, ty) = match (kind, ty, out) {
                    (ReduceKind::Sum, Ty::F32, None | Some(DType::F32)) => (Fold::Sum, Ty::F32),
                    (ReduceKind::Sum, Ty::Mask, Some(d)) if d.is_int() => {
                        (Fold::Sum, Ty::Count(*d))
                    }
                    (ReduceKind::Max, Ty::F32, _) => (Fold::Max, Ty::F32),
                    (ReduceKind::Min, Ty::F32, _) => (Fold::Min, Ty::F32),
                    _ => return Ok(None),
                };
                Ok(Some((Step::Fold(fold, *src), Level::Row, ty)))
            }
            Op::Broadcast { axes, .. } => {
                let (_, level, ty, s) = &ops[0];
                match level {
                    Level::Full if shape == g.full.as_slice() => same(Level::Full, *ty),
                    Level::Row if g.broadcast_keeps_rows(s, shape, axes.as_deref()) => {
                        same(Level::Row, *ty)
                    }
                    _ => Ok(None),
                }
            }
            Op::Reshape { .. } => {
                let (_, level, ty, s) = &ops[0];
                match level {
                    Level::Full if shape == g.full.as_slice() => same(Level::Full, *ty),
                    Level::Row if g.row_shaped(s) && g.row_shaped(shape) => same(Level::Row, *ty),
                    _ => Ok(None),
                }
            }
            op => {
                let level = if shape == g.full.as_slice() {
                    // per-row operands must line up with the rows
                    let fits = ops.iter().all(|(_, l, _, s)| match l {
                        Level::Full => s == &g.full,
                        Level::Row => s == &g.full || g.row_aligned(s),
                        Level::Scalar => true,
                    });
                    if !fits {
                        return Ok(None);
                    }
                    if ops.iter().any(|o| o.1 == Level::Full) {
                        Level::Full
                    } else {
                        Level::Row
                    }
                } else if g.row_shaped(shape) {
                    let fits = ops.iter().all(|(src, l, _, s)| match l {
                        Level::Full => false,
                        Level::Row => {
                            s == shape && (!matches!(src, Src::Ext(_)) || g.row_aligned(s))
                        }
                        Level::Scalar => true,
                    });
                    if !fits {
                        return Ok(None);
                    }
                    Level::Row
                } else if shape.is_empty() {
                    Level::Scalar
                } else {
                    return Ok(None);
                };
                let srcs: Vec<Src> = ops.iter().map(|o| o.0).collect();
                let tys: Vec<Ty> = ops.iter().map(|o| o.2).collect();
                Ok(map32::stage(op, &srcs, &tys).map(|(stage, ty)| (Step::Map(stage), level, ty)))
            }
        }
    }

    /// How the kernel's threads cover the rows (see [`Threads`]).
    pub(super) fn threads(&self) -> Threads {
        let full_inputs = self.ext.iter().filter(|e| e.level == Level::Full).count();
        if self.cols <= 32 * MAX_PER_THREAD
            && full_inputs * self.cols.div_ceil(32) <= WARP_REGISTERS
        {
            // short rows (attention's 512) of few operands: a warp per row, reductions by
            // shuffles alone; a block per row of a few elements per thread spent its time in
            // the block's synchronisations (softmax over [96 * 512, 512] on an H200: 72 us
            // against 113 us)
            return Threads {
                threads: MAX_BLOCK,
                lanes: 32,
                per: self.cols.div_ceil(32),
            };
        }
        let threads = if self.cols > MAX_BLOCK * MAX_PER_THREAD {
            1024
        } else {
            MAX_BLOCK
        };
        Threads {
            threads,
            lanes: threads,
            per: self.cols.div_ceil(threads),
        }
    }

    /// Takes over from `values` the full-size operands that `dies` says the region reads
    /// for the last time (the program's own tensors, so that when nothing else holds their
    /// buffers a result can be written over one; see [`Plan::give_back`]).
    pub(super) fn take_last_reads(
        &mut self,
        values: &mut [Option<Tensor>],
        dies: &dyn Fn(usize) -> bool,
    ) {
        for e in self.ext.iter_mut() {
            let Some(a) = e.value.filter(|&a| e.level == Level::Full && dies(a)) else {
                continue;
            };
            if let Some(t) = values.get_mut(a).and_then(|v| v.take()) {
                e.tensor = t;
                e.donated = true;
            }
        }
    }

    /// Returns the operands [`Plan::take_last_reads`] took (when the region did not run).
    pub(super) fn give_back(&self, values: &mut [Option<Tensor>]) {
        for e in self.ext.iter().filter(|e| e.donated) {
            if let Some(slot) = e.value.and_then(|a| values.get_mut(a)) {
                *slot = Some(e.tensor.clone());
            }
        }
    }

    /// For each written result (in order), the operand whose buffer it may be written over:
    /// a donated full-size operand of as many elements that no other tensor holds.
    fn reuse(&self, written: &[usize]) -> Vec<Option<usize>> {
        let mut used = vec![false; self.ext.len()];
        written
            .iter()
            .map(|&k| {
                let count: usize = self.shapes[k].iter().product();
                if self.levels[k] != Level::Full || count != self.rows * self.cols {
                    return None;
                }
                let j = (0..self.ext.len()).find(|&j| {
                    !used[j]
                        && self.ext[j].donated
                        && crate::cuda::elementwise::reusable(&self.ext[j].tensor, count)
                })?;
                used[j] = true;
                Some(j)
            })
            .collect()
    }

    /// Runs the region (its results read after it: `live_out`; `literal(k)`: the kept tensor
    /// of constant step `k`) as one kernel; the live results in instruction order, or `None`
    /// where the kernel does not apply (a mask, count or scalar read after the region).
    /// Results may be written over donated operands (see [`Plan::take_last_reads`]): each
    /// thread reads all of its elements of every operand before it writes any.
    pub(super) fn execute(
        &self,
        live_out: &[bool],
        literal: &dyn Fn(usize) -> Result<Tensor>,
    ) -> Result<Option<Vec<Option<Tensor>>>> {
        let mut written = Vec::new();
        for (k, _) in live_out.iter().enumerate().filter(|(_, &l)| l) {
            match (self.steps[k], self.levels[k], self.tys[k]) {
                (Step::Map(Stage::Const(_)), _, _) => {}
                (_, Level::Scalar, _) | (_, _, Ty::Mask | Ty::Count(_) | Ty::Const(_)) => {
                    return Ok(None)
                }
                _ => written.push(k),
            }
        }
        let Some(strides) = super::gpu::operand_strides(self.ext.iter().map(|e| &e.tensor)) else {
            return Ok(None);
        };
        let reuse = self.reuse(&written);
        let restrict = reuse.iter().all(Option::is_none);
        let Some(code) = super::gpu::row_source(self, &written, &strides, restrict) else {
            return Ok(None);
        };
        let inputs: Vec<&Tensor> = self.ext.iter().map(|e| &e.tensor).collect();
        let shapes: Vec<Vec<usize>> = written.iter().map(|&k| self.shapes[k].clone()).collect();
        let g = self.threads();
        let Some(computed) = crate::cuda::elementwise::launch_rows(
            &code,
            &inputs,
            &shapes,
            self.rows,
            (g.threads, g.rows_per_block()),
            &reuse,
        )?
        else {
            return Ok(None);
        };
        REGIONS.with(|c| c.set(c.get() + 1));
        crate::profile::note_detail(|| {
            format!(
                "{}x{} rows, {} in, {} out",
                self.rows,
                self.cols,
                inputs.len(),
                shapes.len()
            )
        });
        let mut computed = computed.into_iter();
        live_out
            .iter()
            .enumerate()
            .map(|(k, &live)| match (live, self.steps[k]) {
                (false, _) => Ok(None),
                (true, Step::Map(Stage::Const(_))) => literal(k).map(Some),
                (true, _) => computed
                    .next()
                    .map(Some)
                    .ok_or_else(|| Error::Execution("missing output".into())),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::fuse::Run;
    use crate::program::{Instr, Step};
    use crate::{Device, Scalar};

    fn ins(op: Op, args: &[usize]) -> Instr {
        Instr {
            op: Step::Op(op),
            args: args.to_vec(),
        }
    }

    /// A masked softmax over [6, 300] plans as one region of every instruction, and its CUDA
    /// C compiles with NVRTC where the library is found (no GPU needed).
    #[test]
    fn a_softmax_region_plans_and_its_source_compiles() {
        let x =
            Tensor::from_bytes(&[0u8; 6 * 300 * 4], &[6, 300], DType::F32, Device::Cpu).unwrap();
        let m = x.cast(DType::U8).unwrap().to_bool();
        let lit = |v: f64| Op::Full {
            shape: vec![],
            dtype: DType::F32,
            value: Scalar::F(v),
        };
        let fold = |kind| Op::Reduce {
            kind,
            axes: Some(vec![1]),
            keep_axes: true,
            out: None,
        };
        let bin = |op| Op::Binary { op, out: None };
        use crate::op::Arith;
        let instrs = vec![
            ins(lit(8.0), &[]),                          // 2
            ins(bin(Arith::Divide), &[0, 2]),            // 3
            ins(lit(-1.0e9), &[]),                       // 4
            ins(Op::Select { out: None }, &[1, 3, 4]),   // 5
            ins(fold(ReduceKind::Max), &[5]),            // 6
            ins(bin(Arith::Subtract), &[5, 6]),          // 7
            ins(Op::Unary(crate::op::Unary::Exp), &[7]), // 8
            ins(fold(ReduceKind::Sum), &[8]),            // 9
            ins(bin(Arith::Divide), &[8, 9]),            // 10
        ];
        let values = vec![Some(x), Some(m)];
        let run = Run {
            instrs: &instrs,
            first: 2,
            literals: &[],
        };
        let Attempt::Region(plan, len) = plan(&run, &values).unwrap() else {
            panic!("no region");
        };
        assert_eq!(len, instrs.len());
        let warp = Threads {
            threads: 256,
            lanes: 32,
            per: 10,
        };
        assert_eq!((plan.rows, plan.cols, plan.threads()), (6, 300, warp));
        let strides: Vec<Vec<usize>> = plan
            .ext
            .iter()
            .map(|e| match e.tensor.shape() {
                [] => vec![1],
                s => (0..s.len()).map(|a| s[a + 1..].iter().product()).collect(),
            })
            .collect();
        for restrict in [true, false] {
            let source =
                crate::program::fuse::gpu::row_source(&plan, &[8, 4, 7], &strides, restrict)
                    .unwrap();
            assert_eq!(source.contains("__restrict__"), restrict);
            crate::cuda::elementwise::assert_compiles(&source);
        }
    }
}
