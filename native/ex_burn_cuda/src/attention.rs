//! The CUDA kernel of a fused attention (`softmax(f(Q Kᵀ)) V` as the engine's
//! `program::attention` plans it, [`AttentionCall`]): one block per batch matrix
//! and block of [`ROWS`] query rows, each warp 16 of those rows. Keys and values come in
//! blocks of [`KEYS`] through shared memory; a warp computes its scores with TF32 tensor-core
//! products (`mma.sync` m16n8k8, as the GPU's f32 `dot` multiplies by default), applies the
//! steps, keeps the rows' running maxima and sums (the exponentials rescaled when a maximum
//! grows) and adds the probabilities times the values to its accumulators; the result is
//! divided by the sums at the end. The `[batch.., sq, sk]` scores are never written.
//!
//! Values as the op-by-op program computes them on the GPU up to the rounding of its two
//! TF32 products and of the softmax's order of operations; NaN and infinities as there: a
//! NaN score (NaN wins the maximum) or a `+inf` one makes its row NaN, a row whose every
//! score is `-inf` is NaN. Products small enough that op by op they are full f32 (below
//! [`crate::gemm::threshold`]) over at most 64 query rows go to the full-f32 kernel of one
//! row per block instead ([`crate::attention_rows`]). Not taken (the instructions run op by
//! op): products asking for full f32 accuracy, other full-f32 products, exact ones (at most
//! `EXACT_F32_WORK` multiply-adds), head sizes above 128, GPUs before compute capability 8.0
//! (for the TF32 kernel).

use crate::{attention_rows, elementwise};
use burn::DispatchTensor;
use ex_burn_core::kernels::{broadcast_strides, AttentionCall, AttentionSizes, Operand, ScoreStep};
use ex_burn_core::Result;
use std::fmt::Write;

/// Query rows per block (16 per warp).
const ROWS: usize = 64;

/// Keys per step through shared memory.
const KEYS: usize = 32;

/// Threads per block.
const THREADS: usize = ROWS * 2;

/// Largest head size (of `q`/`k` and of `v`) the kernel takes.
const MAX_HEAD: usize = 128;

/// TF32 `mma.sync` and `cp.async` need compute capability 8.0; the name profilers show.
const BUILD: elementwise::Build = elementwise::Build {
    arch: Some("compute_80"),
    entry: "exburn_attention",
};

/// Static shared memory a kernel may use.
const SHARED: usize = 48 * 1024;

/// A tensor's element strides over the scores' axes `[batch.., rows, cols]`, for the kernel.
pub(crate) struct Layout {
    pub(crate) batch: Vec<usize>,
    pub(crate) row: usize,
    pub(crate) col: usize,
}

impl Layout {
    /// Strides `batch` over the batch axes, `row` and `col` over the matrix's.
    pub(crate) fn new(batch: &[usize], row: usize, col: usize) -> Layout {
        Layout {
            batch: batch.to_vec(),
            row,
            col,
        }
    }
}

/// The attention `call` on the GPU, when every operand is an f32 CUDA tensor of the
/// expected shapes (predicates f32 or boolean) and the kernel takes them; `Ok(None)`
/// otherwise.
pub fn run(call: &AttentionCall) -> Result<Option<DispatchTensor>> {
    let (nb, q, k, v) = (call.batch_axes, call.q, call.k, call.v);
    let Some(sizes) = AttentionSizes::of(nb, q.shape, k.shape, v.shape) else {
        return Ok(None);
    };
    let (batch, nbatch, (sq, d, sk, dv)) = (sizes.batch, sizes.matrices(), sizes.dims());
    let work = nbatch
        .checked_mul(sq)
        .and_then(|w| w.checked_mul(sk))
        .and_then(|w| w.checked_mul(d.min(dv)));
    // rows and keys are counted in 32 bits in the kernels
    if d > MAX_HEAD || dv > MAX_HEAD || sq > i32::MAX as usize || sk > i32::MAX as usize {
        return Ok(None);
    }
    // Products below `EXACT_F32_WORK` are exact op by op: left to the instructions. Those
    // below the TF32 threshold are full f32 op by op: the kernel of one query row per block
    // (full f32 too) takes a few rows (generation's one new token), else the instructions run.
    let Some(work) = work.filter(|&w| w > ex_burn_core::op::EXACT_F32_WORK) else {
        return Ok(None);
    };
    let full_f32 = work < crate::gemm::threshold();
    if full_f32 && !attention_rows::takes(sq, sk) {
        return Ok(None);
    }
    let Some(index) = crate::queue::cube(q.prim).map(|c| c.device.index) else {
        return Ok(None);
    };
    if !full_f32 && crate::device::compute_capability(index)?.0 < 8 {
        return Ok(None);
    }
    let blocks = if full_f32 {
        nbatch.checked_mul(sq)
    } else {
        nbatch.checked_mul(sq.div_ceil(ROWS))
    };
    let Some(blocks) = blocks.filter(|&b| b <= i32::MAX as usize) else {
        return Ok(None);
    };
    let scores: Vec<usize> = [batch, &[sq, sk]].concat();
    // a mask as the kernel reads it: its element type and layout over the scores' axes
    let layout = |t: Operand| -> Option<(&'static str, Layout)> {
        let (ty, st) = elementwise::operand_layout(t)?;
        let full = broadcast_strides(t.shape, &st, &scores)?;
        Some((ty, Layout::new(&full[..nb], full[nb], full[nb + 1])))
    };
    // q, k, v as [batch.., rows, cols] over their own axes
    let own = |t: Operand| -> Option<Layout> {
        let st = elementwise::strides(t)?;
        (st.len() == nb + 2).then(|| Layout::new(&st[..nb], st[nb], st[nb + 1]))
    };
    let (Some(ql), Some(kl), Some(vl)) = (own(q), own(k), own(v)) else {
        return Ok(None);
    };
    // masks read as they are (f32 or boolean, broadcast views included; the engine cast
    // others to f32)
    let masks: Vec<Operand> = call
        .steps
        .iter()
        .filter_map(|&(step, pred, _)| pred.filter(|_| step == ScoreStep::Select))
        .collect();
    let selects = call
        .steps
        .iter()
        .filter(|(s, _, _)| *s == ScoreStep::Select)
        .count();
    if masks.len() != selects {
        return Ok(None);
    }
    let mut mask_layouts = Vec::with_capacity(masks.len());
    for &m in &masks {
        let Some(l) = layout(m) else { return Ok(None) };
        mask_layouts.push(l);
    }
    let shape = Shape {
        batch: batch.to_vec(),
        sq,
        sk,
        d,
        dv,
    };
    let steps: Vec<(ScoreStep, f32)> = call.steps.iter().map(|&(s, _, c)| (s, c)).collect();
    let (build, source, threads) = if full_f32 {
        let source = attention_rows::source(&shape, [&ql, &kl, &vl], &mask_layouts, &steps);
        (attention_rows::BUILD, source, attention_rows::THREADS)
    } else {
        if stages(&shape).is_none() {
            return Ok(None);
        }
        let source = source(&shape, [&ql, &kl, &vl], &mask_layouts, &steps);
        (BUILD, source, THREADS)
    };
    let mut inputs: Vec<Operand> = vec![q, k, v];
    inputs.extend(masks);
    let out: Vec<usize> = [batch, &[sq, dv]].concat();
    Ok(elementwise::submit_for(
        build,
        &source,
        &inputs,
        &[out],
        (blocks as u32, threads as u32),
        blocks,
        &[],
    )?
    .and_then(|mut o| o.pop()))
}

/// The sizes a kernel is generated for.
pub(crate) struct Shape {
    pub(crate) batch: Vec<usize>,
    pub(crate) sq: usize,
    pub(crate) sk: usize,
    pub(crate) d: usize,
    pub(crate) dv: usize,
}

/// Head sizes rounded up to the products' 8.
fn padded(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Shared memory of the kernel for `s` with `stages` buffers of keys and values: per stage a
/// key block and a value block, and a block of probabilities per warp (rows padded so the
/// warps' fragment reads hit distinct banks).
fn shared_bytes(s: &Shape, stages: usize) -> usize {
    4 * (stages * KEYS * (padded(s.d) + 4 + padded(s.dv) + 8) + ROWS * (KEYS + 4))
}

/// Buffers of keys and values: two (the next block is copied while this one is used) where
/// they fit in the shared memory, else one; `None` where not even one does.
fn stages(s: &Shape) -> Option<usize> {
    [2, 1].into_iter().find(|&n| shared_bytes(s, n) <= SHARED)
}

/// The mask element of `select` step `m` (its operand `e{3 + m}`) at score `(row, col)`.
pub(crate) fn mask_at(m: usize, l: &Layout, row: &str, col: &str) -> String {
    format!(
        "e{}[mo{m} + ({row}) * {}ULL + ({col}) * {}ULL]",
        3 + m,
        l.row,
        l.col
    )
}

/// The definitions by which the kernel skips blocks of keys: `SKIPPING` (1 where a `select`
/// step exists), `LAST_MASK(row, col)` (the last `select`'s mask: where it is 0 every score is
/// that step's fill, whatever came before) and `LAST_FILL` (that fill after the steps that
/// follow it, as the kernel computes them).
fn skipping(masks: &[(&str, Layout)], steps: &[(ScoreStep, f32)]) -> String {
    let Some(last) = steps
        .iter()
        .rposition(|(s, _)| matches!(s, ScoreStep::Select))
    else {
        return "#define SKIPPING 0\n".into();
    };
    let Some(m) = masks.len().checked_sub(1) else {
        return "#define SKIPPING 0\n".into();
    };
    let mut fill = float(steps[last].1);
    for &(step, c) in &steps[last + 1..] {
        fill = match step {
            ScoreStep::Divide => format!("({fill} / {})", float(c)),
            ScoreStep::Multiply => format!("({fill} * {})", float(c)),
            ScoreStep::Select => fill,
        };
    }
    format!(
        "#define SKIPPING 1\n#define LAST_MASK(row, col) {}\n#define LAST_FILL {fill}\n",
        mask_at(m, &masks[m].1, "row", "col")
    )
}

/// CUDA C declaring `qo`, `ko`, `vo` and `mo0..` (one per mask): the element offsets of batch
/// matrix `bi` (the kernel's variable) in `q`, `k`, `v` and each mask, from its coordinates
/// over the `batch` axes (row-major).
pub(crate) fn offsets(
    batch: &[usize],
    [q, k, v]: [&Layout; 3],
    masks: &[(&str, Layout)],
) -> String {
    let mut s = String::from("  unsigned long long qo = 0, ko = 0, vo = 0;\n");
    for m in 0..masks.len() {
        let _ = writeln!(s, "  unsigned long long mo{m} = 0;");
    }
    s.push_str("  { unsigned int r = bi, c;\n");
    for (a, &len) in batch.iter().enumerate().rev() {
        let _ = writeln!(s, "    c = r % {len}u; r /= {len}u;");
        let _ = write!(
            s,
            "    qo += c * {}ULL; ko += c * {}ULL; vo += c * {}ULL;",
            q.batch[a], k.batch[a], v.batch[a]
        );
        for (m, (_, l)) in masks.iter().enumerate() {
            let _ = write!(s, " mo{m} += c * {}ULL;", l.batch[a]);
        }
        s.push('\n');
    }
    s.push_str("  }\n");
    s
}

/// Whether a `[rows, cols]` operand of `cols` columns can be copied 16 bytes at a time:
/// contiguous rows of whole groups of four, every row and batch matrix starting at a multiple
/// of four elements (the kernel also checks the buffer's own alignment).
fn rows_of_four(l: &Layout, cols: usize) -> bool {
    l.col == 1
        && cols.is_multiple_of(4)
        && l.row.is_multiple_of(4)
        && l.batch.iter().all(|b| b.is_multiple_of(4))
}

/// Whether `x / c` equals `x * (1 / c)` for every `x`: `c` a power of two whose reciprocal is
/// a normal number.
fn exact_reciprocal(c: f32) -> bool {
    c.is_normal() && c.to_bits() & 0x007f_ffff == 0 && (1.0 / c).is_normal()
}

/// The CUDA C of a float constant, exactly (infinities and NaN included).
pub(crate) fn float(c: f32) -> String {
    format!("__int_as_float(0x{:08x})", c.to_bits())
}

/// The kernel for `shape` with operand layouts `[q, k, v]`, masks `e3..` (one per `select`
/// step, in order: element type and layout) and the steps with their constants.
fn source(
    shape: &Shape,
    [q, k, v]: [&Layout; 3],
    masks: &[(&str, Layout)],
    steps: &[(ScoreStep, f32)],
) -> String {
    let (dp, dvp) = (padded(shape.d), padded(shape.dv));
    let stages = stages(shape).unwrap_or(1);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"#define NEG_INF __int_as_float(0xff800000)
#define LOG2E 1.4426950408889634f
#define VEC_K {vec_k}
#define VEC_V {vec_v}
#define SQ {sq}u
#define SK {sk}u
#define D {d}u
#define DV {dv}u
#define DP {dp}
#define DVP {dvp}
#define KEYS {keys}
#define QBLOCKS {qblocks}u
#define STAGES {stages}
__device__ __forceinline__ unsigned tf32(float x) {{
  unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r;
}}
__device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {{
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};"
    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}}
/* an asynchronous copy of 4 bytes to shared memory (zeros where !ok, reading nothing) */
__device__ __forceinline__ unsigned smem(const void* p) {{
  unsigned d;
  asm("{{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }}" : "=r"(d) : "l"(p));
  return d;
}}
__device__ __forceinline__ void cp4(unsigned dst, const float* src, bool ok) {{
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}}
/* 16 bytes (both addresses 16-byte aligned) */
__device__ __forceinline__ void cp16(unsigned dst, const float* src, bool ok) {{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}}
/* rows kb..kb + KEYS of a [SK, COLS] operand at src (row stride rs, column stride cs) into the
   shared buffer at dst (PITCH floats a row; columns from COLS to PADDED and rows from SK on
   zero), asynchronously: 16 bytes a copy where `vec` (contiguous rows, all aligned), else 4 */
template <unsigned int COLS, unsigned int PADDED, unsigned int PITCH>
__device__ __forceinline__ void load_rows(unsigned dst, const float* src, unsigned long long rs,
                                          unsigned long long cs, unsigned int kb, bool vec) {{
  if (vec) {{
    for (unsigned int i = threadIdx.x; i < KEYS * PADDED / 4; i += {threads}u) {{
      const unsigned int r = i / (PADDED / 4), c = i % (PADDED / 4) * 4, key = kb + r;
      const bool ok = key < SK && c < COLS;
      cp16(dst + (r * PITCH + c) * 4, ok ? src + (key * rs + c) : src, ok);
    }}
  }} else {{
    for (unsigned int i = threadIdx.x; i < KEYS * PADDED; i += {threads}u) {{
      const unsigned int r = i / PADDED, c = i % PADDED, key = kb + r;
      const bool ok = key < SK && c < COLS;
      cp4(dst + (r * PITCH + c) * 4, ok ? src + (key * rs + c * cs) : src, ok);
    }}
  }}
}}
/* the maximum in which NaN wins, as the op-by-op reduce_max */
__device__ __forceinline__ float nanmax(float a, float b) {{ return (a != a || a > b) ? a : b; }}
extern "C" __global__ void __launch_bounds__({threads}, 4) exburn_attention(const float* __restrict__ e0, const float* __restrict__ e1, const float* __restrict__ e2, "#,
        sq = shape.sq,
        sk = shape.sk,
        d = shape.d,
        dv = shape.dv,
        keys = KEYS,
        qblocks = shape.sq.div_ceil(ROWS),
        threads = THREADS,
        stages = stages,
        vec_k = u8::from(rows_of_four(k, shape.d)),
        vec_v = u8::from(rows_of_four(v, shape.dv)),
    );
    for (m, (ty, _)) in masks.iter().enumerate() {
        let _ = write!(s, "const {ty}* __restrict__ e{}, ", 3 + m);
    }
    s.insert_str(0, &skipping(masks, steps));
    s.push_str("float* __restrict__ o0, unsigned long long n) {\n");
    let _ = write!(
        s,
        r#"  __shared__ __align__(16) float ks[STAGES][KEYS][DP + 4];
  __shared__ __align__(16) float vs[STAGES][KEYS][DVP + 8];
  __shared__ unsigned ps[{warps}][16][KEYS + 4];
  const unsigned int tile = blockIdx.x;
  if (tile >= n) return;
  /* the last query blocks first: under a causal mask they have the most keys to visit */
  const unsigned int qb = QBLOCKS - 1u - tile % QBLOCKS, bi = tile / QBLOCKS;
"#,
        warps = ROWS / 16
    );
    s.push_str(&offsets(&shape.batch, [q, k, v], masks));
    let _ = write!(
        s,
        r#"  const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const unsigned int r0 = qb * {rows}u + warp * 16u + g, r1 = r0 + 8u;
  unsigned qf[DP / 8][4];
#pragma unroll
  for (int kk = 0; kk < DP / 8; kk++) {{
    const unsigned int c0 = kk * 8 + t, c1 = c0 + 4;
    qf[kk][0] = tf32(r0 < SQ && c0 < D ? e0[qo + r0 * {qr}ULL + c0 * {qc}ULL] : 0.0f);
    qf[kk][1] = tf32(r1 < SQ && c0 < D ? e0[qo + r1 * {qr}ULL + c0 * {qc}ULL] : 0.0f);
    qf[kk][2] = tf32(r0 < SQ && c1 < D ? e0[qo + r0 * {qr}ULL + c1 * {qc}ULL] : 0.0f);
    qf[kk][3] = tf32(r1 < SQ && c1 < D ? e0[qo + r1 * {qr}ULL + c1 * {qc}ULL] : 0.0f);
  }}
  float acc[DVP / 8][4];
  float m0, m1, l0, l1;
  /* block `it` of keys and values into buffer `st`, asynchronously (one group per block): 16
     bytes a copy where rows are contiguous and aligned, else 4 */
  const unsigned ks0 = smem(&ks[0][0][0]), vs0 = smem(&vs[0][0][0]);
  const bool vk = VEC_K && ((unsigned long long)(e1 + ko) & 15) == 0;
  const bool vv = VEC_V && ((unsigned long long)(e2 + vo) & 15) == 0;
#define LOAD(IT, ST) {{ \
    load_rows<D, DP, DP + 4>(ks0 + (ST) * KEYS * (DP + 4) * 4, e1 + ko, {kr}ULL, {kc}ULL, (IT) * KEYS, vk); \
    load_rows<DV, DVP, DVP + 8>(vs0 + (ST) * KEYS * (DVP + 8) * 4, e2 + vo, {vr}ULL, {vc}ULL, (IT) * KEYS, vv); \
    asm volatile("cp.async.commit_group;" ::: "memory"); }}
  const unsigned int blocks = (SK + KEYS - 1) / KEYS;
  /* pass 0 skips blocks of keys whose every score is the fill (when that proves exact); pass 1,
     if needed, skips nothing */
  for (int pass = 0; pass < 2; pass++) {{
  int skipped = 0;
#pragma unroll
  for (int j = 0; j < DVP / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  m0 = NEG_INF; m1 = NEG_INF; l0 = 0.0f; l1 = 0.0f;
  LOAD(0u, 0u);
  for (unsigned int it = 0; it < blocks; it++) {{
    const unsigned int kb = it * KEYS, st = it % STAGES;
#if STAGES > 1
    if (it + 1 < blocks) {{
      LOAD(it + 1, (it + 1) % STAGES);
      asm volatile("cp.async.wait_group 1;" ::: "memory");
    }} else {{
      asm volatile("cp.async.wait_group 0;" ::: "memory");
    }}
#else
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
    __syncthreads();
    bool skip = false;
#if SKIPPING
    /* the last mask at this thread's scores, bit nt * 4 + j (0 outside the scores) */
    unsigned int lm = 0;
#pragma unroll
    for (int nt = 0; nt < KEYS / 8; nt++)
#pragma unroll
      for (int j = 0; j < 4; j++) {{
        const unsigned int row = j < 2 ? r0 : r1, col = kb + nt * 8 + 2 * t + (j & 1);
        if (row < SQ && col < SK && LAST_MASK(row, col) != 0) lm |= 1u << (nt * 4 + j);
      }}
    const int keep = lm != 0;
    if (pass == 0) {{
      if (!__syncthreads_or(keep)) {{
        /* every score is the fill; a value that is not finite (0 times it: NaN) keeps the block */
        int bad = 0;
        for (unsigned int i = threadIdx.x; i < KEYS * DVP; i += {threads}u) {{
          const unsigned int r = i / DVP, c = i % DVP;
          if (kb + r < SK && c < DV && !isfinite(vs[st][r][c])) bad = 1;
        }}
        skip = !__syncthreads_or(bad);
      }}
    }}
#endif
    if (skip) {{
      skipped = 1;
    }} else {{
    float s[KEYS / 8][4];
#pragma unroll
    for (int nt = 0; nt < KEYS / 8; nt++) {{
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < DP / 8; kk++)
        mma(s[nt], qf[kk], tf32(ks[st][nt * 8 + g][kk * 8 + t]), tf32(ks[st][nt * 8 + g][kk * 8 + t + 4]));
    }}
    float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
    for (int nt = 0; nt < KEYS / 8; nt++) {{
#pragma unroll
      for (int j = 0; j < 4; j++) {{
        const unsigned int row = j < 2 ? r0 : r1, col = kb + nt * 8 + 2 * t + (j & 1);
        float x = s[nt][j];
        if (col < SK) {{
"#,
        rows = ROWS,
        threads = THREADS,
        qr = q.row,
        qc = q.col,
        kr = k.row,
        kc = k.col,
        vr = v.row,
        vc = v.col,
    );
    let mut mask = 0;
    let last = steps
        .iter()
        .rposition(|(s, _)| matches!(s, ScoreStep::Select));
    for (i, &(step, c)) in steps.iter().enumerate() {
        match step {
            // by a power of two: the product by its reciprocal is the same number
            ScoreStep::Divide if exact_reciprocal(c) => {
                let _ = writeln!(s, "          x = x * {};", float(1.0 / c));
            }
            ScoreStep::Divide => {
                let _ = writeln!(s, "          x = x / {};", float(c));
            }
            ScoreStep::Multiply => {
                let _ = writeln!(s, "          x = x * {};", float(c));
            }
            ScoreStep::Select if Some(i) == last => {
                let _ = writeln!(
                    s,
                    "          if (!((lm >> (nt * 4 + j)) & 1u)) x = {};",
                    float(c)
                );
                mask += 1;
            }
            ScoreStep::Select => {
                let _ = writeln!(
                    s,
                    "          if (row < SQ && {} == 0) x = {};",
                    mask_at(mask, &masks[mask].1, "row", "col"),
                    float(c)
                );
                mask += 1;
            }
        }
    }
    s.push_str(
        r#"        } else {
          x = NEG_INF;
        }
        s[nt][j] = x;
        if (j < 2) mx0 = nanmax(mx0, x); else mx1 = nanmax(mx1, x);
      }
    }
    mx0 = nanmax(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = nanmax(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = nanmax(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = nanmax(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float n0 = nanmax(m0, mx0), n1 = nanmax(m1, mx1);
    /* a row with no finite score yet keeps exponentials of 0 (not NaN from -inf - -inf) */
    const float b0 = n0 == NEG_INF ? 0.0f : n0, b1 = n1 == NEG_INF ? 0.0f : n1;
    const float c0 = exp2f((m0 - b0) * LOG2E), c1 = exp2f((m1 - b1) * LOG2E);
    const float bl0 = b0 * LOG2E, bl1 = b1 * LOG2E;
    m0 = n0; m1 = n1; l0 *= c0; l1 *= c1;
#pragma unroll
    for (int j = 0; j < DVP / 8; j++) { acc[j][0] *= c0; acc[j][1] *= c0; acc[j][2] *= c1; acc[j][3] *= c1; }
#pragma unroll
    for (int nt = 0; nt < KEYS / 8; nt++) {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const float p = exp2f(fmaf(s[nt][j], LOG2E, -(j < 2 ? bl0 : bl1)));
        if (j < 2) l0 += p; else l1 += p;
        ps[warp][j < 2 ? g : g + 8][nt * 8 + 2 * t + (j & 1)] = tf32(p);
      }
    }
    __syncwarp();
#pragma unroll
    for (int kk = 0; kk < KEYS / 8; kk++) {
      unsigned a[4];
      a[0] = ps[warp][g][kk * 8 + t];
      a[1] = ps[warp][g + 8][kk * 8 + t];
      a[2] = ps[warp][g][kk * 8 + t + 4];
      a[3] = ps[warp][g + 8][kk * 8 + t + 4];
#pragma unroll
      for (int j = 0; j < DVP / 8; j++)
        mma(acc[j], a, tf32(vs[st][kk * 8 + t][j * 8 + g]), tf32(vs[st][kk * 8 + t + 4][j * 8 + g]));
    }
    }
    /* every warp is done with buffer `st` (and its probabilities) before they are refilled */
    __syncthreads();
#if STAGES == 1
    if (it + 1 < blocks) LOAD(it + 1, 0u);
#endif
  }
#if SKIPPING
  /* skipping was exact when the fill's exponential is 0 in every row (the fill is far below
     each row's maximum); otherwise (or for a row without a finite maximum) pass 1 */
  if (pass == 0 && skipped) {
    const float F = LAST_FILL;
    const int fail = (r0 < SQ && !(F - m0 < -128.0f)) || (r1 < SQ && !(F - m1 < -128.0f));
    if (__syncthreads_or(fail)) continue;
  }
#endif
  break;
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const unsigned long long out = (unsigned long long)bi * SQ * DV;
#pragma unroll
  for (int j = 0; j < DVP / 8; j++) {
    const unsigned int col = j * 8 + 2 * t;
    if (r0 < SQ && col < DV) o0[out + (unsigned long long)r0 * DV + col] = acc[j][0] / l0;
    if (r0 < SQ && col + 1 < DV) o0[out + (unsigned long long)r0 * DV + col + 1] = acc[j][1] / l0;
    if (r1 < SQ && col < DV) o0[out + (unsigned long long)r1 * DV + col] = acc[j][2] / l1;
    if (r1 < SQ && col + 1 < DV) o0[out + (unsigned long long)r1 * DV + col + 1] = acc[j][3] / l1;
  }
}
"#,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_powers_of_two_divide_as_products() {
        assert!(exact_reciprocal(8.0) && exact_reciprocal(0.125) && exact_reciprocal(-2.0));
        for c in [
            3.0,
            0.1,
            f32::INFINITY,
            f32::NAN,
            0.0,
            f32::MAX,
            f32::MIN_POSITIVE / 2.0,
        ] {
            assert!(!exact_reciprocal(c), "{c}");
        }
    }

    #[test]
    fn attention_sources_compile() {
        // GPT-2's heads: q, k, v strided views of one projection; a causal mask broadcast
        let shape = Shape {
            batch: vec![8, 12],
            sq: 512,
            sk: 512,
            d: 64,
            dv: 64,
        };
        let qkv = Layout::new(&[512 * 2304, 64], 2304, 1);
        let mask = ("unsigned char", Layout::new(&[0, 0], 512, 1));
        let steps = [(ScoreStep::Divide, 8.0), (ScoreStep::Select, -1.0e9)];
        assert_eq!(stages(&shape), Some(2));
        let src = source(&shape, [&qkv, &qkv, &qkv], &[mask], &steps);
        elementwise::assert_compiles_for(BUILD.arch, &src);
        // odd sizes: padded heads, no mask, a product step
        let odd = Shape {
            batch: vec![3],
            sq: 37,
            sk: 41,
            d: 20,
            dv: 12,
        };
        let l = Layout::new(&[41 * 20], 20, 1);
        elementwise::assert_compiles_for(
            BUILD.arch,
            &source(&odd, [&l, &l, &l], &[], &[(ScoreStep::Multiply, 0.125)]),
        );
        // the largest heads fit the shared memory
        let big = Shape {
            batch: vec![1],
            sq: 1,
            sk: 1,
            d: MAX_HEAD,
            dv: MAX_HEAD,
        };
        assert_eq!(stages(&big), Some(1));
    }
}
