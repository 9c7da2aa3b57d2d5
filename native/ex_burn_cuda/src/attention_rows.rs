//! The CUDA kernel of a fused attention whose products are full f32 op by op (below
//! [`crate::gemm::threshold`]) and whose queries are few: one block per batch matrix and query
//! row, as in token-by-token generation (one new query row against a key/value cache). The
//! row's scores (full f32 products, then the steps) stay in shared memory; the block takes
//! their maximum (NaN wins), the exponentials and their sum, divides each by the sum (the
//! probabilities, as the op-by-op program computes them) and multiplies them by the values.
//!
//! One launch where the instructions took about ten (two products, the steps, the softmax's
//! reductions and element-wise runs), each paying the host's cost of a launch: in generation
//! the host, not the GPU, sets the pace. Values as op by op up to the order of the sums; NaN
//! and infinities as there (a NaN or `+inf` score makes its row NaN, a row whose every score
//! is `-inf` is NaN, a probability of 0 times an infinite value is NaN).

use crate::attention::{float, mask_at, offsets, Layout, Shape};
use crate::elementwise;
use ex_burn_core::kernels::ScoreStep;
use std::fmt::Write;

/// Query rows at most: each block reads the keys and values again, so many rows are left to
/// the instructions' products.
const MAX_ROWS: usize = 64;

/// Keys at most: the row's scores fill the shared memory (32 KiB).
const MAX_KEYS: usize = 8192;

/// Threads per block.
pub(crate) const THREADS: usize = 256;

/// NVRTC's default architecture (no tensor-core instructions); the name profilers show.
pub(crate) const BUILD: elementwise::Build = elementwise::Build {
    arch: None,
    entry: "exburn_attention_rows",
};

/// A value head size rounded up to whole warps (at most 128: [`THREADS`] is a multiple).
fn dv_rounded(dv: usize) -> usize {
    dv.div_ceil(32) * 32
}

/// Whether the kernel takes `sq` query rows over `sk` keys (head sizes are checked by the
/// caller, at most 128).
pub(crate) fn takes(sq: usize, sk: usize) -> bool {
    (1..=MAX_ROWS).contains(&sq) && (1..=MAX_KEYS).contains(&sk)
}

/// The kernel for `shape` with operand layouts `[q, k, v]`, masks `e3..` (one per `select`
/// step, in order: element type and layout) and the steps with their constants.
pub(crate) fn source(
    shape: &Shape,
    [q, k, v]: [&Layout; 3],
    masks: &[(&str, Layout)],
    steps: &[(ScoreStep, f32)],
) -> String {
    let mut s = format!(
        r#"#define NEG_INF __int_as_float(0xff800000)
#define SQ {sq}u
#define SK {sk}u
#define D {d}u
#define DV {dv}u
#define WARPS {warps}
#define DVR {dvr}u
#define GROUPS {groups}u
/* the maximum in which NaN wins, as the op-by-op reduce_max */
__device__ __forceinline__ float nanmax(float a, float b) {{ return (a != a || a > b) ? a : b; }}
extern "C" __global__ void __launch_bounds__({threads}) {entry}(const float* __restrict__ e0, const float* __restrict__ e1, const float* __restrict__ e2, "#,
        sq = shape.sq,
        sk = shape.sk,
        d = shape.d,
        dv = shape.dv,
        warps = THREADS / 32,
        dvr = dv_rounded(shape.dv),
        groups = THREADS / dv_rounded(shape.dv),
        threads = THREADS,
        entry = BUILD.entry,
    );
    for (m, (ty, _)) in masks.iter().enumerate() {
        let _ = write!(s, "const {ty}* __restrict__ e{}, ", 3 + m);
    }
    s.push_str(
        r#"float* __restrict__ o0, unsigned long long n) {
  __shared__ float qs[D];
  __shared__ float sc[SK];
  __shared__ float red[WARPS];
  __shared__ float part[GROUPS][DVR];
  const unsigned int tile = blockIdx.x;
  if (tile >= n) return;
  const unsigned int row = tile % SQ, bi = tile / SQ;
"#,
    );
    s.push_str(&offsets(&shape.batch, [q, k, v], masks));
    let _ = write!(
        s,
        r#"  for (unsigned int c = threadIdx.x; c < D; c += {threads}u) qs[c] = e0[qo + row * {qr}ULL + c * {qc}ULL];
  __syncthreads();
  float mx = NEG_INF;
  for (unsigned int col = threadIdx.x; col < SK; col += {threads}u) {{
    const float* kr = e1 + ko + col * {kr}ULL;
    float x = 0.0f;
    for (unsigned int c = 0; c < D; c++) x = fmaf(qs[c], kr[c * {kc}ULL], x);
"#,
        threads = THREADS,
        qr = q.row,
        qc = q.col,
        kr = k.row,
        kc = k.col,
    );
    let mut mask = 0;
    for &(step, c) in steps {
        match step {
            ScoreStep::Divide => {
                let _ = writeln!(s, "    x = x / {};", float(c));
            }
            ScoreStep::Multiply => {
                let _ = writeln!(s, "    x = x * {};", float(c));
            }
            ScoreStep::Select => {
                let _ = writeln!(
                    s,
                    "    if ({} == 0) x = {};",
                    mask_at(mask, &masks[mask].1, "row", "col"),
                    float(c)
                );
                mask += 1;
            }
        }
    }
    let _ = write!(
        s,
        r#"    sc[col] = x;
    mx = nanmax(mx, x);
  }}
  for (int o = 16; o > 0; o >>= 1) mx = nanmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if ((threadIdx.x & 31u) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = red[0];
  for (int w = 1; w < WARPS; w++) mx = nanmax(mx, red[w]);
  __syncthreads();
  /* exp(x - max) and the sum (a row without a finite maximum is NaN, as op by op) */
  float sum = 0.0f;
  for (unsigned int col = threadIdx.x; col < SK; col += {threads}u) {{
    const float e = expf(sc[col] - mx);
    sc[col] = e;
    sum += e;
  }}
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if ((threadIdx.x & 31u) == 0) red[threadIdx.x >> 5] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int w = 0; w < WARPS; w++) sum += red[w];
  for (unsigned int col = threadIdx.x; col < SK; col += {threads}u) sc[col] = sc[col] / sum;
  __syncthreads();
  /* the probabilities times the values: GROUPS groups of threads, each over every GROUPS-th
     key, one column a thread; then the groups' sums */
  {{
    const unsigned int c = threadIdx.x % DVR, g = threadIdx.x / DVR;
    float acc = 0.0f;
    if (c < DV) {{
      const float* vc = e2 + vo + c * {vc}ULL;
      for (unsigned int j = g; j < SK; j += GROUPS) acc = fmaf(sc[j], vc[j * {vr}ULL], acc);
    }}
    part[g][c] = acc;
  }}
  __syncthreads();
  const unsigned long long out = ((unsigned long long)bi * SQ + row) * DV;
  for (unsigned int c = threadIdx.x; c < DV; c += {threads}u) {{
    float acc = part[0][c];
    for (unsigned int g = 1; g < GROUPS; g++) acc += part[g][c];
    o0[out + c] = acc;
  }}
}}
"#,
        threads = THREADS,
        vr = v.row,
        vc = v.col,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_attention_sources_compile() {
        // generation's step: one query row of GPT-2's heads (strided views of a projection)
        // against a cache of 160 positions, a boolean mask broadcast over the heads
        let shape = Shape {
            batch: vec![1, 12],
            sq: 1,
            sk: 160,
            d: 64,
            dv: 64,
        };
        let qkv = Layout::new(&[2304, 64], 2304, 1);
        let cache = Layout::new(&[12 * 160 * 64, 160 * 64], 64, 1);
        let mask = ("unsigned char", Layout::new(&[0, 0], 0, 1));
        let steps = [(ScoreStep::Divide, 8.0), (ScoreStep::Select, -1.0e9)];
        let src = source(&shape, [&qkv, &cache, &cache], &[mask], &steps);
        assert!(src.contains("exburn_attention_rows"));
        elementwise::assert_compiles_for(BUILD.arch, &src);
        // two masks, a product step, f32 mask, the largest sizes taken
        let big = Shape {
            batch: vec![2],
            sq: MAX_ROWS,
            sk: MAX_KEYS,
            d: 128,
            dv: 128,
        };
        let l = Layout::new(&[MAX_KEYS * 128], 128, 1);
        let masks = [
            ("float", Layout::new(&[0], MAX_KEYS, 1)),
            (
                "unsigned char",
                Layout::new(&[MAX_ROWS * MAX_KEYS], MAX_KEYS, 1),
            ),
        ];
        let steps = [
            (ScoreStep::Select, f32::NEG_INFINITY),
            (ScoreStep::Multiply, 0.125),
            (ScoreStep::Select, 0.0),
        ];
        elementwise::assert_compiles_for(BUILD.arch, &source(&big, [&l, &l, &l], &masks, &steps));
    }

    #[test]
    fn rows_and_keys_taken() {
        assert!(takes(1, 160) && takes(MAX_ROWS, MAX_KEYS));
        assert!(
            !takes(0, 160) && !takes(MAX_ROWS + 1, 10) && !takes(1, MAX_KEYS + 1) && !takes(1, 0)
        );
    }
}
