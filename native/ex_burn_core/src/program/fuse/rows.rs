//! Row regions: consecutive element-wise instructions and reductions over the same trailing
//! axes (a softmax, a layer norm, and their gradients) planned for one kernel of the device
//! kernels ([`crate::kernels::RowRegion`]; NVIDIA GPUs with the CUDA kernels), or run row by
//! row on the CPU ([`host`], the values of op-by-op evaluation bit for bit).
//!
//! The region's shape `full` splits into `rows` (the leading axes) and `cols` (the reduced
//! trailing axes). The kernel computes a row at a time: every element-wise step of the row's
//! elements stays in registers, each reduction is a sum, max or min across the row, and values
//! that only vary per row (the row's max, `1 / sqrt(var + eps)`) are computed once per row. Op
//! by op, the same computation makes one pass over memory per op and one kernel per reduction.
//! Element-wise steps compute what the op table computes (the stages of [`map32`]); sums add
//! in another order than Burn's reduction kernel (rounding may differ in the last bits);
//! `max`/`min` let NaN win, as Nx's.

mod host;

pub(super) use host::MAX_COLS as HOST_MAX_COLS;

use super::map32::{self, Ty};
use super::Run;
use crate::kernels::{DeviceKernels, Fold, Level, RowOperand, RowRegion, Src, Stage};
use crate::op::util::broadcast_shape;
use crate::op::{Op, ReduceKind};
use crate::{DType, Error, Result, Tensor};

/// One instruction of a region.
type Step = crate::kernels::RowStep;

thread_local! {
    /// Row regions this thread ran as one kernel (see [`row_regions`]).
    static REGIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many row regions the programs run on this thread executed as one kernel: lets tests
/// tell a fused region from op-by-op evaluation.
pub fn row_regions() -> u64 {
    REGIONS.with(|c| c.get())
}

/// An external tensor operand and how the kernel reads it.
struct External {
    /// The operand (f32; masks cast to f32).
    tensor: Tensor,
    /// Per element, or once per row.
    level: Level,
    /// The program's value it is (`tensor` itself unless it is a mask cast to f32).
    value: Option<usize>,
    /// Whether the program handed its own tensor over (read for the last time here): a
    /// result may be written over its buffer.
    donated: bool,
}

/// A region compiled for one kernel.
pub(super) struct Plan {
    /// The instructions.
    steps: Vec<Step>,
    /// Each step's level.
    levels: Vec<Level>,
    /// Each step's shape (as Nx has it).
    shapes: Vec<Vec<usize>>,
    /// Each step's type.
    tys: Vec<Ty>,
    /// External operands.
    ext: Vec<External>,
    /// The region's shape.
    full: Vec<usize>,
    /// Rows (the product of the leading axes) and their length (of the reduced axes).
    rows: usize,
    cols: usize,
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
/// reduction, whose rows are at most `max_cols` long (what the kernels take).
pub(super) fn plan(run: &Run, values: &[Option<Tensor>], max_cols: usize) -> Result<Attempt> {
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
    if rows == 0 || cols == 0 || cols > max_cols {
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

    /// Runs the region (its results read after it: `live_out`; `literal(k)`: the kept tensor
    /// of constant step `k`) as one kernel of `kernels` (`None`: on the host, row by row);
    /// the live results in instruction order,
    /// or `None` where the kernel does not apply (a mask, count or scalar read after the
    /// region). Results may be written over donated operands (see [`Plan::take_last_reads`]).
    pub(super) fn execute(
        &self,
        kernels: Option<&dyn DeviceKernels>,
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
        let computed: Vec<Tensor> = match kernels {
            Some(kernels) => {
                let region = RowRegion {
                    steps: &self.steps,
                    levels: &self.levels,
                    shapes: &self.shapes,
                    operands: self
                        .ext
                        .iter()
                        .map(|e| RowOperand {
                            operand: e.tensor.operand(),
                            level: e.level,
                            donated: e.donated,
                        })
                        .collect(),
                    full: &self.full,
                    rows: self.rows,
                    cols: self.cols,
                    written: &written,
                };
                let Some(computed) = kernels.row_region(&region)? else {
                    return Ok(None);
                };
                written
                    .iter()
                    .zip(computed)
                    .map(|(&k, p)| Tensor::from_kernel(p, self.shapes[k].clone()))
                    .collect()
            }
            None => self.on_host(&written)?,
        };
        REGIONS.with(|c| c.set(c.get() + 1));
        crate::profile::note_detail(|| {
            format!(
                "{}x{} rows, {} in, {} out",
                self.rows,
                self.cols,
                self.ext.len(),
                written.len()
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

    /// A masked softmax over [6, 300] plans as one region of every instruction (the CUDA
    /// crate's `a_softmax_region_compiles` compiles this region's kernel).
    #[test]
    fn a_softmax_region_plans() {
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
        let Attempt::Region(plan, len) = plan(&run, &values, 16 * 1024).unwrap() else {
            panic!("no region");
        };
        assert_eq!(len, instrs.len());
        assert_eq!((plan.rows, plan.cols), (6, 300));
        // (`exp` is the correctly rounded kernel's on CPUs that have it)
        let exp = crate::op::f32_map::map_of(&Op::Unary(crate::op::Unary::Exp)).unwrap();
        assert_eq!(
            format!("{:?}", plan.steps),
            format!(
                "[Map(Const(8.0)), Map(Binary(Div, Ext(0), Const(8.0))), Map(Const(-1000000000.0)), \
                 Map(Select(Ext(1), Stage(1), Const(-1000000000.0))), Fold(Max, Stage(3)), \
                 Map(Binary(Sub, Stage(3), Stage(4))), Map(Unary({exp:?}, Stage(5))), \
                 Fold(Sum, Stage(6)), Map(Binary(Div, Stage(6), Stage(7)))]"
            )
        );
        use Level::{Full, Row};
        let one = Level::Scalar;
        let levels = [one, Full, one, Full, Row, Full, Full, Row, Full];
        assert_eq!(plan.levels, levels);
        let ext: Vec<(&[usize], Level)> = plan
            .ext
            .iter()
            .map(|e| (e.tensor.shape(), e.level))
            .collect();
        assert_eq!(ext, [(&[6, 300][..], Full), (&[6, 300][..], Full)]);
        // rows longer than the kernels take are not planned
        assert!(matches!(plan_at(&run, &values, 299), Attempt::Skip(_)));
    }

    fn plan_at(run: &Run, values: &[Option<Tensor>], max_cols: usize) -> Attempt {
        plan(run, values, max_cols).unwrap()
    }
}
