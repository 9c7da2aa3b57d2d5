//! The device-kernel seam: what an accelerator plug-in may compute in place of Burn, and the
//! one place where it is installed.
//!
//! The engine is written against Burn's `Dispatch` backend and runs on every device without
//! this module. An accelerator with kernels of its own (ExBurn's CUDA crate,
//! `native/ex_burn_cuda`: cuBLAS products, fused element-wise runs and row regions, strided
//! views, sums, window scatters, attention, memory statistics) implements [`DeviceKernels`]
//! and is [`install`]ed once, at load time (the NIF's `load`). The engine asks the kernels
//! serving a tensor's device first; every method may decline (`Ok(None)`, what the defaults
//! return), and the engine then computes the same result with Burn. Nothing here knows CUDA:
//! the plug-in reaches the backend tensors behind the primitives it is handed.
//!
//! This module sits on the engine's lowest floor (it names only errors, Burn's primitives and
//! the types below), so that devices, tensors, ops and programs all call down into it. The
//! kernels' vocabulary: an [`Operand`] is a Burn primitive with its logical shape; results
//! are float primitives the engine wraps into tensors; fused work arrives as step lists the
//! engine planned ([`MapRun`], [`RowRegion`], [`AttentionCall`]).

use crate::Result;
use burn::DispatchTensor;
use serde::Deserialize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A tensor as kernels read it.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    /// Burn's primitive (rank 0 is stored as `[1]`).
    pub prim: &'a DispatchTensor,
    /// The logical shape (`[]` for a scalar).
    pub shape: &'a [usize],
}

impl Operand<'_> {
    /// Number of elements (1 for rank 0).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Where a window starts along one axis of a kernel's tensor.
#[derive(Clone, Copy, Debug)]
pub enum Start<'a> {
    /// Known on the host, clamped already so that the window fits.
    At(usize),
    /// An f32 scalar on the tensor's device holding an integer start (a loop's position, say),
    /// read and clamped into `0..=dim - len` by the kernel itself: no read of the device by the
    /// host, and one kernel for every value of it. Given only for axes of fewer than 2^24
    /// elements, where f32 holds every start the clamp can give exactly.
    Read(Operand<'a>),
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

/// A function that f32 work computes in f64 and rounds once to f32 (as the op table does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounded {
    /// `exp`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Cube root.
    Cbrt,
}

impl Rounded {
    /// The C math library's name of the function (of a double).
    pub fn name(self) -> &'static str {
        match self {
            Rounded::Exp => "exp",
            Rounded::Log => "log",
            Rounded::Cbrt => "cbrt",
        }
    }
}

/// Where an operand of a fused step comes from.
#[derive(Clone, Copy, Debug)]
pub enum Src {
    /// The result of an earlier step of the run.
    Stage(usize),
    /// An external tensor (index into the run's operands).
    Ext(usize),
    /// A scalar, broadcast.
    Const(f32),
}

/// How element `i` of a fused run's (row-major) output reads an external operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Layout {
    /// The operand has the run's shape: element `i`.
    Full,
    /// The operand's shape is a trailing part of the run's (a bias row): element `i % len`.
    Rows(usize),
    /// The operand's shape is a leading part of the run's, then unit axes (a per-row
    /// statistic kept with `keep_axes`): element `i / inner`.
    Columns(usize),
    /// The operand's shape is a middle part of the run's, unit axes around it (a
    /// per-channel value of an NCHW tensor, `[1, c, 1, 1]`): `(len, inner)`, element
    /// `i / inner % len`.
    Middle(usize, usize),
}

impl Layout {
    /// How an operand of shape `s` broadcasts to `full` (`None`: not one of the layouts).
    pub fn of(s: &[usize], full: &[usize]) -> Option<Layout> {
        if s == full {
            return Some(Layout::Full);
        }
        let lead = s.iter().take_while(|&&d| d == 1).count();
        let rest = &s[lead..];
        if s.len() <= full.len() && full.ends_with(rest) {
            return Some(Layout::Rows(rest.iter().product()));
        }
        let keep = s.len() - s.iter().rev().take_while(|&&d| d == 1).count();
        if s.len() == full.len() && s[..keep] == full[..keep] {
            return Some(Layout::Columns(full[keep..].iter().product()));
        }
        // right-aligned with `full`: the axes `lead..keep` of `s` are `full`'s `at..at + k`
        let at = (full.len() + lead).checked_sub(s.len())?;
        let end = at + keep.checked_sub(lead)?;
        (keep > lead && full.get(at..end) == Some(&s[lead..keep]))
            .then(|| Layout::Middle(s[lead..keep].iter().product(), full[end..].iter().product()))
    }
}

/// An IEEE comparison of f32 operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Comparison {
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

/// A function with correctly rounded f32 kernels on some CPUs (`op::exact32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Exact {
    Sin,
    Cos,
    Tanh,
    Exp,
}

/// The per-element function of a fused step, on f32 operands.
#[derive(Clone, Copy, Debug)]
pub enum Map {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// Nx `max`: the left operand where it is greater or NaN, else the right one (the op
    /// table's `min_max`, element by element).
    Max,
    /// Nx `min`, as `Max` with "less".
    Min,
    /// `powf`, except exponents 2 and 3 given as constants: the products rounded once (the
    /// op table's `small_power`).
    Pow,
    /// An IEEE comparison; its result is a mask (1.0 or 0.0) that only other steps read.
    Cmp(Comparison),
    /// `-a`.
    Neg,
    /// `|a|`.
    Abs,
    /// Square root.
    Sqrt,
    /// `1 / sqrt(x)` in f64, rounded once to f32 (the op table's).
    Rsqrt,
    /// `exp`, in f64 rounded once to f32 off the CPU.
    Exp,
    /// Natural logarithm, in f64 rounded once to f32 off the CPU.
    Log,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Hyperbolic tangent.
    Tanh,
    /// `sin`/`cos`/`tanh`/`exp` by the correctly rounded kernels, as the op table computes
    /// them on CPUs that have them (the same function as [`Map::Sin`] elsewhere).
    Exact(Exact),
}

impl Map {
    /// Whether the map takes two operands.
    pub fn binary(self) -> bool {
        matches!(
            self,
            Map::Add
                | Map::Sub
                | Map::Mul
                | Map::Div
                | Map::Pow
                | Map::Max
                | Map::Min
                | Map::Cmp(_)
        )
    }
}

/// One instruction of a fused run: its map and operands (a constant instruction has no map).
#[derive(Clone, Copy, Debug)]
pub enum Stage {
    /// An f32 constant.
    Const(f32),
    /// A map of one operand.
    Unary(Map, Src),
    /// A map of two operands.
    Binary(Map, Src, Src),
    /// Nx `select(pred, on_true, on_false)`: `pred` is true where it is not 0 (NaN included).
    Select(Src, Src, Src),
    /// The operand itself: a broadcast or reshape that reads each element where the run
    /// reads it already.
    Same(Src),
}

/// A run of f32 element-wise steps over one shape, for one kernel: each element computed
/// as the op table computes it op by op.
pub struct MapRun<'a> {
    /// The steps in order.
    pub steps: &'a [Stage],
    /// The external operands (f32; masks cast to f32) and how the run reads them.
    pub operands: Vec<(Operand<'a>, Layout)>,
    /// The steps whose values are written out, in order: one result of the run's shape each.
    pub written: &'a [usize],
    /// The run's shape.
    pub shape: &'a [usize],
}

/// What a value of a row region varies with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Level {
    /// One value for the whole region (a constant).
    Scalar,
    /// One value per row.
    Row,
    /// One value per element.
    Full,
}

/// A fold over each row of a row region.
#[derive(Clone, Copy, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Fold {
    Sum,
    Max,
    Min,
}

/// One instruction of a row region.
#[derive(Clone, Copy, Debug)]
pub enum RowStep {
    /// An element-wise stage (of any level).
    Map(Stage),
    /// A fold of a full-level value over its row.
    Fold(Fold, Src),
    /// A reshape or broadcast: the same numbers.
    Same(Src),
}

/// An external operand of a row region.
#[derive(Clone, Copy, Debug)]
pub struct RowOperand<'a> {
    /// The operand (f32; masks cast to f32).
    pub operand: Operand<'a>,
    /// Read per element, or once per row.
    pub level: Level,
    /// Whether the program handed its own tensor over (read for the last time here): a
    /// result may be written over its buffer where nothing else holds it.
    pub donated: bool,
}

/// Consecutive element-wise instructions and reductions over the same trailing axes (a
/// softmax, a layer norm, their gradients), for one kernel: the region's shape `full` splits
/// into `rows` (its leading axes) and `cols` (the reduced trailing axes).
pub struct RowRegion<'a> {
    /// The instructions.
    pub steps: &'a [RowStep],
    /// Each step's level.
    pub levels: &'a [Level],
    /// Each step's shape (as Nx has it).
    pub shapes: &'a [Vec<usize>],
    /// External operands.
    pub operands: Vec<RowOperand<'a>>,
    /// The region's shape.
    pub full: &'a [usize],
    /// Rows (the product of the leading axes).
    pub rows: usize,
    /// Row length (the product of the reduced axes).
    pub cols: usize,
    /// The steps whose values are written out, in order: full-size steps (one value per
    /// element) or per-row ones (one per row).
    pub written: &'a [usize],
}

/// An element-wise step applied to attention scores before the softmax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreStep {
    /// `x / c`.
    Divide,
    /// `x * c`.
    Multiply,
    /// `select(pred, x, c)`: `pred` non-zero picks `x`.
    Select,
}

/// `softmax(f(Q Kᵀ)) V` for one kernel, `f` the score steps in order.
pub struct AttentionCall<'a> {
    /// Leading batch axes of `q`, `k` and `v`.
    pub batch_axes: usize,
    /// Queries `[batch.., sq, d]`.
    pub q: Operand<'a>,
    /// Keys `[batch.., sk, d]`.
    pub k: Operand<'a>,
    /// Values `[batch.., sk, dv]`.
    pub v: Operand<'a>,
    /// Each step, the predicate of a `Select` (f32 or boolean, broadcasting to the scores)
    /// and the step's scalar `c`.
    pub steps: Vec<(ScoreStep, Option<Operand<'a>>, f32)>,
}

/// The sizes of an attention's operands: `q` `[batch.., sq, d]`, `k` `[batch.., sk, d]`, `v`
/// `[batch.., sk, dv]`.
#[derive(Clone, Copy, Debug)]
pub struct AttentionSizes<'a> {
    /// The batch axes.
    pub batch: &'a [usize],
    /// Query rows.
    pub sq: usize,
    /// Head size of `q` and `k`.
    pub d: usize,
    /// Keys.
    pub sk: usize,
    /// Head size of `v`.
    pub dv: usize,
}

impl<'a> AttentionSizes<'a> {
    /// The sizes when `q`, `k` and `v` have `nb` batch axes, agree with each other and no
    /// size is 0 (the kernels' precondition); `None` otherwise.
    pub fn of(nb: usize, q: &'a [usize], k: &[usize], v: &[usize]) -> Option<AttentionSizes<'a>> {
        if ![q, k, v].iter().all(|s| s.len() == nb + 2) {
            return None;
        }
        let batch = &q[..nb];
        let (sq, d, sk, dv) = (q[nb], q[nb + 1], k[nb], v[nb + 1]);
        let agree = k[..nb] == *batch && v[..nb] == *batch && k[nb + 1] == d && v[nb] == sk;
        let empty = batch.contains(&0) || [sq, d, sk, dv].contains(&0);
        (agree && !empty).then_some(AttentionSizes {
            batch,
            sq,
            d,
            sk,
            dv,
        })
    }

    /// How many `[sq, sk]` matrices the batch axes hold.
    pub fn matrices(&self) -> usize {
        self.batch.iter().product()
    }

    /// `(sq, d, sk, dv)`.
    pub fn dims(&self) -> (usize, usize, usize, usize) {
        (self.sq, self.d, self.sk, self.dv)
    }
}

/// The element strides of a row-major tensor of `dims`.
pub fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for a in (0..dims.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * dims[a + 1];
    }
    s
}

/// Strides of a tensor of `shape` (its own element `strides`) broadcast to `full`
/// (trailing-aligned): zero on axes it lacks or has as 1 (a mask's layout over attention
/// scores, say); `None` if it does not broadcast.
pub fn broadcast_strides<S: Copy + Default>(
    shape: &[usize],
    strides: &[S],
    full: &[usize],
) -> Option<Vec<S>> {
    let lead = full.len().checked_sub(shape.len())?;
    if strides.len() != shape.len()
        || !shape
            .iter()
            .zip(&full[lead..])
            .all(|(&s, &f)| s == f || s == 1)
    {
        return None;
    }
    Some(
        (0..full.len())
            .map(|a| match a.checked_sub(lead) {
                Some(i) if shape[i] == full[a] && shape[i] != 1 => strides[i],
                _ => S::default(),
            })
            .collect(),
    )
}

/// A point in a device's queued work (a timing event), recorded by [`DeviceKernels::mark`]:
/// its handle once the device has recorded it.
pub type Mark = Arc<Mutex<Option<usize>>>;

/// What the installed kernels did for the calling thread (tests tell a kernel's path from
/// Burn's by them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Matrix products the vendor library computed.
    pub library_products: u64,
    /// Those of them with an operand owned by another thread's stream (complete once a
    /// result has been read).
    pub cross_stream_products: u64,
    /// Fused runs and row regions launched as one kernel.
    pub fused_launches: u64,
    /// Kernel results written over an operand's buffer instead of a new one.
    pub reused_buffers: u64,
    /// 2-D convolution passes (results, kernel gradients) the vendor library computed for
    /// the calling thread.
    pub library_convolutions: u64,
}

/// The windows of a 2-D convolution: strides, zero padding on both sides and kernel
/// dilations, each along height and width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dGeometry {
    /// Window strides.
    pub strides: [usize; 2],
    /// Zero padding on both sides.
    pub padding: [usize; 2],
    /// Kernel dilations.
    pub dilations: [usize; 2],
}

impl Conv2dGeometry {
    /// The result's `[height, width]` for an input's `[h, w]` and a kernel's `[kh, kw]`;
    /// `None` where the dilated kernel is larger than the padded input or has no elements.
    pub fn output(&self, input: [usize; 2], kernel: [usize; 2]) -> Option<[usize; 2]> {
        let along = |i: usize| {
            if kernel[i] == 0 {
                return None;
            }
            let span = (kernel[i] - 1) * self.dilations[i] + 1;
            let padded = input[i] + 2 * self.padding[i];
            (padded >= span).then(|| (padded - span) / self.strides[i] + 1)
        };
        Some([along(0)?, along(1)?])
    }
}

/// The windows of `window_scatter_max` / `window_scatter_min` (XLA's select-and-scatter, the
/// gradient of max and min pooling) over an input of `shape`: `counts` windows along each
/// axis, each of `window` elements, `strides` apart, the first starting `lo` elements before
/// the input (padding read as the init value).
///
/// The values, as `Nx.BinaryBackend` computes them: each window selects, scanning its
/// elements in row-major order from the first, each element `x` for which `x >= best`
/// (`x <= best` for min) holds, so ties go to the last and a NaN is never selected unless it
/// is the first; each element of the result is the init value plus, one at a time in
/// row-major order of the windows, the source value of every window that selected it
/// (elements no window selected, and selections in the padding, leave the init value alone).
#[derive(Clone, Copy, Debug)]
pub struct WindowScatterGeometry<'a> {
    /// The input's (and the result's) shape.
    pub shape: &'a [usize],
    /// Windows along each axis (the source's shape).
    pub counts: &'a [usize],
    /// Window size along each axis.
    pub window: &'a [usize],
    /// Window strides.
    pub strides: &'a [usize],
    /// Padding before each axis.
    pub lo: &'a [usize],
    /// Whether windows select their largest element (else their smallest).
    pub max: bool,
}

impl WindowScatterGeometry<'_> {
    /// Number of windows.
    pub fn windows(&self) -> usize {
        self.counts.iter().product()
    }

    /// Number of elements of a window.
    pub fn window_len(&self) -> usize {
        self.window.iter().product()
    }

    /// Along `axis`, the windows (first, last) that cover padded coordinate `pp`; `None`
    /// where none does.
    pub fn covering(&self, axis: usize, pp: usize) -> Option<(usize, usize)> {
        let (w, s, c) = (self.window[axis], self.strides[axis], self.counts[axis]);
        // windows j with j * s <= pp < j * s + w
        let first = (pp + 1).saturating_sub(w).div_ceil(s);
        let last = (pp / s).min(c.checked_sub(1)?);
        (first <= last).then_some((first, last))
    }
}

/// A window scatter for [`DeviceKernels::window_scatter`]: f32 `input`, `source` (one value
/// per window) and scalar `init`, the result of the input's shape.
#[derive(Clone, Copy, Debug)]
pub struct WindowScatterCall<'a> {
    /// The tensor whose windows select.
    pub input: Operand<'a>,
    /// A value per window.
    pub source: Operand<'a>,
    /// The init value (a scalar).
    pub init: Operand<'a>,
    /// The windows.
    pub geometry: WindowScatterGeometry<'a>,
}

/// The gradient of a 2-D convolution's kernel for [`DeviceKernels::conv2d_kernel_gradient`]:
/// the convolution of `input` `[n, c, h, w]` by a kernel of shape `kernel` `[o, c, kh, kw]`
/// (strides, symmetric padding, kernel dilations, one group) gave a result whose gradient is
/// `grad` `[n, o, oh, ow]`; the result is the kernel's gradient, `[o, c, kh, kw]`. Both
/// operands of one float type, each packed in one row (their logical shapes over primitives
/// holding the elements in row-major order).
#[derive(Clone, Copy, Debug)]
pub struct KernelGradientCall<'a> {
    /// The convolution's input.
    pub input: Operand<'a>,
    /// The gradient of the convolution's result.
    pub grad: Operand<'a>,
    /// The kernel's shape.
    pub kernel: [usize; 4],
    /// The convolution's windows.
    pub geometry: Conv2dGeometry,
    /// How f32 may round (as [`ConvCall::precision`]).
    pub precision: Precision,
}

/// A 2-D convolution for [`DeviceKernels::conv2d`]: `input` `[n, c, h, w]` and `kernel`
/// `[o, c / groups, kh, kw]` of one float type, cross-correlation as Nx's `conv` computes it,
/// result `[n, o, oh, ow]` (contiguous) of that type.
#[derive(Clone, Copy, Debug)]
pub struct ConvCall<'a> {
    /// The input: its logical shape `[n, c, h, w]` over a primitive holding its elements
    /// packed in one row.
    pub input: Operand<'a>,
    /// The kernel: its logical shape `[o, c / groups, kh, kw]` over a primitive holding its
    /// elements packed in one row.
    pub kernel: Operand<'a>,
    /// The windows.
    pub geometry: Conv2dGeometry,
    /// Feature groups (`c` and `o` multiples of it).
    pub groups: usize,
    /// How f32 convolutions may round: `Default` allows TF32 tensor cores where the
    /// convolution is large (as products do), `Highest` computes in full f32.
    pub precision: Precision,
}

/// The kernels of an accelerator, installed with [`install`]. Device indices are those of
/// the family the kernels serve ([`DeviceKernels::family`]). Every method has a default
/// that declines or reports nothing, so a plug-in implements what it has.
pub trait DeviceKernels: Send + Sync {
    /// The device family served (`"cuda"`: the tensors of `Device::Cuda`).
    fn family(&self) -> &'static str;

    /// Prepares device `index` before Burn first uses it (checks that its driver and
    /// libraries load, configures memory pools, caches and autotuning): called every time
    /// the engine maps the device to Burn's, so repeated calls must be cheap.
    fn prepare(&self, index: usize) -> Result<()> {
        let _ = index;
        Ok(())
    }

    /// Number of devices of the family, or the reason none can be used.
    fn device_count(&self) -> Result<usize> {
        Ok(0)
    }

    /// The device's name as its driver reports it.
    fn device_name(&self, index: usize) -> Option<Result<String>> {
        let _ = index;
        None
    }

    /// Total memory of the device in bytes.
    fn total_memory(&self, index: usize) -> Option<u64> {
        let _ = index;
        None
    }

    /// What the device's memory pools hold for this process, `(bytes in use, bytes
    /// reserved)`.
    fn pool_usage(&self, index: usize) -> Option<(u64, u64)> {
        let _ = index;
        None
    }

    /// After a piece of work on the device: gives memory its allocator keeps idle back,
    /// where it is configured to.
    fn after_work(&self, index: usize) {
        let _ = index;
    }

    /// Starts the work queued for the device (the engine calls it between program steps).
    fn start_queued(&self, index: usize) {
        let _ = index;
    }

    /// The error of queued work that failed since the last call, once (its results were
    /// filled with NaN). Called after every read of a tensor to the host.
    fn check_failures(&self) -> Result<()> {
        Ok(())
    }

    /// Sums across devices: each set holds one tensor per device (same shape and float type,
    /// the devices in the same order in every set, each device once); every tensor of a set is
    /// replaced by the set's sum, on its own device. Results in set order. Declining
    /// (`Ok(None)`) lets the engine sum through copies.
    fn all_reduce(&self, sets: &[Vec<Operand>]) -> Result<Option<Vec<Vec<DispatchTensor>>>> {
        let _ = sets;
        Ok(None)
    }

    /// `[nb, m, k] x [nb, k, n]` (batch broadcast where one side has `nb` 1), `[nb, m, n]`.
    fn matmul(
        &self,
        a: Operand,
        b: Operand,
        precision: Precision,
    ) -> Result<Option<DispatchTensor>> {
        let _ = (a, b, precision);
        Ok(None)
    }

    /// A 2-D convolution ([`ConvCall`]) by a vendor library, `[n, o, oh, ow]`.
    fn conv2d(&self, call: &ConvCall) -> Result<Option<DispatchTensor>> {
        let _ = call;
        Ok(None)
    }

    /// The gradient of a 2-D convolution's kernel ([`KernelGradientCall`]) by a vendor
    /// library, `[o, c, kh, kw]`.
    fn conv2d_kernel_gradient(&self, call: &KernelGradientCall) -> Result<Option<DispatchTensor>> {
        let _ = call;
        Ok(None)
    }

    /// `t` as `shape` without Burn's copy of strided tensors: a view of the same buffer, or
    /// a contiguous copy (of any shape of as many elements; the engine reshapes it).
    fn reshape(&self, t: Operand, shape: &[usize]) -> Result<Option<DispatchTensor>> {
        let _ = (t, shape);
        Ok(None)
    }

    /// `update` written into a copy of `t` at `starts` (Nx's `put_slice`): each start known on
    /// the host (clamped already) or read by the kernel from the device (see [`Start`]).
    fn put_slice(
        &self,
        t: Operand,
        update: Operand,
        starts: &[Start],
    ) -> Result<Option<DispatchTensor>> {
        let _ = (t, update, starts);
        Ok(None)
    }

    /// The window of `t` of `lens` elements along each axis, every `steps`-th taken, at
    /// `starts` (Nx's `slice`; each start known on the host, clamped already, or read by the
    /// kernel from the device, see [`Start`]). The result has `lens[i].div_ceil(steps[i])`
    /// elements along axis `i`.
    fn slice(
        &self,
        t: Operand,
        starts: &[Start],
        lens: &[usize],
        steps: &[usize],
    ) -> Result<Option<DispatchTensor>> {
        let _ = (t, starts, lens, steps);
        Ok(None)
    }

    /// `x` (`[rows, cols]`, f32) with row `r[j]` of it increased by row `j` of `upd`
    /// (`[m, cols]`) for each `j` in order (the f32 additions of one element in the order of
    /// `j`, as a walk of the updates one by one makes them): the sum behind `indexed_add` of
    /// whole rows or elements, an embedding's gradient. The row numbers, checked in range
    /// already, come as two f32 operands of `[m]` holding integers below 2^24 exactly:
    /// `r[j] = hi[j] * 2^24 + lo[j]`.
    fn add_rows(
        &self,
        x: Operand,
        (hi, lo): (Operand, Operand),
        upd: Operand,
    ) -> Result<Option<DispatchTensor>> {
        let _ = (x, hi, lo, upd);
        Ok(None)
    }

    /// The f32 sum of `t` over its first `lead` axes (the remaining axes' shape).
    fn leading_sum(&self, t: Operand, lead: usize) -> Result<Option<DispatchTensor>> {
        let _ = (t, lead);
        Ok(None)
    }

    /// The f32 sum of `t` over every axis outside `kept` (a run of axes with reduced axes on
    /// both sides: a batch normalization's statistics over `[n, c, h, w]`, kept `1..2`),
    /// shaped as the kept axes.
    fn sum_around(
        &self,
        t: Operand,
        kept: std::ops::Range<usize>,
    ) -> Result<Option<DispatchTensor>> {
        let _ = (t, kept);
        Ok(None)
    }

    /// Nx's element-wise `max` (`min`) of f32 `a` and `b` of one shape (either may be a
    /// broadcast view): `a` where `a > b` (`a < b`) or `a` is NaN, else `b`.
    fn extremum_pair(&self, a: Operand, b: Operand, max: bool) -> Result<Option<DispatchTensor>> {
        let _ = (a, b, max);
        Ok(None)
    }

    /// `x ** e` for f32 `x` and an f32 scalar `e` read on the device: exponents 2 and 3 as
    /// products rounded once, others by `powf`.
    fn small_power(&self, x: Operand, e: Operand) -> Result<Option<DispatchTensor>> {
        let _ = (x, e);
        Ok(None)
    }

    /// `f` of f32 `x` computed in f64 and rounded once to f32.
    fn rounded(&self, x: Operand, f: Rounded) -> Result<Option<DispatchTensor>> {
        let _ = (x, f);
        Ok(None)
    }

    /// The element strides of a tensor's buffer, axis by axis (views are strided, some
    /// buffers padded), where the kernels know them.
    fn strides(&self, t: Operand) -> Option<Vec<usize>> {
        let _ = t;
        None
    }

    /// Whether fused kernels ([`DeviceKernels::map_run`], [`DeviceKernels::row_region`],
    /// [`DeviceKernels::attention`]) may be used: the engine plans fused work for the
    /// family's devices only then.
    fn fusion(&self) -> bool {
        false
    }

    /// The results of a fused run's written steps, in order, as one kernel.
    fn map_run(&self, run: &MapRun) -> Result<Option<Vec<DispatchTensor>>> {
        let _ = run;
        Ok(None)
    }

    /// The longest rows ([`RowRegion::cols`]) a row-region kernel takes: the engine plans
    /// no longer ones.
    fn row_limit(&self) -> usize {
        0
    }

    /// The results of a row region's written steps, in order, as one kernel.
    fn row_region(&self, region: &RowRegion) -> Result<Option<Vec<DispatchTensor>>> {
        let _ = region;
        Ok(None)
    }

    /// A window scatter of f32 tensors as kernels of the device (the values as
    /// [`WindowScatterGeometry`] says).
    fn window_scatter(&self, call: &WindowScatterCall) -> Result<Option<DispatchTensor>> {
        let _ = call;
        Ok(None)
    }

    /// An attention `[batch.., sq, dv]` as one kernel.
    fn attention(&self, call: &AttentionCall) -> Result<Option<DispatchTensor>> {
        let _ = call;
        Ok(None)
    }

    /// Records a timing event after the work queued so far on this thread's stream of
    /// device `index` (the `gpu` profile).
    fn mark(&self, index: usize) -> Option<Mark> {
        let _ = index;
        None
    }

    /// The time in milliseconds between each pair of marks (`None` for a pair not recorded),
    /// once the device has run them; waits for the device.
    fn elapsed(&self, index: usize, pairs: Vec<(Mark, Mark)>) -> Vec<Option<f64>> {
        let _ = index;
        vec![None; pairs.len()]
    }

    /// Host time the device's own queue spent on the kernels' queued work since the last
    /// call, by kind of work: `(what, pieces, looking up buffers, in all)`.
    fn queued_work_time(&self) -> Vec<(&'static str, u64, Duration, Duration)> {
        Vec::new()
    }

    /// What the kernels did for the calling thread.
    fn counts(&self) -> Counts {
        Counts::default()
    }
}

/// The installed kernels.
static INSTALLED: OnceLock<&'static dyn DeviceKernels> = OnceLock::new();

/// Installs `kernels` for the rest of the process; `false` when kernels were installed
/// already (those stay).
pub fn install(kernels: &'static dyn DeviceKernels) -> bool {
    INSTALLED.set(kernels).is_ok()
}

/// The installed kernels, if any.
pub fn installed() -> Option<&'static dyn DeviceKernels> {
    INSTALLED.get().copied()
}

/// The installed kernels when they serve device `family` (`"cuda"`).
pub fn serving(family: &str) -> Option<&'static dyn DeviceKernels> {
    installed().filter(|k| k.family() == family)
}

/// Reports the failure of queued kernel work (see [`DeviceKernels::check_failures`]).
pub fn check_failures() -> Result<()> {
    installed().map_or(Ok(()), |k| k.check_failures())
}

/// What the installed kernels did for the calling thread (zeros without kernels).
pub fn counts() -> Counts {
    installed().map_or_else(Counts::default, |k| k.counts())
}

#[cfg(test)]
mod tests {
    use super::Layout;

    #[test]
    fn layouts_name_how_each_broadcast_operand_is_read() {
        let full = [4, 6, 8, 9];
        assert_eq!(Layout::of(&full, &full), Some(Layout::Full));
        assert_eq!(Layout::of(&[8, 9], &full), Some(Layout::Rows(72)));
        assert_eq!(Layout::of(&[1, 1, 1, 9], &full), Some(Layout::Rows(9)));
        assert_eq!(Layout::of(&[4, 6, 1, 1], &full), Some(Layout::Columns(72)));
        // per channel, in NCHW: element i / (8 * 9) % 6
        assert_eq!(
            Layout::of(&[1, 6, 1, 1], &full),
            Some(Layout::Middle(6, 72))
        );
        assert_eq!(Layout::of(&[6, 1, 1], &full), Some(Layout::Middle(6, 72)));
        assert_eq!(
            Layout::of(&[1, 6, 8, 1], &full),
            Some(Layout::Middle(48, 9))
        );
        // a unit axis inside the kept part, or axes that are not the run's
        assert_eq!(Layout::of(&[1, 6, 1, 9], &full), None);
        assert_eq!(Layout::of(&[1, 5, 1, 1], &full), None);
        assert_eq!(Layout::of(&[6, 1, 1, 1, 1], &full), None);
    }
}
