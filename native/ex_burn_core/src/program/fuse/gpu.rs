//! f32 element-wise runs on NVIDIA GPUs as one kernel each: the plan of [`map32`] written as
//! CUDA C ([`source`]) and run by `cuda::elementwise`.
//!
//! Each element is computed as ExBurn computes it op by op: the same IEEE operations in the
//! same order, without fused multiply-adds, `exp` and `log` in f64 rounded once to f32 (as
//! `op::unary` does on CUDA, and as Nx.BinaryBackend does), the CUDA math library's `tanhf`,
//! `sinf`, ..., Nx's `max`/`min` (NaN wins), comparisons as masks, `select` on non-zero.
//! Constants are the literals' f32 values, written bit-exactly.

use super::map32::{Layout, Map, Plan, Src, Stage};
use super::rows;
use crate::cuda::elementwise::{grid_loop, header, header_with};
use crate::op::exact32::Fun;
use crate::op::Compare;
use crate::{Result, Tensor};
use std::fmt::Write;

/// How element `i` of the run (of shape `full`) reads an operand of shape `shape` stored with
/// `strides`: the layout's index where the operand is contiguous, else the sum over its
/// axes (right-aligned with `full`; unit and broadcast axes, of stride 0, skipped) of the
/// coordinate times the stride.
fn index(layout: Option<Layout>, shape: &[usize], strides: &[usize], full: &[usize]) -> String {
    let contiguous = crate::cuda::views::contiguous(shape, strides);
    if let (true, Some(layout)) = (contiguous, layout) {
        let total: usize = full.iter().product();
        return match layout {
            Layout::Full => "i".to_string(),
            Layout::Rows(m) => crate::cuda::elementwise::coordinate(1, m, total),
            Layout::Columns(inner) => crate::cuda::elementwise::coordinate(inner, 0, total),
        };
    }
    crate::cuda::elementwise::strided_index(shape, strides, full)
}

/// How element `i` of a result of shape `full` reads operand `t` stored with `strides` (see
/// [`index`]); `None` where its axes do not fit `full`.
fn operand_index(
    t: &Tensor,
    strides: &[usize],
    full: &[usize],
    layout: Option<Layout>,
) -> Option<String> {
    // a scalar's buffer has one axis of one element
    let shape = match t.shape() {
        [] => &[1][..],
        s => s,
    };
    if shape.len() != strides.len() || shape.len() > full.len().max(1) {
        return None;
    }
    Some(index(layout, shape, strides, full))
}

/// The strides of every operand (see `cuda::elementwise::strides`), `None` if one has none.
pub(super) fn operand_strides<'a>(
    tensors: impl IntoIterator<Item = &'a Tensor>,
) -> Option<Vec<Vec<usize>>> {
    tensors
        .into_iter()
        .map(crate::cuda::elementwise::strides)
        .collect()
}

/// The CUDA C source of `plan` over a run of shape `full` for outputs `live` (step indices,
/// in order), reading the operands with `strides`; `None` when a step has no CUDA form.
pub(super) fn source(
    plan: &Plan,
    live: &[usize],
    full: &[usize],
    strides: &[Vec<usize>],
) -> Option<String> {
    let mut s = header("", plan.ext.len(), live.len());
    s.push_str(&grid_loop("i"));
    for (j, (e, st)) in plan.ext.iter().zip(strides).enumerate() {
        let index = operand_index(&e.tensor, st, full, Some(e.layout))?;
        let _ = writeln!(s, "    float x{j} = e{j}[{index}];");
    }
    let src = |v: Src| match v {
        Src::Stage(k) => format!("s{k}"),
        Src::Ext(j) => format!("x{j}"),
        Src::Const(c) => constant(c),
    };
    for (k, step) in plan.steps.iter().enumerate() {
        let expr = expression(*step, &src)?;
        let _ = writeln!(s, "    float s{k} = {expr};");
    }
    for (q, &k) in live.iter().enumerate() {
        let _ = writeln!(s, "    o{q}[i] = s{k};");
    }
    s.push_str("  }\n}\n");
    Some(s)
}

/// The CUDA C expression of a stage whose operands read as `src` gives.
fn expression(step: Stage, src: &dyn Fn(Src) -> String) -> Option<String> {
    Some(match step {
        Stage::Const(c) => constant(c),
        Stage::Unary(m, a) => unary(m, &src(a))?,
        // as the op table's `small_power`: the square rounded once, the cube in f64 rounded
        // to f32 (powf is several times slower and not always correctly rounded)
        Stage::Binary(Map::Pow, a, Src::Const(2.0)) => {
            let a = src(a);
            format!("({a} * {a})")
        }
        Stage::Binary(Map::Pow, a, Src::Const(3.0)) => {
            let a = src(a);
            format!("(float)((double)({a}) * (double)({a}) * (double)({a}))")
        }
        Stage::Binary(m, a, b) => binary(m, &src(a), &src(b))?,
        Stage::Select(p, t, f) => format!("({} != 0.0f) ? {} : {}", src(p), src(t), src(f)),
    })
}

/// Folds across a block (a multiple of 32 threads) for row regions: within each warp by
/// shuffles, then across the warps' results in shared memory; every thread gets the result.
const BLOCK_FOLDS: &str = r#"
__device__ __forceinline__ float f_sum(float a, float b) { return a + b; }
__device__ __forceinline__ float f_max(float a, float b) { return (a > b || isnan(a)) ? a : b; }
__device__ __forceinline__ float f_min(float a, float b) { return (a < b || isnan(a)) ? a : b; }
#define BLOCK_FOLD(NAME, OP, IDENT) \
__device__ float NAME(float v, float* sh) { \
  for (int o = 16; o > 0; o >>= 1) v = OP(v, __shfl_xor_sync(0xffffffffu, v, o)); \
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v; \
  __syncthreads(); \
  if (threadIdx.x < 32) { \
    v = threadIdx.x < (blockDim.x >> 5) ? sh[threadIdx.x] : (IDENT); \
    for (int o = 16; o > 0; o >>= 1) v = OP(v, __shfl_xor_sync(0xffffffffu, v, o)); \
    if (threadIdx.x == 0) sh[32] = v; \
  } \
  __syncthreads(); \
  v = sh[32]; \
  __syncthreads(); \
  return v; \
}
BLOCK_FOLD(fold_sum, f_sum, 0.0f)
BLOCK_FOLD(fold_max, f_max, __int_as_float(0xff800000))
BLOCK_FOLD(fold_min, f_min, __int_as_float(0x7f800000))
#define WARP_FOLD(NAME, OP) \
__device__ __forceinline__ float NAME(float v) { \
  for (int o = 16; o > 0; o >>= 1) v = OP(v, __shfl_xor_sync(0xffffffffu, v, o)); \
  return v; \
}
WARP_FOLD(warp_sum, f_sum)
WARP_FOLD(warp_max, f_max)
WARP_FOLD(warp_min, f_min)
"#;

/// The CUDA C source of a row region (see [`rows`]): a grid-stride loop over rows, a warp or
/// a block per row ([`rows::Plan::threads`]), each thread computing `per` elements of the row
/// (`c = lane + q * lanes`) in registers; per-row values are computed by every thread of the
/// row. Writes the steps `written` (full-size ones per element, per-row ones by thread
/// 0); `None` when a step has no CUDA form.
pub(super) fn row_source(
    plan: &rows::Plan,
    written: &[usize],
    strides: &[Vec<usize>],
    restrict: bool,
) -> Option<String> {
    let g = plan.threads();
    let (threads, lanes, per) = (g.threads, g.lanes, g.per);
    let warp = lanes == 32;
    let (cols, full) = (plan.cols, &plan.full);
    let mut s = String::from(BLOCK_FOLDS);
    s.push_str(&header_with(
        &format!("__launch_bounds__({threads}) "),
        plan.ext.len(),
        written.len(),
        restrict,
    ));
    if warp {
        // a warp per row: every fold is a warp's shuffles, no block synchronisation
        let _ = writeln!(
            s,
            "  const unsigned int lane = threadIdx.x & 31u;\n  for (unsigned long long r = \
             blockIdx.x * {rpb}ULL + (threadIdx.x >> 5); r < n; r += gridDim.x * {rpb}ULL) {{",
            rpb = g.rows_per_block()
        );
    } else {
        s.push_str("  const unsigned int lane = threadIdx.x;\n  __shared__ float sh[33];\n");
        s.push_str("  for (unsigned long long r = blockIdx.x; r < n; r += gridDim.x) {\n");
    }
    let each = |body: &str| {
        format!(
            "    for (int q = 0; q < {per}; q++) {{ unsigned long long c = lane + q * {lanes}ULL; {body} }}\n"
        )
    };
    for (j, (e, st)) in plan.ext.iter().zip(strides).enumerate() {
        let layout = Layout::of(e.tensor.shape(), full);
        let index = operand_index(&e.tensor, st, full, layout)?;
        match e.level {
            rows::Level::Full => {
                let _ = writeln!(s, "    float x{j}[{per}];");
                s.push_str(&each(&format!(
                    "unsigned long long i = r * {cols}ULL + c; x{j}[q] = c < {cols}ULL ? e{j}[{index}] : 0.0f;"
                )));
            }
            _ => {
                let _ = writeln!(
                    s,
                    "    float x{j}; {{ unsigned long long i = r * {cols}ULL; x{j} = e{j}[{index}]; }}"
                );
            }
        }
    }
    let full_level = |v: Src| match v {
        Src::Stage(k) => plan.levels[k] == rows::Level::Full,
        Src::Ext(j) => plan.ext[j].level == rows::Level::Full,
        Src::Const(_) => false,
    };
    // an operand inside the per-element loop, and outside it
    let element = |v: Src| match v {
        Src::Stage(k) if full_level(v) => format!("s{k}[q]"),
        Src::Ext(j) if full_level(v) => format!("x{j}[q]"),
        Src::Stage(k) => format!("s{k}"),
        Src::Ext(j) => format!("x{j}"),
        Src::Const(c) => constant(c),
    };
    for (k, step) in plan.steps.iter().enumerate() {
        let full_step = plan.levels[k] == rows::Level::Full;
        let expr = match *step {
            rows::Step::Map(stage) => expression(stage, &element)?,
            rows::Step::Same(v) => element(v),
            rows::Step::Fold(fold, v) => {
                let (name, ident) = match fold {
                    rows::Fold::Sum => ("sum", "0.0f"),
                    rows::Fold::Max => ("max", "__int_as_float(0xff800000)"),
                    rows::Fold::Min => ("min", "__int_as_float(0x7f800000)"),
                };
                let _ = writeln!(s, "    float s{k}; {{ float a = {ident};");
                s.push_str(&each(&format!(
                    "if (c < {cols}ULL) a = f_{name}(a, {});",
                    element(v)
                )));
                if warp {
                    let _ = writeln!(s, "    s{k} = warp_{name}(a); }}");
                } else {
                    let _ = writeln!(s, "    s{k} = fold_{name}(a, sh); }}");
                }
                continue;
            }
        };
        if full_step {
            let _ = writeln!(s, "    float s{k}[{per}];");
            s.push_str(&each(&format!("s{k}[q] = {expr};")));
        } else {
            let _ = writeln!(s, "    float s{k} = {expr};");
        }
    }
    for (o, &k) in written.iter().enumerate() {
        let numel: usize = plan.shapes[k].iter().product();
        let value = element(Src::Stage(k));
        if numel == plan.rows * cols {
            s.push_str(&each(&format!(
                "if (c < {cols}ULL) o{o}[r * {cols}ULL + c] = {value};"
            )));
        } else if plan.levels[k] == rows::Level::Row && numel == plan.rows {
            let _ = writeln!(s, "    if (lane == 0) o{o}[r] = s{k};");
        } else {
            return None;
        }
    }
    s.push_str("  }\n}\n");
    Some(s)
}

/// An f32 constant, bit for bit (NaN payloads and signed zeros included).
fn constant(c: f32) -> String {
    format!("__uint_as_float({:#010x}u)", c.to_bits())
}

fn unary(m: Map, a: &str) -> Option<String> {
    let f = match m {
        Map::Neg => return Some(format!("-{a}")),
        Map::Rsqrt => return Some(format!("1.0f / sqrtf({a})")),
        Map::Abs => "fabsf",
        Map::Sqrt => "sqrtf",
        Map::Exp => return Some(crate::cuda::elementwise::rounded_call("exp", a)),
        Map::Log => return Some(crate::cuda::elementwise::rounded_call("log", a)),
        Map::Sin | Map::Exact(Fun::Sin) => "sinf",
        Map::Cos | Map::Exact(Fun::Cos) => "cosf",
        Map::Tanh | Map::Exact(Fun::Tanh) => "tanhf",
        _ => return None,
    };
    Some(format!("{f}({a})"))
}

fn binary(m: Map, a: &str, b: &str) -> Option<String> {
    let cmp = |op: &str| format!("({a} {op} {b}) ? 1.0f : 0.0f");
    Some(match m {
        Map::Add => format!("{a} + {b}"),
        Map::Sub => format!("{a} - {b}"),
        Map::Mul => format!("{a} * {b}"),
        Map::Div => format!("{a} / {b}"),
        Map::Pow => format!("powf({a}, {b})"),
        Map::Max => format!("({a} > {b} || isnan({a})) ? {a} : {b}"),
        Map::Min => format!("({a} < {b} || isnan({a})) ? {a} : {b}"),
        Map::Cmp(c) => cmp(match c {
            Compare::Equal => "==",
            Compare::NotEqual => "!=",
            Compare::Less => "<",
            Compare::LessEqual => "<=",
            Compare::Greater => ">",
            Compare::GreaterEqual => ">=",
        }),
        _ => return None,
    })
}

/// Runs `plan` over `n` elements as one kernel; the live results (shaped `shape`) in
/// instruction order, or `None` where the kernel does not apply.
pub(super) fn execute(
    plan: &Plan,
    n: usize,
    live_out: &[bool],
    shape: &[usize],
) -> Result<Option<Vec<Option<Tensor>>>> {
    let live = plan.written(live_out);
    let Some(strides) = operand_strides(plan.ext.iter().map(|e| &e.tensor)) else {
        return Ok(None);
    };
    let Some(code) = source(plan, &live, shape, &strides) else {
        return Ok(None);
    };
    let inputs: Vec<&Tensor> = plan.ext.iter().map(|e| &e.tensor).collect();
    let Some(results) = crate::cuda::elementwise::launch(&code, &inputs, live.len(), n, shape)?
    else {
        return Ok(None);
    };
    crate::profile::note_detail(|| {
        format!("{n} elements, {} in, {} out", inputs.len(), live.len())
    });
    plan.results(live_out, results).map(Some)
}
