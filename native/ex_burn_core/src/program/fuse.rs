//! Cache-blocked execution of element-wise runs on the CPU.
//!
//! A run of consecutive element-wise instructions whose tensor operands all share one shape
//! (other operands being scalars; f32 runs also take bias rows, per-row columns and
//! per-channel values that broadcast to it) is executed chunk by chunk: every op of the run is
//! applied to a slice of a few thousand elements before the next slice is read, so
//! intermediates stay in cache instead of making one pass over memory per op. Chunks are spread over the host's
//! cores. Runs over f32 whose instructions are all plain maps run as tight loops over chunk
//! buffers ([`map32`]); others run the same op-table code on chunk tensors. Either way results
//! are identical to the unfused program. On devices whose kernels fuse (NVIDIA GPUs with
//! the CUDA kernels, see [`crate::kernels`]) the same f32 plans run as one kernel per run (a
//! run there may also hold broadcasts and reshapes, read inside the kernel: [`view`]), and
//! element-wise instructions together with reductions over the same trailing axes (softmax,
//! layer norm, their gradients) as one kernel per region (`rows`); other GPUs run op by op.

pub(super) mod map32;
mod rows;

pub use rows::row_regions;

use super::Instr;
use super::Step;
use crate::op::{shape, Arith, Op};
use crate::{Device, Error, Result, Tensor};

thread_local! {
    /// Runs this thread executed as f32 chunk loops (see [`loop_runs`]).
    static LOOP_RUNS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many element-wise runs the programs run on this thread executed as f32 chunk loops:
/// lets tests tell a fused run from one that fell back to op-by-op evaluation.
pub fn loop_runs() -> u64 {
    LOOP_RUNS.with(|c| c.get())
}

/// Elements per chunk (64 KiB of f32): a handful of live chunks fit in a core's L2 cache.
const CHUNK: usize = 16 * 1024;

/// Runs below this size are not worth splitting.
const MIN_ELEMENTS: usize = 8 * CHUNK;

/// Whether `op` maps each element independently (scalars broadcast).
pub(super) fn elementwise(step: &Step) -> bool {
    use Op::*;
    let Some(op) = step.as_op() else {
        return false;
    };
    match op {
        Full { shape, .. } => shape.is_empty(),
        AsType { .. } | Select { .. } | Clip => true,
        Bitcast { .. } | Narrow { .. } => false,
        op => matches!(op.arity(), Some(1) | Some(2)) && is_map(op),
    }
}

/// Whether `step` is a view that runs may hold on devices whose kernels fuse (a broadcast or
/// a reshape: the kernel reads its operand where the run reads the view). The CPU's runs end
/// before views.
pub(super) fn view(step: &Step) -> bool {
    step.as_op().and_then(map32::view_shape).is_some()
}

/// Whether a run of this single op is worth executing in chunks: the op table computes it
/// in several passes over memory (`max`/`min`: a comparison, a NaN test and a select), the
/// chunk loops in one.
pub(super) fn worth_alone(step: &Step) -> bool {
    matches!(
        step.as_op(),
        Some(
            Op::Binary {
                op: Arith::Max | Arith::Min,
                ..
            } | Op::Select { .. }
        )
    )
}

/// Whether `step` may belong to a row region: element-wise, a reduction that row regions
/// fold (sum, max, min), a reshape or a broadcast.
pub(super) fn row_capable(step: &Step) -> bool {
    elementwise(step)
        || reduces(step)
        || matches!(
            step.as_op(),
            Some(Op::Reshape { .. } | Op::Broadcast { .. })
        )
}

/// Whether `step` is a reduction that row regions fold.
pub(super) fn reduces(step: &Step) -> bool {
    use crate::op::ReduceKind;
    matches!(
        step.as_op(),
        Some(Op::Reduce {
            kind: ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min,
            ..
        })
    )
}

/// Whether programs on `device` run row regions whole: as one kernel each where its device
/// kernels fuse, row by row on the CPU (`rows::host`).
pub(super) fn regions_on(device: Device) -> bool {
    device == Device::Cpu || device.kernels().is_some_and(|(k, _)| k.fusion())
}

/// Runs the longest row region at the start of `run` (instructions that may form one) as one
/// kernel (on the CPU, row by row): `Ok(results)` for its instructions (`None` where
/// `live_out(len)` says a result is not read after them), or `Err(n)`: no region starts at
/// the next `n` instructions.
///
/// Operands the region reads for the last time (`dies(value, len)`: no instruction after its
/// `len` instructions, nor the outputs, reads them) are taken from `values`, so that a result
/// may be written over one of their buffers when nothing else holds it (one buffer less
/// while the region runs: in a GPT-2 layer's backward pass, the softmax gradient over the
/// probabilities' gradient, 96 MiB at 8 x 512 tokens); put back where no kernel ran.
pub(super) fn rows(
    run: &Run,
    values: &mut [Option<Tensor>],
    live_out: &dyn Fn(usize) -> Vec<bool>,
    dies: &dyn Fn(usize, usize) -> bool,
    literal: &dyn Fn(usize) -> Result<Tensor>,
    device: Device,
) -> Result<std::result::Result<Vec<Option<Tensor>>, usize>> {
    let kernels = device.kernels().filter(|(k, _)| k.fusion()).map(|(k, _)| k);
    let limit = match kernels {
        Some(k) => k.row_limit(),
        None if device == Device::Cpu => rows::HOST_MAX_COLS,
        None => return Ok(Err(usize::MAX)),
    };
    match rows::plan(run, values, limit)? {
        rows::Attempt::Skip(n) => Ok(Err(n)),
        rows::Attempt::Region(mut plan, len) => {
            plan.take_last_reads(values, &|a| dies(a, len));
            match plan.execute(kernels, &live_out(len), literal) {
                Ok(Some(out)) => Ok(Ok(out)),
                other => {
                    plan.give_back(values);
                    other.map(|_| Err(1))
                }
            }
        }
    }
}

/// Unary and binary maps of the op table (not reductions, shapes or indexing).
fn is_map(op: &Op) -> bool {
    op.is_unary_map() || op.is_binary()
}

/// A run of element-wise instructions: `instrs` start at value number `first`.
pub(super) struct Run<'a> {
    /// The instructions, in order.
    pub instrs: &'a [Instr],
    /// The value number of the first instruction's result.
    pub first: usize,
    /// The program's literals by value number (see `literal`).
    pub literals: &'a [Option<super::literal::Literal>],
}

impl Run<'_> {
    /// The f32 value and type of value `a` when it is one of the program's literals (known on
    /// the host, so a kernel takes it as a constant instead of reading a tensor).
    fn literal(&self, a: usize) -> Option<(f32, crate::DType)> {
        let (value, dtype) = self.literals.get(a).copied().flatten()?;
        Some((literal_f32(value, dtype)?, dtype))
    }
}

/// A literal's value as an f32 operand of a kernel: stored as `dtype` stores it, then rounded
/// to f32 (`None` where the host cannot know it exactly; see `Scalar::stored_as`).
fn literal_f32(value: crate::Scalar, dtype: crate::DType) -> Option<f32> {
    Some(value.stored_as(dtype)? as f32)
}

/// Executes `run` in chunks when its operands allow it. `values` holds every value defined so
/// far; `live_out` says which results of the run are read later; `literal(k)` is the tensor
/// of the run's `k`-th instruction when that is a scalar literal. Returns the run's results
/// (`None` where not live), or `Ok(None)` when the run must execute unfused.
pub(super) fn execute(
    run: &Run,
    values: &[Option<Tensor>],
    live_out: &[bool],
    device: Device,
    literal: &dyn Fn(usize) -> Result<Tensor>,
) -> Result<Option<Vec<Option<Tensor>>>> {
    // off the host, one kernel of the device kernels where they fuse
    let kernels = device.kernels().map(|(k, _)| k).filter(|k| k.fusion());
    if device != Device::Cpu && kernels.is_none() {
        return Ok(None);
    }
    let external: Vec<(usize, Tensor)> = run
        .instrs
        .iter()
        .flat_map(|ins| ins.args.iter().copied())
        .filter(|&a| a < run.first)
        .map(|a| {
            let t = values[a]
                .clone()
                .ok_or_else(|| Error::Execution(format!("value {a} was freed")))?;
            Ok((a, t))
        })
        .collect::<Result<_>>()?;
    // the run's shape: its operands' and views' shapes broadcast together (a view's operand
    // is read through the view)
    let mut shape: Option<Vec<usize>> = None;
    let mut views = false;
    for ins in run.instrs {
        let shapes: Vec<&[usize]> = match ins.op.as_op().and_then(map32::view_shape) {
            Some(shape) => {
                views = true;
                vec![shape]
            }
            None => ins
                .args
                .iter()
                .filter_map(|a| external.iter().find(|(v, _)| v == a))
                .map(|(_, t)| t.shape())
                .collect(),
        };
        for s in shapes.into_iter().filter(|s| !s.is_empty()) {
            shape = Some(match shape {
                None => s.to_vec(),
                Some(have) => match crate::op::util::broadcast_shape(&have, s) {
                    Ok(s) => s,
                    Err(_) => return Ok(None),
                },
            });
        }
    }
    let Some(shape) = shape else {
        return Ok(None);
    };
    let n: usize = shape.iter().product();
    if let Some(k) = kernels {
        // one kernel for the run, whatever its size (each kernel launch has a fixed cost)
        return match map32::Plan::new(run, &external, &shape, live_out, device, literal)? {
            Some(plan) => plan.on_device(k, n, live_out, &shape),
            None => Ok(None),
        };
    }
    if n < MIN_ELEMENTS {
        return Ok(None);
    }
    if let Some(plan) = map32::Plan::new(run, &external, &shape, live_out, device, literal)? {
        if let Some(out) = plan.execute(n, live_out, &shape, device)? {
            LOOP_RUNS.with(|c| c.set(c.get() + 1));
            crate::profile::note_detail(|| {
                let live = live_out.iter().filter(|&&l| l).count();
                format!("{n} elements, {} in, {live} out", external.len())
            });
            return Ok(Some(out));
        }
    }
    // The op table on chunks: every tensor operand has the run's shape (a single op gains
    // nothing from it).
    if run.instrs.len() < 2
        || views
        || external
            .iter()
            .any(|(_, t)| t.rank() > 0 && t.shape() != shape)
    {
        return Ok(None);
    }
    let flat: Vec<(usize, Tensor)> = external
        .into_iter()
        .map(|(a, t)| Ok((a, if t.rank() > 0 { t.reshape(vec![n])? } else { t })))
        .collect::<Result<_>>()?;
    let chunks: Vec<(usize, usize)> = (0..n)
        .step_by(CHUNK)
        .map(|s| (s, CHUNK.min(n - s)))
        .collect();
    // one piece per chunk, the results in chunk order
    let ordered = crate::threads::map_claimed(chunks.len(), |i| {
        run_chunk(run, &flat, chunks[i], live_out, device)
    })?;
    let mut out = Vec::with_capacity(run.instrs.len());
    for (k, &live) in live_out.iter().enumerate() {
        if !live {
            out.push(None);
            continue;
        }
        let parts: Vec<Tensor> = ordered
            .iter()
            .map(|c| {
                c[k].clone()
                    .ok_or_else(|| Error::Execution("missing chunk".into()))
            })
            .collect::<Result<_>>()?;
        if parts.iter().any(|p| p.rank() != 1) {
            // a scalar computed inside the run is read later: run unfused instead
            return Ok(None);
        }
        out.push(Some(
            crate::op::util::cat(&parts, 0).reshape(shape.clone())?,
        ));
    }
    Ok(Some(out))
}

/// Runs every instruction of `run` on one chunk; keeps the live results.
fn run_chunk(
    run: &Run,
    flat: &[(usize, Tensor)],
    (start, len): (usize, usize),
    live_out: &[bool],
    device: Device,
) -> Result<Vec<Option<Tensor>>> {
    let lookup_external = |a: usize| -> Result<Tensor> {
        let (_, t) = flat
            .iter()
            .find(|(v, _)| *v == a)
            .ok_or_else(|| Error::Execution(format!("value {a} missing from the fused run")))?;
        if t.rank() == 0 {
            Ok(t.clone())
        } else {
            shape::slice_static(t, &[start], &[len], &[1])
        }
    };
    let mut local: Vec<Tensor> = Vec::with_capacity(run.instrs.len());
    for ins in run.instrs {
        let args = ins
            .args
            .iter()
            .map(|&a| {
                if a >= run.first {
                    Ok(local[a - run.first].clone())
                } else {
                    lookup_external(a)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let mut res = super::eval(&ins.op, &args, device)?;
        local.push(
            res.pop()
                .ok_or_else(|| Error::Execution("no result".into()))?,
        );
    }
    Ok(local
        .into_iter()
        .zip(live_out)
        .map(|(t, &live)| live.then_some(t))
        .collect())
}
