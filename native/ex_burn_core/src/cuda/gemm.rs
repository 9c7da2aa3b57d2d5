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
//! overwritten before the GEMM has read it. The GPU never waits for the host.
//!
//! Queued, not waited for: a thread's first product on a device looks its buffers up and
//! calls cuBLAS itself (waiting for CubeCL's device thread to reach that point; a cuBLAS
//! handle that cannot be made sends the product to Burn's kernels). Later products are
//! queued on CubeCL's device thread (`queue::submit`) and the calling thread goes on (on an
//! H200 the lookups cost ~110 us of host time per product); one that fails there sets its
//! result to NaN and reports the error at the next read ([`queue::check_failures`]).
use super::queue::{self, driver, GpuResource, Nan, Output};
use crate::dtype::Kind;
use crate::op::Precision;
use crate::{DType, Error, Result, Tensor};
use burn_cubecl::tensor::CubeTensor;
use cubecl_cuda::CudaRuntime;
use cudarc::cublas::sys as blas;
use cudarc::driver::{result as drv, sys as drv_sys};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

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
    /// Products cuBLAS computed on this thread (see [`products`]).
    static PRODUCTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Those of them that had an operand owned by another thread's stream; counted where the
    /// product runs (CubeCL's device thread), hence shared.
    static CROSS: Arc<AtomicU64> = Arc::new(AtomicU64::new(0));
    /// Devices (bit per index below 64) on which this thread's first product went through:
    /// later products are queued without waiting.
    static READY: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The bit of device `index` in [`READY`] (devices from 63 on share the last bit's fate: they
/// always take the waiting path).
fn device_bit(index: usize) -> u64 {
    if index < 63 {
        1 << index
    } else {
        0
    }
}

/// How many products cuBLAS computed for this thread, and how many of those had an operand
/// owned by another thread's stream (ordered by events): lets tests tell them from products
/// that fell back to Burn's kernels. Products are queued: the second count is complete once
/// a result has been read.
pub fn products() -> (u64, u64) {
    (
        PRODUCTS.with(|c| c.get()),
        CROSS.with(|c| c.load(Ordering::Relaxed)),
    )
}

/// Whether products may go to cuBLAS: the library loads and the environment variable
/// `EX_BURN_CUBLAS` is not `0` (which keeps every product on Burn's kernels), both checked
/// once, and no queued product has failed.
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: only tries to open the shared library.
        std::env::var("EX_BURN_CUBLAS").as_deref() != Ok("0") && unsafe { blas::is_culib_present() }
    }) && queue::enabled()
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

/// One product as cuBLAS runs it: device, sizes, operand layouts and types.
#[derive(Clone, Copy, Debug)]
struct Gemm {
    index: usize,
    nb: usize,
    m: usize,
    n: usize,
    k: usize,
    a: Layout,
    b: Layout,
    data_type: blas::cudaDataType,
    compute: blas::cublasComputeType_t,
    nan: Nan,
}

impl Gemm {
    /// Queues the product on the result's stream (`Some(true)` when an operand's stream had to
    /// be ordered by events, `None` when no cuBLAS handle could be made for the stream).
    ///
    /// # Safety
    /// `a`, `b` and `c` are live buffers of the device holding the operands and the result in
    /// the layouts of `self`, kept alive until this returns; the work queued on their streams
    /// afterwards is what may reuse them.
    unsafe fn run(
        &self,
        a: &GpuResource,
        b: &GpuResource,
        c: &GpuResource,
    ) -> Result<Option<bool>> {
        let stream = c.stream;
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
            .entry((self.index, stream as usize))
            .or_insert_with(|| Blas::new(self.index, stream).ok());
        let Some(h) = entry.as_ref() else {
            return Ok(None);
        };
        let (la, lb) = (self.a, self.b);
        // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS multiplies B^T (n x k) by A^T
        // (k x m) into C^T (n x m, ld n). A row-major operand is, read column-major, already
        // its transpose (no operation); a transposed view (columns contiguous) is read with
        // `CUBLAS_OP_T`.
        // SAFETY: the context is made current for this thread before cuBLAS runs; the pointers
        // are live device buffers of the sizes given (the caller's guarantee). The GEMM is
        // queued on `stream`, after the work queued so far on the operands' streams (events);
        // memory those streams free afterwards is reused only by work queued after the GEMM
        // (they wait for `stream`), and memory freed on `stream` is reused only by work queued
        // after it there. alpha and beta are f32 as the compute type wants; the handle is used
        // under the table's lock.
        unsafe {
            driver(drv::ctx::set_current(h.context), "context")?;
            let others = queue::order_operands(stream, &[a, b])?;
            check(
                blas::cublasGemmStridedBatchedEx(
                    h.handle,
                    op(lb.transposed),
                    op(la.transposed),
                    self.n as i32,
                    self.m as i32,
                    self.k as i32,
                    (&alpha as *const f32).cast(),
                    b.ptr as *const std::ffi::c_void,
                    self.data_type,
                    lb.ld as i32,
                    lb.batch as i64,
                    a.ptr as *const std::ffi::c_void,
                    self.data_type,
                    la.ld as i32,
                    la.batch as i64,
                    (&beta as *const f32).cast(),
                    c.ptr as *mut std::ffi::c_void,
                    self.data_type,
                    self.n as i32,
                    (self.m * self.n) as i64,
                    self.nb as i32,
                    self.compute,
                    blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                ),
                "GEMM",
            )?;
            queue::release(stream, &others)?;
            Ok(Some(!others.is_empty()))
        }
    }
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
    let (Some(ta), Some(tb)) = (queue::cube(&pa), queue::cube(&pb)) else {
        return Ok(None);
    };
    let (Some(la), Some(lb)) = (layout(ta), layout(tb)) else {
        return Ok(None);
    };
    if ![la.ld, lb.ld].into_iter().all(fits) {
        return Ok(None);
    }

    let gemm = Gemm {
        index: ta.device.index,
        nb,
        m,
        n,
        k,
        a: la,
        b: lb,
        data_type,
        compute: match (a3.dtype(), precision) {
            (DType::F32, Precision::Default) => {
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
            }
            _ => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        },
        nan: Nan::of(a3.dtype()),
    };
    let client = ta.client.clone();
    let out_handle = client.empty(nb * m * n * elem);
    if READY.with(|r| r.get() & device_bit(gemm.index) != 0) {
        // Queued on CubeCL's device thread, in order with the kernels queued before and after
        // it: this thread goes on at once.
        let (ba, bb, bc) = (
            ta.handle.clone().binding(),
            tb.handle.clone().binding(),
            out_handle.clone().binding(),
        );
        let cross = CROSS.with(Arc::clone);
        let output = Output {
            binding: 2,
            count: nb * m * n,
            nan: gemm.nan,
        };
        queue::submit(
            ta,
            vec![ba, bb, bc],
            vec![output],
            "a cuBLAS matrix product",
            move |bufs, _| {
                // SAFETY: the buffers are live, of the sizes the layouts give, held until the
                // call returns (see `Gemm::run`).
                match unsafe { gemm.run(bufs[0], bufs[1], bufs[2])? } {
                    Some(true) => {
                        cross.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }
                    Some(false) => Ok(()),
                    None => Err(Error::Device("no cuBLAS handle for the stream".into())),
                }
            },
        );
        crate::program::profile::note("cublas");
        crate::program::profile::note_detail(|| {
            let op = |l: Layout| if l.transposed { 'T' } else { 'N' };
            format!("cublas {nb}x{m}x{n}x{k} {}{}", op(la), op(lb))
        });
    } else {
        // The first product of this thread on this device waits for its buffers: a cuBLAS
        // handle that cannot be created sends the product to Burn's kernels, before anything
        // was queued.
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
        // SAFETY: as above; `ra`, `rb`, `rc` hold the buffers until the call returns.
        let Some(cross) = (unsafe { gemm.run(ra.resource(), rb.resource(), rc.resource())? })
        else {
            return Ok(None);
        };
        drop((ra, rb, rc));
        CROSS.with(|c| c.fetch_add(u64::from(cross), Ordering::Relaxed));
        READY.with(|r| r.set(r.get() | device_bit(gemm.index)));
        crate::program::profile::note("cublas[first]");
    }
    PRODUCTS.with(|c| c.set(c.get() + 1));
    Ok(Some(queue::output(
        ta,
        out_handle,
        &[nb, m, n],
        a3.dtype(),
        pa.checkpointing,
    )))
}
