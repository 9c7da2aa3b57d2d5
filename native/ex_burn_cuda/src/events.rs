//! CUDA events queued in order with this thread's GPU work, for the GPU-time profile
//! (`EX_BURN_PROFILE=gpu`, `ex_burn_core::profile`): an event recorded before and after each
//! program step times the step on the GPU itself, apart from the time the GPU waited for
//! the host to queue it.

use crate::queue::{self, driver, Nan, Output};
use burn_cubecl::tensor::CubeTensor;
use cubecl_cuda::{CudaDevice, CudaRuntime};
use cubecl_runtime::runtime::Runtime;
use cudarc::driver::{result as drv, sys as drv_sys};
use ex_burn_core::kernels::Mark;
use ex_burn_core::{Error, Result};
use std::sync::{Arc, Mutex};

/// A one-element buffer on this thread's stream of CUDA device `index`, through which work
/// is queued on that stream.
fn anchor(index: usize) -> CubeTensor<CudaRuntime> {
    let device = CudaDevice::new(index);
    let client = CudaRuntime::client(&device);
    let handle = client.empty(4);
    CubeTensor::new_contiguous(
        client,
        device,
        ex_burn_core::tensor::prim_shape(&[1]),
        handle,
        burn::tensor::DType::F32,
    )
}

/// Queues `work` on this thread's stream of device `index` (after everything queued so far).
fn queue_on<W>(index: usize, what: &'static str, work: W)
where
    W: FnOnce(drv_sys::CUstream) -> Result<()> + Send + 'static,
{
    let t = anchor(index);
    let output = Output {
        binding: 0,
        count: 1,
        nan: Nan::D32(0),
    };
    let binding = t.handle.clone().binding();
    queue::submit(&t, vec![binding], vec![output], what, move |_, stream| {
        work(stream)
    });
}

/// Records an event on this thread's stream of CUDA device `index` after the work queued so
/// far.
pub(crate) fn mark(index: usize) -> Mark {
    let slot: Mark = Arc::default();
    let out = Arc::clone(&slot);
    queue_on(index, "a profile event", move |stream| {
        let event = driver(
            drv::event::create(drv_sys::CUevent_flags::CU_EVENT_DEFAULT),
            "event creation",
        )?;
        // SAFETY: a live event and a live stream of the context current on the device thread.
        driver(unsafe { drv::event::record(event, stream) }, "event record")?;
        let mut s = out
            .lock()
            .map_err(|_| Error::Execution("a profile event slot is poisoned".into()))?;
        *s = Some(event as usize);
        Ok(())
    });
    slot
}

/// The GPU time in milliseconds between each pair of marks (`None` for a pair not recorded),
/// once the device has run them; destroys the events. Waits for the device.
pub(crate) fn elapsed(index: usize, pairs: Vec<(Mark, Mark)>) -> Vec<Option<f64>> {
    let results: Arc<Mutex<Vec<Option<f64>>>> = Arc::default();
    let out = Arc::clone(&results);
    queue_on(index, "profile event times", move |_| {
        let handle = |m: &Mark| m.lock().ok().and_then(|s| *s);
        let mut times = Vec::with_capacity(pairs.len());
        let mut seen = Vec::new();
        for (a, b) in &pairs {
            let time = match (handle(a), handle(b)) {
                (Some(a), Some(b)) => {
                    let (a, b) = (a as drv_sys::CUevent, b as drv_sys::CUevent);
                    // SAFETY: events created and recorded by `mark` on this device thread,
                    // destroyed only below.
                    unsafe {
                        drv::event::synchronize(b)
                            .and_then(|_| drv::event::elapsed(a, b))
                            .ok()
                            .map(f64::from)
                    }
                }
                _ => None,
            };
            times.push(time);
            seen.extend([handle(a), handle(b)].into_iter().flatten());
        }
        seen.sort_unstable();
        seen.dedup();
        for e in seen {
            // SAFETY: each event once, not used afterwards.
            let _ = unsafe { drv::event::destroy(e as drv_sys::CUevent) };
        }
        if let Ok(mut r) = out.lock() {
            *r = times;
        }
        Ok(())
    });
    let _ = ex_burn_core::Device::Cuda(index).sync();
    results.lock().map(|r| r.clone()).unwrap_or_default()
}
