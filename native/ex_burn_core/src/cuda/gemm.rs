//! Matrix products on NVIDIA GPUs by cuBLAS, on the buffers of Burn's CUDA tensors.
//!
//! Burn 0.21's CUDA matmul kernels reach about a quarter of cuBLAS on an H200 and have no true
//! f32 path (`Precision::Highest` was four TF32 products). When `libcublas` loads, a batched
//! product of f32, f16 or bf16 operands (each matrix's rows or columns contiguous) runs as one
//! `cublasGemmStridedBatchedEx` on the operands' device memory: f32 with TF32 tensor cores
//! (`Precision::Default`, as PyTorch's `allow_tf32` and XLA's default) or in full f32
//! (`Precision::Highest`), f16 and bf16 accumulating in f32. Anything else returns `None` and
//! Burn's kernels compute it: no cuBLAS on the machine, another GPU backend, products below
//! [`MIN_WORK`], other strided views.
//!
//! Ordering with CubeCL's kernels: CubeCL queues its kernels on streams of its own, one per
//! thread (the patched `cubecl-cuda` tells which stream owns a buffer,
//! `native/vendor/cubecl-cuda`). The GEMM is queued on the stream of the result (this
//! thread's), through a cuBLAS handle bound to it: the stream orders it after the kernels that
//! wrote operands there and before those that read the result. An operand owned by another
//! thread's stream (parameters uploaded elsewhere, say) is ordered by events, on the GPU: this
//! stream waits for the work queued so far on the operand's stream, and after the GEMM the
//! operand's stream waits for this one, so that memory it frees and reuses later is not
//! overwritten before the GEMM has read it. The host never waits.
use crate::dtype::Kind;
use crate::op::Precision;
use crate::tensor::Prim;
use crate::{DType, Error, Result, Tensor};
use burn::tensor::DType as BurnDType;
use burn_cubecl::tensor::CubeTensor;
use burn_dispatch::{BackendTensor, DispatchTensor, DispatchTensorKind};
use cubecl_cuda::CudaRuntime;
use cudarc::cublas::sys as blas;
use cudarc::driver::{result as drv, sys as drv_sys};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Below this many multiply-adds (a 512^3 product) Burn's kernel computes the product:
/// cuBLAS's call and the buffer lookups cost more than the product saves.
pub const MIN_WORK: usize = 1 << 27;

/// The threshold set by [`set_min_work`] (`usize::MAX`: [`MIN_WORK`]).
static OVERRIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Sets the number of multiply-adds from which products go to cuBLAS (tests use it to send
/// small products there; `usize::MAX` restores [`MIN_WORK`]); returns the previous setting.
pub fn set_min_work(work: usize) -> usize {
    OVERRIDE.swap(work, std::sync::atomic::Ordering::Relaxed)
}

/// The threshold in force.
fn threshold() -> usize {
    match OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        usize::MAX => MIN_WORK,
        n => n,
    }
}

/// A cuBLAS handle bound to one of CubeCL's streams, in the primary context of one device.
struct Blas {
    handle: blas::cublasHandle_t,
    context: drv_sys::CUcontext,
}

// SAFETY: the handle and stream are only used under the mutex of `BLAS`, with the device's
// context made current on the calling thread first.
unsafe impl Send for Blas {}

/// One handle per device index and stream (`None`: creating it failed, do not retry). CubeCL
/// has one stream per thread that uses the device, so this stays small.
static BLAS: OnceLock<Mutex<Handles>> = OnceLock::new();

/// Handles by (device index, stream address).
type Handles = HashMap<(usize, usize), Option<Blas>>;

thread_local! {
    /// Products cuBLAS computed on this thread, and how many of them had an operand owned by
    /// another thread's stream (see [`products`]).
    static PRODUCTS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// How many products cuBLAS computed on this thread, and how many of those had an operand
/// owned by another thread's stream (ordered by events): lets tests tell them from products
/// that fell back to Burn's kernels.
pub fn products() -> (u64, u64) {
    PRODUCTS.with(|c| c.get())
}

/// Whether products may go to cuBLAS (checked once): the library loads and the environment
/// variable `EX_BURN_CUBLAS` is not `0` (which keeps every product on Burn's kernels).
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: only tries to open the shared library.
        std::env::var("EX_BURN_CUBLAS").as_deref() != Ok("0") && unsafe { blas::is_culib_present() }
    })
}

fn check(status: blas::cublasStatus_t, what: &str) -> Result<()> {
    if status == blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Execution(format!(
            "cuBLAS {what} failed: {status:?}"
        )))
    }
}

fn driver<T>(r: std::result::Result<T, drv::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| Error::Device(format!("CUDA {what} failed: {e:?}")))
}

impl Blas {
    /// A handle on CubeCL's `stream`.
    fn new(index: usize, stream: drv_sys::CUstream) -> Result<Blas> {
        let device = driver(drv::device::get(index as i32), "device lookup")?;
        // SAFETY: `device` is a valid device; CubeCL uses the same primary context.
        let context = driver(unsafe { drv::primary_ctx::retain(device) }, "context")?;
        // SAFETY: a valid context.
        driver(unsafe { drv::ctx::set_current(context) }, "context")?;
        let mut handle: blas::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: out-pointer to a handle; the context is current.
        check(
            unsafe { blas::cublasCreate_v2(&mut handle) },
            "handle creation",
        )?;
        // SAFETY: a live handle and stream of the current context.
        check(
            unsafe { blas::cublasSetStream_v2(handle, stream as blas::cudaStream_t) },
            "stream setting",
        )?;
        Ok(Blas { handle, context })
    }
}

/// Makes `waiter` wait, on the GPU, for the work queued on `on` so far.
///
/// # Safety
/// Both streams are live streams of the current context.
unsafe fn wait_for(waiter: drv_sys::CUstream, on: drv_sys::CUstream) -> Result<()> {
    let event = driver(
        drv::event::create(drv_sys::CUevent_flags::CU_EVENT_DISABLE_TIMING),
        "event creation",
    )?;
    // SAFETY: a live event and streams (the caller's guarantee); destroying an event whose
    // recorded work is pending is allowed (its resources go when the work completes).
    let r = unsafe {
        driver(drv::event::record(event, on), "event record").and_then(|()| {
            driver(
                drv::stream::wait_event(
                    waiter,
                    event,
                    drv_sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                ),
                "stream wait",
            )
        })
    };
    // SAFETY: created above, not used afterwards.
    let _ = unsafe { drv::event::destroy(event) };
    r
}

/// The CUDA tensor behind a float primitive, when it is one.
fn cube(prim: &Prim) -> Option<&CubeTensor<CudaRuntime>> {
    match &prim.kind {
        DispatchTensorKind::Cuda(BackendTensor::Float(t)) => Some(t),
        _ => None,
    }
}

/// How cuBLAS reads one operand: whether its matrices are stored transposed (columns
/// contiguous), the leading dimension and the batch stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    transposed: bool,
    ld: usize,
    batch: usize,
}

/// The cuBLAS layout of a rank-3 batch of matrices `[nb, rows, cols]`: rows contiguous and
/// evenly spaced (CubeCL may pad rows), or columns contiguous and evenly spaced (a transposed
/// view), with matrices evenly spaced and not overlapping (stride 0 for a batch of one);
/// `None` otherwise.
fn layout(t: &CubeTensor<CudaRuntime>) -> Option<Layout> {
    let (shape, strides) = (t.meta.shape(), t.meta.strides());
    let (&[nb, rows, cols], &[s0, s1, s2]) = (&shape[..], &strides[..]) else {
        return None;
    };
    let (transposed, ld, extent) = if cols <= 1 || s2 == 1 {
        let ld = if rows > 1 { s1 } else { cols };
        (false, ld, ld * rows.saturating_sub(1) + cols)
    } else if rows <= 1 || s1 == 1 {
        let ld = if cols > 1 { s2 } else { rows };
        (true, ld, ld * cols.saturating_sub(1) + rows)
    } else {
        return None;
    };
    let inner = if transposed { rows } else { cols };
    if ld < inner.max(1) {
        return None;
    }
    let batch = if nb > 1 { s0 } else { 0 };
    if nb > 1 && batch < extent {
        return None;
    }
    Some(Layout {
        transposed,
        ld: ld.max(1),
        batch,
    })
}

/// `[nb, m, k] x [nb, k, n]` (batch broadcast where one side has `nb` 1) by cuBLAS, or `None`
/// when it does not apply (see the module documentation).
pub fn batched_matmul(a3: &Tensor, b3: &Tensor, precision: Precision) -> Result<Option<Tensor>> {
    let (sa, sb) = (a3.shape(), b3.shape());
    if a3.kind() != Kind::Float || a3.rank() != 3 || b3.rank() != 3 || a3.dtype() != b3.dtype() {
        return Ok(None);
    }
    let (nb, m, k, n) = (sa[0].max(sb[0]), sa[1], sa[2], sb[2]);
    let (data_type, elem) = match a3.dtype() {
        DType::F32 => (blas::cudaDataType::CUDA_R_32F, 4),
        DType::F16 => (blas::cudaDataType::CUDA_R_16F, 2),
        DType::BF16 => (blas::cudaDataType::CUDA_R_16BF, 2),
        _ => return Ok(None),
    };
    let fits = |v: usize| i32::try_from(v).is_ok();
    if nb * m * n * k < threshold()
        || sb[1] != k
        || (sa[0] != sb[0] && sa[0] != 1 && sb[0] != 1)
        || ![nb, m, n, k].into_iter().all(fits)
        || !available()
    {
        return Ok(None);
    }
    let (pa, pb) = (a3.prim(), b3.prim());
    let (Some(ta), Some(tb)) = (cube(&pa), cube(&pb)) else {
        return Ok(None);
    };
    let (Some(la), Some(lb)) = (layout(ta), layout(tb)) else {
        return Ok(None);
    };
    if ![la.ld, lb.ld].into_iter().all(fits) {
        return Ok(None);
    }

    let index = ta.device.index;
    let client = ta.client.clone();
    let out_handle = client.empty(nb * m * n * elem);
    let resource = |h| {
        client
            .get_resource(h)
            .map_err(|e| Error::Device(format!("CUDA buffer lookup failed: {e:?}")))
    };
    let (ra, rb, rc) = (
        resource(ta.handle.clone())?,
        resource(tb.handle.clone())?,
        resource(out_handle.clone())?,
    );
    // Queued on the result's stream (this thread's); operands owned by other streams are
    // ordered by events.
    let stream = rc.resource().stream;
    let mut others: Vec<drv_sys::CUstream> = Vec::new();
    for s in [ra.resource().stream, rb.resource().stream] {
        if s != stream && !others.contains(&s) {
            others.push(s);
        }
    }

    let compute = match (a3.dtype(), precision) {
        (DType::F32, Precision::Default) => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        _ => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    };
    let op = |transposed: bool| {
        if transposed {
            blas::cublasOperation_t::CUBLAS_OP_T
        } else {
            blas::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let (alpha, beta) = (1f32, 0f32);
    let table = BLAS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut table = table
        .lock()
        .map_err(|_| Error::Execution("the cuBLAS handle table is poisoned".into()))?;
    let entry = table
        .entry((index, stream as usize))
        .or_insert_with(|| Blas::new(index, stream).ok());
    let Some(b) = entry.as_ref() else {
        return Ok(None);
    };
    // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS multiplies B^T (n x k) by A^T
    // (k x m) into C^T (n x m, ld n). A row-major operand is, read column-major, already its
    // transpose (no operation); a transposed view (columns contiguous) is read with
    // `CUBLAS_OP_T`.
    // SAFETY: the context is current for this thread before cuBLAS runs; the pointers are
    // live device buffers of the sizes given, which `ra`, `rb`, `rc` and the tensors keep
    // until the call returns. The GEMM is queued on `stream`, after the work queued so far on
    // the operands' streams (events); memory those streams free afterwards is reused only by
    // work queued after the GEMM (they wait for `stream`), and memory freed on `stream` is
    // reused only by work queued after it there. alpha and beta are f32 as the compute type
    // wants.
    unsafe {
        driver(drv::ctx::set_current(b.context), "context")?;
        for &other in &others {
            wait_for(stream, other)?;
        }
        check(
            blas::cublasGemmStridedBatchedEx(
                b.handle,
                op(lb.transposed),
                op(la.transposed),
                n as i32,
                m as i32,
                k as i32,
                (&alpha as *const f32).cast(),
                rb.resource().ptr as *const std::ffi::c_void,
                data_type,
                lb.ld as i32,
                lb.batch as i64,
                ra.resource().ptr as *const std::ffi::c_void,
                data_type,
                la.ld as i32,
                la.batch as i64,
                (&beta as *const f32).cast(),
                rc.resource().ptr as *mut std::ffi::c_void,
                data_type,
                n as i32,
                (m * n) as i64,
                nb as i32,
                compute,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            ),
            "GEMM",
        )?;
        for &other in &others {
            wait_for(other, stream)?;
        }
    }
    drop((ra, rb, rc));
    crate::program::profile::note(if others.is_empty() {
        "cublas"
    } else {
        "cublas+events"
    });
    PRODUCTS.with(|c| {
        let (all, cross) = c.get();
        c.set((all + 1, cross + u64::from(!others.is_empty())));
    });
    let dtype: BurnDType = ta.dtype;
    let device = ta.device.clone();
    let out = CubeTensor::new_contiguous(client, device, [nb, m, n].into(), out_handle, dtype);
    let prim = DispatchTensor {
        kind: DispatchTensorKind::Cuda(BackendTensor::Float(out)),
        checkpointing: pa.checkpointing,
    };
    Ok(Some(Tensor::from_prim(prim, Kind::Float, vec![nb, m, n])))
}
