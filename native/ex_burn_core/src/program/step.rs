//! The steps of a program: a tensor op of the op table, or what only programs have, whose
//! attributes hold sub-programs: control flow (`while`, `cond`), hooks, and folds of a
//! function (`reduce`, `window_reduce`). On the wire a step is sent like an op (its Nx name
//! and attributes); an eager call of any of them is a one-step program.

use super::{reduce_fn, Program};
use crate::op::{self, plan, Op};
use crate::wire::{self, FromWire, Replay};
use crate::{DType, Device, Error, Result, Tensor};
use serde::de::{self, VariantAccess};
use serde::Deserialize;
use std::sync::OnceLock;

/// One step of a program.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(remote = "Self", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// A tensor op.
    #[serde(skip)]
    Op(Op),
    /// `[state..., invariants...]`: runs `body` (state and invariants in, new state out) while
    /// `cond` (same inputs, one scalar out) is non-zero; results are the final state.
    While {
        /// The condition.
        cond: Program,
        /// The loop body.
        body: Program,
        /// How many of the inputs are loop state (the rest are invariants).
        state: usize,
    },
    /// `[preds..., args...]`: runs the branch of the first non-zero predicate, or the last
    /// branch when none is; every branch takes `args` and returns the same number of results.
    /// There is one predicate per branch but the last.
    Cond {
        /// The branches.
        branches: Vec<Program>,
    },
    /// `[values...]`: hands the values to hook `id` of the running program, in execution
    /// order, also inside `while` bodies and `cond` branches (see
    /// [`Program::run_hooked`]); no results.
    Hook {
        /// The hook's id.
        id: u64,
        /// How many values it takes.
        inputs: usize,
    },
    /// `[x, acc]`: folds `body` (element, acc -> acc) over `axes` (all by default),
    /// element-wise over the kept axes.
    Reduce {
        /// Axes folded (all when absent).
        #[serde(default)]
        axes: Option<Vec<usize>>,
        /// Whether folded axes stay with length 1.
        #[serde(default)]
        keep_axes: bool,
        /// The function.
        body: Program,
    },
    /// `[x, acc]`: folds `body` over each window (x is padded with acc).
    WindowReduce {
        /// Window extent per axis.
        window_dims: Vec<usize>,
        /// Step between windows.
        #[serde(default)]
        strides: Option<Vec<usize>>,
        /// (low, high) padding per axis.
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
        /// Spacing of a window's elements.
        #[serde(default)]
        window_dilations: Option<Vec<usize>>,
        /// The function.
        body: Program,
    },
}

/// The wire names of the steps that are not tensor ops.
fn own_names() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| wire::variant_names(|p| Step::deserialize(p)))
}

impl FromWire for Step {
    fn from_wire<'de, V: VariantAccess<'de>>(name: &str, v: V) -> Result<Step, V::Error> {
        if own_names().iter().any(|n| n == name) {
            Step::deserialize(Replay { name, variant: v })
        } else {
            Op::from_wire(name, v).map(Step::Op)
        }
    }
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Step, D::Error> {
        wire::deserialize(d, "Step")
    }
}

impl From<Op> for Step {
    fn from(op: Op) -> Step {
        Step::Op(op)
    }
}

/// The wire names of the program-only steps (`while`, `cond`, `hook`, `reduce`,
/// `window_reduce`).
pub fn names() -> Vec<String> {
    own_names().to_vec()
}

impl Step {
    /// The tensor op, when the step is one.
    pub fn as_op(&self) -> Option<&Op> {
        match self {
            Step::Op(op) => Some(op),
            _ => None,
        }
    }

    /// The step's wire name (used in error messages).
    pub fn name(&self) -> String {
        match self {
            Step::Op(op) => op.name(),
            other => wire::debug_name(other),
        }
    }

    /// Number of inputs the step takes (`None` = variable).
    pub fn arity(&self) -> Option<usize> {
        Some(match self {
            Step::Op(op) => return op.arity(),
            Step::While { cond, .. } => cond.inputs,
            Step::Cond { branches } => match branches.first() {
                Some(first) => branches.len() - 1 + first.inputs,
                None => 0,
            },
            Step::Hook { inputs, .. } => *inputs,
            Step::Reduce { .. } | Step::WindowReduce { .. } => 2,
        })
    }

    /// Number of results (control flow produces several, hooks none).
    pub fn results(&self) -> usize {
        match self {
            Step::While { state, .. } => *state,
            Step::Cond { branches } => branches.first().map_or(0, |b| b.outputs.len()),
            Step::Hook { .. } => 0,
            _ => 1,
        }
    }

    /// The size and work of the step on `inputs` (see [`plan::plan`]).
    pub fn plan(&self, inputs: &[Tensor]) -> Result<plan::Plan> {
        match self {
            Step::Op(op) => plan::plan(op, inputs),
            Step::WindowReduce { padding, .. } => {
                plan::sub_program(inputs, Some(padding.as_deref().unwrap_or(&[])))
            }
            _ => plan::sub_program(inputs, None),
        }
    }
}

/// Runs one step on `inputs`. Creation ops place their result on `device`; the others run on
/// the device of their inputs (which must all be on one device).
pub fn eval(step: &Step, inputs: &[Tensor], device: Device) -> Result<Vec<Tensor>> {
    if let Step::Op(op) = step {
        return op::eval(op, inputs, device);
    }
    let name = step.name();
    op::check_inputs(&name, step.arity(), inputs)?;
    let on = inputs.first().map_or(device, Tensor::device);
    let _held = step
        .plan(inputs)
        .and_then(|p| p.reserve(on))
        .map_err(|e| e.in_op(&name))?;
    run(step, inputs, device).map_err(|e| e.in_op(&name))
}

fn run(step: &Step, inputs: &[Tensor], device: Device) -> Result<Vec<Tensor>> {
    match step {
        Step::Op(op) => op::eval(op, inputs, device),
        Step::While { cond, body, state } => {
            // loops over small tensors run whole on the host, without per-op dispatch
            if let (Some(c), Some(b)) = (small_code(cond), small_code(body)) {
                if let Some(out) = super::small::run(&c, &b, *state, inputs, device)? {
                    return Ok(out);
                }
            }
            let (mut st, inv) = (inputs[..*state].to_vec(), &inputs[*state..]);
            loop {
                crate::cancel::check()?;
                // the state is handed to the body (not also kept here): a state tensor nothing
                // else holds may then be updated in place (`put_slice` into a cache)
                let mut args: Vec<Tensor> = std::mem::take(&mut st);
                args.extend(inv.iter().cloned());
                if !truthy(&cond.run(args.clone(), device)?[0])? {
                    args.truncate(*state);
                    return Ok(args);
                }
                st = body.run(args, device)?;
            }
        }
        Step::Cond { branches } => {
            let k = branches.len() - 1;
            let args = inputs[k..].to_vec();
            for (pred, branch) in inputs[..k].iter().zip(branches) {
                if truthy(pred)? {
                    return branch.run(args, device);
                }
            }
            branches[k].run(args, device)
        }
        Step::Hook { id, .. } => super::hook(*id, inputs),
        Step::Reduce {
            axes,
            keep_axes,
            body,
        } => reduce_fn::reduce(&inputs[0], &inputs[1], axes, *keep_axes, body, device)
            .map(|t| vec![t]),
        Step::WindowReduce {
            window_dims,
            strides,
            padding,
            window_dilations,
            body,
        } => {
            let r = inputs[0].rank();
            let win = reduce_fn::Window {
                dims: window_dims,
                strides: strides.clone().unwrap_or_else(|| vec![1; r]),
                padding: padding.clone().unwrap_or_else(|| vec![(0, 0); r]),
                dilations: window_dilations.clone().unwrap_or_else(|| vec![1; r]),
            };
            reduce_fn::window_reduce(&inputs[0], &inputs[1], &win, body, device).map(|t| vec![t])
        }
    }
}

/// `p` as the small-loop interpreter reads it, when it is tensor ops only.
pub(super) fn small_code(p: &Program) -> Option<super::small::Code<'_>> {
    if p.consts != 0 {
        return None;
    }
    let instrs = p
        .instrs
        .iter()
        .map(|i| i.op.as_op().map(|op| (op, i.args.as_slice())))
        .collect::<Option<Vec<_>>>()?;
    Some(super::small::Code {
        inputs: p.inputs,
        instrs,
        outputs: &p.outputs,
    })
}

/// Whether a scalar predicate is non-zero (NaN counts as non-zero, as in Nx).
fn truthy(pred: &Tensor) -> Result<bool> {
    if pred.numel() != 1 {
        return Err(Error::Shape(format!(
            "a predicate must be a scalar, got shape {:?}",
            pred.shape()
        )));
    }
    let bytes = pred.to_bool().cast(DType::U8)?.to_bytes(None)?;
    Ok(bytes.first().copied().unwrap_or(0) != 0)
}
