//! Sums across GPUs by NCCL, loaded at run time (as cuBLAS is), through CubeCL's collective
//! operations: each device's `ncclAllReduce` is queued on its communication stream after the
//! work queued so far on its compute stream, and the compute stream waits for it before any
//! later work. One communicator per set of GPUs (the devices are always given in index order,
//! so a set never gets a second one).
//!
//! Work that waits for the other devices is handed to every device before anything else of the
//! sum is queued: NCCL's communicator setup (each device thread waits in it until all have
//! entered it) for all devices first, then each device's part handed to its device thread at
//! once ([`deliver`]) instead of when its channel's batch fills. A device thread waiting for
//! the other devices cannot take more work; with other threads queuing work on the same GPUs,
//! its channel fills, and the summing thread, blocked on that channel, never queued the other
//! devices' setup or parts: a deadlock, seen with two GPUs while the engine's tests ran on
//! four threads (in the setup, and with a part queued behind a device thread that was loading
//! a kernel module, which waits for the device's running NCCL kernel).

use crate::queue;
use burn::DispatchTensor;
use burn_cubecl::tensor::CubeTensor;
use cubecl_common::device::{Device as _, DeviceId};
use cubecl_common::device_handle::DeviceHandle;
use cubecl_cuda::{CudaDevice, CudaRuntime};
use cubecl_runtime::runtime::Runtime;
use cubecl_runtime::server::ReduceOperation;
use ex_burn_core::kernels::Operand;
use ex_burn_core::{DType, Result};
use std::sync::{Mutex, OnceLock};

/// Whether NCCL loads in this process (looked for once).
pub fn nccl_loads() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: loading the library runs its initialisers only; nothing is called through it.
    *PRESENT.get_or_init(|| unsafe { cudarc::nccl::sys::is_culib_present() })
}

/// Hands what was queued for device `id` so far (a part of a sum) to its device thread now,
/// instead of when its channel's batch fills.
fn deliver(id: DeviceId) {
    DeviceHandle::<<CudaRuntime as Runtime>::Server>::new(id).flush_queue();
}

/// The CUDA tensor of an operand and its GPU index.
fn cuda_of<'a>(t: &Operand<'a>) -> Option<(&'a CubeTensor<CudaRuntime>, usize)> {
    let c = queue::cube(t.prim)?;
    Some((c, c.device.index))
}

/// Each set's sum on every device of the set (see
/// [`ex_burn_core::kernels::DeviceKernels::all_reduce`]); `None` without NCCL or when the
/// operands are not one float tensor per distinct GPU.
pub fn all_reduce(sets: &[Vec<Operand>]) -> Result<Option<Vec<Vec<DispatchTensor>>>> {
    if sets.is_empty() {
        return Ok(Some(Vec::new()));
    }
    if !nccl_loads() {
        return Ok(None);
    }
    // each set's CUDA tensors, looked up once
    let Some(tensors) = sets
        .iter()
        .map(|set| set.iter().map(cuda_of).collect::<Option<Vec<_>>>())
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let indices: Vec<usize> = tensors[0].iter().map(|&(_, i)| i).collect();
    let distinct = indices
        .iter()
        .enumerate()
        .all(|(i, d)| !indices[..i].contains(d));
    let same_places = tensors.iter().all(|set| {
        set.len() == indices.len() && set.iter().zip(&indices).all(|(&(_, j), &i)| j == i)
    });
    if indices.len() < 2 || !distinct || !same_places {
        return Ok(None);
    }
    let mut sorted = indices.clone();
    sorted.sort_unstable();
    let ids: Vec<_> = sorted.iter().map(|&i| CudaDevice::new(i).to_id()).collect();
    // Every device must take the collectives of a communicator in the same order (NCCL's
    // requirement; two trainings summing over the same GPUs from two threads deadlocked
    // without this lock). The calls only queue work on each device's own thread, so the lock
    // is held for the submissions, not for the transfers.
    static ORDER: Mutex<()> = Mutex::new(());
    let _order = ORDER.lock().unwrap_or_else(|p| p.into_inner());
    // NCCL was loaded by `nccl_loads`, after ExBurn's exit handler was first registered:
    // registered again now, it runs before any exit handler NCCL set up when it loaded (those
    // its communicators may set up on the devices' threads during this first collective are
    // not covered)
    static LOADED: std::sync::Once = std::sync::Once::new();
    LOADED.call_once(ex_burn_core::exit::after_load);
    // every device's communicator (set up once per set of devices) before any part
    for &(c, _) in &tensors[0] {
        c.client.clone().ensure_init_collective(ids.clone());
    }
    let mut out = Vec::with_capacity(sets.len());
    for (set, cubes) in sets.iter().zip(&tensors) {
        let mut sums = Vec::with_capacity(set.len());
        for (t, &(c, index)) in set.iter().zip(cubes) {
            let src = burn_cubecl::kernel::into_contiguous(c.clone());
            let dtype = DType::from_burn(src.dtype)?;
            let mut client = src.client.clone();
            let dst = client.empty(t.numel() * dtype.size());
            client.all_reduce(
                src.handle.clone(),
                dst.clone(),
                src.dtype.into(),
                ids.clone(),
                ReduceOperation::Sum,
            );
            deliver(CudaDevice::new(index).to_id());
            sums.push(queue::output(
                &src,
                dst,
                t.shape,
                dtype,
                t.prim.checkpointing,
            ));
        }
        out.push(sums);
    }
    // each device's compute stream waits for its communication stream before using a sum
    for &(c, _) in &tensors[0] {
        c.client.sync_collective();
    }
    Ok(Some(out))
}
