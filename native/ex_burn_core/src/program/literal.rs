//! Scalar literals of a program: the values of `full` instructions of rank 0 (Nx's constants:
//! `x + 1.0e-5`, `sum / 512`, `x ** 2`), known when the program is built.
//!
//! Run op by op, each literal was one kernel launch per run (a fill), and the arithmetic that
//! read it often one more (a cast to the other operand's type) before a broadcasting kernel.
//! On a GPU every launch costs about as much as a small kernel's work (for Burn and PyTorch
//! alike), and a GPT-2 layer's forward and backward passes have ~50 of them.
//! Here a literal is made once per device and kept with the program, and `add`, `subtract`,
//! `multiply` and `divide` of a float tensor by a literal run as Burn's scalar kernels with the
//! value converted on the host exactly as the device would convert it.

use super::Instr;
use crate::op::{binary, Op};
use crate::scalar::Scalar;
use crate::{DType, Device, Error, Result, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

thread_local! {
    /// Arithmetic steps this thread ran with a literal operand (see [`literal_steps`]).
    static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many arithmetic steps of programs run on this thread took a literal operand as a
/// scalar (lets tests tell that path from op-by-op evaluation).
pub fn literal_steps() -> u64 {
    STEPS.with(|c| c.get())
}

/// A literal: its value and type.
pub(super) type Literal = (Scalar, DType);

/// For each value number, the literal that defines it (`None`: not a literal). `first` is the
/// value number of the first instruction's first result.
pub(super) fn plan(instrs: &[Instr], first: usize) -> Vec<Option<Literal>> {
    let mut out = vec![None; first];
    for ins in instrs {
        let lit = match ins.op.as_op() {
            Some(Op::Full {
                shape,
                dtype,
                value,
            }) if shape.is_empty() => Some((*value, *dtype)),
            _ => None,
        };
        let (start, n) = (out.len(), ins.op.results());
        out.resize(start + n, None);
        if n == 1 {
            out[start] = lit;
        }
    }
    out
}

/// Largest value (in elements) kept across runs besides literals: a causal mask or an index
/// table of a few megabytes, not a broadcast of it to a whole batch.
const KEEP_MAX: usize = 1 << 22;

/// For each instruction, whether its value depends on no input of the program: literals, other
/// creation ops (`iota`, `eye`, `full`; not the random ones) and deterministic single-result
/// ops of such values or of the program's constants (a causal mask built from two `iota`s).
/// Such values are made once per device and kept (see [`Made::get_with`]).
pub(super) fn input_free(instrs: &[Instr], inputs: usize, consts: usize) -> Vec<bool> {
    let mut free = vec![false; inputs];
    free.resize(inputs + consts, true);
    let mut out = Vec::with_capacity(instrs.len());
    for ins in instrs {
        let n = ins.op.results();
        let ok = n == 1
            && ins
                .args
                .iter()
                .all(|&a| free.get(a).copied().unwrap_or(false))
            && ins.op.as_op().is_some_and(|op| {
                !matches!(op, Op::RandomUniform { .. } | Op::RandomNormal { .. })
            });
        out.push(ok);
        free.extend(std::iter::repeat_n(ok, n));
    }
    out
}

/// Values made on a device, by instruction, kept across runs: literals and other input-free
/// values (see [`input_free`]). A program's clones share them; tensors are immutable, and a
/// kept one is never the only reference that would let an op overwrite it in place.
#[derive(Debug, Clone, Default)]
pub(super) struct Made(Arc<Mutex<HashMap<(usize, Device), Tensor>>>);

impl PartialEq for Made {
    /// Kept literals are a cache: they never make two programs differ.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Made {
    /// The literal of instruction `i` (`op`, a rank-0 `full`) on `device`: made on first use.
    pub(super) fn get(&self, i: usize, op: &Op, device: Device) -> Result<Tensor> {
        let mut made = self
            .0
            .lock()
            .map_err(|_| Error::Execution("a program's literal cache is poisoned".into()))?;
        if let Some(t) = made.get(&(i, device)) {
            return Ok(t.clone());
        }
        let t = crate::op::eval(op, &[], device)?
            .pop()
            .ok_or_else(|| Error::Execution("full gave no result".into()))?;
        made.insert((i, device), t.clone());
        Ok(t)
    }

    /// The value of input-free instruction `i` on `device`: the kept one, else `make`'s, kept
    /// when at most [`KEEP_MAX`] elements (larger ones are made again on each run).
    pub(super) fn get_with(
        &self,
        i: usize,
        device: Device,
        make: impl FnOnce() -> Result<Tensor>,
    ) -> Result<Tensor> {
        let lock = || {
            self.0
                .lock()
                .map_err(|_| Error::Execution("a program's kept values are poisoned".into()))
        };
        if let Some(t) = lock()?.get(&(i, device)) {
            return Ok(t.clone());
        }
        let t = make()?;
        if t.numel() <= KEEP_MAX {
            lock()?.insert((i, device), t.clone());
        }
        Ok(t)
    }
}

/// `op` on `args` when it is float arithmetic with one literal operand (see the module
/// documentation); `None` otherwise.
pub(super) fn arithmetic(
    op: &Op,
    args: &[usize],
    tensors: &[Tensor],
    literals: &[Option<Literal>],
) -> Result<Option<Tensor>> {
    let Op::Binary { op: f, out } = op else {
        return Ok(None);
    };
    let (&[a, b], [ta, tb]) = (args, tensors) else {
        return Ok(None);
    };
    let lit = |v: usize| literals.get(v).copied().flatten();
    let done = match (lit(a), lit(b)) {
        (None, Some(l)) => binary::with_literal(*f, *out, ta, l, false)?,
        (Some(l), None) => binary::with_literal(*f, *out, tb, l, true)?,
        _ => None,
    };
    if done.is_some() {
        STEPS.with(|c| c.set(c.get() + 1));
    }
    Ok(done)
}
