//! `while` loops over small tensors, run whole by an interpreter on the host (and small
//! straight-line programs, run once by it: [`once`]).
//!
//! A loop whose state is a few small tensors (counters, a point, a 16-element vector) and
//! whose condition and body are element-wise arithmetic, comparisons, selects and full sums
//! spends almost all of its time in per-op dispatch when each iteration runs its body as a
//! program of tensor ops: allocating results, Burn's dispatch, the memory ledger, freeing.
//! Here such a loop is compiled once per run into code over preallocated host buffers (one
//! per value, shapes and types known from the loop's inputs); each iteration then runs that
//! code with no allocation. Element functions are the op table's own (the f32 maps of
//! `fuse::map32`, its f64-accumulated f32 sum, Nx's wrapping integer arithmetic, casts as
//! `Tensor::cast` does them), so results are bit-identical to running the body op by op
//! (`tests/engine/small_loops.rs` compares them). Loops with anything else (other ops or
//! types, hooks, nested control flow, tensors over [`MAX_ELEMENTS`]) run as before.

mod code;
mod compile;

pub use compile::Once;
mod native;

use crate::op::Op;
use crate::{Device, Result, Tensor};

/// A program as the interpreter reads it: tensor ops only, on values numbered as in a
/// program (`0..inputs` the inputs, then one value per instruction).
pub struct Code<'a> {
    /// Number of inputs.
    pub inputs: usize,
    /// The instructions: each op and the values it reads.
    pub instrs: Vec<(&'a Op, &'a [usize])>,
    /// The values returned.
    pub outputs: &'a [usize],
}

/// Values of at most this many elements are small enough for the interpreter.
pub const MAX_ELEMENTS: usize = 4096;

/// Elements of all the slots of a loop, at most (16 MiB of f32 or 32 MiB of integers).
pub const MAX_SLOTS: usize = 1 << 22;

/// Iterations between checks that the caller still waits (`cancel::check`).
const CHECK_EVERY: u64 = 256;

/// Iterations interpreted before the loop's runs of simple maps are compiled to machine code
/// (`native`): compiling costs a few microseconds (mapping memory), which a loop of fewer
/// iterations would not win back.
const NATIVE_AFTER: u64 = 64;

/// Runs the `while` loop of condition `cond` and body `body` on `inputs` (its `state` values,
/// then its invariants) with the interpreter when the loop qualifies: `Ok(None)` when it does
/// not (the caller runs it op by op).
pub fn run(
    cond: &Code,
    body: &Code,
    state: usize,
    inputs: &[Tensor],
    device: Device,
) -> Result<Option<Vec<Tensor>>> {
    if !device.is_host() || inputs.iter().any(|t| !t.device().is_host()) {
        return Ok(None);
    }
    let Some(mut m) = compile::Machine::new(cond, body, state, inputs)? else {
        return Ok(None);
    };
    let mut n = 0u64;
    while m.test() {
        if n.is_multiple_of(CHECK_EVERY) {
            crate::cancel::check()?;
        }
        if n == NATIVE_AFTER {
            m.compile_native();
        }
        m.step();
        n += 1;
    }
    m.state().map(Some)
}

/// Runs the straight-line program `p` (tensor ops only) once on `inputs` with the
/// interpreter when it qualifies (host tensors of at most [`MAX_ELEMENTS`] elements, ops and
/// types the interpreter has, no `u8` result): the same values as running it op by op
/// without allocating a tensor per op; `Ok(None)` when it does not qualify. `kept` holds the
/// code compiled by an earlier call, reused when the inputs have the same types and shapes.
pub fn once(
    p: &Code,
    inputs: &[Tensor],
    device: Device,
    kept: &mut Option<compile::Once>,
) -> Result<Option<Vec<Tensor>>> {
    if !device.is_host() || inputs.iter().any(|t| !t.device().is_host()) {
        return Ok(None);
    }
    if !kept.as_ref().is_some_and(|k| k.fits(inputs)) {
        *kept = compile::Once::new(p, inputs)?;
    }
    match kept {
        Some(k) => k.run(inputs).map(Some),
        None => Ok(None),
    }
}

/// How many loops this thread has run with the interpreter (lets tests tell it ran).
pub fn loops_run() -> u64 {
    compile::LOOPS.with(|c| c.get())
}
