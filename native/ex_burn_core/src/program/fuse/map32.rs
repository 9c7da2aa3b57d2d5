//! f32 element-wise runs on the CPU as plain loops over chunk buffers.
//!
//! When every operand of a fused run is f32 and every instruction is one of the maps below,
//! each worker keeps one chunk-sized buffer per instruction and applies the whole run to a
//! chunk with one tight loop per instruction, writing live results straight into the output
//! buffers. Nothing is allocated per op and chunk, unlike running the op table on chunk
//! tensors. Each map is the very element function the op table applies for that op on f32
//! (IEEE `+ - * /`, libm `expf`, ..., the correctly rounded kernels of `op::exact32` for
//! `sin`/`cos`/`tanh` where the op table uses them), so results are bit-identical to the
//! unfused program (tests/engine/fusion.rs compares them).

use super::{on_threads, Run, CHUNK};
use crate::op::exact32::{self, Fun};
use crate::op::{self, shape, Op};
use crate::{DType, Device, Error, Result, Tensor};
use burn::tensor::TensorData;
use std::mem::MaybeUninit;

/// Where an operand of a step comes from.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// The result of an earlier step of the run.
    Step(usize),
    /// A chunk of an external tensor (index into the run's external tensors).
    Ext(usize),
    /// A scalar, broadcast.
    Const(f32),
}

/// The per-element function of a step.
#[derive(Clone, Copy, Debug)]
enum Map {
    Add,
    Sub,
    Mul,
    Div,
    Neg,
    Abs,
    Sqrt,
    Exp,
    Log,
    Sin,
    Cos,
    Tanh,
    /// `sin`/`cos`/`tanh` by the correctly rounded kernels, as the op table computes them
    /// on CPUs that have them.
    Exact(Fun),
}

impl Map {
    /// The map of `op` when its result is f32 (`None`: not handled here).
    fn of(op: &Op) -> Option<Map> {
        let f32_out = |out: &Option<DType>| matches!(out, None | Some(DType::F32));
        if let Some(fun) = Fun::of(op).filter(|_| exact32::available()) {
            return Some(Map::Exact(fun));
        }
        Some(match op {
            Op::Add { out } if f32_out(out) => Map::Add,
            Op::Subtract { out } if f32_out(out) => Map::Sub,
            Op::Multiply { out } if f32_out(out) => Map::Mul,
            Op::Divide { out } if f32_out(out) => Map::Div,
            Op::Neg => Map::Neg,
            Op::Abs => Map::Abs,
            Op::Sqrt => Map::Sqrt,
            Op::Exp => Map::Exp,
            Op::Log => Map::Log,
            Op::Sin => Map::Sin,
            Op::Cos => Map::Cos,
            Op::Tanh => Map::Tanh,
            _ => return None,
        })
    }

    fn binary(self) -> bool {
        matches!(self, Map::Add | Map::Sub | Map::Mul | Map::Div)
    }
}

/// One instruction of the run: its map and operands (a constant instruction has no map).
#[derive(Clone, Copy, Debug)]
enum Step {
    Const(f32),
    Unary(Map, Src),
    Binary(Map, Src, Src),
}

/// A run compiled to f32 loops.
pub(super) struct Plan {
    steps: Vec<Step>,
    /// External tensor operands, flat (rank 1) and f32.
    ext: Vec<Tensor>,
}

/// Reads a one-element f32 tensor (exact: f32 -> f64 -> f32).
fn scalar_value(t: &Tensor) -> Result<f32> {
    Ok(op::util::read_scalar(t)?.to_f64() as f32)
}

impl Plan {
    /// Compiles `run` (whose external operands are `flat`: rank-1 tensors of the run's length
    /// or scalars) when every operand is f32 and every instruction has an f32 map; `Ok(None)`
    /// otherwise.
    pub(super) fn new(run: &Run, flat: &[(usize, Tensor)], device: Device) -> Result<Option<Plan>> {
        if flat.iter().any(|(_, t)| t.dtype() != DType::F32) {
            return Ok(None);
        }
        let mut ext: Vec<Tensor> = Vec::new();
        let mut ext_ids: Vec<usize> = Vec::new();
        let mut steps: Vec<Step> = Vec::with_capacity(run.instrs.len());
        for ins in run.instrs {
            if let Op::Full { shape, dtype, .. } = &ins.op {
                if !shape.is_empty() || *dtype != DType::F32 {
                    return Ok(None);
                }
                // the op table's own conversion of the value to f32
                let t = op::eval(&ins.op, &[], device)?
                    .pop()
                    .ok_or_else(|| Error::Execution("no result".into()))?;
                steps.push(Step::Const(scalar_value(&t)?));
                continue;
            }
            let Some(map) = Map::of(&ins.op) else {
                return Ok(None);
            };
            let mut srcs = Vec::with_capacity(2);
            for &a in &ins.args {
                let src = if a >= run.first {
                    match steps[a - run.first] {
                        Step::Const(v) => Src::Const(v),
                        _ => Src::Step(a - run.first),
                    }
                } else {
                    let (_, t) = flat
                        .iter()
                        .find(|(v, _)| *v == a)
                        .ok_or_else(|| Error::Execution(format!("value {a} missing")))?;
                    if t.rank() == 0 {
                        Src::Const(scalar_value(t)?)
                    } else if let Some(j) = ext_ids.iter().position(|&e| e == a) {
                        Src::Ext(j)
                    } else {
                        ext_ids.push(a);
                        ext.push(t.clone());
                        Src::Ext(ext.len() - 1)
                    }
                };
                srcs.push(src);
            }
            let all_const = srcs.iter().all(|s| matches!(s, Src::Const(_)));
            steps.push(match (map.binary(), srcs.as_slice()) {
                // a scalar result: the generic path keeps its rank-0 shape
                _ if all_const => return Ok(None),
                (true, &[a, b]) => Step::Binary(map, a, b),
                (false, &[a]) => Step::Unary(map, a),
                _ => return Ok(None),
            });
        }
        Ok(Some(Plan { steps, ext }))
    }

    /// Runs the plan over `n` elements in `chunks` on `workers` threads; returns the live
    /// results (shaped `shape`) in instruction order.
    pub(super) fn execute(
        &self,
        n: usize,
        workers: usize,
        live_out: &[bool],
        shape: &[usize],
        device: Device,
    ) -> Result<Option<Vec<Option<Tensor>>>> {
        if live_out
            .iter()
            .zip(&self.steps)
            .any(|(&live, s)| live && matches!(s, Step::Const(_)))
        {
            return Ok(None);
        }
        let live: Vec<usize> = (0..self.steps.len()).filter(|&k| live_out[k]).collect();
        // Outputs are written once, by the workers (no zeroing pass on this thread first).
        let mut outs: Vec<Vec<f32>> = live.iter().map(|_| Vec::with_capacity(n)).collect();
        let n_chunks = n.div_ceil(CHUNK);
        // per chunk, its slice of every live output
        let mut per_chunk: Vec<Parts> = (0..n_chunks).map(|_| Vec::new()).collect();
        for buf in outs.iter_mut() {
            for (c, part) in buf.spare_capacity_mut()[..n].chunks_mut(CHUNK).enumerate() {
                per_chunk[c].push(part);
            }
        }
        let mut per_worker: Vec<Vec<(usize, Parts)>> = (0..workers).map(|_| Vec::new()).collect();
        for (c, parts) in per_chunk.into_iter().enumerate() {
            per_worker[c % workers].push((c, parts));
        }
        on_threads(per_worker, |work| self.run_chunks(work, &live))?;
        for buf in outs.iter_mut() {
            // SAFETY: every worker returned Ok, so every chunk of every output was written in
            // full by `run_chunks` (the chunks cover `0..n` exactly once).
            unsafe { buf.set_len(n) };
        }
        let mut bufs = outs.into_iter();
        let mut out = Vec::with_capacity(self.steps.len());
        for &l in live_out {
            if !l {
                out.push(None);
                continue;
            }
            let buf = bufs
                .next()
                .ok_or_else(|| Error::Execution("missing output".into()))?;
            let data = TensorData::new(buf, shape.to_vec());
            out.push(Some(Tensor::from_data(
                data,
                DType::F32,
                shape.to_vec(),
                device,
            )?));
        }
        Ok(Some(out))
    }

    /// Computes the chunks of one worker.
    fn run_chunks(&self, work: Vec<(usize, Parts)>, live: &[usize]) -> Result<()> {
        let mut regs: Vec<Vec<f32>> = self.steps.iter().map(|_| vec![0f32; CHUNK]).collect();
        let mut ext: Vec<Vec<f32>> = vec![Vec::new(); self.ext.len()];
        for (c, mut parts) in work {
            let start = c * CHUNK;
            let len = parts.first().map_or(0, |p| p.len());
            for (buf, t) in ext.iter_mut().zip(&self.ext) {
                let part = shape::slice_static(t, &[start], &[len], &[1])?;
                *buf = part.to_f32_vec()?;
            }
            for k in 0..self.steps.len() {
                let (done, rest) = regs.split_at_mut(k);
                let out = &mut rest[0][..len];
                let arg = |s: Src| match s {
                    Src::Step(i) => Arg::Slice(&done[i][..len]),
                    Src::Ext(j) => Arg::Slice(&ext[j][..len]),
                    Src::Const(v) => Arg::Scalar(v),
                };
                match self.steps[k] {
                    Step::Const(_) => {}
                    Step::Unary(m, a) => run_step(m, arg(a), None, out),
                    Step::Binary(m, a, b) => run_step(m, arg(a), Some(arg(b)), out),
                }
            }
            for (part, &k) in parts.iter_mut().zip(live) {
                for (d, &v) in part.iter_mut().zip(&regs[k][..len]) {
                    d.write(v);
                }
            }
        }
        Ok(())
    }
}

/// One chunk's (not yet written) slice of every live output.
type Parts<'a> = Vec<&'a mut [MaybeUninit<f32>]>;

/// An operand of a loop: a chunk or a broadcast scalar.
#[derive(Clone, Copy)]
enum Arg<'a> {
    Slice(&'a [f32]),
    Scalar(f32),
}

/// Applies `f` element-wise; `out` has the chunk's length.
#[inline(always)]
fn map1(a: Arg, out: &mut [f32], f: impl Fn(f32) -> f32) {
    match a {
        Arg::Slice(a) => out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x)),
        Arg::Scalar(x) => out.fill(f(x)),
    }
}

/// Applies `f` element-wise to two operands (scalars broadcast).
#[inline(always)]
fn map2(a: Arg, b: Arg, out: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    match (a, b) {
        (Arg::Slice(a), Arg::Slice(b)) => out
            .iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(o, (&x, &y))| *o = f(x, y)),
        (Arg::Slice(a), Arg::Scalar(y)) => out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x, y)),
        (Arg::Scalar(x), Arg::Slice(b)) => out.iter_mut().zip(b).for_each(|(o, &y)| *o = f(x, y)),
        (Arg::Scalar(x), Arg::Scalar(y)) => out.fill(f(x, y)),
    }
}

/// Applies map `m` to a chunk (`b`: the second operand of a binary map). On x86-64 CPUs with
/// AVX2 the loops are compiled for 8-lane vectors; the element functions are the same IEEE
/// operations (no contraction into fused multiply-adds), so results do not change.
fn run_step(m: Map, a: Arg, b: Option<Arg>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if op::util::simd().avx2 {
        // SAFETY: AVX2 was detected on this CPU.
        unsafe { run_step_avx2(m, a, b, out) };
        return;
    }
    run_step_any(m, a, b, out);
}

/// [`run_step_any`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_step_avx2(m: Map, a: Arg, b: Option<Arg>, out: &mut [f32]) {
    run_step_any(m, a, b, out);
}

#[inline(always)]
fn run_step_any(m: Map, a: Arg, b: Option<Arg>, out: &mut [f32]) {
    match b {
        Some(b) => binary(m, a, b, out),
        None => unary(m, a, out),
    }
}

#[inline(always)]
fn unary(m: Map, a: Arg, out: &mut [f32]) {
    match m {
        Map::Neg => map1(a, out, |x| -x),
        Map::Abs => map1(a, out, f32::abs),
        Map::Sqrt => map1(a, out, f32::sqrt),
        Map::Exp => map1(a, out, f32::exp),
        Map::Log => map1(a, out, f32::ln),
        Map::Exact(fun) => match a {
            Arg::Slice(a) => exact32::apply(fun, a, out),
            Arg::Scalar(x) => {
                let mut v = [0f32];
                exact32::apply(fun, &[x], &mut v);
                out.fill(v[0]);
            }
        },
        Map::Sin => map1(a, out, f32::sin),
        Map::Cos => map1(a, out, f32::cos),
        Map::Tanh => map1(a, out, f32::tanh),
        Map::Add | Map::Sub | Map::Mul | Map::Div => {}
    }
}

#[inline(always)]
fn binary(m: Map, a: Arg, b: Arg, out: &mut [f32]) {
    match m {
        Map::Add => map2(a, b, out, |x, y| x + y),
        Map::Sub => map2(a, b, out, |x, y| x - y),
        Map::Mul => map2(a, b, out, |x, y| x * y),
        Map::Div => map2(a, b, out, |x, y| x / y),
        _ => {}
    }
}
