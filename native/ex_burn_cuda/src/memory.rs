//! How CubeCL pools CUDA memory.
//!
//! CubeCL keeps every buffer it ever allocated: its pools (one buffer per page from size
//! buckets, or buffers cut out of large pages) reuse a free page only for a later request of
//! the same bucket, and in normal operation never free one (its periodic cleanup only runs
//! after an error). A process that ran work of several shapes (making inputs, a forward pass,
//! a backward pass) then holds the peak of every bucket at once. The engine's configuration
//! (`cuda_memory`, [`ex_burn_core::config::CudaMemory`]) chooses, before the first CUDA device
//! is used:
//!
//! * `driver` (default) - one buffer per page (CubeCL's `ExclusivePages`), and after every
//!   piece of work ExBurn issues on the device (an op, a program run, a training step) the
//!   pages left free go back to the CUDA driver's stream-ordered pool (`cuMemFreeAsync`,
//!   queued on CubeCL's device thread), which keeps them (its release threshold raised) and
//!   hands them out again for allocations of any size: the process holds about its peak of
//!   live buffers, not the sum of every bucket's peak, at the same speed (measurements:
//!   bench/results/gpu_h200.md);
//! * `exclusive` - CubeCL's `ExclusivePages`, pages never freed;
//! * `pooled` - CubeCL's default, `MemoryConfiguration::SubSlices`.

use cubecl_runtime::memory_management::MemoryConfiguration;
use ex_burn_core::config::{self, CudaMemory};
use ex_burn_core::{guard, Error, Result};
use std::sync::OnceLock;

/// The name of a configuration and CubeCL's memory configuration for it.
pub fn parse(mode: CudaMemory) -> (&'static str, MemoryConfiguration) {
    match mode {
        CudaMemory::Exclusive => ("exclusive", MemoryConfiguration::ExclusivePages),
        CudaMemory::Pooled => ("pooled", MemoryConfiguration::SubSlices),
        CudaMemory::Driver => ("driver", MemoryConfiguration::ExclusivePages),
    }
}

/// Sets CubeCL's memory configuration from the engine's configuration once, before the first
/// CUDA server is created; returns the name of the configuration in force (a configuration
/// refused, from a bad environment variable, is an [`Error::Argument`] at every CUDA device
/// use until it is replaced).
pub fn configure() -> Result<&'static str> {
    static CHOSEN: OnceLock<&'static str> = OnceLock::new();
    if let Some(name) = CHOSEN.get() {
        return Ok(name);
    }
    let mode = config::device_settings()?.cuda_memory;
    Ok(CHOSEN.get_or_init(|| {
        let (name, memory) = parse(mode);
        cubecl_cuda::set_memory_configuration(memory);
        if name == "driver" {
            keep_driver_pools();
        }
        name
    }))
}

/// Raises the release threshold of every device's default memory pool (the pool
/// `cuMemAllocAsync` draws from): memory given back with `cuMemFreeAsync` stays with the
/// process for the next allocations instead of going back to the system at every
/// synchronisation (the default threshold, 0).
fn keep_driver_pools() {
    use cudarc::driver::{result as drv, sys};
    let Ok(count) = crate::device::device_count() else {
        return;
    };
    for i in 0..count {
        let Ok(dev) = drv::device::get(i as i32) else {
            continue;
        };
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        let mut threshold: u64 = u64::MAX;
        // SAFETY: plain driver calls on a valid device; `pool` and `threshold` outlive them.
        unsafe {
            if sys::cuDeviceGetDefaultMemPool(&mut pool, dev) == sys::CUresult::CUDA_SUCCESS {
                let _ = sys::cuMemPoolSetAttribute(
                    pool,
                    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    (&mut threshold as *mut u64).cast(),
                );
            }
        }
    }
}

/// Gives CubeCL's free pages of CUDA device `index` back to the driver's pool (`driver`
/// mode; queued on CubeCL's device thread, the caller does not wait). Nothing in the other
/// modes.
pub fn give_back(index: usize) {
    use cubecl_cuda::{CudaDevice, CudaRuntime};
    use cubecl_runtime::runtime::Runtime;
    if configure() == Ok("driver") {
        let _ = guard(|| {
            CudaRuntime::client(&CudaDevice::new(index)).memory_cleanup();
            Ok(())
        });
    }
}

/// What CubeCL's pools of CUDA device `index` hold for this process: bytes in use by live
/// buffers and bytes reserved from the driver (in use, padding and idle pages).
pub fn usage(index: usize) -> Result<(u64, u64)> {
    use cubecl_cuda::{CudaDevice, CudaRuntime};
    use cubecl_runtime::runtime::Runtime;
    crate::device::check(index)?;
    configure()?;
    guard(|| {
        let client = CudaRuntime::client(&CudaDevice::new(index));
        let usage = client
            .memory_usage()
            .map_err(|e| Error::Device(format!("CUDA memory usage: {e:?}")))?;
        Ok((usage.bytes_in_use, usage.bytes_reserved))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_names_its_configuration() {
        assert_eq!(parse(CudaMemory::default()).0, "driver");
        assert_eq!(parse(CudaMemory::Exclusive).0, "exclusive");
        assert_eq!(parse(CudaMemory::Pooled).0, "pooled");
    }
}
