//! Compiling a `while` loop's condition and body to interpreter code, and the machine that
//! runs it: one register per value, shapes and types fixed by the loop's inputs.

use super::code::{self, Ins, IntOp, IntReduce, IntUnary, Regs, Slot, Src};
use super::Code;
use super::MAX_ELEMENTS;
use crate::dtype::Kind;
use crate::op::f32_map;
use crate::op::{Arith, Op, ReduceKind, Unary};
use crate::{DType, Device, Result, Tensor};

thread_local! {
    /// Loops this thread ran with the interpreter (see [`super::loops_run`]).
    pub static LOOPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A register's element type: f32, or an integer type whose values fit `i64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    F32,
    Int(DType),
}

impl Ty {
    fn of(d: DType) -> Option<Ty> {
        match d {
            DType::F32 => Some(Ty::F32),
            DType::S8 | DType::S16 | DType::S32 | DType::S64 => Some(Ty::Int(d)),
            DType::U8 | DType::U16 | DType::U32 => Some(Ty::Int(d)),
            _ => None,
        }
    }

    fn dtype(self) -> DType {
        match self {
            Ty::F32 => DType::F32,
            Ty::Int(d) => d,
        }
    }
}

/// What the compiler knows of a register: its type, shape and slot.
#[derive(Debug, Clone)]
struct Reg {
    ty: Ty,
    shape: Vec<usize>,
    src: Src,
}

/// A loop compiled for its inputs, with its registers.
pub struct Machine {
    regs: Regs,
    info: Vec<Reg>,
    cond: Vec<Ins>,
    body: Vec<Ins>,
    /// The condition's result.
    pred: Src,
    /// The body's results, one per state value.
    outs: Vec<Src>,
    /// The state values whose result is another value (not the state value itself).
    changed: Vec<usize>,
    /// Whether a result is another state value (so results go through `next`).
    crossed: bool,
    /// Where the body's results are gathered before they become the state (slots of the
    /// same lengths as the state's).
    next: Regs,
    next_slots: Vec<Src>,
}

/// Builds the code of one program whose inputs are registers `0..inputs`.
struct Builder<'a> {
    info: &'a mut Vec<Reg>,
    regs: &'a mut Regs,
    code: Vec<Ins>,
}

impl Machine {
    /// Compiles loop `cond`/`body` (state values first among `inputs`, then invariants):
    /// `Ok(None)` when something in it is not for the interpreter.
    pub fn new(
        cond: &Code,
        body: &Code,
        state: usize,
        inputs: &[Tensor],
    ) -> Result<Option<Machine>> {
        let n = inputs.len();
        if cond.inputs != n || body.inputs != n || body.outputs.len() != state {
            return Ok(None);
        }
        if cond.outputs.len() != 1 {
            return Ok(None);
        }
        let mut info: Vec<Reg> = Vec::with_capacity(n + cond.instrs.len() + body.instrs.len());
        let mut regs = Regs::default();
        // booleans come back as their own kind (the interpreter makes integers): invariants only
        if !load_inputs(inputs, |k| k >= state, &mut info, &mut regs)? {
            return Ok(None);
        }
        let Some((cond_code, pred)) = Builder::program(cond, &mut info, &mut regs)? else {
            return Ok(None);
        };
        let Some((body_code, outs)) = Builder::program(body, &mut info, &mut regs)? else {
            return Ok(None);
        };
        let pred = pred[0];
        if crate::tensor::numel(&info[pred].shape) != 1 {
            return Ok(None);
        }
        // the state keeps its types and shapes
        if outs
            .iter()
            .enumerate()
            .any(|(k, &o)| info[o].ty != info[k].ty || info[o].shape != info[k].shape)
        {
            return Ok(None);
        }
        // what `code::run` relies on
        if !cond_code.iter().chain(&body_code).all(Ins::reads_below) {
            return Ok(None);
        }
        let state_slots = info[..state].iter().map(|r| r.src);
        let (before, [cond_code, body_code]) = hoist(state_slots, [cond_code, body_code]);
        code::run(&before, &mut regs);
        let mut next = Regs::default();
        let next_slots = outs
            .iter()
            .map(|&o| next.alloc(info[o].ty == Ty::F32, info[o].src.slot().len))
            .collect();
        LOOPS.with(|c| c.set(c.get() + 1));
        Ok(Some(Machine {
            regs,
            cond: cond_code,
            body: body_code,
            pred: info[pred].src,
            outs: outs.iter().map(|&o| info[o].src).collect(),
            changed: (0..state).filter(|&k| outs[k] != k).collect(),
            crossed: outs.iter().enumerate().any(|(k, &o)| o < state && o != k),
            info,
            next,
            next_slots,
        }))
    }

    /// Compiles the condition's and body's runs of simple maps to machine code, where this
    /// CPU and system allow (`native`); the results stay the same.
    pub fn compile_native(&mut self) {
        super::native::compile(&mut [&mut self.cond, &mut self.body]);
    }

    /// Runs the condition on the current state: whether to run the body again.
    pub fn test(&mut self) -> bool {
        code::run(&self.cond, &mut self.regs);
        self.regs.truthy(self.pred)
    }

    /// Runs the body once and makes its results the state.
    pub fn step(&mut self) {
        code::run(&self.body, &mut self.regs);
        if !self.crossed {
            for &k in &self.changed {
                match (self.outs[k], self.info[k].src) {
                    (Src::F(a), Src::F(b)) => self.regs.f.copy_within(a.off..a.off + a.len, b.off),
                    (Src::I(a), Src::I(b)) => self.regs.i.copy_within(a.off..a.off + a.len, b.off),
                    _ => {}
                }
            }
            return;
        }
        // through `next`: a result is another state value's slot
        for &k in &self.changed {
            copy_between(&self.regs, self.outs[k], &mut self.next, self.next_slots[k]);
        }
        for &k in &self.changed {
            copy_between(
                &self.next,
                self.next_slots[k],
                &mut self.regs,
                self.info[k].src,
            );
        }
    }

    /// The state as tensors on the host.
    pub fn state(&self) -> Result<Vec<Tensor>> {
        (0..self.outs.len())
            .map(|k| store(&self.regs, &self.info[k]))
            .collect()
    }
}

/// A straight-line program compiled for inputs of given types and shapes, run once per
/// call (see [`super::once`]); kept to run again on inputs of the same types and shapes.
pub struct Once {
    regs: Regs,
    info: Vec<Reg>,
    code: Vec<Ins>,
    /// The registers of the results.
    outs: Vec<usize>,
    /// Number of inputs (registers `0..inputs`).
    inputs: usize,
}

impl Once {
    /// Compiles `p` (tensor ops only, no loop) for `inputs`: `Ok(None)` when something in it
    /// is not for the interpreter, or when a result is `u8` (op by op a comparison's result
    /// is a boolean tensor, which the interpreter does not make).
    pub fn new(p: &Code, inputs: &[Tensor]) -> Result<Option<Once>> {
        if p.inputs != inputs.len() {
            return Ok(None);
        }
        let mut info: Vec<Reg> = Vec::with_capacity(inputs.len() + p.instrs.len());
        let mut regs = Regs::default();
        if !load_inputs(inputs, |_| true, &mut info, &mut regs)? {
            return Ok(None);
        }
        let Some((code, outs)) = Builder::program(p, &mut info, &mut regs)? else {
            return Ok(None);
        };
        if !code.iter().all(Ins::reads_below)
            || outs.iter().any(|&o| info[o].ty == Ty::Int(DType::U8))
        {
            return Ok(None);
        }
        Ok(Some(Once {
            regs,
            info,
            code,
            outs,
            inputs: inputs.len(),
        }))
    }

    /// Whether `inputs` have the types and shapes this was compiled for.
    pub fn fits(&self, inputs: &[Tensor]) -> bool {
        inputs.len() == self.inputs
            && inputs
                .iter()
                .zip(&self.info)
                .all(|(t, r)| Ty::of(t.dtype()) == Some(r.ty) && t.shape() == r.shape.as_slice())
    }

    /// Runs the program on `inputs` (which [`Once::fits`]) and returns its results.
    pub fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        for (t, r) in inputs.iter().zip(&self.info) {
            load(t, r.ty, &mut self.regs, r.src)?;
        }
        code::run(&self.code, &mut self.regs);
        self.outs
            .iter()
            .map(|&o| store(&self.regs, &self.info[o]))
            .collect()
    }
}

/// Splits the instructions of `codes` (the condition's, then the body's) into those that
/// read, directly or through earlier instructions, a slot of `state` (kept, in order) and
/// the others (returned first, in order): their operands (constants, the loop's invariants,
/// results of such instructions) never change between iterations, so they run once before
/// the loop (every slot is written by one instruction or, for the state, between
/// iterations).
fn hoist<const N: usize>(
    state: impl Iterator<Item = Src>,
    codes: [Vec<Ins>; N],
) -> (Vec<Ins>, [Vec<Ins>; N]) {
    let mut varying: std::collections::HashSet<Src> = state.collect();
    let mut before = Vec::new();
    let kept = codes.map(|code| {
        let mut kept = Vec::with_capacity(code.len());
        for ins in code {
            if ins.reads().iter().any(|r| varying.contains(r)) {
                varying.insert(ins.out());
                kept.push(ins);
            } else {
                before.push(ins);
            }
        }
        kept
    });
    (before, kept)
}

/// Copies slot `a` of `from` into slot `b` of `to` (same arena kind and length).
fn copy_between(from: &Regs, a: Src, to: &mut Regs, b: Src) {
    match (a, b) {
        (Src::F(a), Src::F(b)) => to.f[b.off..b.off + b.len].copy_from_slice(from.f32s(a)),
        (Src::I(a), Src::I(b)) => to.i[b.off..b.off + b.len].copy_from_slice(from.ints(a)),
        _ => {}
    }
}

/// Puts `inputs` in new registers (`0..inputs.len()`, their values loaded); `false` when one
/// is not for the interpreter: a type it lacks, no elements or more than [`MAX_ELEMENTS`], or
/// a boolean where `booleans` (given the input's index) refuses it.
fn load_inputs(
    inputs: &[Tensor],
    booleans: impl Fn(usize) -> bool,
    info: &mut Vec<Reg>,
    regs: &mut Regs,
) -> Result<bool> {
    for (k, t) in inputs.iter().enumerate() {
        let Some(ty) = Ty::of(t.dtype()) else {
            return Ok(false);
        };
        let kind_ok = t.kind() != Kind::Bool || booleans(k);
        if !kind_ok || t.numel() == 0 || t.numel() > MAX_ELEMENTS {
            return Ok(false);
        }
        let src = regs.alloc(ty == Ty::F32, t.numel());
        load(t, ty, regs, src)?;
        info.push(Reg {
            ty,
            shape: t.shape().to_vec(),
            src,
        });
    }
    Ok(true)
}

/// Writes a host tensor's values, of register type `ty`, into slot `src`.
fn load(t: &Tensor, ty: Ty, regs: &mut Regs, src: Src) -> Result<()> {
    match (ty, src) {
        (Ty::F32, Src::F(s)) => {
            regs.f[s.off..s.off + s.len].copy_from_slice(&t.to_f32_vec()?);
        }
        (Ty::Int(d), Src::I(s)) => {
            let bytes = t.to_bytes(None)?;
            let w = d.size();
            let signed = d.is_signed_int();
            let out = &mut regs.i[s.off..s.off + s.len];
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(w)) {
                let mut b = [0u8; 8];
                b[..w].copy_from_slice(c);
                let raw = i64::from_le_bytes(b);
                // sign-extend from the type's width
                let shift = 64 - 8 * w as u32;
                *o = if signed { (raw << shift) >> shift } else { raw };
            }
        }
        _ => {}
    }
    Ok(())
}

/// A register's values as a host tensor.
fn store(regs: &Regs, r: &Reg) -> Result<Tensor> {
    let d = r.ty.dtype();
    let bytes: Vec<u8> = match r.src {
        Src::F(s) => regs.f32s(s).iter().flat_map(|x| x.to_le_bytes()).collect(),
        Src::I(s) => regs
            .ints(s)
            .iter()
            .flat_map(|x| x.to_le_bytes().into_iter().take(d.size()))
            .collect(),
    };
    Tensor::from_bytes(&bytes, &r.shape, d, Device::Cpu)
}

/// The shape operands broadcast to (Nx's rules: trailing axes aligned, axes of 1 stretch),
/// when it is small enough for the interpreter.
fn broadcast(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max()?;
    let mut out = vec![1usize; rank];
    for s in shapes {
        for (k, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + k];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    let n = crate::tensor::numel(&out);
    (n <= MAX_ELEMENTS && n > 0).then_some(out)
}

/// For each element of `to` (row-major), the element of `from` that broadcasts to it.
fn broadcast_index(from: &[usize], to: &[usize]) -> Vec<u32> {
    let lead = to.len() - from.len();
    // strides of `from` along `to`'s axes (0 where it has no axis or an axis of 1)
    let mut strides = vec![0usize; to.len()];
    let mut s = 1;
    for k in (0..from.len()).rev() {
        if from[k] != 1 {
            strides[lead + k] = s;
        }
        s *= from[k];
    }
    let n = crate::tensor::numel(to);
    let mut index = Vec::with_capacity(n);
    let mut pos = vec![0usize; to.len()];
    for _ in 0..n {
        index.push(pos.iter().zip(&strides).map(|(p, s)| p * s).sum::<usize>() as u32);
        for k in (0..to.len()).rev() {
            pos[k] += 1;
            if pos[k] < to[k] {
                break;
            }
            pos[k] = 0;
        }
    }
    index
}

impl Builder<'_> {
    /// Compiles `p` over the registers so far (its inputs being registers `0..p.inputs`):
    /// its code and the registers of its outputs, `None` if it is not for the interpreter.
    fn program(
        p: &Code,
        info: &mut Vec<Reg>,
        regs: &mut Regs,
    ) -> Result<Option<(Vec<Ins>, Vec<usize>)>> {
        let mut b = Builder {
            info,
            regs,
            code: Vec::with_capacity(p.instrs.len()),
        };
        // value number -> register
        let mut at: Vec<usize> = (0..p.inputs).collect();
        for &(op, args) in &p.instrs {
            let args: Vec<usize> = args.iter().map(|&a| at[a]).collect();
            match b.op(op, &args)? {
                Some(r) => at.push(r),
                None => return Ok(None),
            }
            // every value keeps its slot for the whole loop: long bodies stay op by op, where
            // values are freed after their last use
            if b.regs.f.len() + b.regs.i.len() > super::MAX_SLOTS {
                return Ok(None);
            }
        }
        let outs = p.outputs.iter().map(|&o| at[o]).collect();
        Ok(Some((b.code, outs)))
    }

    /// A new register of type `ty` and `shape`.
    fn reg(&mut self, ty: Ty, shape: Vec<usize>) -> usize {
        let src = self.regs.alloc(ty == Ty::F32, crate::tensor::numel(&shape));
        self.info.push(Reg { ty, shape, src });
        self.info.len() - 1
    }

    /// The slot of register `r` in its arena.
    fn slot(&self, r: usize) -> Slot {
        self.info[r].src.slot()
    }

    /// The slot of register `r`, either arena.
    fn src(&self, r: usize) -> Src {
        self.info[r].src
    }

    fn ty(&self, r: usize) -> Ty {
        self.info[r].ty
    }

    fn shape(&self, r: usize) -> &[usize] {
        &self.info[r].shape
    }

    /// Register `r` as an operand of a result of `shape`: itself when it is one element or
    /// holds the result's elements in order, else broadcast into a new register.
    fn fit(&mut self, r: usize, shape: &[usize]) -> usize {
        let m = crate::tensor::numel(self.shape(r));
        if m == 1 || m == crate::tensor::numel(shape) {
            return r;
        }
        let index = broadcast_index(self.shape(r), shape);
        let out = self.reg(self.ty(r), shape.to_vec());
        self.code.push(Ins::Expand {
            a: self.src(r),
            out: self.src(out),
            index,
        });
        out
    }

    /// Register `r` as f32 (converted into a new register if it holds integers).
    fn as_f32(&mut self, r: usize) -> usize {
        if self.ty(r) == Ty::F32 {
            return r;
        }
        let out = self.reg(Ty::F32, self.shape(r).to_vec());
        self.code.push(Ins::ToF32 {
            a: self.slot(r),
            out: self.slot(out),
        });
        out
    }

    /// Register `r` as integers of type `to` (wrapped into a new register if it differs).
    fn as_int(&mut self, r: usize, to: DType) -> Option<usize> {
        match self.ty(r) {
            Ty::Int(d) if d == to => Some(r),
            Ty::Int(_) => {
                let out = self.reg(Ty::Int(to), self.shape(r).to_vec());
                self.code.push(Ins::IntUnary {
                    op: IntUnary::Cast,
                    a: self.slot(r),
                    out: self.slot(out),
                    to,
                });
                Some(out)
            }
            Ty::F32 => None,
        }
    }

    /// The type of an op's result: declared, or Nx's merge of its operands'.
    fn result(&self, out: Option<DType>, operands: &[usize]) -> Option<Ty> {
        let merged = operands
            .iter()
            .map(|&r| self.ty(r).dtype())
            .reduce(DType::merge)?;
        Ty::of(out.unwrap_or(merged))
    }

    /// Compiles one op on registers `args`: its result's register.
    fn op(&mut self, op: &Op, args: &[usize]) -> Result<Option<usize>> {
        Ok(match (op, args) {
            (Op::Full { shape, dtype, .. }, []) => self.constant(op, shape, *dtype)?,
            (Op::Unary(u), &[a]) => self.unary(op, *u, a),
            (Op::Binary { op: f, out }, &[a, b]) => self.binary(*f, *out, a, b),
            (Op::Compare(c), &[a, b]) => {
                let shape = broadcast(&[self.shape(a), self.shape(b)]);
                let (Some(shape), Some(ty)) = (shape, self.result(None, &[a, b])) else {
                    return Ok(None);
                };
                // integers compare by exact value (their merged type holds both)
                let (a, b) = match ty {
                    Ty::F32 => (self.as_f32(a), self.as_f32(b)),
                    Ty::Int(_) => (a, b),
                };
                let (a, b) = (self.fit(a, &shape), self.fit(b, &shape));
                let out = self.reg(Ty::Int(DType::U8), shape);
                let ins = match ty {
                    Ty::F32 => Ins::CmpF {
                        c: *c,
                        a: self.slot(a),
                        b: self.slot(b),
                        out: self.slot(out),
                    },
                    Ty::Int(_) => Ins::CmpI {
                        c: *c,
                        a: self.slot(a),
                        b: self.slot(b),
                        out: self.slot(out),
                    },
                };
                self.code.push(ins);
                Some(out)
            }
            (Op::Logical(l), &[a, b]) => {
                let shape = broadcast(&[self.shape(a), self.shape(b)]);
                shape.map(|s| {
                    let (a, b) = (self.fit(a, &s), self.fit(b, &s));
                    let out = self.reg(Ty::Int(DType::U8), s);
                    self.code.push(Ins::Logical {
                        op: *l,
                        a: self.src(a),
                        b: self.src(b),
                        out: self.slot(out),
                    });
                    out
                })
            }
            (Op::Select { out }, &[p, t, f]) => self.select(*out, p, t, f),
            (Op::AsType { dtype }, &[a]) => self.cast(a, *dtype),
            (
                Op::Reduce {
                    kind,
                    axes,
                    keep_axes,
                    out,
                },
                &[a],
            ) => self.reduce(*kind, axes.as_deref(), *keep_axes, *out, a),
            _ => None,
        })
    }

    /// A `full` of a small shape: computed by the op table once, kept in its register.
    fn constant(&mut self, op: &Op, shape: &[usize], dtype: DType) -> Result<Option<usize>> {
        let Some(ty) = Ty::of(dtype) else {
            return Ok(None);
        };
        let n = crate::tensor::numel(shape);
        if n == 0 || n > MAX_ELEMENTS {
            return Ok(None);
        }
        let t = crate::op::eval(op, &[], Device::Cpu)?.pop();
        let Some(t) = t else { return Ok(None) };
        let r = self.reg(ty, shape.to_vec());
        load(&t, ty, self.regs, self.src(r))?;
        Ok(Some(r))
    }

    fn unary(&mut self, op: &Op, u: Unary, a: usize) -> Option<usize> {
        let shape = self.shape(a).to_vec();
        if let (Ty::Int(d), Unary::Neg | Unary::Abs) = (self.ty(a), u) {
            let out = self.reg(Ty::Int(d), shape);
            let op = if u == Unary::Neg {
                IntUnary::Neg
            } else {
                IntUnary::Abs
            };
            self.code.push(Ins::IntUnary {
                op,
                a: self.slot(a),
                out: self.slot(out),
                to: d,
            });
            return Some(out);
        }
        // float functions of integers compute on their f32 conversion
        let m = f32_map::map_of(op)?;
        let a = self.as_f32(a);
        let out = self.reg(Ty::F32, shape);
        self.code
            .push(Ins::map(m, self.slot(a), None, self.slot(out)));
        Some(out)
    }

    fn binary(&mut self, f: Arith, out: Option<DType>, a: usize, b: usize) -> Option<usize> {
        let shape = broadcast(&[self.shape(a), self.shape(b)])?;
        match self.result(out, &[a, b])? {
            // the op table divides two integers' f64 values and rounds the quotient once
            // (`op::binary`); in f32 the operands would be rounded first
            Ty::F32
                if f == Arith::Divide
                    && matches!(self.ty(a), Ty::Int(_))
                    && matches!(self.ty(b), Ty::Int(_)) =>
            {
                None
            }
            Ty::F32 => {
                let m = f32_map::map_of(&Op::Binary {
                    op: f,
                    out: Some(DType::F32),
                })?;
                let (a, b) = (self.as_f32(a), self.as_f32(b));
                let (a, b) = (self.fit(a, &shape), self.fit(b, &shape));
                let r = self.reg(Ty::F32, shape);
                self.code
                    .push(Ins::map(m, self.slot(a), Some(self.slot(b)), self.slot(r)));
                Some(r)
            }
            Ty::Int(to) => {
                let op = match f {
                    Arith::Add => IntOp::Add,
                    Arith::Subtract => IntOp::Sub,
                    Arith::Multiply => IntOp::Mul,
                    Arith::Min => IntOp::Min,
                    Arith::Max => IntOp::Max,
                    Arith::BitwiseAnd => IntOp::And,
                    Arith::BitwiseOr => IntOp::Or,
                    Arith::BitwiseXor => IntOp::Xor,
                    _ => return None,
                };
                let (a, b) = (self.as_int(a, to)?, self.as_int(b, to)?);
                let (a, b) = (self.fit(a, &shape), self.fit(b, &shape));
                let r = self.reg(Ty::Int(to), shape);
                self.code.push(Ins::Int {
                    op,
                    a: self.slot(a),
                    b: self.slot(b),
                    out: self.slot(r),
                    to,
                });
                Some(r)
            }
        }
    }

    fn select(&mut self, out: Option<DType>, p: usize, t: usize, f: usize) -> Option<usize> {
        let shape = broadcast(&[self.shape(p), self.shape(t), self.shape(f)])?;
        let p = self.fit(p, &shape);
        Some(match self.result(out, &[t, f])? {
            Ty::F32 => {
                let (t, f) = (self.as_f32(t), self.as_f32(f));
                let (t, f) = (self.fit(t, &shape), self.fit(f, &shape));
                let r = self.reg(Ty::F32, shape);
                self.code.push(Ins::Select {
                    p: self.src(p),
                    t: self.slot(t),
                    f: self.slot(f),
                    out: self.slot(r),
                });
                r
            }
            Ty::Int(to) => {
                let (t, f) = (self.as_int(t, to)?, self.as_int(f, to)?);
                let (t, f) = (self.fit(t, &shape), self.fit(f, &shape));
                let r = self.reg(Ty::Int(to), shape);
                self.code.push(Ins::SelectI {
                    p: self.src(p),
                    t: self.slot(t),
                    f: self.slot(f),
                    out: self.slot(r),
                });
                r
            }
        })
    }

    fn cast(&mut self, a: usize, to: DType) -> Option<usize> {
        let to = Ty::of(to)?;
        match (self.ty(a), to) {
            (Ty::F32, Ty::F32) => {
                let r = self.reg(Ty::F32, self.shape(a).to_vec());
                self.code.push(Ins::Copy {
                    a: self.src(a),
                    out: self.src(r),
                });
                Some(r)
            }
            (Ty::Int(_), Ty::F32) => {
                let r = self.reg(Ty::F32, self.shape(a).to_vec());
                self.code.push(Ins::ToF32 {
                    a: self.slot(a),
                    out: self.slot(r),
                });
                Some(r)
            }
            (Ty::Int(_), Ty::Int(d)) => {
                let r = self.reg(Ty::Int(d), self.shape(a).to_vec());
                self.code.push(Ins::IntUnary {
                    op: IntUnary::Cast,
                    a: self.slot(a),
                    out: self.slot(r),
                    to: d,
                });
                Some(r)
            }
            // float to integer conversions (Nx's modular rules) stay with the op table
            (Ty::F32, Ty::Int(_)) => None,
        }
    }

    fn reduce(
        &mut self,
        kind: ReduceKind,
        axes: Option<&[usize]>,
        keep_axes: bool,
        out: Option<DType>,
        a: usize,
    ) -> Option<usize> {
        let rank = self.shape(a).len();
        // whole-tensor reductions only
        if let Some(axes) = axes {
            let mut sorted = axes.to_vec();
            sorted.sort_unstable();
            if sorted != (0..rank).collect::<Vec<_>>() {
                return None;
            }
        }
        let shape = if keep_axes { vec![1; rank] } else { vec![] };
        let ty = self.ty(a);
        match (kind, ty) {
            (ReduceKind::All | ReduceKind::Any, _) => {
                let r = self.reg(Ty::Int(DType::U8), shape);
                let any = kind == ReduceKind::Any;
                self.code.push(Ins::Truth {
                    any,
                    a: self.src(a),
                    out: self.slot(r),
                });
                Some(r)
            }
            (ReduceKind::Sum, Ty::F32) if matches!(out, None | Some(DType::F32)) => {
                let r = self.reg(Ty::F32, shape);
                self.code.push(Ins::SumF {
                    a: self.slot(a),
                    out: self.slot(r),
                });
                Some(r)
            }
            (_, Ty::Int(d)) => {
                let (op, to) = match kind {
                    ReduceKind::Sum => (IntReduce::Sum, out?),
                    ReduceKind::Product => (IntReduce::Product, out?),
                    ReduceKind::Max => (IntReduce::Max, out.unwrap_or(d)),
                    ReduceKind::Min => (IntReduce::Min, out.unwrap_or(d)),
                    _ => return None,
                };
                let Ty::Int(to) = Ty::of(to)? else {
                    return None;
                };
                // a sum or product computes in its result type
                let a = self.as_int(a, to)?;
                let r = self.reg(Ty::Int(to), shape);
                self.code.push(Ins::ReduceI {
                    op,
                    a: self.slot(a),
                    out: self.slot(r),
                    to,
                });
                Some(r)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Map;

    /// Instructions reading only invariant values run once before the loop; those reading the
    /// state, or a result that does, stay in it, in order.
    #[test]
    fn invariant_instructions_move_before_the_loop() {
        let mut regs = Regs::default();
        let mut f = || match regs.alloc(true, 4) {
            Src::F(s) => s,
            Src::I(_) => unreachable!(),
        };
        let (state, inv, a, b, c, d) = (f(), f(), f(), f(), f(), f());
        let map = |x: Slot, y: Slot, out: Slot| Ins::Map {
            m: Map::Add,
            a: x,
            b: Some(y),
            out,
        };
        let cond = vec![map(inv, inv, a)];
        let body = vec![map(a, state, b), map(a, inv, c), map(b, c, d)];
        let (before, [cond, body]) = hoist([Src::F(state)].into_iter(), [cond, body]);
        let outs = |code: &[Ins]| code.iter().map(Ins::out).collect::<Vec<_>>();
        assert_eq!(outs(&before), [Src::F(a), Src::F(c)]);
        assert!(cond.is_empty());
        assert_eq!(outs(&body), [Src::F(b), Src::F(d)]);
    }
}
