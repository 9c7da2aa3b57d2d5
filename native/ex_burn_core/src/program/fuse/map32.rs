//! f32 element-wise runs on the CPU as plain loops over chunk buffers.
//!
//! When every operand of a fused run is f32 (or boolean, read as a mask), broadcasts to the
//! run's shape as a whole tensor, a bias row, a per-row column or a per-channel value (a
//! [`Layout`]), and every instruction is one
//! of the maps below, `select`, or a scalar constant, each worker keeps one chunk-sized buffer
//! per instruction and applies the whole run to a chunk with one tight loop per instruction,
//! writing live results straight into the output buffers. Nothing is allocated per op and
//! chunk, unlike running the op table on chunk tensors. Each map is the very element function
//! the op table applies for that op on f32 (IEEE `+ - * /` and comparisons, `max`/`min` as
//! its `min_max`, libm `expf`, ..., the correctly rounded kernels of `op::exact32` for
//! `sin`/`cos`/`tanh` where the op table uses them; constants of other types cast to f32 as
//! the op table casts them), so results are bit-identical to the unfused program
//! (tests/engine/fusion.rs compares them; tests/engine/generated.rs on generated programs),
//! but for the sign of a NaN where two NaNs of different signs meet: which one an addition
//! carries on depends on the operand order the compiler gave the instruction.

use super::{Run, CHUNK};
use crate::dtype::Kind;
use crate::kernels::{DeviceKernels, Layout, Map, MapRun, Src, Stage};
use crate::op::f32_map::{map_of, run_step_any, Arg};
use crate::op::{self, Op};
use crate::{DType, Device, Error, Result, Tensor};
use burn::tensor::TensorData;
use std::mem::MaybeUninit;
use std::sync::Mutex;

/// An external operand: its values (row-major) and how the run reads them.
pub(super) struct Ext {
    /// The operand.
    pub(super) tensor: Tensor,
    /// How the run reads it.
    pub(super) layout: Layout,
}

/// A run compiled to f32 loops.
pub(super) struct Plan {
    /// The instructions.
    pub(super) steps: Vec<Stage>,
    /// The scalar tensors of constant steps (`None` for other steps), returned when live.
    consts: Vec<Option<Tensor>>,
    /// External tensor operands, f32.
    pub(super) ext: Vec<Ext>,
    /// Per step, whether its value is a mask: written as 1.0/0.0, a boolean tensor when
    /// read after the run.
    masks: Vec<bool>,
}

/// A scalar operand as the op table uses it in an f32 computation: cast to f32 as `prepare`
/// and `select` cast it (exact for f32; int, f16 and bf16 values convert as Burn's cast does).
fn scalar_f32(t: &Tensor) -> Result<f32> {
    Ok(op::util::read_scalar(&t.cast(DType::F32)?)?.to_f64() as f32)
}

/// What an operand or step holds: f32 values, a mask (1.0/0.0, from a comparison or a
/// boolean tensor; read by `select`, comparisons and f32 arithmetic, never a result), or a
/// scalar of the given type.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Ty {
    F32,
    Mask,
    Const(DType),
    /// Whole numbers of an integer type small enough to be exact in f32 (a count of mask
    /// elements), computed in f32 (only row regions make them).
    Count(DType),
    /// An external operand of an integer type, read by steps that compute in f32 (Nx's merge
    /// of f32 with any integer type is f32) as the op table reads it there: converted to f32
    /// first, by the same cast.
    Int(DType),
}

impl Ty {
    /// The Nx type of a value operand: a mask is Nx's `u8` (0 or 1), which arithmetic with
    /// f32 reads as 0.0 or 1.0, as its cast to f32 gives.
    fn dtype(self) -> DType {
        match self {
            Ty::F32 => DType::F32,
            Ty::Mask => DType::U8,
            Ty::Const(d) | Ty::Count(d) | Ty::Int(d) => d,
        }
    }

    /// How a kernel reads a tensor operand: f32 values or a boolean mask (`None`: neither).
    pub(super) fn of_operand(t: &Tensor) -> Option<Ty> {
        match (t.kind(), t.dtype()) {
            (Kind::Bool, _) => Some(Ty::Mask),
            (_, DType::F32) => Some(Ty::F32),
            _ => None,
        }
    }

    /// How an f32 run reads an external tensor operand: as [`Ty::of_operand`], or integers
    /// as [`Ty::Int`].
    fn of_run_operand(t: &Tensor) -> Option<Ty> {
        match (t.kind(), t.dtype()) {
            (Kind::Int, d) if d.is_int() => Some(Ty::Int(d)),
            _ => Ty::of_operand(t),
        }
    }

    /// The tensor a kernel reads for an operand of this type: masks as f32 1.0/0.0 (a
    /// broadcast mask cast before it is broadcast, off the host), integers converted to f32.
    pub(super) fn operand(self, t: &Tensor, device: Device) -> Result<Tensor> {
        match self {
            Ty::Mask if !device.is_host() => op::shape::mask_f32(t),
            Ty::Mask | Ty::Int(_) => t.cast(DType::F32),
            _ => Ok(t.clone()),
        }
    }
}

/// Whether an op with result type `out` on value operands `tys` computes in f32 (what the
/// loops do): `out` says f32, or by default Nx's merged type of the operands is f32.
fn computes_in_f32(out: Option<DType>, tys: &[Ty]) -> bool {
    let mut merged = None;
    for t in tys {
        let d = t.dtype();
        merged = Some(merged.map_or(d, |m| DType::merge(m, d)));
    }
    match out {
        Some(o) => o == DType::F32,
        None => merged == Some(DType::F32),
    }
}

/// The result type an op declares (`None`: the default, Nx's merge of its operands).
fn declared_out(op: &Op) -> Option<DType> {
    match op {
        Op::Binary { out, .. } | Op::Select { out } => *out,
        _ => None,
    }
}

/// The stage an element-wise op (a map, comparison or `select`) makes of operands `srcs` of
/// types `tys`, and the type of its value: `None` where it has no f32 form (another result
/// type, an operand of another type).
pub(super) fn stage(op: &Op, srcs: &[Src], tys: &[Ty]) -> Option<(Stage, Ty)> {
    let map = match op {
        Op::Select { .. } => None,
        op => Some(map_of(op)?),
    };
    let out = declared_out(op);
    Some(match (map, srcs, tys) {
        (None, &[p, t, f], &[_, tt, tf]) if computes_in_f32(out, &[tt, tf]) => {
            (Stage::Select(p, t, f), Ty::F32)
        }
        (Some(m @ Map::Cmp(_)), &[a, b], &[ta, tb]) if computes_in_f32(None, &[ta, tb]) => {
            (Stage::Binary(m, a, b), Ty::Mask)
        }
        (Some(m), &[a, b], &[ta, tb]) if m.binary() && computes_in_f32(out, &[ta, tb]) => {
            (Stage::Binary(m, a, b), Ty::F32)
        }
        (Some(m), &[a], &[Ty::F32]) if !m.binary() => (Stage::Unary(m, a), Ty::F32),
        _ => return None,
    })
}

/// The shape a view step (a broadcast or reshape) gives its operand.
pub(super) fn view_shape(op: &Op) -> Option<&[usize]> {
    match op {
        Op::Broadcast { shape, .. } | Op::Reshape { shape } => Some(shape),
        _ => None,
    }
}

/// The operand of view `op` (of shape `from`) reshaped to the view's rank so that, read
/// right-aligned as the run reads its operands, it gives the view's elements: unit axes where
/// a broadcast adds axes, the view's own shape for a reshape. `None` where no such shape
/// exists (axes that do not fit).
fn view_source_shape(op: &Op, from: &[usize]) -> Option<Vec<usize>> {
    match op {
        Op::Broadcast { shape, axes } => {
            let axes: Vec<usize> = match axes {
                Some(a) => a.clone(),
                None => (shape.len().checked_sub(from.len())?..shape.len()).collect(),
            };
            let fits = axes.len() == from.len()
                && axes.windows(2).all(|w| w[0] < w[1])
                && axes.iter().all(|&a| a < shape.len());
            if !fits {
                return None;
            }
            let mut aligned = vec![1; shape.len()];
            for (&a, &d) in axes.iter().zip(from) {
                if d != 1 && d != shape[a] {
                    return None;
                }
                aligned[a] = d;
            }
            Some(aligned)
        }
        Op::Reshape { shape } => Some(shape.clone()),
        _ => None,
    }
}

/// `s` without its leading unit axes (how right-aligned reads see it).
fn leading_units_dropped(s: &[usize]) -> &[usize] {
    &s[s.iter().take_while(|&&d| d == 1).count()..]
}

impl Plan {
    /// Compiles `run` when every external operand is f32 or boolean and broadcasts to `full`
    /// as one of the [`Layout`]s, every instruction has an f32 map (comparisons and `select`
    /// included) or is a view that reads its operand where the run reads it (off the CPU, not
    /// read after the run), computes in f32 a tensor of the run's shape, and no mask is read
    /// after the run; `Ok(None)` otherwise.
    pub(super) fn new(
        run: &Run,
        external: &[(usize, Tensor)],
        full: &[usize],
        live_out: &[bool],
        device: Device,
        literal: &dyn Fn(usize) -> Result<Tensor>,
    ) -> Result<Option<Plan>> {
        let mut ext: Vec<Ext> = Vec::new();
        let mut ext_ids: Vec<usize> = Vec::new();
        let mut steps: Vec<Stage> = Vec::with_capacity(run.instrs.len());
        let mut consts: Vec<Option<Tensor>> = Vec::with_capacity(run.instrs.len());
        // per step: its type and whether it has the run's shape (false for constants)
        let mut kinds: Vec<(Ty, bool)> = Vec::with_capacity(run.instrs.len());
        // per step: the shape of its value (as Nx has it)
        let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(run.instrs.len());
        // operands read through a view: their index in `ext`, view shape and type
        let mut reshaped: Vec<(usize, Vec<usize>, Ty)> = Vec::new();
        for ins in run.instrs {
            let Some(op) = ins.op.as_op() else {
                return Ok(None);
            };
            if super::view(&ins.op) {
                // a broadcast or reshape: its operand read where the run reads the view (off
                // the CPU; the CPU's runs end before views)
                let (Some(to), &[a]) = (view_shape(op), ins.args.as_slice()) else {
                    return Ok(None);
                };
                // (a view read after the run is left to the op table, where it moves no data)
                if device == Device::Cpu || live_out[steps.len()] {
                    return Ok(None);
                }
                let (src, ty) = if a >= run.first {
                    let j = a - run.first;
                    // a value of the run: the view must read each element where the run
                    // reads the value (unit axes added or dropped in front)
                    match view_source_shape(op, &shapes[j]) {
                        Some(s)
                            if leading_units_dropped(&s) == leading_units_dropped(&shapes[j]) => {}
                        _ => return Ok(None),
                    }
                    let src = match steps[j] {
                        Stage::Const(v) => Src::Const(v),
                        _ => Src::Stage(j),
                    };
                    (src, kinds[j].0)
                } else {
                    let (_, t) = external
                        .iter()
                        .find(|(v, _)| *v == a)
                        .ok_or_else(|| Error::Execution(format!("value {a} missing")))?;
                    if let Some((v, dtype)) = run.literal(a) {
                        (Src::Const(v), Ty::Const(dtype))
                    } else {
                        // the operand reshaped to the view's rank, read right-aligned
                        let Some(aligned) = view_source_shape(op, t.shape()) else {
                            return Ok(None);
                        };
                        let (Some(layout), Some(ty)) =
                            (Layout::of(&aligned, full), Ty::of_run_operand(t))
                        else {
                            return Ok(None);
                        };
                        // (reshaped once the whole run is known to fit: a reshape may copy)
                        reshaped.push((ext.len(), aligned, ty));
                        ext.push(Ext {
                            tensor: t.clone(),
                            layout,
                        });
                        ext_ids.push(usize::MAX);
                        (Src::Ext(ext.len() - 1), ty)
                    }
                };
                steps.push(Stage::Same(src));
                consts.push(None);
                kinds.push((ty, to == full));
                shapes.push(to.to_vec());
                continue;
            }
            if let Op::Full {
                shape,
                dtype,
                value,
            } = op
            {
                if !shape.is_empty() {
                    return Ok(None);
                }
                let k = steps.len();
                let make = || literal(k);
                if device == Device::Cpu {
                    let t = make()?;
                    steps.push(Stage::Const(scalar_f32(&t)?));
                    consts.push(Some(t));
                } else {
                    // off the CPU the value is converted on the host (a device read would
                    // wait for the GPU); the tensor (the program's kept literal) is only
                    // fetched when read after the run
                    let Some(v) = super::literal_f32(*value, *dtype) else {
                        return Ok(None);
                    };
                    steps.push(Stage::Const(v));
                    consts.push(if live_out[steps.len() - 1] {
                        Some(make()?)
                    } else {
                        None
                    });
                }
                kinds.push((Ty::Const(*dtype), false));
                shapes.push(Vec::new());
                continue;
            }
            if !matches!(op, Op::Select { .. }) && map_of(op).is_none() {
                return Ok(None);
            }
            let mut srcs = Vec::with_capacity(3);
            let mut tys = Vec::with_capacity(3);
            let mut full_operand = false;
            let mut shape: Vec<usize> = Vec::new();
            for &a in &ins.args {
                let of = match a.checked_sub(run.first) {
                    Some(j) => shapes[j].as_slice(),
                    None => external
                        .iter()
                        .find(|(v, _)| *v == a)
                        .map_or(&[][..], |(_, t)| t.shape()),
                };
                let Ok(s) = crate::op::util::broadcast_shape(&shape, of) else {
                    return Ok(None);
                };
                shape = s;
                let src = if a >= run.first {
                    let (ty, is_full) = kinds[a - run.first];
                    tys.push(ty);
                    full_operand |= is_full;
                    match steps[a - run.first] {
                        Stage::Const(v) => Src::Const(v),
                        _ => Src::Stage(a - run.first),
                    }
                } else {
                    let (_, t) = external
                        .iter()
                        .find(|(v, _)| *v == a)
                        .ok_or_else(|| Error::Execution(format!("value {a} missing")))?;
                    if t.rank() == 0 && device == Device::Cpu {
                        tys.push(Ty::Const(t.dtype()));
                        Src::Const(scalar_f32(t)?)
                    } else if let Some((v, dtype)) = run.literal(a) {
                        // off the CPU a literal's value is converted on the host, as for
                        // literals inside the run
                        tys.push(Ty::Const(dtype));
                        Src::Const(v)
                    } else if t.rank() == 0 && (t.kind(), t.dtype()) != (Kind::Float, DType::F32) {
                        // off the CPU a computed scalar is read by the kernel, as f32 only
                        return Ok(None);
                    } else {
                        let Some(ty) = Ty::of_run_operand(t) else {
                            return Ok(None);
                        };
                        tys.push(ty);
                        let Some(layout) = Layout::of(t.shape(), full) else {
                            return Ok(None);
                        };
                        full_operand |= layout == Layout::Full;
                        let j = match ext_ids.iter().position(|&e| e == a) {
                            Some(j) => j,
                            None => {
                                ext_ids.push(a);
                                // a broadcast view on the host is read from the values it
                                // repeats (copying it out element by element is slow)
                                let small = match (layout, ty, device) {
                                    (Layout::Full, Ty::F32, Device::Cpu) => broadcast_view(t)?,
                                    _ => None,
                                };
                                ext.push(match small {
                                    Some((tensor, layout)) => Ext { tensor, layout },
                                    None => Ext {
                                        tensor: ty.operand(t, device)?,
                                        layout,
                                    },
                                });
                                ext.len() - 1
                            }
                        };
                        Src::Ext(j)
                    }
                };
                srcs.push(src);
            }
            // A step without an operand of the run's shape computes a smaller (or scalar)
            // tensor. The GPU kernel computes it for every element it is broadcast to (a
            // layer norm's `mean = sum / n` per row, say), which only a result read after the
            // run cannot represent; the CPU loops keep such runs op by op.
            if !full_operand && (device == Device::Cpu || live_out[steps.len()]) {
                return Ok(None);
            }
            let Some((step, ty)) = stage(op, &srcs, &tys) else {
                return Ok(None);
            };
            steps.push(step);
            consts.push(None);
            kinds.push((ty, full_operand));
            shapes.push(shape);
        }
        for (j, aligned, ty) in reshaped {
            ext[j].tensor = ty.operand(&ext[j].tensor.reshape(aligned)?, device)?;
        }
        let masks = kinds.iter().map(|&(ty, _)| ty == Ty::Mask).collect();
        Ok(Some(Plan {
            steps,
            consts,
            ext,
            masks,
        }))
    }

    /// The steps whose values the loops or kernel write out: those read after the run, but
    /// constants (returned as the tensors they are).
    pub(super) fn written(&self, live_out: &[bool]) -> Vec<usize> {
        (0..self.steps.len())
            .filter(|&k| live_out[k] && self.consts[k].is_none())
            .collect()
    }

    /// The run's results in instruction order (`None` where not read after the run): live
    /// constants, and the `computed` tensors of the [`Plan::written`] steps in their order.
    pub(super) fn results(
        &self,
        live_out: &[bool],
        computed: Vec<Tensor>,
    ) -> Result<Vec<Option<Tensor>>> {
        let mut computed = computed.into_iter();
        live_out
            .iter()
            .zip(&self.consts)
            .zip(&self.masks)
            .map(|((&live, c), &mask)| match (live, c) {
                (false, _) => Ok(None),
                (true, Some(c)) => Ok(Some(c.clone())),
                (true, None) => {
                    let t = computed
                        .next()
                        .ok_or_else(|| Error::Execution("missing output".into()))?;
                    if mask {
                        // a comparison's 1.0/0.0 as the boolean tensor the op gives
                        let zero = op::util::scalar_like(&t, 0.0)?;
                        op::binary::compare(op::Compare::NotEqual, &t, &zero).map(Some)
                    } else {
                        Ok(Some(t))
                    }
                }
            })
            .collect()
    }

    /// Runs the plan over `n` elements as one kernel of the device kernels `k`; the live
    /// results (shaped `shape`) in instruction order, or `None` where the kernels decline.
    pub(super) fn on_device(
        &self,
        k: &dyn DeviceKernels,
        n: usize,
        live_out: &[bool],
        shape: &[usize],
    ) -> Result<Option<Vec<Option<Tensor>>>> {
        let written = self.written(live_out);
        let run = MapRun {
            steps: &self.steps,
            operands: self
                .ext
                .iter()
                .map(|e| (e.tensor.operand(), e.layout))
                .collect(),
            written: &written,
            shape,
        };
        let Some(results) = k.map_run(&run)? else {
            return Ok(None);
        };
        crate::profile::note_detail(|| {
            format!("{n} elements, {} in, {} out", self.ext.len(), written.len())
        });
        let computed = results
            .into_iter()
            .map(|p| Tensor::from_kernel(p, shape.to_vec()))
            .collect();
        self.results(live_out, computed).map(Some)
    }

    /// Runs the plan over `n` elements in chunks, on the calling thread and the compute
    /// threads ([`crate::threads::for_each_claimed`]); returns the live results (shaped
    /// `shape`) in instruction order.
    pub(super) fn execute(
        &self,
        n: usize,
        live_out: &[bool],
        shape: &[usize],
        device: Device,
    ) -> Result<Option<Vec<Option<Tensor>>>> {
        // Operands of the run's shape are read in place when they are contiguous host f32
        // tensors (else copied once); broadcast ones are small: read once, indexed per chunk.
        let owned: Vec<Option<Vec<f32>>> = self
            .ext
            .iter()
            .map(|e| match e.layout {
                Layout::Full if e.tensor.host_f32().is_some() => Ok(None),
                _ => e.tensor.to_f32_vec().map(Some),
            })
            .collect::<Result<_>>()?;
        let sources: Vec<Source> = self
            .ext
            .iter()
            .zip(&owned)
            .map(|(e, v)| {
                let values = match v {
                    Some(v) => v.as_slice(),
                    None => e.tensor.host_f32().unwrap_or(&[]),
                };
                match e.layout {
                    Layout::Full if values.len() == n => Ok(Source::Flat(values)),
                    Layout::Full => Err(Error::Execution("fused operand of another size".into())),
                    layout => Ok(Source::Small(values, layout)),
                }
            })
            .collect::<Result<_>>()?;
        // live constants are returned as they are; the loops write the other live results
        let live = self.written(live_out);
        // Outputs are written once, by the threads that claim their chunks (no zeroing first).
        let mut outs: Vec<Vec<f32>> = live.iter().map(|_| Vec::with_capacity(n)).collect();
        let n_chunks = n.div_ceil(CHUNK);
        // per chunk, its slice of every live output (taken by the thread that claims it)
        let mut per_chunk: Vec<Parts> = (0..n_chunks).map(|_| Vec::new()).collect();
        for buf in outs.iter_mut() {
            for (c, part) in buf.spare_capacity_mut()[..n].chunks_mut(CHUNK).enumerate() {
                per_chunk[c].push(part);
            }
        }
        let per_chunk: Vec<Mutex<Parts>> = per_chunk.into_iter().map(Mutex::new).collect();
        let steps = self.steps.len();
        let ext = self.ext.len();
        crate::threads::for_each_claimed(
            n_chunks,
            move || Scratch::new(steps, ext),
            |scratch, c| {
                let mut parts = per_chunk[c].lock().unwrap_or_else(|p| p.into_inner());
                self.run_chunk(scratch, c, &mut parts, &live, &sources)
            },
        )?;
        for buf in outs.iter_mut() {
            // SAFETY: the loop returned Ok, so every chunk of every output was written in
            // full by `run_chunk` (the chunks cover `0..n` exactly once).
            unsafe { buf.set_len(n) };
        }
        let computed = outs
            .into_iter()
            .map(|buf| {
                let data = TensorData::new(buf, shape.to_vec());
                Tensor::from_data(data, DType::F32, shape.to_vec(), device)
            })
            .collect::<Result<Vec<_>>>()?;
        self.results(live_out, computed).map(Some)
    }

    /// Computes chunk `c` into its slices `parts` of the live outputs.
    fn run_chunk(
        &self,
        scratch: &mut Scratch,
        c: usize,
        parts: &mut Parts,
        live: &[usize],
        sources: &[Source],
    ) -> Result<()> {
        let Scratch { regs, small } = scratch;
        let start = c * CHUNK;
        let len = parts.first().map_or(0, |p| p.len());
        for (buf, source) in small.iter_mut().zip(sources) {
            if let Source::Small(v, layout) = *source {
                broadcast_chunk(v, layout, start, len, buf)?;
            }
        }
        // the chunk in blocks whose step buffers stay in the core's L1 cache
        let mut ext: Vec<&[f32]> = Vec::with_capacity(sources.len());
        for b in (0..len).step_by(BLOCK) {
            let bl = BLOCK.min(len - b);
            ext.clear();
            ext.extend(
                sources
                    .iter()
                    .zip(small.iter())
                    .map(|(source, buf)| match source {
                        Source::Flat(v) => &v[start + b..start + b + bl],
                        Source::Small(..) => &buf[b..b + bl],
                    }),
            );
            for k in 0..self.steps.len() {
                let (done, rest) = regs.split_at_mut(k);
                let out = &mut rest[0][..bl];
                let arg = |s: Src| match s {
                    Src::Stage(i) => Arg::Slice(&done[i][..bl]),
                    Src::Ext(j) => Arg::Slice(ext[j]),
                    Src::Const(v) => Arg::Scalar(v),
                };
                match self.steps[k] {
                    Stage::Const(_) => {}
                    Stage::Unary(m, a) => run_step(m, arg(a), None, out),
                    Stage::Binary(m, a, b) => run_step(m, arg(a), Some(arg(b)), out),
                    Stage::Select(p, t, f) => select(arg(p), arg(t), arg(f), out),
                    Stage::Same(a) => match arg(a) {
                        Arg::Slice(v) => out.copy_from_slice(v),
                        Arg::Scalar(c) => out.fill(c),
                    },
                }
            }
            for (part, &k) in parts.iter_mut().zip(live) {
                let (dst, src) = (&mut part[b..b + bl], &regs[k][..bl]);
                // SAFETY: `MaybeUninit<f32>` has `f32`'s layout; `dst` and `src` are `bl`
                // elements each and do not overlap (an output and a step buffer). A copy
                // (the library's vector loop) rather than an element loop compiled for
                // the baseline CPU, 16 bytes a store.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast(), bl) };
            }
        }
        Ok(())
    }
}

/// A thread's buffers while it computes chunks of a plan.
struct Scratch {
    /// A block of each step's values.
    regs: Vec<Vec<f32>>,
    /// A chunk of each broadcast operand's values.
    small: Vec<Vec<f32>>,
}

impl Scratch {
    /// Buffers for `steps` steps and `ext` external operands.
    fn new(steps: usize, ext: usize) -> Scratch {
        Scratch {
            regs: (0..steps).map(|_| vec![0f32; BLOCK]).collect(),
            small: vec![Vec::new(); ext],
        }
    }
}

/// Elements a worker computes through all the steps at a time: each step's buffer (4 KiB)
/// stays in the L1 cache for the next step to read.
const BLOCK: usize = 1024;

/// The values of an external operand while a plan runs.
enum Source<'a> {
    /// An operand of the run's shape: its values in row-major order.
    Flat(&'a [f32]),
    /// A broadcast operand's values and how the run reads them.
    Small(&'a [f32], Layout),
}

/// A host f32 tensor that is a broadcast view (zero strides on some axes) of fewer values:
/// those values (copied: a row of a bias, a value per row) and the layout that reads them
/// for the tensor's elements in row-major order (`None`: not such a view).
fn broadcast_view(t: &Tensor) -> Result<Option<(Tensor, Layout)>> {
    let Some((data, offset, strides)) = t.host_f32_strided() else {
        return Ok(None);
    };
    if strides.len() != t.rank() {
        return Ok(None);
    }
    // the axes of more than one element, with their strides
    let axes: Vec<(usize, isize)> = t
        .shape()
        .iter()
        .zip(strides)
        .filter(|(&d, _)| d > 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    let row_major = |ax: &[(usize, isize)]| {
        let mut want = 1isize;
        ax.iter().rev().all(|&(d, s)| {
            let ok = s == want;
            want = want.saturating_mul(d as isize);
            ok
        })
    };
    let count = |ax: &[(usize, isize)]| ax.iter().map(|&(d, _)| d).product::<usize>();
    let first_zero = axes.iter().position(|&(_, s)| s == 0);
    let first_nonzero = axes.iter().position(|&(_, s)| s != 0);
    let (n, layout) = match (first_zero, first_nonzero) {
        // leading axes in row-major order, then broadcast ones: a value per row
        (Some(k), _) if axes[k..].iter().all(|&(_, s)| s == 0) && row_major(&axes[..k]) => {
            (count(&axes[..k]), Layout::Columns(count(&axes[k..])))
        }
        // broadcast axes, then trailing ones in row-major order: a repeated row
        (Some(0), Some(k)) if row_major(&axes[k..]) => {
            let m = count(&axes[k..]);
            (m, Layout::Rows(m))
        }
        // broadcast axes around axes in row-major order: a value per channel, say
        (Some(0), Some(k)) => {
            let e = k + axes[k..].iter().take_while(|&&(_, s)| s != 0).count();
            if !axes[e..].iter().all(|&(_, s)| s == 0) || !row_major(&axes[k..e]) {
                return Ok(None);
            }
            let m = count(&axes[k..e]);
            (m, Layout::Middle(m, count(&axes[e..])))
        }
        _ => return Ok(None),
    };
    let Some(values) = data.get(offset..offset.saturating_add(n)) else {
        return Ok(None);
    };
    let data = TensorData::new(values.to_vec(), vec![n]);
    let small = Tensor::from_data(data, DType::F32, vec![n], Device::Cpu)?;
    Ok(Some((small, layout)))
}

/// Fills `buf` with elements `start..start + len` of the run as a broadcast operand of
/// `layout` reads them from its values `v`: whole repeats of a bias row are copied, per-row
/// values filled in runs.
fn broadcast_chunk(
    v: &[f32],
    layout: Layout,
    start: usize,
    len: usize,
    buf: &mut Vec<f32>,
) -> Result<()> {
    buf.clear();
    let end = start + len;
    match layout {
        Layout::Rows(m) if m > 0 && v.len() == m => {
            let mut i = start;
            while i < end {
                let at = i % m;
                let take = (m - at).min(end - i);
                buf.extend_from_slice(&v[at..at + take]);
                i += take;
            }
        }
        Layout::Columns(inner) if inner > 0 && v.len() >= end.div_ceil(inner) => {
            let mut i = start;
            while i < end {
                let row = i / inner;
                let take = ((row + 1) * inner).min(end) - i;
                buf.resize(buf.len() + take, v[row]);
                i += take;
            }
        }
        Layout::Middle(m, inner) if m > 0 && inner > 0 && v.len() == m => {
            let mut i = start;
            while i < end {
                let block = i / inner;
                let take = ((block + 1) * inner).min(end) - i;
                buf.resize(buf.len() + take, v[block % m]);
                i += take;
            }
        }
        _ => return Err(Error::Execution("fused operand without values".into())),
    }
    Ok(())
}

/// One chunk's (not yet written) slice of every live output.
type Parts<'a> = Vec<&'a mut [MaybeUninit<f32>]>;

/// Applies map `m` to a chunk (`b`: the second operand of a binary map). On x86-64 CPUs with
/// AVX2 the loops are compiled for 8-lane vectors; the element functions are the same IEEE
/// operations (no contraction into fused multiply-adds), so results do not change.
pub(super) fn run_step(m: Map, a: Arg, b: Option<Arg>, out: &mut [f32]) {
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

/// `select` on a chunk: `on_true` where `pred` is not 0 (NaN included), else `on_false`.
/// Branch-free: a ReLU's gradient selects on signs that change from element to element, and
/// a branch per element mispredicted about every other one (4-5 ns an element on an EPYC).
pub(super) fn select(pred: Arg, on_true: Arg, on_false: Arg, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if op::util::simd().avx2 {
        // SAFETY: AVX2 was detected on this CPU.
        unsafe { select_avx2(pred, on_true, on_false, out) };
        return;
    }
    select_any(pred, on_true, on_false, out);
}

/// [`select_any`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn select_avx2(pred: Arg, on_true: Arg, on_false: Arg, out: &mut [f32]) {
    select_any(pred, on_true, on_false, out);
}

/// [`select`]'s loop, one monomorphic loop per kind of operand (slice or scalar).
#[inline(always)]
fn select_any(pred: Arg, on_true: Arg, on_false: Arg, out: &mut [f32]) {
    let n = out.len();
    match pred {
        Arg::Slice(p) => {
            let p = &p[..n];
            select_on(out, |i| p[i], on_true, on_false)
        }
        Arg::Scalar(v) => select_on(out, move |_| v, on_true, on_false),
    }
}

#[inline(always)]
fn select_on(out: &mut [f32], p: impl Fn(usize) -> f32, on_true: Arg, on_false: Arg) {
    let n = out.len();
    match on_true {
        Arg::Slice(t) => {
            let t = &t[..n];
            select_pick(out, p, |i| t[i], on_false)
        }
        Arg::Scalar(v) => select_pick(out, p, move |_| v, on_false),
    }
}

#[inline(always)]
fn select_pick(out: &mut [f32], p: impl Fn(usize) -> f32, t: impl Fn(usize) -> f32, on_false: Arg) {
    // all ones where the predicate is not 0 (NaN included), else all zeros
    let pick = |p: f32, x: f32, y: f32| {
        let m = 0u32.wrapping_sub(u32::from(p != 0.0));
        f32::from_bits((x.to_bits() & m) | (y.to_bits() & !m))
    };
    let n = out.len();
    match on_false {
        Arg::Slice(f) => {
            let f = &f[..n];
            for (i, o) in out.iter_mut().enumerate() {
                *o = pick(p(i), t(i), f[i]);
            }
        }
        Arg::Scalar(v) => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = pick(p(i), t(i), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(values: Vec<f32>, shape: &[usize]) -> Tensor {
        let data = TensorData::new(values, shape.to_vec());
        Tensor::from_data(data, DType::F32, shape.to_vec(), Device::Cpu).unwrap()
    }

    fn broadcast(t: &Tensor, shape: &[usize], axes: Vec<usize>) -> Tensor {
        let op = Op::Broadcast {
            shape: shape.to_vec(),
            axes: Some(axes),
        };
        op::eval(&op, std::slice::from_ref(t), Device::Cpu)
            .unwrap()
            .pop()
            .unwrap()
    }

    /// Broadcast views are read from the values they repeat, with the layout that gives each
    /// element its value; other views are not.
    #[test]
    fn broadcast_views_are_read_from_their_values() {
        let column = host((0..6).map(|i| i as f32).collect(), &[2, 3, 1]);
        let view = broadcast(&column, &[2, 3, 5], vec![0, 1, 2]);
        let (small, layout) = broadcast_view(&view).unwrap().unwrap();
        assert_eq!(layout, Layout::Columns(5));
        assert_eq!(small.to_f32_vec().unwrap(), column.to_f32_vec().unwrap());
        let row = host((0..5).map(|i| i as f32).collect(), &[5]);
        let view = broadcast(&row, &[2, 3, 5], vec![2]);
        let (small, layout) = broadcast_view(&view).unwrap().unwrap();
        assert_eq!(layout, Layout::Rows(5));
        assert_eq!(small.to_f32_vec().unwrap(), row.to_f32_vec().unwrap());
        // a value per channel, repeated around it
        let channel = host((0..3).map(|i| i as f32).collect(), &[3]);
        let view = broadcast(&channel, &[2, 3, 4, 5], vec![1]);
        let (small, layout) = broadcast_view(&view).unwrap().unwrap();
        assert_eq!(layout, Layout::Middle(3, 20));
        assert_eq!(small.to_f32_vec().unwrap(), channel.to_f32_vec().unwrap());
        let mut chunk = Vec::new();
        broadcast_chunk(&[0.0, 1.0, 2.0], layout, 37, 30, &mut chunk).unwrap();
        let want: Vec<f32> = (37..67).map(|i| ((i / 20) % 3) as f32).collect();
        assert_eq!(chunk, want);
        // repeated along a middle axis: no layout
        let ends = host((0..10).map(|i| i as f32).collect(), &[2, 1, 5]);
        let view = broadcast(&ends, &[2, 3, 5], vec![0, 1, 2]);
        assert!(broadcast_view(&view).unwrap().is_none());
        // a contiguous tensor is not a broadcast view
        assert!(broadcast_view(&column).unwrap().is_none());
    }

    /// The branch-free `select` takes `on_true` exactly where the predicate is not 0 (NaN
    /// and -0.0 included as IEEE compares them) and returns the chosen operand's bits (NaN
    /// payloads, signed zeros), for every mix of slice and scalar operands.
    #[test]
    fn select_picks_bits_as_a_branch_would() {
        let preds = [
            0.0,
            -0.0,
            1.0,
            f32::NAN,
            -3.0,
            f32::INFINITY,
            1e-45,
            0.0,
            2.0,
        ];
        let ts: Vec<f32> = (0..preds.len()).map(|i| i as f32 + 0.5).collect();
        let mut fs: Vec<f32> = (0..preds.len()).map(|i| -(i as f32)).collect();
        fs[0] = f32::from_bits(0x7fc0_1234);
        fs[1] = -0.0;
        let n = preds.len();
        for kinds in 0..8 {
            let p = if kinds & 1 == 0 {
                Arg::Slice(&preds)
            } else {
                Arg::Scalar(f32::NAN)
            };
            let t = if kinds & 2 == 0 {
                Arg::Slice(&ts)
            } else {
                Arg::Scalar(-0.0)
            };
            let f = if kinds & 4 == 0 {
                Arg::Slice(&fs)
            } else {
                Arg::Scalar(7.0)
            };
            let at = |a: Arg, i: usize| match a {
                Arg::Slice(s) => s[i],
                Arg::Scalar(v) => v,
            };
            let mut out = vec![0f32; n];
            select(p, t, f, &mut out);
            for (i, o) in out.iter().enumerate() {
                let want = if at(p, i) != 0.0 { at(t, i) } else { at(f, i) };
                assert_eq!(o.to_bits(), want.to_bits(), "kinds {kinds}, element {i}");
            }
        }
        // a scalar predicate of 0 takes every element from `on_false`
        let mut out = vec![0f32; n];
        select(
            Arg::Scalar(-0.0),
            Arg::Slice(&ts),
            Arg::Slice(&fs),
            &mut out,
        );
        assert_eq!(
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            fs.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}
