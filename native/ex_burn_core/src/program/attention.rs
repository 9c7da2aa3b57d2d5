//! Attention as one step: `softmax(f(Q Kᵀ)) V`, where `f` is a chain of scalings and masks,
//! computed without materialising the `[batch.., sq, sk]` scores, exponentials and
//! probabilities (three tensors of 96 MiB each in a GPT-2-small layer of 8 x 512 tokens).
//!
//! The compiler writes attention as Nx does: `s = dot(q, k)` contracting the last axes over
//! leading batch axes; element-wise steps on `s` (a division or multiplication by a scalar
//! literal, `select(mask, s, literal)`); `e = exp(x - reduce_max(x))` and `p = e / sum(e)`
//! over the last axis (`keep_axes`); `dot(p, v)`. When each of those values is read only
//! there (a forward pass; a backward pass reads the probabilities again, and keeps the
//! unfused form), the program skips the instructions that define them and the final `dot`
//! computes the whole from `q`, `k`, the masks and `v` ([`plan`]).
//!
//! On the CPU, for each batch matrix: the scores by the GEMM into a scratch block, the
//! element-wise steps, the row maxima, exponentials, the rows' sums accumulated in f64 and
//! the divisions exactly as the unfused program computes them (the same f32 operations in
//! the same order), then the product with `v` by the GEMM; batch matrices spread over the
//! CPU compute threads. Elsewhere (other devices, other types, shapes the kernel does not
//! take) the skipped instructions run op by op when the final `dot` is reached.

use super::literal::Literal;
use super::Instr;
use crate::dtype::Kind;
use crate::kernels::{AttentionCall, AttentionSizes, DeviceKernels, ScoreStep};
use crate::op::{Arith, Op, Precision, ReduceKind, Unary};
use crate::{DType, Device, Error, Result, Tensor};

thread_local! {
    /// Attentions this thread computed as one step (see [`attention_steps`]).
    static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many attentions programs run on this thread computed as one step (lets tests tell
/// that path from op-by-op evaluation).
pub fn attention_steps() -> u64 {
    STEPS.with(|c| c.get())
}

/// An element-wise step applied to the scores, before the softmax.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Scale {
    /// `x / c`, `c` the scalar literal of this value.
    Divide(usize),
    /// `x * c` (either operand order).
    Multiply(usize),
    /// `select(pred, x, fill)`: `pred` any tensor that broadcasts to the scores (non-zero
    /// picks `x`), `fill` the scalar literal of this value.
    Select { pred: usize, fill: usize },
}

/// A program's attentions.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Plans {
    /// For each instruction that is the final `dot` of an attention, the attention.
    pub by_root: Vec<Option<Attention>>,
    /// For each instruction, whether an attention computes its value (skipped where the
    /// attention runs as one step).
    pub inner: Vec<bool>,
    /// The program's element-wise runs with the attentions' instructions taken out.
    pub runs: Vec<Option<usize>>,
    /// The program's row regions with the attentions' instructions taken out.
    pub rows: Vec<Option<usize>>,
}

/// A matched attention: what the final `dot` computes instead of the instructions it skips.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Attention {
    /// Value numbers of `q` (`[batch.., sq, d]`), `k` (`[batch.., sk, d]`) and `v`
    /// (`[batch.., sk, dv]`).
    pub q: usize,
    pub k: usize,
    pub v: usize,
    /// Number of leading batch axes.
    pub batch: usize,
    /// The steps on the scores, in order.
    pub steps: Vec<Scale>,
    /// The instructions whose values the fused step computes (skipped when it runs), in order.
    pub inner: Vec<usize>,
    /// `Highest` when either product asks for full f32 accuracy (GPU kernels, which multiply
    /// in TF32, then leave the attention to the instructions).
    pub precision: Precision,
}

impl Attention {
    /// Every value the skipped instructions read from outside them (kept alive until the
    /// final `dot`, which may run them op by op).
    pub(super) fn reads(&self, instrs: &[Instr], first: usize) -> Vec<usize> {
        let defined: Vec<usize> = self
            .inner
            .iter()
            .map(|&i| value_of(instrs, first, i))
            .collect();
        let mut reads: Vec<usize> = self
            .inner
            .iter()
            .flat_map(|&i| instrs[i].args.iter().copied())
            .filter(|a| !defined.contains(a))
            .collect();
        reads.sort_unstable();
        reads.dedup();
        reads
    }
}

/// The value number of instruction `i`'s first result.
pub(super) fn value_of(instrs: &[Instr], first: usize, i: usize) -> usize {
    first
        + instrs[..i]
            .iter()
            .map(|ins| ins.op.results())
            .sum::<usize>()
}

/// For each instruction, the attention it computes when it is the final `dot` of one.
/// `first` is the value number of the first instruction's first result; `literals` the
/// scalar literals by value (see `literal::plan`); `outputs` the program's outputs.
pub(super) fn plan(
    instrs: &[Instr],
    first: usize,
    outputs: &[usize],
    literals: &[Option<Literal>],
) -> Vec<Option<Attention>> {
    let values = super::values::Values::of(instrs, first, outputs);
    let uses = values.uses();
    let defined_by = values.def;
    let m = Matcher {
        instrs,
        defined_by: &defined_by,
        uses: &uses,
        literals,
    };
    let mut plans: Vec<Option<Attention>> = vec![None; instrs.len()];
    let mut taken = vec![false; instrs.len()];
    for (root, ins) in instrs.iter().enumerate() {
        if let Some(a) = m.attention(ins) {
            if a.inner.iter().all(|&i| !taken[i]) {
                for &i in &a.inner {
                    taken[i] = true;
                }
                plans[root] = Some(a);
            }
        }
    }
    plans
}

struct Matcher<'a> {
    instrs: &'a [Instr],
    defined_by: &'a [usize],
    uses: &'a [usize],
    literals: &'a [Option<Literal>],
}

impl Matcher<'_> {
    /// The instruction defining value `v` when `v` is read `uses` times, else `None`.
    fn def(&self, v: usize, uses: usize) -> Option<(usize, &Instr)> {
        let i = *self.defined_by.get(v)?;
        (i != usize::MAX && self.uses[v] == uses && self.instrs[i].op.results() == 1)
            .then(|| (i, &self.instrs[i]))
    }

    fn literal(&self, v: usize) -> bool {
        matches!(self.literals.get(v), Some(Some(_)))
    }

    /// The attention whose final `dot` is `root`.
    fn attention(&self, root: &Instr) -> Option<Attention> {
        // out = p . v over the batch axes: p [batch.., sq, sk], v [batch.., sk, dv]
        let nb = batched_dot(root, 0)?;
        let [p, v] = root.args[..] else { return None };
        let last = Some(vec![nb + 1]);
        // p = e / sum(e)
        let (ip, pi) = self.def(p, 1)?;
        let [e, sum] = self.binary(pi, Arith::Divide)?;
        let (isum, sumi) = self.def(sum, 1)?;
        if !self.reduce(sumi, ReduceKind::Sum, &last, e) {
            return None;
        }
        // e = exp(x - max(x))
        let (ie, ei) = self.def(e, 2)?;
        if ei.op.as_op() != Some(&Op::Unary(Unary::Exp)) {
            return None;
        }
        let (id, di) = self.def(ei.args[0], 1)?;
        let [x, max] = self.binary(di, Arith::Subtract)?;
        let (imax, maxi) = self.def(max, 1)?;
        if !self.reduce(maxi, ReduceKind::Max, &last, x) {
            return None;
        }
        // x = steps(dot(q, k))
        let mut inner = vec![ip, isum, ie, id, imax];
        let mut steps = Vec::new();
        let (mut at, mut uses) = (x, 2);
        let (_, scores) = loop {
            let (i, ins) = self.def(at, uses)?;
            inner.push(i);
            uses = 1;
            match ins.op.as_op()? {
                Op::Dot { .. } => break (i, ins),
                Op::Binary {
                    op: Arith::Divide,
                    out,
                } if matches!(out, None | Some(DType::F32)) && self.literal(ins.args[1]) => {
                    steps.push(Scale::Divide(ins.args[1]));
                    at = ins.args[0];
                }
                Op::Binary {
                    op: Arith::Multiply,
                    out: None | Some(DType::F32),
                } => {
                    let [a, b] = ins.args[..] else { return None };
                    let (c, x) = if self.literal(b) { (b, a) } else { (a, b) };
                    if !self.literal(c) {
                        return None;
                    }
                    steps.push(Scale::Multiply(c));
                    at = x;
                }
                Op::Select {
                    out: None | Some(DType::F32),
                } => {
                    let [pred, x, fill] = ins.args[..] else {
                        return None;
                    };
                    if !self.literal(fill) {
                        return None;
                    }
                    steps.push(Scale::Select { pred, fill });
                    at = x;
                }
                _ => return None,
            }
        };
        steps.reverse();
        // scores = q . k over the batch axes: q [batch.., sq, d], k [batch.., sk, d]
        if batched_dot(scores, 1)? != nb {
            return None;
        }
        let [q, k] = scores.args[..] else { return None };
        inner.sort_unstable();
        let precision = if [root, scores].iter().any(|i| {
            matches!(
                i.op.as_op(),
                Some(Op::Dot {
                    precision: Precision::Highest,
                    ..
                })
            )
        }) {
            Precision::Highest
        } else {
            Precision::Default
        };
        Some(Attention {
            q,
            k,
            v,
            batch: nb,
            steps,
            inner,
            precision,
        })
    }

    /// The two operands of `ins` when it is `f` on f32 (or the merged type).
    fn binary(&self, ins: &Instr, f: Arith) -> Option<[usize; 2]> {
        match ins.op.as_op()? {
            Op::Binary { op, out } if *op == f && matches!(out, None | Some(DType::F32)) => {
                ins.args[..].try_into().ok()
            }
            _ => None,
        }
    }

    /// Whether `ins` is the fold `kind` of value `x` over `axes`, keeping them, in f32 (or x's
    /// type).
    fn reduce(&self, ins: &Instr, kind: ReduceKind, axes: &Option<Vec<usize>>, x: usize) -> bool {
        matches!(ins.op.as_op(), Some(Op::Reduce { kind: k, axes: a, keep_axes: true, out })
            if *k == kind && a == axes && matches!(out, None | Some(DType::F32)))
            && ins.args == [x]
    }
}

/// The number of batch axes of `ins` when it is an f32 `dot` over leading batch axes that
/// contracts the left operand's last axis with the right operand's axis `right` after the
/// batch axes (0: the first of its two others, 1: its last).
fn batched_dot(ins: &Instr, right: usize) -> Option<usize> {
    let Some(Op::Dot {
        contract_a,
        batch_a,
        contract_b,
        batch_b,
        out: None | Some(DType::F32),
        ..
    }) = ins.op.as_op()
    else {
        return None;
    };
    let nb = batch_a.len();
    let leading: Vec<usize> = (0..nb).collect();
    (*batch_a == leading
        && *batch_b == leading
        && *contract_a == [nb + 1]
        && *contract_b == [nb + right])
    .then_some(nb)
}

/// The operands of a planned attention at run time.
pub(super) struct Operands<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    /// For each step: the predicate tensor of a `select`, and the step's scalar (f32).
    pub steps: Vec<(Scale, Option<&'a Tensor>, f32)>,
}

impl Operands<'_> {
    /// The operands' sizes when they have `nb` batch axes, agree with each other and no size
    /// is 0 (the kernels' precondition); `None` otherwise.
    pub(super) fn sizes(&self, nb: usize) -> Option<AttentionSizes<'_>> {
        AttentionSizes::of(nb, self.q.shape(), self.k.shape(), self.v.shape())
    }
}

/// Whether attentions run as one step on `device` (a kernel exists there): the CPU, and
/// devices whose kernels fuse (NVIDIA GPUs with the CUDA kernels), unless the configuration
/// turns it off (`attention: false`, [`crate::config`]).
pub(super) fn fused_on(device: Device) -> bool {
    if !crate::config::attention() {
        return false;
    }
    match device {
        Device::Cpu => true,
        _ => device.kernels().is_some_and(|(k, _)| k.fusion()),
    }
}

/// Computes the attention on `device` when the kernel takes these operands (`Ok(None)`:
/// the caller runs the skipped instructions op by op).
pub(super) fn run(a: &Attention, ops: &Operands, device: Device) -> Result<Option<Tensor>> {
    let out = match device {
        Device::Cpu => cpu::run(a.batch, ops)?,
        // the device kernel multiplies in TF32, as `dot` does by default there
        _ if a.precision == Precision::Default => match device.kernels() {
            Some((k, _)) => on_device(k, a.batch, ops)?,
            None => None,
        },
        _ => None,
    };
    if out.is_some() {
        STEPS.with(|c| c.set(c.get() + 1));
    }
    Ok(out)
}

/// The attention of `ops` with `nb` batch axes by the device kernels `k`: predicates that
/// are neither f32 nor boolean are cast to f32 masks first.
fn on_device(k: &dyn DeviceKernels, nb: usize, ops: &Operands) -> Result<Option<Tensor>> {
    let Some(sizes) = ops.sizes(nb) else {
        return Ok(None);
    };
    let out: Vec<usize> = [sizes.batch, &[sizes.sq, sizes.dv]].concat();
    let masks = ops
        .steps
        .iter()
        .map(|(_, pred, _)| match pred {
            Some(p) if p.kind() != Kind::Bool && p.dtype() != DType::F32 => {
                crate::op::shape::mask_f32(p).map(Some)
            }
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    let call = AttentionCall {
        batch_axes: nb,
        q: ops.q.operand(),
        k: ops.k.operand(),
        v: ops.v.operand(),
        steps: ops
            .steps
            .iter()
            .zip(&masks)
            .map(|(&(scale, pred, c), mask)| {
                let step = match scale {
                    Scale::Divide(_) => ScoreStep::Divide,
                    Scale::Multiply(_) => ScoreStep::Multiply,
                    Scale::Select { .. } => ScoreStep::Select,
                };
                (step, mask.as_ref().or(pred).map(Tensor::operand), c)
            })
            .collect(),
    };
    Ok(k.attention(&call)?.map(|p| Tensor::from_kernel(p, out)))
}

mod cpu;

/// The f32 value of a scalar tensor (a literal the program keeps), as the f32 arithmetic of
/// the unfused steps reads it.
pub(super) fn scalar_f32(t: &Tensor) -> Result<f32> {
    if t.numel() != 1 {
        return Err(Error::Execution(
            "attention: a step's scalar is not a scalar".into(),
        ));
    }
    Ok(crate::op::util::read_scalar(&t.cast(DType::F32)?)?.to_f64() as f32)
}
