//! Work of ExBurn's own (cuBLAS products, fused element-wise kernels) queued on the buffers of
//! Burn's CUDA tensors, in order with CubeCL's kernels.
//!
//! CubeCL hands every kernel launch to a device thread of its own and returns. Foreign work
//! is queued on that thread the same way (`submit`): it runs after the launches queued
//! before it and before those queued after it, looks up its buffers there (their device
//! pointers and the streams that own them, through the patched `cubecl-cuda`) and queues its
//! GPU work on the stream of its first output. Operands owned by another stream are ordered
//! by events (`wait_for`). The calling thread never waits.
//!
//! Queued work cannot return an error. Work that fails (which validated arguments make
//! unexpected) sets its outputs to NaN, is recorded, turns ExBurn's own GPU paths off
//! (`enabled`), and the next read of any tensor to the host returns the error
//! ([`check_failures`]).

use burn::DispatchTensor;
use burn_cubecl::tensor::CubeTensor;
use burn_dispatch::{BackendTensor, DispatchTensorKind};
use cubecl_common::device::Device as _;
use cubecl_common::device_handle::DeviceHandle;
use cubecl_common::stream_id::StreamId;
use cubecl_cuda::CudaRuntime;
use cubecl_runtime::runtime::Runtime;
use cubecl_runtime::server::{Binding, ComputeServer, Handle};
use cubecl_runtime::storage::ComputeStorage;
use cudarc::driver::{result as drv, sys as drv_sys};
use ex_burn_core::{DType, Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// CubeCL's CUDA server, which owns the buffers and runs on its device thread.
pub(crate) type Server = <CudaRuntime as Runtime>::Server;

/// A buffer of [`Server`]: its device pointer and the stream that owns it (patched crate).
pub(crate) type GpuResource = <<Server as ComputeServer>::Storage as ComputeStorage>::Resource;

/// A NaN of an output's element type, the fill of a failed piece of work's outputs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Nan {
    /// 32-bit pattern (f32).
    D32(u32),
    /// 16-bit pattern (f16, bf16).
    D16(u16),
}

impl Nan {
    /// The quiet NaN of a float type (f64 is not an output type of queued work).
    pub(crate) fn of(dtype: DType) -> Nan {
        match dtype {
            DType::F16 => Nan::D16(0x7e00),
            DType::BF16 => Nan::D16(0x7fc0),
            _ => Nan::D32(0x7fc0_0000),
        }
    }
}

/// The CUDA tensor behind a float primitive, when it is one.
pub(crate) fn cube(prim: &DispatchTensor) -> Option<&CubeTensor<CudaRuntime>> {
    match &prim.kind {
        DispatchTensorKind::Cuda(BackendTensor::Float(t)) => Some(t),
        _ => None,
    }
}

/// The float primitive of logical shape `shape` (contiguous) in buffer `handle`, an output of
/// queued work on the device of `like`.
pub(crate) fn output(
    like: &CubeTensor<CudaRuntime>,
    handle: Handle,
    shape: &[usize],
    dtype: DType,
    checkpointing: burn_dispatch::CheckpointingStrategy,
) -> DispatchTensor {
    let t = CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        ex_burn_core::tensor::prim_shape(shape),
        handle,
        dtype.burn(),
    );
    DispatchTensor {
        kind: DispatchTensorKind::Cuda(BackendTensor::Float(t)),
        checkpointing,
    }
}

/// An output of queued work: which binding, how many elements and their NaN.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Output {
    /// Index into the bindings handed to [`submit`].
    pub binding: usize,
    /// Elements.
    pub count: usize,
    /// The fill on failure.
    pub nan: Nan,
}

/// The error of queued work that failed, not yet reported (see [`check_failures`]).
static FAILED: Mutex<Option<Error>> = Mutex::new(None);

/// Set once queued work failed: ExBurn's own GPU paths are not used again.
static DISABLED: AtomicBool = AtomicBool::new(false);

/// Whether no queued work has failed so far.
pub(crate) fn enabled() -> bool {
    !DISABLED.load(Ordering::Acquire)
}

/// Returns the error of queued work that failed since the last call (its outputs were
/// filled with NaN), once. Called after every read of a tensor to the host, which runs after
/// the work queued before it.
pub fn check_failures() -> Result<()> {
    if enabled() {
        return Ok(());
    }
    match FAILED.lock().map(|mut f| f.take()) {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}

/// Maps a driver result to ExBurn's error, naming `what` failed.
pub(crate) fn driver<T>(r: std::result::Result<T, drv::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| Error::Device(format!("CUDA {what} failed: {e:?}")))
}

/// Makes `waiter` wait, on the GPU, for the work queued on `on` so far.
///
/// # Safety
/// Both streams are live streams of the current context.
pub(crate) unsafe fn wait_for(waiter: drv_sys::CUstream, on: drv_sys::CUstream) -> Result<()> {
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

/// Queues `work` on the device thread of `tensor`'s device: it gets the buffers of
/// `bindings` (in order) and the stream of the first output's buffer, where it queues its GPU
/// work; it returns whether an operand's stream had to be ordered by events (see
/// [`order_operands`]). On failure the `outputs` are filled with NaN and the error recorded
/// (see the module documentation). `what` names the work in that error.
pub(crate) fn submit<W>(
    tensor: &CubeTensor<CudaRuntime>,
    bindings: Vec<Binding>,
    outputs: Vec<Output>,
    what: &'static str,
    work: W,
) where
    W: FnOnce(&[&GpuResource], drv_sys::CUstream) -> Result<()> + Send + 'static,
{
    let stream_id = StreamId::current();
    let timed = ex_burn_core::profile::gpu_mode();
    DeviceHandle::<Server>::new(tensor.device.to_id()).submit(move |server: &mut Server| {
        let started = timed.then(std::time::Instant::now);
        let resources: Option<Vec<_>> = bindings
            .into_iter()
            .map(|b| server.get_resource(b, stream_id).ok())
            .collect();
        let looked_up = started.map(|t| t.elapsed());
        let r = match &resources {
            Some(rs) => {
                let buffers: Vec<&GpuResource> = rs.iter().map(|r| r.resource()).collect();
                match outputs.first().and_then(|o| buffers.get(o.binding)) {
                    // a panic here would end CubeCL's device thread, and every later GPU call
                    // would wait for it forever: it is a failure like any other
                    Some(out) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        work(&buffers, out.stream)
                    }))
                    .unwrap_or_else(|_| Err(Error::Execution(format!("{what} panicked")))),
                    None => Err(Error::Execution("queued work without an output".into())),
                }
            }
            None => Err(Error::Device("CUDA buffer lookup failed".into())),
        };
        if let Err(e) = r {
            if let Some(rs) = &resources {
                for o in &outputs {
                    if let Some(r) = rs.get(o.binding) {
                        let r = r.resource();
                        // SAFETY: `r` is a live output buffer of `o.count` elements of the
                        // work's type, on `r.stream` of the context current on this thread
                        // (CubeCL's device thread).
                        unsafe {
                            let _ = match o.nan {
                                Nan::D32(v) => {
                                    drv_sys::cuMemsetD32Async(r.ptr, v, o.count, r.stream)
                                }
                                Nan::D16(v) => {
                                    drv_sys::cuMemsetD16Async(r.ptr, v, o.count, r.stream)
                                }
                            };
                        }
                    }
                }
            }
            let e = Error::Device(format!(
                "{what} queued on the GPU failed (its results were set to NaN; ExBurn's own GPU \
                 kernels are not used again in this process): {e}"
            ));
            if let Ok(mut f) = FAILED.lock() {
                f.get_or_insert(e);
            }
            DISABLED.store(true, Ordering::Release);
        }
        if let (Some(t), Some(lookups)) = (started, looked_up) {
            DEVICE_THREAD.record(what, lookups, t.elapsed());
        }
    });
}

/// Starts the work queued for CUDA device `index`: CubeCL's device thread takes queued tasks
/// (kernel launches, ExBurn's [`submit`]s) in batches of 32 and waits until a batch is full
/// or flushed, so without this the last tasks of an op or of a program's steps would wait for
/// the next synchronisation (a GPT-2 layer forward: the GPU started only when the host had
/// issued the whole pass). Fills the batch with no-op tasks.
pub fn flush(index: usize) {
    DeviceHandle::<Server>::new(cubecl_cuda::CudaDevice::new(index).to_id()).flush_queue();
}

/// Time CubeCL's device thread spent on ExBurn's queued work, by kind of work (the `what`
/// of [`submit`]): pieces, nanoseconds looking up their buffers, nanoseconds in all (read by
/// the GPU-time profile, `EX_BURN_PROFILE=gpu`, which alone records it).
pub struct DeviceThreadTime {
    by_kind: Mutex<Vec<(&'static str, u64, u64, u64)>>,
}

impl DeviceThreadTime {
    /// Adds a piece of kind `what` (a kind named `within ...` is a part of other pieces'
    /// time, not counted again in the profile's totals).
    pub(crate) fn record(
        &self,
        what: &'static str,
        lookups: std::time::Duration,
        total: std::time::Duration,
    ) {
        let Ok(mut kinds) = self.by_kind.lock() else {
            return;
        };
        let at = match kinds.iter().position(|k| k.0 == what) {
            Some(at) => at,
            None => {
                kinds.push((what, 0, 0, 0));
                kinds.len() - 1
            }
        };
        let k = &mut kinds[at];
        k.1 += 1;
        k.2 += lookups.as_nanos() as u64;
        k.3 += total.as_nanos() as u64;
    }

    /// `(what, pieces, lookup time, total time)` by kind since the last call.
    pub fn take(&self) -> Vec<(&'static str, u64, std::time::Duration, std::time::Duration)> {
        let kinds = match self.by_kind.lock() {
            Ok(mut k) => std::mem::take(&mut *k),
            Err(_) => Vec::new(),
        };
        let ns = std::time::Duration::from_nanos;
        kinds
            .into_iter()
            .map(|(what, n, lookups, total)| (what, n, ns(lookups), ns(total)))
            .collect()
    }
}

/// See [`DeviceThreadTime`].
pub static DEVICE_THREAD: DeviceThreadTime = DeviceThreadTime {
    by_kind: Mutex::new(Vec::new()),
};

/// Makes `stream` wait for the work queued so far on the streams of `operands` that are
/// not `stream`; returns those streams (to be ordered after the work with [`release`]).
///
/// # Safety
/// The streams are live streams of the current context.
pub(crate) unsafe fn order_operands(
    stream: drv_sys::CUstream,
    operands: &[&GpuResource],
) -> Result<Vec<drv_sys::CUstream>> {
    let mut others: Vec<drv_sys::CUstream> = Vec::new();
    for r in operands {
        if r.stream != stream && !others.contains(&r.stream) {
            others.push(r.stream);
        }
    }
    for &other in &others {
        // SAFETY: the caller's guarantee.
        unsafe { wait_for(stream, other)? };
    }
    Ok(others)
}

/// Makes each of `others` wait for the work queued on `stream` so far, so that memory they
/// free and reuse later is not overwritten before that work has read it.
///
/// # Safety
/// The streams are live streams of the current context.
pub(crate) unsafe fn release(
    stream: drv_sys::CUstream,
    others: &[drv_sys::CUstream],
) -> Result<()> {
    for &other in others {
        // SAFETY: the caller's guarantee.
        unsafe { wait_for(other, stream)? };
    }
    Ok(())
}
