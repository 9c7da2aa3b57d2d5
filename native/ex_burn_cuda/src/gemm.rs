//! Matrix products on NVIDIA GPUs by cuBLAS, on the buffers of Burn's CUDA tensors.
//!
//! Burn 0.21's CUDA matmul kernels reach a fraction of cuBLAS's speed
//! (`bench/results/core_cuda_matmul.md`) and have no true f32 path (`Precision::Highest` was four TF32 products). When `libcublas` loads, a batched
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
//! Burn's own products: [`foreign_matmul`] is installed in Burn's CUDA backend (the patched
//! `burn-cubecl`, `native/vendor/burn-cubecl`), so that the products Burn runs itself (native
//! training and its backward pass, convolutions lowered to GEMM, `dot`'s products below
//! [`MIN_WORK`] that it leaves to Burn) also run on cuBLAS: no kernel to compile (Burn's
//! autotuned matmul compiled up to ~20 candidate kernels per shape, 1-3 s each, on a cold
//! cache), f32 below [`MIN_WORK`] in full f32.
//!
//! Queued, not waited for: a thread's first product on a device looks its buffers up and
//! calls cuBLAS itself (waiting for CubeCL's device thread to reach that point; a cuBLAS
//! handle that cannot be made sends the product to Burn's kernels). Later products are
//! queued on CubeCL's device thread (`queue::submit`) and the calling thread goes on (the
//! lookups cost the host more than the product's launch); one that fails there sets its
//! result to NaN and reports the error at the next read ([`queue::check_failures`]).
use crate::queue::{self, driver, GpuResource, Nan, Output};
use burn::DispatchTensor;
use burn_cubecl::tensor::CubeTensor;
use cubecl_cuda::CudaRuntime;
use cubecl_runtime::server::Handle;
use cudarc::cublas::sys as blas;
use cudarc::driver::{result as drv, sys as drv_sys};
use ex_burn_core::kernels::{Operand, Precision};
use ex_burn_core::{DType, Error, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// From this many multiply-adds (a 512^3 product) on, `dot` calls cuBLAS directly and f32
/// products use TF32 tensor cores by default; smaller ones go through Burn's matmul, which
/// hands them to [`foreign_matmul`] (full f32).
pub const MIN_WORK: usize = 1 << 27;

/// The threshold set by [`set_min_work`] (`usize::MAX`: [`MIN_WORK`]).
static OVERRIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Sets the number of multiply-adds from which products go to cuBLAS (tests use it to send
/// small products there; `usize::MAX` restores [`MIN_WORK`]); returns the previous setting.
pub fn set_min_work(work: usize) -> usize {
    OVERRIDE.swap(work, std::sync::atomic::Ordering::Relaxed)
}

/// The threshold in force: products of at least this many multiply-adds use TF32 by default.
pub fn threshold() -> usize {
    match OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        usize::MAX => MIN_WORK,
        n => n,
    }
}

/// A cuBLAS handle bound to one of CubeCL's streams, in the primary context of one device.
struct Blas {
    handle: blas::cublasHandle_t,
    context: drv_sys::CUcontext,
    /// The (element type, compute type) pairs this handle has multiplied.
    kinds: Vec<(blas::cudaDataType, blas::cublasComputeType_t)>,
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
}

/// The (device index, Burn stream) pairs whose first product went through (a cuBLAS handle
/// exists for that device and stream): later products there are queued without waiting,
/// from whichever thread issues them (data-parallel training issues each replica's work from
/// a thread of its own, on the caller's stream).
static READY: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());

/// Whether products on device `index` from the current Burn stream go through (see [`READY`]).
fn ready(index: usize) -> bool {
    let stream = cubecl_common::stream_id::StreamId::current().value;
    READY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&(index, stream))
}

/// Records that products on device `index` from the current Burn stream go through.
fn set_ready(index: usize) {
    let stream = cubecl_common::stream_id::StreamId::current().value;
    let mut ready = READY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !ready.contains(&(index, stream)) {
        ready.push((index, stream));
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

/// Whether products may go to cuBLAS: the engine's configuration allows it (`cublas: false`
/// keeps every product on Burn's kernels), the library loads (checked once), and no queued
/// product has failed.
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    ex_burn_core::config::cublas()
        // SAFETY: only tries to open the shared library.
        && *PRESENT.get_or_init(|| unsafe { blas::is_culib_present() })
        && queue::enabled()
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
        Ok(Blas {
            handle,
            context,
            kinds: Vec::new(),
        })
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
    layout3([nb, rows, cols], [s0, s1, s2])
}

/// [`layout`] of a batch `[nb, rows, cols]` with element strides `[s0, s1, s2]`.
fn layout3([nb, rows, cols]: [usize; 3], [s0, s1, s2]: [usize; 3]) -> Option<Layout> {
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
        let Some(h) = entry.as_mut() else {
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
            // cuBLAS sets up a kind of product (its heuristics' tables) on first use and
            // registers that state's exit handlers then: ExBurn's must be registered after
            // them, so that an exit waits for queued products before that state is torn down
            let kind = (self.data_type, self.compute);
            if !h.kinds.contains(&kind) {
                h.kinds.push(kind);
                ex_burn_core::exit::after_load();
            }
            queue::release(stream, &others)?;
            Ok(Some(!others.is_empty()))
        }
    }
}

/// The cuBLAS element type of a float type it multiplies.
fn blas_type(dtype: DType) -> Option<blas::cudaDataType> {
    match dtype {
        DType::F32 => Some(blas::cudaDataType::CUDA_R_32F),
        DType::F16 => Some(blas::cudaDataType::CUDA_R_16F),
        DType::BF16 => Some(blas::cudaDataType::CUDA_R_16BF),
        _ => None,
    }
}

/// Multiply-adds of a product (saturating: sizes come from user shapes).
fn work(nb: usize, m: usize, n: usize, k: usize) -> usize {
    nb.saturating_mul(m).saturating_mul(n).saturating_mul(k)
}

/// How cuBLAS accumulates: f32 on TF32 tensor cores for `Precision::Default` (as PyTorch's
/// `allow_tf32` and XLA's default), f32 otherwise (f16 and bf16 always accumulate in f32).
fn compute_type(dtype: DType, precision: Precision) -> blas::cublasComputeType_t {
    match (dtype, precision) {
        (DType::F32, Precision::Default) => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        _ => blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    }
}

/// `[nb, m, k] x [nb, k, n]` (batch broadcast where one side has `nb` 1) by cuBLAS, or `None`
/// when it does not apply (see the module documentation).
pub fn batched_matmul(
    a3: Operand,
    b3: Operand,
    precision: Precision,
) -> Result<Option<DispatchTensor>> {
    let (sa, sb) = (a3.shape, b3.shape);
    // float CUDA tensors of rank 3 and one type
    let (Some(ta), Some(tb)) = (queue::cube(a3.prim), queue::cube(b3.prim)) else {
        return Ok(None);
    };
    if sa.len() != 3 || sb.len() != 3 || ta.dtype != tb.dtype {
        return Ok(None);
    }
    let dtype = DType::from_burn(ta.dtype).unwrap_or(DType::F32);
    let (nb, m, k, n) = (sa[0].max(sb[0]), sa[1], sa[2], sb[2]);
    let Some(data_type) = blas_type(dtype) else {
        return Ok(None);
    };
    let fits = |v: usize| i32::try_from(v).is_ok();
    if work(nb, m, n, k) < threshold()
        || sb[1] != k
        || (sa[0] != sb[0] && sa[0] != 1 && sb[0] != 1)
        || ![nb, m, n, k].into_iter().all(fits)
        || !available()
    {
        return Ok(None);
    }
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
        compute: compute_type(dtype, precision),
        nan: Nan::of(dtype),
    };
    let Some(out_handle) = launch(ta, tb, gemm)? else {
        return Ok(None);
    };
    Ok(Some(queue::output(
        ta,
        out_handle,
        &[nb, m, n],
        dtype,
        a3.prim.checkpointing,
    )))
}

/// Queues `gemm` on the buffers of `ta` and `tb` (or, for this thread's first product on the
/// device, runs it at once) and returns the result's buffer; `None` when no cuBLAS handle
/// could be made (nothing was queued).
fn launch(
    ta: &CubeTensor<CudaRuntime>,
    tb: &CubeTensor<CudaRuntime>,
    gemm: Gemm,
) -> Result<Option<Handle>> {
    let (nb, m, n, k, la, lb) = (gemm.nb, gemm.m, gemm.n, gemm.k, gemm.a, gemm.b);
    let elem = match gemm.data_type {
        blas::cudaDataType::CUDA_R_32F => 4,
        _ => 2,
    };
    let client = ta.client.clone();
    let out_handle = client.empty(nb * m * n * elem);
    if ready(gemm.index) {
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
        ex_burn_core::profile::note("cublas");
        ex_burn_core::profile::note_detail(|| {
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
        set_ready(gemm.index);
        ex_burn_core::profile::note("cublas[first]");
    }
    PRODUCTS.with(|c| c.set(c.get() + 1));
    Ok(Some(out_handle))
}

/// Installs [`foreign_matmul`] as the matrix product of Burn's CUDA backend (once per process).
pub(crate) fn install() {
    burn_cubecl::exburn::set_foreign_matmul(foreign_matmul);
}

/// Burn's own matrix products of CUDA tensors by cuBLAS (the products of native training and
/// its backward pass, convolutions lowered to GEMM, and `dot`'s products below [`MIN_WORK`]):
/// f32, f16 and bf16 operands of equal rank `[.., m, k] x [.., k, n]` whose batch axes are
/// equal or all 1 on one side and collapse to one stride. f32 products of at least
/// [`MIN_WORK`] multiply-adds use TF32 tensor cores, as `dot` does by default (and as Burn's
/// kernels did); smaller ones accumulate in full f32. Anything else (or no cuBLAS) returns
/// `None`: Burn's kernels compute it. These products need no kernel compilation, which made
/// Burn's autotuned matmuls most of a cold first training epoch (hundreds of kernels compiled
/// by NVRTC for `examples/train_classifier.exs`).
fn foreign_matmul(
    lhs: &dyn std::any::Any,
    rhs: &dyn std::any::Any,
    out: burn::tensor::DType,
) -> Option<Box<dyn std::any::Any>> {
    let ta = lhs.downcast_ref::<CubeTensor<CudaRuntime>>()?;
    let tb = rhs.downcast_ref::<CubeTensor<CudaRuntime>>()?;
    if ta.dtype != tb.dtype
        || ta.dtype != out
        || ta.device != tb.device
        || ta.qparams.is_some()
        || tb.qparams.is_some()
    {
        return None;
    }
    let dtype = DType::from_burn(out).ok()?;
    let data_type = blas_type(dtype)?;
    let plan = Plan::of(
        (ta.meta.shape(), ta.meta.strides()),
        (tb.meta.shape(), tb.meta.strides()),
    )?;
    if !available() {
        return None;
    }
    let [nb, m, n, k] = plan.sizes;
    let precision = if work(nb, m, n, k) >= threshold() {
        Precision::Default
    } else {
        Precision::Highest
    };
    let gemm = Gemm {
        index: ta.device.index,
        nb,
        m,
        n,
        k,
        a: plan.a,
        b: plan.b,
        data_type,
        compute: compute_type(dtype, precision),
        nan: Nan::of(dtype),
    };
    let handle = launch(ta, tb, gemm).ok()??;
    Some(Box::new(CubeTensor::new_contiguous(
        ta.client.clone(),
        ta.device.clone(),
        ex_burn_core::tensor::prim_shape(&plan.shape),
        handle,
        out,
    )))
}

/// A product `[.., m, k] x [.., k, n]` of any rank as one strided batch for cuBLAS.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Plan {
    /// `[nb, m, n, k]`.
    sizes: [usize; 4],
    a: Layout,
    b: Layout,
    /// The result's shape (the batch axes of the operand that has them, then `[m, n]`).
    shape: Vec<usize>,
}

impl Plan {
    /// The plan for operands of these shapes and element strides; `None` when ranks differ or
    /// are below 2, inner sizes disagree, a size is 0 or does not fit cuBLAS's `int`, batch
    /// axes differ (other than all 1 on one side) or do not collapse to one stride, or the
    /// matrices' layouts are not ones cuBLAS reads.
    fn of((sa, ta): (&[usize], &[usize]), (sb, tb): (&[usize], &[usize])) -> Option<Plan> {
        let r = sa.len();
        if r < 2 || sb.len() != r || ta.len() != r || tb.len() != r {
            return None;
        }
        let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
        let (ba, bb) = (&sa[..r - 2], &sb[..r - 2]);
        let (na, nb_b) = (ba.iter().product::<usize>(), bb.iter().product::<usize>());
        if sb[r - 2] != k || !(ba == bb || na == 1 || nb_b == 1) {
            return None;
        }
        let nb = na.max(nb_b);
        let fits = |v: usize| v > 0 && i32::try_from(v).is_ok();
        if ![nb, m, n, k].into_iter().all(fits) {
            return None;
        }
        let side = |shape: &[usize], strides: &[usize]| -> Option<Layout> {
            let batch = batch_stride(&shape[..r - 2], &strides[..r - 2])?;
            let l = layout3(
                [shape[..r - 2].iter().product(), shape[r - 2], shape[r - 1]],
                [batch, strides[r - 2], strides[r - 1]],
            )?;
            i32::try_from(l.ld).is_ok().then_some(l)
        };
        let (a, b) = (side(sa, ta)?, side(sb, tb)?);
        let mut shape = if na >= nb_b { ba.to_vec() } else { bb.to_vec() };
        shape.extend([m, n]);
        Some(Plan {
            sizes: [nb, m, n, k],
            a,
            b,
            shape,
        })
    }
}

/// The one stride that steps through batch axes of these sizes and strides in row-major order
/// (axes of size 1 skipped; 0 when there are none); `None` when they do not collapse.
fn batch_stride(sizes: &[usize], strides: &[usize]) -> Option<usize> {
    let mut step: Option<usize> = None;
    let mut span = 1usize;
    for (&size, &stride) in sizes.iter().zip(strides).rev() {
        if size == 1 {
            continue;
        }
        match step {
            None => step = Some(stride),
            Some(s) if stride == s.checked_mul(span)? => {}
            Some(_) => return None,
        }
        span = span.checked_mul(size)?;
    }
    Some(step.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(sa: &[usize], ta: &[usize], sb: &[usize], tb: &[usize]) -> Option<Plan> {
        Plan::of((sa, ta), (sb, tb))
    }

    #[test]
    fn matrices_of_rank_two_are_one_product() {
        let p = plan(&[4, 3], &[3, 1], &[3, 5], &[5, 1]).unwrap();
        assert_eq!(p.sizes, [1, 4, 5, 3]);
        assert_eq!(p.shape, vec![4, 5]);
        assert_eq!((p.a.transposed, p.a.ld, p.a.batch), (false, 3, 0));
        assert_eq!((p.b.transposed, p.b.ld, p.b.batch), (false, 5, 0));
        // a transposed view of a [5, 3] matrix (what autodiff's backward pass multiplies by)
        let t = plan(&[4, 3], &[3, 1], &[3, 5], &[1, 3]).unwrap();
        assert_eq!((t.b.transposed, t.b.ld), (true, 3));
    }

    #[test]
    fn batch_axes_collapse_or_broadcast() {
        // [2, 3] batches, contiguous on both sides
        let p = plan(
            &[2, 3, 4, 5],
            &[60, 20, 5, 1],
            &[2, 3, 5, 6],
            &[90, 30, 6, 1],
        )
        .unwrap();
        assert_eq!(p.sizes, [6, 4, 6, 5]);
        assert_eq!(p.shape, vec![2, 3, 4, 6]);
        assert_eq!((p.a.batch, p.b.batch), (20, 30));
        // one side's batch axes all 1: broadcast (stride 0)
        let q = plan(
            &[1, 1, 4, 5],
            &[20, 20, 5, 1],
            &[2, 3, 5, 6],
            &[90, 30, 6, 1],
        )
        .unwrap();
        assert_eq!((q.sizes[0], q.a.batch, q.b.batch), (6, 0, 30));
        assert_eq!(q.shape, vec![2, 3, 4, 6]);
        // batch axes that differ otherwise are left to Burn
        assert!(plan(
            &[2, 1, 4, 5],
            &[20, 20, 5, 1],
            &[1, 3, 5, 6],
            &[90, 30, 6, 1]
        )
        .is_none());
        // batch axes permuted in memory do not collapse to one stride
        assert!(plan(
            &[2, 3, 4, 5],
            &[20, 40, 5, 1],
            &[2, 3, 5, 6],
            &[90, 30, 6, 1]
        )
        .is_none());
    }

    #[test]
    fn unusable_shapes_are_left_to_burn() {
        // empty, rank 1, ranks that differ, inner sizes that disagree
        assert!(plan(&[0, 3], &[3, 1], &[3, 5], &[5, 1]).is_none());
        assert!(plan(&[4, 0], &[1, 1], &[0, 5], &[5, 1]).is_none());
        assert!(plan(&[3], &[1], &[3], &[1]).is_none());
        assert!(plan(&[2, 4, 3], &[12, 3, 1], &[3, 5], &[5, 1]).is_none());
        assert!(plan(&[4, 3], &[3, 1], &[2, 5], &[5, 1]).is_none());
        // neither rows nor columns contiguous
        assert!(plan(&[4, 3], &[6, 2], &[3, 5], &[5, 1]).is_none());
        // a size beyond cuBLAS's int
        assert!(plan(&[1 << 31, 1], &[1, 1], &[1, 1], &[1, 1]).is_none());
    }

    #[test]
    fn batch_strides_step_in_row_major_order() {
        assert_eq!(batch_stride(&[], &[]), Some(0));
        assert_eq!(batch_stride(&[1, 1], &[7, 9]), Some(0));
        assert_eq!(batch_stride(&[2, 3], &[60, 20]), Some(20));
        assert_eq!(batch_stride(&[2, 1, 3], &[60, 5, 20]), Some(20));
        assert_eq!(batch_stride(&[2, 3], &[20, 60]), None);
        assert_eq!(batch_stride(&[2, 3], &[usize::MAX, 1 << 62]), None);
    }
}
