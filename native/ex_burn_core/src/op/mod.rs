//! THE op table: every tensor operation ExBurn knows, with Nx's semantics.
//!
//! The Nx backend (eager), the Defn compiler (programs) and `ExBurn.BurnBridge` all send
//! values of [`Op`]; [`eval`] runs one. An eager op is a one-instruction program: the program
//! interpreter calls the same [`eval`]. Ops are grouped by family, one file each.

pub(crate) mod binary;
mod conv;
pub(crate) mod creation;
mod dot;
pub(crate) mod exact32;
mod fold;
mod hostmath;
mod index;
mod linalg;
mod nn;
pub mod plan;
mod reduce;
mod scatter;
pub(crate) mod shape;
mod sort;
mod unary;
mod window;

pub(crate) mod util;

use crate::program::Program;
use crate::{DType, Device, Error, Result, Scalar, Tensor};
use serde::Deserialize;

pub use linalg::Transform;

/// How `argmax`/`argmin` break ties.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TieBreak {
    /// The first (lowest) index wins (Nx's default).
    #[default]
    Low,
    /// The last (highest) index wins.
    High,
}

/// Precision of float32 matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// The backend's fastest f32 path (TF32 tensor cores on recent NVIDIA GPUs).
    #[default]
    Default,
    /// Full f32 accuracy: on GPUs, four TF32 products of operands split exactly at bf16
    /// precision (about 4x the cost); identical to `Default` on the CPU.
    Highest,
}

/// One operation and its attributes. Inputs are passed separately, in the order documented on
/// each variant. `out` attributes, where present, give the result type Nx computed; when absent
/// the op infers it with Nx's promotion rules.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
#[allow(missing_docs)]
pub enum Op {
    // ---- creation (no inputs) ----
    /// Counts along `axis` (or over the flattened tensor when `axis` is absent).
    Iota {
        shape: Vec<usize>,
        dtype: DType,
        axis: Option<usize>,
    },
    /// Ones where the last two indices are equal.
    Eye {
        shape: Vec<usize>,
        dtype: DType,
    },
    /// Every element set to `value`.
    Full {
        shape: Vec<usize>,
        dtype: DType,
        value: Scalar,
    },
    /// Uniform samples in `[min, max)` from a deterministic generator seeded by `seed`.
    RandomUniform {
        shape: Vec<usize>,
        dtype: DType,
        #[serde(default)]
        min: f64,
        #[serde(default = "one")]
        max: f64,
        #[serde(default)]
        seed: u64,
    },
    /// Normal samples with `mean` and `std` from a deterministic generator seeded by `seed`.
    RandomNormal {
        shape: Vec<usize>,
        dtype: DType,
        #[serde(default)]
        mean: f64,
        #[serde(default = "one")]
        std: f64,
        #[serde(default)]
        seed: u64,
    },

    // ---- unary: [x] ----
    Neg,
    Abs,
    Sign,
    Exp,
    Expm1,
    Log,
    Log1p,
    Sqrt,
    Rsqrt,
    Cbrt,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Asinh,
    Acosh,
    Atanh,
    Erf,
    Erfc,
    ErfInv,
    Sigmoid,
    Relu,
    Floor,
    Ceil,
    Round,
    IsNan,
    IsInfinity,
    LogicalNot,
    BitwiseNot,
    PopulationCount,
    CountLeadingZeros,

    // ---- binary with broadcasting: [a, b] ----
    Add {
        #[serde(default)]
        out: Option<DType>,
    },
    Subtract {
        #[serde(default)]
        out: Option<DType>,
    },
    Multiply {
        #[serde(default)]
        out: Option<DType>,
    },
    Divide {
        #[serde(default)]
        out: Option<DType>,
    },
    Quotient {
        #[serde(default)]
        out: Option<DType>,
    },
    Remainder {
        #[serde(default)]
        out: Option<DType>,
    },
    Pow {
        #[serde(default)]
        out: Option<DType>,
    },
    Atan2 {
        #[serde(default)]
        out: Option<DType>,
    },
    Min {
        #[serde(default)]
        out: Option<DType>,
    },
    Max {
        #[serde(default)]
        out: Option<DType>,
    },
    BitwiseAnd {
        #[serde(default)]
        out: Option<DType>,
    },
    BitwiseOr {
        #[serde(default)]
        out: Option<DType>,
    },
    BitwiseXor {
        #[serde(default)]
        out: Option<DType>,
    },
    LeftShift {
        #[serde(default)]
        out: Option<DType>,
    },
    RightShift {
        #[serde(default)]
        out: Option<DType>,
    },
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    LogicalAnd,
    LogicalOr,
    LogicalXor,

    // ---- types ----
    /// [x] converted with Nx's rules.
    AsType {
        dtype: DType,
    },
    /// [x] reinterpreted bit for bit (same element size).
    Bitcast {
        dtype: DType,
    },
    /// [pred, on_true, on_false], broadcast together.
    Select {
        #[serde(default)]
        out: Option<DType>,
    },
    /// [x, min, max].
    Clip,

    // ---- reductions: [x] ----
    Sum {
        #[serde(default)]
        axes: Option<Vec<usize>>,
        #[serde(default)]
        keep_axes: bool,
        #[serde(default)]
        out: Option<DType>,
    },
    Product {
        #[serde(default)]
        axes: Option<Vec<usize>>,
        #[serde(default)]
        keep_axes: bool,
        #[serde(default)]
        out: Option<DType>,
    },
    ReduceMax {
        #[serde(default)]
        axes: Option<Vec<usize>>,
        #[serde(default)]
        keep_axes: bool,
    },
    ReduceMin {
        #[serde(default)]
        axes: Option<Vec<usize>>,
        #[serde(default)]
        keep_axes: bool,
    },
    All {
        #[serde(default)]
        axes: Option<Vec<usize>>,
        #[serde(default)]
        keep_axes: bool,
    },
    Any {
        #[serde(default)]
        axes: Option<Vec<usize>>,
        #[serde(default)]
        keep_axes: bool,
    },
    Argmax {
        #[serde(default)]
        axis: Option<usize>,
        #[serde(default)]
        keep_axis: bool,
        #[serde(default)]
        tie_break: TieBreak,
        #[serde(default)]
        out: Option<DType>,
    },
    Argmin {
        #[serde(default)]
        axis: Option<usize>,
        #[serde(default)]
        keep_axis: bool,
        #[serde(default)]
        tie_break: TieBreak,
        #[serde(default)]
        out: Option<DType>,
    },

    // ---- linear algebra ----
    /// [a, b]: general contraction; result axes are batch, free of a, free of b.
    Dot {
        #[serde(default)]
        contract_a: Vec<usize>,
        #[serde(default)]
        batch_a: Vec<usize>,
        #[serde(default)]
        contract_b: Vec<usize>,
        #[serde(default)]
        batch_b: Vec<usize>,
        #[serde(default)]
        out: Option<DType>,
        #[serde(default)]
        precision: Precision,
    },

    // ---- shape: [x] unless noted ----
    Transpose {
        #[serde(default)]
        axes: Option<Vec<usize>>,
    },
    Reshape {
        shape: Vec<usize>,
    },
    Squeeze {
        #[serde(default)]
        axes: Option<Vec<usize>>,
    },
    /// `axes[i]` is the result axis that input axis `i` maps to.
    Broadcast {
        shape: Vec<usize>,
        #[serde(default)]
        axes: Option<Vec<usize>>,
    },
    /// [x, dynamic starts...]: starts of the axes listed in `dynamic` come from scalar inputs
    /// and are clamped so the slice fits, as in Nx.
    Slice {
        starts: Vec<i64>,
        lengths: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        dynamic: Vec<usize>,
    },
    /// [x, update, dynamic starts...].
    PutSlice {
        starts: Vec<i64>,
        #[serde(default)]
        dynamic: Vec<usize>,
    },
    /// [x...].
    Concatenate {
        axis: usize,
    },
    /// [x...].
    Stack {
        axis: usize,
    },
    /// [x, pad_value]: (low, high, interior) per axis; negative low/high crop.
    Pad {
        config: Vec<(i64, i64, i64)>,
    },
    Reverse {
        #[serde(default)]
        axes: Option<Vec<usize>>,
    },

    // ---- indexing ----
    /// [x, indices]: the last axis of `indices` indexes `axes` of x.
    Gather {
        axes: Vec<usize>,
    },
    /// [x, indices]: picks along `axis`; result is x.shape[..axis] ++ indices.shape ++ x.shape[axis+1..].
    Take {
        axis: usize,
    },
    /// [x, indices] with indices of x's rank.
    TakeAlongAxis {
        axis: usize,
    },
    /// [x, indices, updates].
    IndexedAdd {
        axes: Vec<usize>,
        #[serde(default)]
        out: Option<DType>,
    },
    /// [x, indices, updates].
    IndexedPut {
        axes: Vec<usize>,
        #[serde(default)]
        out: Option<DType>,
    },

    // ---- sorting and scans: [x] ----
    Sort {
        axis: usize,
        #[serde(default)]
        descending: bool,
    },
    Argsort {
        axis: usize,
        #[serde(default)]
        descending: bool,
        #[serde(default)]
        out: Option<DType>,
    },
    CumulativeSum {
        axis: usize,
        #[serde(default)]
        reverse: bool,
    },
    CumulativeProduct {
        axis: usize,
        #[serde(default)]
        reverse: bool,
    },
    CumulativeMax {
        axis: usize,
        #[serde(default)]
        reverse: bool,
    },
    CumulativeMin {
        axis: usize,
        #[serde(default)]
        reverse: bool,
    },

    // ---- neural network ----
    /// [input, kernel] in Nx's layout (batch, features, spatial...).
    Conv {
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
        #[serde(default)]
        input_dilation: Option<Vec<usize>>,
        #[serde(default)]
        kernel_dilation: Option<Vec<usize>>,
        #[serde(default = "one_usize")]
        feature_group_size: usize,
        #[serde(default = "one_usize")]
        batch_group_size: usize,
        #[serde(default)]
        input_permutation: Option<Vec<usize>>,
        #[serde(default)]
        kernel_permutation: Option<Vec<usize>>,
        #[serde(default)]
        output_permutation: Option<Vec<usize>>,
        #[serde(default)]
        out: Option<DType>,
    },
    Softmax {
        axis: usize,
    },
    LogSoftmax {
        axis: usize,
    },

    // ---- windows: [x] ----
    WindowSum {
        window_dims: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
        #[serde(default)]
        window_dilations: Option<Vec<usize>>,
    },
    WindowProduct {
        window_dims: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
        #[serde(default)]
        window_dilations: Option<Vec<usize>>,
    },
    WindowMax {
        window_dims: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
        #[serde(default)]
        window_dilations: Option<Vec<usize>>,
    },
    WindowMin {
        window_dims: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
        #[serde(default)]
        window_dilations: Option<Vec<usize>>,
    },
    /// [x, source, init]: each window of x (padded with init) selects its last largest element
    /// and the source value of that window is added there (the gradient of max pooling).
    WindowScatterMax {
        window_dims: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
    },
    /// [x, source, init]: as `WindowScatterMax`, selecting the last smallest element.
    WindowScatterMin {
        window_dims: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
    },

    // ---- folds with a function: [x, acc]; `body` maps (element, acc) to the new acc ----
    /// Folds `body` over `axes` (all by default), element-wise over the kept axes.
    Reduce {
        #[serde(default)]
        axes: Option<Vec<usize>>,
        #[serde(default)]
        keep_axes: bool,
        body: Program,
    },
    /// Folds `body` over each window (x is padded with acc).
    WindowReduce {
        window_dims: Vec<usize>,
        #[serde(default)]
        strides: Option<Vec<usize>>,
        #[serde(default)]
        padding: Option<Vec<(i64, i64)>>,
        #[serde(default)]
        window_dilations: Option<Vec<usize>>,
        body: Program,
    },

    // ---- linear algebra ----
    /// [a, b]: solves `a x = b` (or `x a = b` when not `left_side`) for triangular `a`.
    TriangularSolve {
        #[serde(default = "yes")]
        lower: bool,
        #[serde(default = "yes")]
        left_side: bool,
        #[serde(default)]
        transform_a: Transform,
    },

    // ---- control flow: sub-programs, one result per state value / branch output ----
    /// [state..., invariants...]: runs `body` (state and invariants in, new state out) while
    /// `cond` (same inputs, one scalar out) is non-zero; results are the final state.
    While {
        cond: Program,
        body: Program,
        state: usize,
    },
    /// [preds..., args...]: runs the branch of the first non-zero predicate, or the last
    /// branch when none is; every branch takes `args` and returns the same number of results.
    /// There is one predicate per branch but the last.
    Cond {
        branches: Vec<Program>,
    },

    // ---- hooks ----
    /// [values...]: hands `inputs` values to hook `id` of the running program, in execution
    /// order, also inside `while` bodies and `cond` branches (see
    /// [`Program::run_hooked`](crate::Program::run_hooked)); no results.
    Hook {
        id: u64,
        inputs: usize,
    },
}

fn one() -> f64 {
    1.0
}

fn one_usize() -> usize {
    1
}

fn yes() -> bool {
    true
}

impl Op {
    /// The op's name in Elixir's snake case (used in error messages).
    pub fn name(&self) -> String {
        let dbg = format!("{self:?}");
        let head = dbg.split([' ', '{', '(']).next().unwrap_or("");
        let mut out = String::new();
        for (i, c) in head.chars().enumerate() {
            if c.is_uppercase() {
                if i > 0 {
                    out.push('_');
                }
                out.extend(c.to_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }

    /// Number of inputs the op takes (`None` = variable).
    pub fn arity(&self) -> Option<usize> {
        use Op::*;
        Some(match self {
            Iota { .. } | Eye { .. } | Full { .. } | RandomUniform { .. } | RandomNormal { .. } => {
                0
            }
            Select { .. }
            | Clip
            | IndexedAdd { .. }
            | IndexedPut { .. }
            | WindowScatterMax { .. }
            | WindowScatterMin { .. } => 3,
            While { cond, .. } => cond.inputs,
            Cond { branches } => match branches.first() {
                Some(first) => branches.len() - 1 + first.inputs,
                None => 0,
            },
            Hook { inputs, .. } => *inputs,
            Slice { dynamic, .. } => 1 + dynamic.len(),
            PutSlice { dynamic, .. } => 2 + dynamic.len(),
            Concatenate { .. } | Stack { .. } => return None,
            op if op.is_binary() => 2,
            Dot { .. }
            | Pad { .. }
            | Gather { .. }
            | Take { .. }
            | TakeAlongAxis { .. }
            | Conv { .. }
            | TriangularSolve { .. }
            | Reduce { .. }
            | WindowReduce { .. } => 2,
            _ => 1,
        })
    }

    /// Number of results the op produces (control flow produces several).
    pub fn results(&self) -> usize {
        match self {
            Op::While { state, .. } => *state,
            Op::Cond { branches } => branches.first().map_or(0, |b| b.outputs.len()),
            Op::Hook { .. } => 0,
            _ => 1,
        }
    }

    /// Unary element-wise maps (one output element from one input element).
    pub(crate) fn is_unary_map(&self) -> bool {
        use Op::*;
        matches!(
            self,
            Neg | Abs
                | Sign
                | Exp
                | Expm1
                | Log
                | Log1p
                | Sqrt
                | Rsqrt
                | Cbrt
                | Sin
                | Cos
                | Tan
                | Asin
                | Acos
                | Atan
                | Sinh
                | Cosh
                | Tanh
                | Asinh
                | Acosh
                | Atanh
                | Erf
                | Erfc
                | ErfInv
                | Sigmoid
                | Relu
                | Floor
                | Ceil
                | Round
                | IsNan
                | IsInfinity
                | LogicalNot
                | BitwiseNot
                | PopulationCount
                | CountLeadingZeros
        )
    }

    /// Binary element-wise ops with broadcasting.
    pub(crate) fn is_binary(&self) -> bool {
        use Op::*;
        matches!(
            self,
            Add { .. }
                | Subtract { .. }
                | Multiply { .. }
                | Divide { .. }
                | Quotient { .. }
                | Remainder { .. }
                | Pow { .. }
                | Atan2 { .. }
                | Min { .. }
                | Max { .. }
                | BitwiseAnd { .. }
                | BitwiseOr { .. }
                | BitwiseXor { .. }
                | LeftShift { .. }
                | RightShift { .. }
                | Equal
                | NotEqual
                | Less
                | LessEqual
                | Greater
                | GreaterEqual
                | LogicalAnd
                | LogicalOr
                | LogicalXor
        )
    }
}

/// Runs one op on `inputs`. Creation ops place their result on `device`; the others run on
/// the device of their inputs (which must all be on one device).
pub fn eval(op: &Op, inputs: &[Tensor], device: Device) -> Result<Vec<Tensor>> {
    check_inputs(op, inputs)?;
    let on = inputs.first().map_or(device, Tensor::device);
    let guarded = plan::plan(op, inputs)
        .and_then(|p| crate::memory::reserve(on, p.bytes, &|| "the result".into()));
    if let Err(e) = guarded {
        return Err(e.in_op(&op.name()));
    }
    let out = match op {
        Op::While { .. } | Op::Cond { .. } => crate::program::control(op, inputs, device),
        Op::Hook { id, .. } => crate::program::hook(*id, inputs),
        _ => eval_unchecked(op, inputs, device).map(|t| vec![t]),
    };
    out.map_err(|e| e.in_op(&op.name()))
}

fn check_inputs(op: &Op, inputs: &[Tensor]) -> Result<()> {
    if let Some(n) = op.arity() {
        if inputs.len() != n {
            return Err(Error::Argument(format!(
                "{}: expected {n} input(s), got {}",
                op.name(),
                inputs.len()
            )));
        }
    } else if inputs.is_empty() {
        return Err(Error::Argument(format!(
            "{}: expected at least one input",
            op.name()
        )));
    }
    if let Some((first, rest)) = inputs.split_first() {
        let d = first.dispatch_device();
        if let Some(other) = rest.iter().find(|t| t.dispatch_device() != d) {
            return Err(Error::Device(format!(
                "{}: inputs live on different devices ({} and {}); transfer them first",
                op.name(),
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
        AsType { dtype } => x[0].cast(*dtype),
        Bitcast { dtype } => unary::bitcast(&x[0], *dtype),
        Select { out } => binary::select(&x[0], &x[1], &x[2], *out),
        Clip => binary::clip(&x[0], &x[1], &x[2]),
        Sum { .. }
        | Product { .. }
        | ReduceMax { .. }
        | ReduceMin { .. }
        | All { .. }
        | Any { .. }
        | Argmax { .. }
        | Argmin { .. } => reduce::eval(op, &x[0]),
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
        Sort { .. }
        | Argsort { .. }
        | CumulativeSum { .. }
        | CumulativeProduct { .. }
        | CumulativeMax { .. }
        | CumulativeMin { .. } => sort::eval(op, &x[0]),
        Conv { .. } => conv::eval(op, &x[0], &x[1]),
        Softmax { axis } => nn::softmax(&x[0], *axis, false),
        LogSoftmax { axis } => nn::softmax(&x[0], *axis, true),
        WindowSum { .. } | WindowProduct { .. } | WindowMax { .. } | WindowMin { .. } => {
            window::eval(op, &x[0])
        }
        WindowScatterMax { .. } | WindowScatterMin { .. } => scatter::eval(op, x),
        Reduce { .. } | WindowReduce { .. } => fold::eval(op, &x[0], &x[1], device),
        TriangularSolve {
            lower,
            left_side,
            transform_a,
        } => linalg::triangular_solve(&x[0], &x[1], *lower, *left_side, *transform_a),
        While { .. } | Cond { .. } | Hook { .. } => Err(Error::Unsupported(format!(
            "{} runs through program::control",
            op.name()
        ))),
        op if op.is_binary() => binary::eval(op, &x[0], &x[1]),
        _ => unary::eval(op, &x[0]),
    }
}
