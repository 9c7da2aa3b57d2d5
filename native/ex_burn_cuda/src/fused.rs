//! Fused work of programs on NVIDIA GPUs as one kernel each, written as CUDA C and run by
//! [`crate::elementwise`]: f32 element-wise runs ([`MapRun`], [`source`]) and row regions
//! ([`RowRegion`], [`row_source`]), as the engine planned them (`program::fuse`).
//!
//! Each element is computed as ExBurn computes it op by op: the same IEEE operations in the
//! same order, without fused multiply-adds, `exp` and `log` in f64 rounded once to f32 (as
//! the op table does on CUDA, and as Nx.BinaryBackend does), the CUDA math library's `tanhf`,
//! `sinf`, ..., Nx's `max`/`min` (NaN wins), comparisons as masks, `select` on non-zero.
//! Constants are the literals' f32 values, written bit-exactly.
//!
//! A row region's kernel computes a row per warp or per block: every element-wise step of
//! the row's elements stays in registers, each reduction is a sum, max or min across the
//! warp or block, and per-row values are computed once per row; sums add in another order
//! than Burn's reduction kernel (rounding may differ in the last bits).

use crate::elementwise::{self, grid_loop, header, header_with};
use burn::DispatchTensor;
use ex_burn_core::kernels::{
    Comparison, Exact, Fold, Layout, Level, Map, MapRun, Operand, RowRegion, RowStep, Src, Stage,
};
use ex_burn_core::Result;
use std::fmt::Write;

/// How element `i` of the run (of shape `full`) reads an operand of shape `shape` stored with
/// `strides`: the layout's index where the operand is contiguous, else the sum over its
/// axes (right-aligned with `full`; unit and broadcast axes, of stride 0, skipped) of the
/// coordinate times the stride.
fn index(layout: Option<Layout>, shape: &[usize], strides: &[usize], full: &[usize]) -> String {
    let contiguous = crate::views::contiguous(shape, strides);
    if let (true, Some(layout)) = (contiguous, layout) {
        let total: usize = full.iter().product();
        return match layout {
            Layout::Full => "i".to_string(),
            Layout::Rows(m) => elementwise::coordinate(1, m, total),
            Layout::Columns(inner) => elementwise::coordinate(inner, 0, total),
            Layout::Middle(len, inner) => elementwise::coordinate(inner, len, total),
        };
    }
    elementwise::strided_index(shape, strides, full)
}

/// How element `i` of a result of shape `full` reads operand `t` stored with `strides` (see
/// [`index`]); `None` where its axes do not fit `full`.
fn operand_index(
    t: Operand,
    strides: &[usize],
    full: &[usize],
    layout: Option<Layout>,
) -> Option<String> {
    // a scalar's buffer has one axis of one element
    let shape = match t.shape {
        [] => &[1][..],
        s => s,
    };
    if shape.len() != strides.len() || shape.len() > full.len().max(1) {
        return None;
    }
    Some(index(layout, shape, strides, full))
}

/// The strides of every operand (see [`elementwise::strides`]), `None` if one has none.
fn operand_strides<'a>(operands: impl IntoIterator<Item = Operand<'a>>) -> Option<Vec<Vec<usize>>> {
    operands.into_iter().map(elementwise::strides).collect()
}

/// The CUDA C source of `run` writing its written steps, reading the operands with
/// `strides`; `None` when a step has no CUDA form.
pub fn source(run: &MapRun, strides: &[Vec<usize>]) -> Option<String> {
    let (live, full) = (run.written, run.shape);
    let mut s = header("", run.operands.len(), live.len());
    s.push_str(&grid_loop("i"));
    for (j, (&(t, layout), st)) in run.operands.iter().zip(strides).enumerate() {
        let index = operand_index(t, st, full, Some(layout))?;
        let _ = writeln!(s, "    float x{j} = e{j}[{index}];");
    }
    let src = |v: Src| match v {
        Src::Stage(k) => format!("s{k}"),
        Src::Ext(j) => format!("x{j}"),
        Src::Const(c) => constant(c),
    };
    for (k, step) in run.steps.iter().enumerate() {
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
        Stage::Same(a) => src(a),
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

/// The CUDA C source of a row region: a grid-stride loop over rows, a warp or a block per
/// row ([`threads`]), each thread computing `per` elements of the row (`c = lane + q *
/// lanes`) in registers; per-row values are computed by every thread of the row. Writes the
/// region's written steps (full-size ones per element, per-row ones by thread 0), reading the
/// operands with `strides` (through `__restrict__` pointers where `restrict`: no result is
/// written over an operand); `None` when a step has no CUDA form.
pub fn row_source(region: &RowRegion, strides: &[Vec<usize>], restrict: bool) -> Option<String> {
    let written = region.written;
    let g = threads(region);
    let (threads, lanes, per) = (g.threads, g.lanes, g.per);
    let warp = lanes == 32;
    let (cols, full) = (region.cols, region.full);
    let mut s = String::from(BLOCK_FOLDS);
    s.push_str(&header_with(
        &format!("__launch_bounds__({threads}) "),
        region.operands.len(),
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
    for (j, (e, st)) in region.operands.iter().zip(strides).enumerate() {
        let layout = Layout::of(e.operand.shape, full);
        let index = operand_index(e.operand, st, full, layout)?;
        match e.level {
            Level::Full => {
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
        Src::Stage(k) => region.levels[k] == Level::Full,
        Src::Ext(j) => region.operands[j].level == Level::Full,
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
    for (k, step) in region.steps.iter().enumerate() {
        let full_step = region.levels[k] == Level::Full;
        let expr = match *step {
            RowStep::Map(stage) => expression(stage, &element)?,
            RowStep::Same(v) => element(v),
            RowStep::Fold(fold, v) => {
                let (name, ident) = match fold {
                    Fold::Sum => ("sum", "0.0f"),
                    Fold::Max => ("max", "__int_as_float(0xff800000)"),
                    Fold::Min => ("min", "__int_as_float(0x7f800000)"),
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
        let numel: usize = region.shapes[k].iter().product();
        let value = element(Src::Stage(k));
        if numel == region.rows * cols {
            s.push_str(&each(&format!(
                "if (c < {cols}ULL) o{o}[r * {cols}ULL + c] = {value};"
            )));
        } else if region.levels[k] == Level::Row && numel == region.rows {
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
        Map::Rsqrt => return Some(format!("(float)(1.0 / sqrt((double){a}))")),
        Map::Abs => "fabsf",
        Map::Sqrt => "sqrtf",
        Map::Exp | Map::Exact(Exact::Exp) => return Some(elementwise::rounded_call("exp", a)),
        Map::Log => return Some(elementwise::rounded_call("log", a)),
        Map::Sin | Map::Exact(Exact::Sin) => "sinf",
        Map::Cos | Map::Exact(Exact::Cos) => "cosf",
        Map::Tanh | Map::Exact(Exact::Tanh) => "tanhf",
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
            Comparison::Equal => "==",
            Comparison::NotEqual => "!=",
            Comparison::Less => "<",
            Comparison::LessEqual => "<=",
            Comparison::Greater => ">",
            Comparison::GreaterEqual => ">=",
        }),
        _ => return None,
    })
}

/// `run` as one kernel: the results of its written steps in order, or `None` where the
/// kernel does not apply (an operand not an f32 CUDA tensor, a step without a CUDA form).
pub fn map_run(run: &MapRun) -> Result<Option<Vec<DispatchTensor>>> {
    let Some(strides) = operand_strides(run.operands.iter().map(|&(t, _)| t)) else {
        return Ok(None);
    };
    let Some(code) = source(run, &strides) else {
        return Ok(None);
    };
    let inputs: Vec<Operand> = run.operands.iter().map(|&(t, _)| t).collect();
    let n = run.shape.iter().product();
    elementwise::launch(&code, &inputs, run.written.len(), n, run.shape)
}

/// Threads per block at most.
const MAX_BLOCK: usize = 256;

/// Elements of a row one thread computes at most (kept in registers): rows up to 512 with a
/// warp per row, 4,096 with 256 threads, 16,384 with 1,024.
const MAX_PER_THREAD: usize = 16;

/// The longest rows a row kernel takes (a block of 1,024 threads, [`MAX_PER_THREAD`] each).
pub const ROW_LIMIT: usize = 1024 * MAX_PER_THREAD;

/// Row elements of full-size operands one thread of a warp-per-row kernel holds at most:
/// with more (the gradient of softmax reads seven operands), registers spill and a block per
/// row is faster.
const WARP_REGISTERS: usize = 48;

/// How a row kernel's threads cover the rows: `threads` per block, `lanes` of them per row
/// (a warp, or the whole block), each computing `per` elements of its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threads {
    /// Threads per block.
    pub threads: usize,
    /// Threads per row: 32 (a warp per row, `threads / 32` rows per block) or `threads`.
    pub lanes: usize,
    /// Row elements per thread.
    pub per: usize,
}

impl Threads {
    /// Rows one block computes at a time.
    pub fn rows_per_block(&self) -> usize {
        self.threads / self.lanes
    }
}

/// How the kernel of `region` covers its rows (see [`Threads`]).
pub fn threads(region: &RowRegion) -> Threads {
    let full_inputs = region
        .operands
        .iter()
        .filter(|e| e.level == Level::Full)
        .count();
    if region.cols <= 32 * MAX_PER_THREAD
        && full_inputs * region.cols.div_ceil(32) <= WARP_REGISTERS
    {
        // short rows (attention's 512) of few operands: a warp per row, reductions by
        // shuffles alone; a block per row of a few elements per thread spends its time in the
        // block's synchronisations
        return Threads {
            threads: MAX_BLOCK,
            lanes: 32,
            per: region.cols.div_ceil(32),
        };
    }
    let threads = if region.cols > MAX_BLOCK * MAX_PER_THREAD {
        1024
    } else {
        MAX_BLOCK
    };
    Threads {
        threads,
        lanes: threads,
        per: region.cols.div_ceil(threads),
    }
}

/// For each written result of `region` (in order), the operand whose buffer it may be
/// written over: a donated full-size operand of as many elements that no other tensor holds.
fn reuse(region: &RowRegion) -> Vec<Option<usize>> {
    let mut used = vec![false; region.operands.len()];
    region
        .written
        .iter()
        .map(|&k| {
            let count: usize = region.shapes[k].iter().product();
            if region.levels[k] != Level::Full || count != region.rows * region.cols {
                return None;
            }
            let j = (0..region.operands.len()).find(|&j| {
                let e = &region.operands[j];
                !used[j] && e.donated && elementwise::reusable(e.operand, count)
            })?;
            used[j] = true;
            Some(j)
        })
        .collect()
}

/// `region` as one kernel: the results of its written steps in order, or `None` where the
/// kernel does not apply. Results may be written over donated operands: each thread reads all
/// of its elements of every operand before it writes any.
pub fn row_region(region: &RowRegion) -> Result<Option<Vec<DispatchTensor>>> {
    let Some(strides) = operand_strides(region.operands.iter().map(|e| e.operand)) else {
        return Ok(None);
    };
    let reuse = reuse(region);
    let restrict = reuse.iter().all(Option::is_none);
    let Some(code) = row_source(region, &strides, restrict) else {
        return Ok(None);
    };
    let inputs: Vec<Operand> = region.operands.iter().map(|e| e.operand).collect();
    let shapes: Vec<Vec<usize>> = region
        .written
        .iter()
        .map(|&k| region.shapes[k].clone())
        .collect();
    let g = threads(region);
    elementwise::launch_rows(
        &code,
        &inputs,
        &shapes,
        region.rows,
        (g.threads, g.rows_per_block()),
        &reuse,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ex_burn_core::kernels::RowOperand;
    use ex_burn_core::{DType, Device, Tensor};

    /// The region `program::fuse::rows` plans for a masked softmax over [6, 300] (its test
    /// `a_softmax_region_plans` checks the plan): one warp per row, and its CUDA C compiles
    /// with NVRTC where the library is found (no GPU needed).
    #[test]
    fn a_softmax_region_compiles() {
        let x = Tensor::from_bytes(&[0u8; 6 * 300 * 4], &[6, 300], DType::F32, Device::Cpu)
            .expect("a tensor");
        use Level::{Full, Row, Scalar};
        use Map::{Div, Exp, Sub};
        use Src::{Const, Ext, Stage as S};
        let steps = [
            RowStep::Map(Stage::Const(8.0)),
            RowStep::Map(Stage::Binary(Div, Ext(0), Const(8.0))),
            RowStep::Map(Stage::Const(-1.0e9)),
            RowStep::Map(Stage::Select(Ext(1), S(1), Const(-1.0e9))),
            RowStep::Fold(Fold::Max, S(3)),
            RowStep::Map(Stage::Binary(Sub, S(3), S(4))),
            RowStep::Map(Stage::Unary(Exp, S(5))),
            RowStep::Fold(Fold::Sum, S(6)),
            RowStep::Map(Stage::Binary(Div, S(6), S(7))),
        ];
        let levels = [Scalar, Full, Scalar, Full, Row, Full, Full, Row, Full];
        let (row, one, none) = (vec![6, 300], vec![6, 1], vec![]);
        let shapes = [
            none.clone(),
            row.clone(),
            none,
            row.clone(),
            one.clone(),
            row.clone(),
            row.clone(),
            one,
            row.clone(),
        ];
        let operand = RowOperand {
            operand: x.operand(),
            level: Full,
            donated: false,
        };
        let region = RowRegion {
            steps: &steps,
            levels: &levels,
            shapes: &shapes,
            operands: vec![operand, operand],
            full: &row,
            rows: 6,
            cols: 300,
            written: &[8, 4, 7],
        };
        let warp = Threads {
            threads: 256,
            lanes: 32,
            per: 10,
        };
        assert_eq!(threads(&region), warp);
        let strides = vec![vec![300, 1]; 2];
        for restrict in [true, false] {
            let source = row_source(&region, &strides, restrict).expect("a CUDA form");
            assert_eq!(source.contains("__restrict__"), restrict);
            elementwise::assert_compiles(&source);
        }
    }
}
