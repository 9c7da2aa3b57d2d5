//! f32 element-wise runs on NVIDIA GPUs as one kernel each: the plan of [`map32`] written as
//! CUDA C ([`source`]) and run by `cuda::elementwise`.
//!
//! Each element is computed as Burn's kernels compute it op by op: the same IEEE operations
//! in the same order, without fused multiply-adds, the CUDA math library's `expf`, `tanhf`,
//! ..., Nx's `max`/`min` (NaN wins), comparisons as masks, `select` on non-zero. Constants
//! are the literals' f32 values, written bit-exactly.

use super::map32::{Layout, Map, Plan, Src, Stage};
use crate::op::exact32::Fun;
use crate::op::Compare;
use crate::{Result, Tensor};
use std::fmt::Write;

/// How element `i` of the run (of shape `full`) reads an operand of shape `shape` stored with
/// `strides`: the layout's index where the operand is contiguous, else the sum over its
/// axes (right-aligned with `full`; unit and broadcast axes, of stride 0, skipped) of the
/// coordinate times the stride.
fn index(layout: Layout, shape: &[usize], strides: &[usize], full: &[usize]) -> String {
    let mut want = 1;
    let contiguous = shape.iter().zip(strides).rev().all(|(&d, &s)| {
        let ok = d == 1 || s == want;
        want *= d;
        ok
    });
    if contiguous {
        return match layout {
            Layout::Full => "i".to_string(),
            Layout::Rows(m) => format!("i % {m}ULL"),
            Layout::Columns(inner) => format!("i / {inner}ULL"),
        };
    }
    let offset = full.len() - shape.len();
    let mut terms = Vec::new();
    for (a, (&d, &st)) in shape.iter().zip(strides).enumerate() {
        if d == 1 || st == 0 {
            continue;
        }
        let k = a + offset;
        let inner: usize = full[k + 1..].iter().product();
        terms.push(format!("(i / {inner}ULL % {}ULL) * {st}ULL", full[k]));
    }
    if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    }
}

/// The CUDA C source of `plan` over a run of shape `full` for outputs `live` (step indices,
/// in order), reading the operands with `strides`; `None` when a step has no CUDA form.
pub(super) fn source(
    plan: &Plan,
    live: &[usize],
    full: &[usize],
    strides: &[Vec<usize>],
) -> Option<String> {
    let mut s = String::from("extern \"C\" __global__ void ");
    s.push_str(crate::cuda::elementwise::ENTRY);
    s.push('(');
    for j in 0..plan.ext.len() {
        let _ = write!(s, "const float* __restrict__ e{j}, ");
    }
    for q in 0..live.len() {
        let _ = write!(s, "float* __restrict__ o{q}, ");
    }
    s.push_str("unsigned long long n) {\n");
    s.push_str(
        "  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {\n",
    );
    for (j, (e, st)) in plan.ext.iter().zip(strides).enumerate() {
        // a scalar's buffer has one axis of one element
        let shape = match e.tensor.shape() {
            [] => &[1][..],
            s => s,
        };
        if shape.len() != st.len() || shape.len() > full.len().max(1) {
            return None;
        }
        let index = index(e.layout, shape, st, full);
        let _ = writeln!(s, "    float x{j} = e{j}[{index}];");
    }
    let src = |v: Src| match v {
        Src::Stage(k) => format!("s{k}"),
        Src::Ext(j) => format!("x{j}"),
        Src::Const(c) => constant(c),
    };
    for (k, step) in plan.steps.iter().enumerate() {
        let expr = match *step {
            Stage::Const(c) => constant(c),
            Stage::Unary(m, a) => unary(m, &src(a))?,
            Stage::Binary(m, a, b) => binary(m, &src(a), &src(b))?,
            Stage::Select(p, t, f) => format!("({} != 0.0f) ? {} : {}", src(p), src(t), src(f)),
        };
        let _ = writeln!(s, "    float s{k} = {expr};");
    }
    for (q, &k) in live.iter().enumerate() {
        let _ = writeln!(s, "    o{q}[i] = s{k};");
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
        Map::Exp => "expf",
        Map::Log => "logf",
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
    let Some(strides) = plan
        .ext
        .iter()
        .map(|e| crate::cuda::elementwise::strides(&e.tensor))
        .collect::<Option<Vec<_>>>()
    else {
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
    plan.results(live_out, results).map(Some)
}
