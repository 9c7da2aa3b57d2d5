//! Matrix products on NVIDIA GPUs by cuBLAS, on the buffers of Burn's CUDA tensors.
//!
//! Burn 0.21's CUDA matmul kernels reach about a quarter of cuBLAS on an H200 and have no true
//! f32 path (`Precision::Highest` was four TF32 products). When `libcublas` loads, a batched
//! product of f32, f16 or bf16 operands (rows contiguous) runs as one
//! `cublasGemmStridedBatchedEx` on the operands' device memory: f32 with TF32 tensor cores
//! (`Precision::Default`, as PyTorch's `allow_tf32` and XLA's default) or in full f32
//! (`Precision::Highest`), f16 and bf16 accumulating in f32. Anything else returns `None` and
//! Burn's kernels compute it: no cuBLAS on the machine, another GPU backend, small products,
//! other strided views.
//!
//! Ordering with CubeCL's kernels: CubeCL queues its kernels on streams of its own. When both
//! operands and the result live in the memory of one stream (the patched `cubecl-cuda` tells
//! which, `native/vendor/cubecl-cuda`), the GEMM is queued on that stream itself, through a
//! cuBLAS handle bound to it: the stream orders it after the kernels that wrote the operands
//! and before those that read the result, and the host does not wait ([`MIN_WORK_ORDERED`]).
//! Otherwise (operands from streams of other threads) the host synchronises CubeCL's stream
//! before cuBLAS reads the operands and cuBLAS's own stream before the result is handed back
//! ([`MIN_WORK`]: the synchronisation drains the GPU's queue, so only large products gain).

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

/// Below this many multiply-adds (about a 3250^3 product) a product whose operands come from
/// another stream runs on Burn's own kernel. That path synchronises the host with CubeCL's stream before and after the GEMM (~60 us
/// of lookups and synchronisation on an H200, and the GPU's queue drains): at 1024^3 cuBLAS took
/// 80 us against ~30 us in Burn's kernel, and inside a compiled GPT-2 layer (GEMMs of 0.7-1e10
/// multiply-adds) the forward pass went from 2.69 to 3.20 ms with a 2^32 threshold (backward
/// 10.39 -> 9.98 ms). Above this size the GEMM dominates (8192^3: 0.88x cuBLAS's own speed).
pub const MIN_WORK: usize = 1 << 35;

/// Below this many multiply-adds (a 512^3 product) a product queued on CubeCL's own stream
/// runs on Burn's kernel instead: cuBLAS's call and the buffer lookups cost more than the
/// product saves.
pub const MIN_WORK_ORDERED: usize = 1 << 27;

/// Thresholds set by [`set_min_work`] (`usize::MAX`: the defaults).
static OVERRIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Sets the number of multiply-adds from which products go to cuBLAS on either path (tests
/// use it to send small products there; `usize::MAX` restores the defaults); returns the
/// previous setting.
pub fn set_min_work(work: usize) -> usize {
    OVERRIDE.swap(work, std::sync::atomic::Ordering::Relaxed)
}

/// The thresholds in force: (stream-ordered path, synchronised path).
fn thresholds() -> (usize, usize) {
    match OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        usize::MAX => (MIN_WORK_ORDERED, MIN_WORK),
        n => (n, n),
    }
}

/// A cuBLAS handle bound to one stream (CubeCL's, or one of its own for the synchronised
/// path), in the primary context of one device.
struct Blas {
    handle: blas::cublasHandle_t,
    stream: drv_sys::CUstream,
    context: drv_sys::CUcontext,
}

// SAFETY: the handle and stream are only used under the mutex of `BLAS`, with the device's
// context made current on the calling thread first.
unsafe impl Send for Blas {}

/// One handle per device index and stream (`None` as stream: the handle's own stream, for the
/// synchronised path; `None` as handle: creating it failed, do not retry). CubeCL has one
/// stream per thread that uses the device, so this stays small.
static BLAS: OnceLock<Mutex<Handles>> = OnceLock::new();

/// Handles by (device index, stream address).
type Handles = HashMap<(usize, Option<usize>), Option<Blas>>;

thread_local! {
    /// Products cuBLAS computed on this thread, and how many of them were queued on CubeCL's
    /// stream (see [`products`]).
    static PRODUCTS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// How many products cuBLAS computed on this thread, and how many of those were queued on
/// CubeCL's stream without synchronising the host: lets tests tell them from products that fell
/// back to Burn's kernels or took the synchronised path.
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
    /// A handle on `stream` (CubeCL's), or on a new stream of its own.
    fn new(index: usize, stream: Option<drv_sys::CUstream>) -> Result<Blas> {
        let device = driver(drv::device::get(index as i32), "device lookup")?;
        // SAFETY: `device` is a valid device; CubeCL uses the same primary context.
        let context = driver(unsafe { drv::primary_ctx::retain(device) }, "context")?;
        // SAFETY: a valid context.
        driver(unsafe { drv::ctx::set_current(context) }, "context")?;
        let stream = match stream {
            Some(s) => s,
            None => driver(
                drv::stream::create(drv::stream::StreamKind::NonBlocking),
                "stream creation",
            )?,
        };
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
        Ok(Blas {
            handle,
            stream,
            context,
        })
    }
}

/// The CUDA tensor behind a float primitive, when it is one.
fn cube(prim: &Prim) -> Option<&CubeTensor<CudaRuntime>> {
    match &prim.kind {
        DispatchTensorKind::Cuda(BackendTensor::Float(t)) => Some(t),
        _ => None,
    }
}

/// The cuBLAS layout of a rank-3 row-major batch of matrices: `(leading dimension, batch
/// stride)` when each matrix's rows are contiguous and evenly spaced (CubeCL may pad rows) and
/// matrices are evenly spaced (stride 0 for a batch of one); `None` otherwise.
fn layout(t: &CubeTensor<CudaRuntime>) -> Option<(usize, usize)> {
    let (shape, strides) = (t.meta.shape(), t.meta.strides());
    let (&[nb, rows, cols], &[s0, s1, s2]) = (&shape[..], &strides[..]) else {
        return None;
    };
    if cols > 1 && s2 != 1 {
        return None;
    }
    let ld = if rows > 1 { s1 } else { cols };
    if ld < cols {
        return None;
    }
    let batch = if nb > 1 { s0 } else { 0 };
    if nb > 1 && batch < ld * (rows - 1) + cols {
        return None;
    }
    Some((ld.max(1), batch))
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
    let (min_ordered, min_synced) = thresholds();
    let work = nb * m * n * k;
    if work < min_ordered.min(min_synced)
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
    let (Some((lda, batch_a)), Some((ldb, batch_b))) = (layout(ta), layout(tb)) else {
        return Ok(None);
    };
    if ![lda, ldb].into_iter().all(fits) {
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
    let stream = ra.resource().stream;
    let ordered = rb.resource().stream == stream && rc.resource().stream == stream;
    if work < if ordered { min_ordered } else { min_synced } {
        return Ok(None);
    }
    if !ordered {
        // The operands' pending writes on CubeCL's stream of this thread are done.
        cubecl_common::future::block_on(client.sync())
            .map_err(|e| Error::Device(format!("CUDA synchronisation failed: {e:?}")))?;
    }

    let compute = match (a3.dtype(), precision) {
        (DType::F32, Precision::Default) => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        _ => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    };
    let (alpha, beta) = (1f32, 0f32);
    let table = BLAS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut table = table
        .lock()
        .map_err(|_| Error::Execution("the cuBLAS handle table is poisoned".into()))?;
    let key = (index, ordered.then_some(stream as usize));
    let entry = table
        .entry(key)
        .or_insert_with(|| Blas::new(index, ordered.then_some(stream)).ok());
    let Some(b) = entry.as_ref() else {
        return Ok(None);
    };
    // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS multiplies B (n x k, leading
    // dimension ldb) by A (k x m, lda) into C (n x m, ld n).
    // SAFETY: the context is current for this thread before cuBLAS runs; the pointers are
    // live device buffers of the sizes given: on the synchronised path `ra`, `rb`, `rc` and the
    // tensors keep them until the stream is synchronised below; on CubeCL's stream, memory
    // they free returns to that stream's pool and is reused only by work queued after the
    // GEMM on the same stream. alpha and beta are f32 as the compute type wants.
    unsafe {
        driver(drv::ctx::set_current(b.context), "context")?;
        check(
            blas::cublasGemmStridedBatchedEx(
                b.handle,
                blas::cublasOperation_t::CUBLAS_OP_N,
                blas::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                m as i32,
                k as i32,
                (&alpha as *const f32).cast(),
                rb.resource().ptr as *const std::ffi::c_void,
                data_type,
                ldb as i32,
                batch_b as i64,
                ra.resource().ptr as *const std::ffi::c_void,
                data_type,
                lda as i32,
                batch_a as i64,
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
        if !ordered {
            driver(drv::stream::synchronize(b.stream), "synchronisation")?;
        }
    }
    drop((ra, rb, rc));
    PRODUCTS.with(|c| {
        let (all, on_stream) = c.get();
        c.set((all + 1, on_stream + u64::from(ordered)));
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
