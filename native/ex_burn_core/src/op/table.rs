//! The op table: every tensor operation ExBurn knows, declared once, grouped by family.
//!
//! On the wire (from Elixir) an op is its Nx name, alone or with a map of attributes
//! (`:exp`, `{:add, %{out: {:f, 32}}}`, `{:window_sum, %{window_dims: [2, 2]}}`); here the
//! element-wise, reduction, scan and window families are one variant each whose kind names
//! the op ([`Op::Unary`]`(`[`Unary::Exp`]`)`). The kind enums carry the wire names, so a
//! name is written in exactly one place; [`names`] lists them all, and what the Elixir side
//! needs besides (the Nx name, float functions, typed reductions, element-wise ops) is
//! declared beside them ([`Unary::float_function`], [`Unary::nx`], [`ReduceKind::takes_out`],
//! [`ELEMENTWISE_OTHERS`], [`NOT_NX_OTHERS`]). `ExBurn.Op` derives its lists from them through
//! `lib/ex_burn/op/table.eterm` ([`crate::vocabulary`]). Control flow, hooks and folds with a
//! function are not tensor ops: they are steps of a [`Program`](crate::program::Step).

use crate::wire::{self, Attrs, FromWire, Replay};
use crate::{DType, Scalar};
use serde::de::{self, VariantAccess};
use serde::{Deserialize, Serialize};

/// How `a` enters `triangular_solve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    /// `a` as given.
    #[default]
    None,
    /// The transpose of `a`.
    Transpose,
}

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

pub use crate::kernels::Precision;

/// Element-wise functions of one tensor: `[x]`. Float functions of integers give `{:f, 32}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Unary {
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
}

impl Unary {
    /// Whether integer input computes in Nx's floating type (`{:f, 32}`), as Nx's float
    /// functions do; the others keep their input's type (predicates give `{:u, 8}`).
    pub fn float_function(self) -> bool {
        use Unary::*;
        matches!(
            self,
            Exp | Expm1
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
        )
    }

    /// The Nx operation this op is, where Nx names it otherwise or has none.
    pub fn nx(self) -> NxName {
        match self {
            Unary::Neg => NxName::Other("negate"),
            Unary::Relu => NxName::Absent,
            _ => NxName::Same,
        }
    }
}

/// Element-wise arithmetic and bitwise functions of two tensors with broadcasting: `[a, b]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Arith {
    Add,
    Subtract,
    Multiply,
    Divide,
    Quotient,
    Remainder,
    Pow,
    Atan2,
    Min,
    Max,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    LeftShift,
    RightShift,
}

/// IEEE comparisons with broadcasting, boolean results: `[a, b]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Compare {
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

/// Logical connectives of truth values (non-zero is true), boolean results: `[a, b]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[allow(missing_docs)]
pub enum Logical {
    #[serde(rename = "logical_and")]
    And,
    #[serde(rename = "logical_or")]
    Or,
    #[serde(rename = "logical_xor")]
    Xor,
}

/// Reductions over axes: `[x]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[allow(missing_docs)]
pub enum ReduceKind {
    #[serde(rename = "sum")]
    Sum,
    #[serde(rename = "product")]
    Product,
    #[serde(rename = "reduce_max")]
    Max,
    #[serde(rename = "reduce_min")]
    Min,
    #[serde(rename = "all")]
    All,
    #[serde(rename = "any")]
    Any,
}

impl ReduceKind {
    /// Whether the `out` attribute gives the accumulation and result type (sum, product);
    /// the other folds keep their input's type and refuse `out`.
    pub fn takes_out(self) -> bool {
        matches!(self, ReduceKind::Sum | ReduceKind::Product)
    }
}

/// Index of the largest or smallest element along an axis: `[x]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[allow(missing_docs)]
pub enum ArgKind {
    #[serde(rename = "argmax")]
    Max,
    #[serde(rename = "argmin")]
    Min,
}

/// Running folds along an axis: `[x]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[allow(missing_docs)]
pub enum CumulativeKind {
    #[serde(rename = "cumulative_sum")]
    Sum,
    #[serde(rename = "cumulative_product")]
    Product,
    #[serde(rename = "cumulative_max")]
    Max,
    #[serde(rename = "cumulative_min")]
    Min,
}

/// Folds over sliding windows: `[x]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[allow(missing_docs)]
pub enum WindowKind {
    #[serde(rename = "window_sum")]
    Sum,
    #[serde(rename = "window_product")]
    Product,
    #[serde(rename = "window_max")]
    Max,
    #[serde(rename = "window_min")]
    Min,
}

/// Which element of each window receives the source value in a window scatter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[allow(missing_docs)]
pub enum ScatterKind {
    #[serde(rename = "window_scatter_max")]
    Max,
    #[serde(rename = "window_scatter_min")]
    Min,
}

/// A type Nx has and Burn lacks, emulated over a wider Burn type (see `Op::Narrow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Narrow {
    /// `{:f, 8}`: E5M2, held as f32.
    F8,
    /// `{:f8_e4m3fn, 8}`: E4M3FN, held as f32.
    F8E4m3fn,
    /// `{:s, 2}`, held as s8.
    S2,
    /// `{:s, 4}`, held as s8.
    S4,
    /// `{:u, 2}`, held as u8.
    U2,
    /// `{:u, 4}`, held as u8.
    U4,
}

/// The windows of a window op (absent strides, padding and dilations default to 1, none, 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Geometry {
    /// Window extent per axis.
    pub window_dims: Vec<usize>,
    /// Step between windows per axis.
    #[serde(default)]
    pub strides: Option<Vec<usize>>,
    /// (low, high) padding per axis.
    #[serde(default)]
    pub padding: Option<Vec<(i64, i64)>>,
    /// Spacing of a window's elements per axis.
    #[serde(default)]
    pub window_dilations: Option<Vec<usize>>,
}

/// One operation and its attributes. Inputs are passed separately, in the order documented on
/// each variant or family. `out` attributes, where present, give the result type Nx computed;
/// when absent the op infers it with Nx's promotion rules.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(remote = "Self", rename_all = "snake_case", deny_unknown_fields)]
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

    // ---- element-wise families (decoded by name, see `FromWire`) ----
    /// `[x]`.
    #[serde(skip)]
    Unary(Unary),
    /// `[a, b]` with broadcasting; the result type is `out` or Nx's promotion of the inputs.
    #[serde(skip)]
    Binary {
        /// The function.
        op: Arith,
        /// The result type.
        out: Option<DType>,
    },
    /// `[a, b]` with broadcasting; boolean result.
    #[serde(skip)]
    Compare(Compare),
    /// `[a, b]` with broadcasting; boolean result.
    #[serde(skip)]
    Logical(Logical),

    // ---- types ----
    /// [x] converted with Nx's rules.
    AsType {
        dtype: DType,
    },
    /// [x] reinterpreted bit for bit (same element size).
    Bitcast {
        dtype: DType,
    },
    /// [x] with every value mapped to a value of the narrower type `to` (floats rounded as
    /// Nx.BinaryBackend stores them, integers wrapped), kept in x's type, which must be
    /// `to`'s storage type (f32 for f8, s8/u8 for 2/4-bit integers).
    Narrow {
        to: Narrow,
    },
    /// [pred, on_true, on_false], broadcast together.
    Select {
        #[serde(default)]
        out: Option<DType>,
    },
    /// [x, min, max].
    Clip,

    // ---- reductions and scans: [x] ----
    /// Folds `axes` (all by default) with `kind`; `out` (sum and product only) is the
    /// accumulation and result type.
    #[serde(skip)]
    Reduce {
        /// The fold.
        kind: ReduceKind,
        /// Axes folded (all when absent).
        axes: Option<Vec<usize>>,
        /// Whether folded axes stay with length 1.
        keep_axes: bool,
        /// Result type (sum and product).
        out: Option<DType>,
    },
    /// Index of the largest/smallest element along `axis` (of the flattened tensor when absent).
    #[serde(skip)]
    Arg {
        /// Largest or smallest.
        kind: ArgKind,
        /// The axis (flattened tensor when absent).
        axis: Option<usize>,
        /// Whether the axis stays with length 1.
        keep_axis: bool,
        /// Which of equal elements wins.
        tie_break: TieBreak,
        /// Index type (s64 by default).
        out: Option<DType>,
    },
    /// Running fold along `axis`, from the end when `reverse`.
    #[serde(skip)]
    Cumulative {
        /// The fold.
        kind: CumulativeKind,
        /// The axis.
        axis: usize,
        /// From the last element backwards.
        reverse: bool,
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
        /// How f32 convolutions on GPUs may round (TF32 by default where large, as products).
        #[serde(default)]
        precision: Precision,
    },
    Softmax {
        axis: usize,
    },
    LogSoftmax {
        axis: usize,
    },

    // ---- windows: [x] ----
    /// Folds each window of `x` (padded with the fold's identity).
    #[serde(skip)]
    Window {
        /// The fold.
        kind: WindowKind,
        /// The windows.
        geometry: Geometry,
    },
    /// `[x, source, init]`: each window of x (padded with init) selects its last largest
    /// (smallest) element and the source value of that window is added there (the gradient of
    /// max/min pooling).
    #[serde(skip)]
    WindowScatter {
        /// Largest or smallest.
        kind: ScatterKind,
        /// The windows (no dilations).
        window_dims: Vec<usize>,
        /// Step between windows.
        strides: Option<Vec<usize>>,
        /// (low, high) padding per axis.
        padding: Option<Vec<(i64, i64)>>,
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
}

/// The ops outside the families that map each element independently (with the unary,
/// binary, comparison and logical families: what the function of a fold may use).
pub const ELEMENTWISE_OTHERS: [&str; 4] = ["as_type", "select", "clip", "full"];

/// The ops outside the families that are no Nx operation: Nx's `constant` becomes `full`
/// with a shape, and Nx builds random numbers, softmax and the narrow types in `defn` code.
pub const NOT_NX_OTHERS: [&str; 6] = [
    "full",
    "random_uniform",
    "random_normal",
    "narrow",
    "softmax",
    "log_softmax",
];

/// Which Nx operation (an `Nx.Backend` callback or `Nx.Defn.Expr` op) an op is: what
/// `ExBurn.Defn.Lower` lowers to it by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NxName {
    /// Nx's operation of the same name.
    Same,
    /// Nx's operation of another name (`neg` is `negate`).
    Other(&'static str),
    /// None (`relu`; Nx's `constant` lowers to `full` with a shape of its own).
    Absent,
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

/// The `out` attribute of a binary op.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutAttr {
    #[serde(default)]
    out: Option<DType>,
}

/// The attributes of a reduction.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReduceAttrs {
    #[serde(default)]
    axes: Option<Vec<usize>>,
    #[serde(default)]
    keep_axes: bool,
    #[serde(default)]
    out: Option<DType>,
}

/// The attributes of argmax/argmin.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ArgAttrs {
    #[serde(default)]
    axis: Option<usize>,
    #[serde(default)]
    keep_axis: bool,
    #[serde(default)]
    tie_break: TieBreak,
    #[serde(default)]
    out: Option<DType>,
}

/// The attributes of a cumulative op.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CumulativeAttrs {
    axis: usize,
    #[serde(default)]
    reverse: bool,
}

/// The attributes of a window scatter.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScatterAttrs {
    window_dims: Vec<usize>,
    #[serde(default)]
    strides: Option<Vec<usize>>,
    #[serde(default)]
    padding: Option<Vec<(i64, i64)>>,
}

impl FromWire for Op {
    fn from_wire<'de, V: VariantAccess<'de>>(name: &str, v: V) -> Result<Op, V::Error> {
        if let Some(k) = wire::kind::<Unary>(name) {
            v.unit_variant()?;
            return Ok(Op::Unary(k));
        }
        if let Some(op) = wire::kind::<Arith>(name) {
            let OutAttr { out } = OutAttr::deserialize(Attrs(v))?;
            return Ok(Op::Binary { op, out });
        }
        if let Some(k) = wire::kind::<Compare>(name) {
            v.unit_variant()?;
            return Ok(Op::Compare(k));
        }
        if let Some(k) = wire::kind::<Logical>(name) {
            v.unit_variant()?;
            return Ok(Op::Logical(k));
        }
        if let Some(kind) = wire::kind::<ReduceKind>(name) {
            let a = ReduceAttrs::deserialize(Attrs(v))?;
            if a.out.is_some() && !kind.takes_out() {
                return Err(de::Error::custom(format!(
                    "{name} takes no `out` attribute (its result has the input's type)"
                )));
            }
            return Ok(Op::Reduce {
                kind,
                axes: a.axes,
                keep_axes: a.keep_axes,
                out: a.out,
            });
        }
        if let Some(kind) = wire::kind::<ArgKind>(name) {
            let a = ArgAttrs::deserialize(Attrs(v))?;
            return Ok(Op::Arg {
                kind,
                axis: a.axis,
                keep_axis: a.keep_axis,
                tie_break: a.tie_break,
                out: a.out,
            });
        }
        if let Some(kind) = wire::kind::<CumulativeKind>(name) {
            let a = CumulativeAttrs::deserialize(Attrs(v))?;
            return Ok(Op::Cumulative {
                kind,
                axis: a.axis,
                reverse: a.reverse,
            });
        }
        if let Some(kind) = wire::kind::<WindowKind>(name) {
            let geometry = Geometry::deserialize(Attrs(v))?;
            return Ok(Op::Window { kind, geometry });
        }
        if let Some(kind) = wire::kind::<ScatterKind>(name) {
            let a = ScatterAttrs::deserialize(Attrs(v))?;
            return Ok(Op::WindowScatter {
                kind,
                window_dims: a.window_dims,
                strides: a.strides,
                padding: a.padding,
            });
        }
        Op::deserialize(Replay { name, variant: v })
    }
}

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Op, D::Error> {
        wire::deserialize(d, "Op")
    }
}

/// Every op name of the table by family: `(family, names)`, families in declaration order.
pub fn names() -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("unary", wire::names::<Unary>()),
        ("binary", wire::names::<Arith>()),
        ("compare", wire::names::<Compare>()),
        ("logical", wire::names::<Logical>()),
        ("reduce", wire::names::<ReduceKind>()),
        ("arg", wire::names::<ArgKind>()),
        ("cumulative", wire::names::<CumulativeKind>()),
        ("window", wire::names::<WindowKind>()),
        ("window_scatter", wire::names::<ScatterKind>()),
        ("other", wire::variant_names(|p| Op::deserialize(p))),
    ]
}

impl Op {
    /// The op's wire name (Nx's, in snake case; used in error messages).
    pub fn name(&self) -> String {
        match self {
            Op::Unary(k) => wire::name(k),
            Op::Binary { op, .. } => wire::name(op),
            Op::Compare(k) => wire::name(k),
            Op::Logical(k) => wire::name(k),
            Op::Reduce { kind, .. } => wire::name(kind),
            Op::Arg { kind, .. } => wire::name(kind),
            Op::Cumulative { kind, .. } => wire::name(kind),
            Op::Window { kind, .. } => wire::name(kind),
            Op::WindowScatter { kind, .. } => wire::name(kind),
            other => wire::debug_name(other),
        }
    }

    /// The type a creation op makes (`iota`, `eye`, `full`, the random ops); `None` for others.
    pub fn created_dtype(&self) -> Option<DType> {
        use Op::*;
        match self {
            Iota { dtype, .. }
            | Eye { dtype, .. }
            | Full { dtype, .. }
            | RandomUniform { dtype, .. }
            | RandomNormal { dtype, .. } => Some(*dtype),
            _ => None,
        }
    }

    /// Number of inputs the op takes (`None` = variable).
    pub fn arity(&self) -> Option<usize> {
        use Op::*;
        Some(match self {
            Iota { .. } | Eye { .. } | Full { .. } | RandomUniform { .. } | RandomNormal { .. } => {
                0
            }
            Select { .. } | Clip | IndexedAdd { .. } | IndexedPut { .. } | WindowScatter { .. } => {
                3
            }
            Slice { dynamic, .. } => 1 + dynamic.len(),
            PutSlice { dynamic, .. } => 2 + dynamic.len(),
            Concatenate { .. } | Stack { .. } => return None,
            Binary { .. }
            | Compare(_)
            | Logical(_)
            | Dot { .. }
            | Pad { .. }
            | Gather { .. }
            | Take { .. }
            | TakeAlongAxis { .. }
            | Conv { .. }
            | TriangularSolve { .. } => 2,
            _ => 1,
        })
    }

    /// Unary element-wise maps (one output element from one input element).
    pub(crate) fn is_unary_map(&self) -> bool {
        matches!(self, Op::Unary(_))
    }

    /// Binary element-wise ops with broadcasting.
    pub(crate) fn is_binary(&self) -> bool {
        matches!(self, Op::Binary { .. } | Op::Compare(_) | Op::Logical(_))
    }
}
