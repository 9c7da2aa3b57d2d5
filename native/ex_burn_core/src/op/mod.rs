//! THE op table: every tensor operation ExBurn knows, with Nx's semantics.
//!
//! The Nx backend (eager), the Defn compiler (programs) and `ExBurn.BurnBridge` all send
//! values of [`Op`] (declared in `table.rs`, grouped by family); [`eval`] runs one. An eager op
//! is a one-step program: the program interpreter calls the same [`eval`]. Each family is
//! evaluated in a file of its own. Nothing here depends on `crate::program`.

pub(crate) mod binary;
mod conv;
mod conv_host;
pub(crate) mod creation;
mod dot;
pub(crate) mod exact32;
pub(crate) mod f32_blocks;
pub(crate) mod f32_map;
mod facts;
pub(crate) mod host_gemm;
mod host_map;
mod hostmath;
mod index;
mod linalg;
mod narrow;
mod nn;
pub mod plan;
mod reduce;
pub(crate) mod scatter;
pub(crate) mod shape;
mod sort;
pub(crate) mod strided_copy;
pub(crate) mod sum32;
mod table;
mod unary;
mod wide;
mod window;
mod window_scatter32;

pub(crate) mod util;
pub(crate) mod view;

use crate::{Device, Error, Result, Tensor};

pub use facts::{facts, Facts};
pub use table::*;

pub use wide::EXACT_F32_WORK;

/// Runs one op on `inputs`. Creation ops place their result on `device`; the others run on
/// the device of their inputs (which must all be on one device).
pub fn eval(op: &Op, inputs: &[Tensor], device: Device) -> Result<Vec<Tensor>> {
    check_inputs(&op.name(), op.arity(), inputs)?;
    let on = inputs.first().map_or(device, Tensor::device);
    // the op's planned peak is held in the memory ledger until the op has run
    let _held = match plan::plan(op, inputs).and_then(|p| p.reserve(on)) {
        Ok(held) => held,
        Err(e) => return Err(e.in_op(&op.name())),
    };
    eval_unchecked(op, inputs, device)
        .map(|t| vec![t])
        .map_err(|e| e.in_op(&op.name()))
}

/// Checks the number of inputs (`arity`, `None` = at least one) and that they share a device.
pub(crate) fn check_inputs(name: &str, arity: Option<usize>, inputs: &[Tensor]) -> Result<()> {
    if let Some(n) = arity {
        if inputs.len() != n {
            return Err(Error::Argument(format!(
                "{name}: expected {n} input(s), got {}",
                inputs.len()
            )));
        }
    } else if inputs.is_empty() {
        return Err(Error::Argument(format!(
            "{name}: expected at least one input"
        )));
    }
    if let Some((first, rest)) = inputs.split_first() {
        let d = first.dispatch_device();
        if let Some(other) = rest.iter().find(|t| t.dispatch_device() != d) {
            return Err(Error::Device(format!(
                "{name}: inputs live on different devices ({} and {}); transfer them first",
                first.device(),
                other.device()
            )));
        }
    }
    Ok(())
}

fn eval_unchecked(op: &Op, x: &[Tensor], device: Device) -> Result<Tensor> {
    use Op::*;
    match op {
        Iota { .. } | Eye { .. } | Full { .. } | RandomUniform { .. } | RandomNormal { .. } => {
            creation::eval(op, device)
        }
        Unary(k) => unary::eval(*k, &x[0]),
        Binary { .. } | Compare(_) | Logical(_) => binary::eval(op, &x[0], &x[1]),
        AsType { dtype } => x[0].cast(*dtype),
        Bitcast { dtype } => unary::bitcast(&x[0], *dtype),
        Narrow { to } => narrow::narrow(&x[0], *to),
        Select { out } => binary::select(&x[0], &x[1], &x[2], *out),
        Clip => binary::clip(&x[0], &x[1], &x[2]),
        Reduce { .. } | Arg { .. } => reduce::eval(op, &x[0]),
        Dot {
            contract_a,
            batch_a,
            contract_b,
            batch_b,
            out,
            precision,
        } => {
            let spec = dot::Contraction {
                contract_a,
                batch_a,
                contract_b,
                batch_b,
            };
            dot::dot(&x[0], &x[1], &spec, *out, *precision)
        }
        Transpose { .. }
        | Reshape { .. }
        | Squeeze { .. }
        | Broadcast { .. }
        | Slice { .. }
        | PutSlice { .. }
        | Concatenate { .. }
        | Stack { .. }
        | Pad { .. }
        | Reverse { .. } => shape::eval(op, x),
        Gather { .. }
        | Take { .. }
        | TakeAlongAxis { .. }
        | IndexedAdd { .. }
        | IndexedPut { .. } => index::eval(op, x),
        Sort { .. } | Argsort { .. } | Cumulative { .. } => sort::eval(op, &x[0]),
        Conv { .. } => conv::eval(op, &x[0], &x[1]),
        Softmax { axis } => nn::softmax(&x[0], *axis, false),
        LogSoftmax { axis } => nn::softmax(&x[0], *axis, true),
        Window { kind, geometry } => window::eval(*kind, geometry, &x[0]),
        WindowScatter { .. } => scatter::eval(op, x),
        TriangularSolve {
            lower,
            left_side,
            transform_a,
        } => linalg::triangular_solve(&x[0], &x[1], *lower, *left_side, *transform_a),
    }
}
