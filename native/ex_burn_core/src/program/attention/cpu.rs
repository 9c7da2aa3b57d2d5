//! The CPU kernel of a fused attention (see the parent module): per batch matrix, the
//! scores by the GEMM into a scratch block, the steps and the softmax row by row with the
//! unfused program's f32 operations, the product with `v` by the GEMM.

use super::{Operands, Scale};
use crate::kernels::broadcast_strides;
use crate::op::host_gemm::gemm_into;
use crate::op::view::View;
use crate::{DType, Device, Result, Tensor};

/// The attention of `ops` with `nb` batch axes, when every operand is an f32 (predicates:
/// boolean) host tensor of the expected shapes; `Ok(None)` otherwise.
pub(super) fn run(nb: usize, ops: &Operands) -> Result<Option<Tensor>> {
    let (q, k, v) = (ops.q, ops.k, ops.v);
    let f32_host = |t: &Tensor| t.dtype() == DType::F32 && t.device() == Device::Cpu;
    if ![q, k, v].iter().all(|t| f32_host(t)) {
        return Ok(None);
    }
    let Some(sizes) = ops.sizes(nb) else {
        return Ok(None);
    };
    let (batch, nbatch, (sq, d, sk, dv)) = (sizes.batch, sizes.matrices(), sizes.dims());
    // products this small are exact op by op (f64 sums rounded once, as Nx.BinaryBackend's),
    // not the GEMM's f32 sums: left to the instructions
    let work = [nbatch, sq, sk, d.min(dv)]
        .iter()
        .try_fold(1usize, |w, &x| w.checked_mul(x));
    if work.is_some_and(|w| w <= crate::op::EXACT_F32_WORK) {
        return Ok(None);
    }
    let (Some(qv), Some(kv), Some(vv)) = (View::of_f32(q), View::of_f32(k), View::of_f32(v)) else {
        return Ok(None);
    };
    let scores: Vec<usize> = [batch, &[sq, sk]].concat();
    // the masks as boolean views over the scores' axes
    let bools: Vec<Option<Tensor>> = ops
        .steps
        .iter()
        .map(|(_, pred, _)| {
            pred.map(|p| match p.kind() {
                crate::dtype::Kind::Bool => p.clone(),
                _ => p.to_bool(),
            })
        })
        .collect();
    let mut masks: Vec<Option<View<u8>>> = Vec::with_capacity(bools.len());
    for b in &bools {
        masks.push(match b {
            None => None,
            Some(t) => {
                let Some((data, offset, strides)) = t.host_bool_strided() else {
                    return Ok(None);
                };
                let Some(strides) = broadcast_strides(t.shape(), strides, &scores) else {
                    return Ok(None);
                };
                Some(View {
                    data,
                    offset,
                    strides,
                })
            }
        });
    }
    let steps: Vec<(Scale, Option<&View<u8>>, f32)> = ops
        .steps
        .iter()
        .zip(&masks)
        .map(|((s, _, c), m)| (*s, m.as_ref(), *c))
        .collect();
    let _out = crate::memory::reserve(Device::Cpu, (nbatch * sq * dv * 4) as u128, &|| {
        "attention result".into()
    })?;
    // written once, by each batch matrix's product (no zeroing pass on this thread first)
    let len = nbatch * sq * dv;
    let mut out: Vec<f32> = Vec::with_capacity(len);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let spare = &mut out.spare_capacity_mut()[..len];
    crate::threads::for_each_chunk_mut(spare, sq * dv, |bi, o| {
        let mut s = vec![0f32; sq * sk];
        let o = o.as_mut_ptr().cast::<f32>();
        let ok = matrix(
            bi,
            batch,
            (sq, d, sk, dv),
            (&qv, &kv, &vv),
            &steps,
            &mut s,
            o,
        );
        if !ok {
            failed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    })?;
    if failed.into_inner() {
        return Err(crate::Error::Execution(
            "attention: an operand view lies outside its storage".into(),
        ));
    }
    // SAFETY: every batch matrix returned true, having written its `sq x dv` outputs.
    unsafe { out.set_len(len) };
    let shape: Vec<usize> = [batch, &[sq, dv]].concat();
    Tensor::from_host_f32(out, shape).map(Some)
}

/// One batch matrix: scores into `s` (`[sq, sk]`), then the result into `o` (`[sq, dv]`,
/// writable, written whole when the result is `true`). `false` when a view would read outside
/// its storage (nothing written to `o` then).
#[allow(clippy::too_many_arguments)]
fn matrix(
    bi: usize,
    batch: &[usize],
    (sq, d, sk, dv): (usize, usize, usize, usize),
    (q, k, v): (&View<f32>, &View<f32>, &View<f32>),
    steps: &[(Scale, Option<&View<u8>>, f32)],
    s: &mut [f32],
    o: *mut f32,
) -> bool {
    let nb = batch.len();
    let (qb, kb, vb) = (q.base(bi, batch), k.base(bi, batch), v.base(bi, batch));
    // every element the GEMMs read lies inside its storage
    let inside = |t: &View<f32>, base: isize, rows: usize, cols: usize| {
        t.spans(base, [(rows, t.strides[nb]), (cols, t.strides[nb + 1])])
    };
    if !inside(q, qb, sq, d) || !inside(k, kb, sk, d) || !inside(v, vb, sk, dv) {
        return false;
    }
    // SAFETY (both products): every element of the three views lies inside its storage
    // (`View::spans` above), `s` holds sq x sk elements and `o` has room for sq x dv (the
    // products write their destinations without reading them).
    unsafe {
        gemm_into(
            (sq, sk, d),
            (s.as_mut_ptr(), sk as isize),
            q.data.as_ptr().offset(qb),
            (q.strides[nb], q.strides[nb + 1]),
            k.data.as_ptr().offset(kb),
            (k.strides[nb + 1], k.strides[nb]),
        );
    }
    for (i, row) in s.chunks_mut(sk).enumerate() {
        for &(step, mask, c) in steps {
            match step {
                Scale::Divide(_) => row.iter_mut().for_each(|x| *x /= c),
                Scale::Multiply(_) => row.iter_mut().for_each(|x| *x *= c),
                Scale::Select { .. } => {
                    let Some(m) = mask else { return false };
                    let base = m.base(bi, batch) + i as isize * m.strides[nb];
                    for (j, x) in row.iter_mut().enumerate() {
                        match m.get(base + j as isize * m.strides[nb + 1]) {
                            Some(0) => *x = c,
                            Some(_) => {}
                            None => return false,
                        }
                    }
                }
            }
        }
        softmax_row(row);
    }
    // SAFETY: as above (`s` now holds the probabilities).
    unsafe {
        gemm_into(
            (sq, dv, sk),
            (o, dv as isize),
            s.as_ptr(),
            (sk as isize, 1),
            v.data.as_ptr().offset(vb),
            (v.strides[nb], v.strides[nb + 1]),
        );
    }
    true
}

/// `exp(x - max(x)) / sum` over a row with the unfused program's operations: the maximum
/// (NaN wins), f32 subtraction and `exp`, the sum accumulated in f64 and rounded once (the
/// CPU's f32 sums), an f32 division.
fn softmax_row(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| {
        if m.is_nan() || !(x > m || x.is_nan()) {
            m
        } else {
            x
        }
    });
    row.iter_mut().for_each(|x| *x -= max);
    crate::op::f32_map::exp_in_place(row);
    let sum: f64 = row.iter().map(|&x| x as f64).sum();
    let sum = sum as f32;
    row.iter_mut().for_each(|x| *x /= sum);
}
