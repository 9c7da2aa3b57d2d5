//! How CubeCL pools CUDA memory.
//!
//! CubeCL keeps every buffer it ever allocated: its pools (one buffer per page from size
//! buckets, or buffers cut out of large pages) reuse a free page only for a later request of
//! the same bucket, and in normal operation never free one (its periodic cleanup only runs
//! after an error). A process that ran work of several shapes (making inputs, a forward pass,
//! a backward pass) then holds the peak of every bucket at once. `EX_BURN_CUDA_MEMORY`
//! chooses, before the first CUDA device is used:
//!
//! * `driver` (default) - one buffer per page (CubeCL's `ExclusivePages`), and after every
//!   piece of work ExBurn issues on the device (an op, a program run, a training step) the
//!   pages left free go back to the CUDA driver's stream-ordered pool (`cuMemFreeAsync`,
//!   queued on CubeCL's device thread), which keeps
//!   them (its release threshold raised) and hands them out again for allocations of any
//!   size: the process holds about its peak of live buffers. H200 (2026-11-27), GPT-2 layer
//!   (b8 x s512) bench: process peak 1,774 MiB against 2,350-2,478 MiB with `exclusive`
//!   (PyTorch 1,288 MiB), at equal speed; a loop dropping 40 results of 256 MiB: 1,454 MiB
//!   (PyTorch 1,130, JAX 2,924; `exclusive` 2,286); native training 1.43 / 1.28 ms per step
//!   (MLP 784-1024-1024-10 b512 / 784-128-10 b32; PyTorch 1.32 / 1.39 ms, same lease);
//! * `exclusive` - CubeCL's `ExclusivePages`, pages never freed (ExBurn's default until
//!   2026-11-27; against `pooled`: GPT-2 layer 2,542 against 3,728 MiB);
//! * `pooled` - CubeCL's default, `MemoryConfiguration::SubSlices`.

use cubecl_runtime::memory_management::MemoryConfiguration;
use ex_burn_core::{guard, Error, Result};
use std::sync::OnceLock;

/// The default when `EX_BURN_CUDA_MEMORY` is unset.
pub const DEFAULT: &str = "driver";

/// The configuration `value` names (`""`: the default).
pub fn parse(value: &str) -> std::result::Result<(&'static str, MemoryConfiguration), String> {
    match if value.is_empty() { DEFAULT } else { value } {
        "exclusive" => Ok(("exclusive", MemoryConfiguration::ExclusivePages)),
        "pooled" => Ok(("pooled", MemoryConfiguration::SubSlices)),
        "driver" => Ok(("driver", MemoryConfiguration::ExclusivePages)),
        other => Err(format!(
            "EX_BURN_CUDA_MEMORY={other:?}: expected \"exclusive\", \"pooled\" or \"driver\""
        )),
    }
}

/// Sets CubeCL's memory configuration from `EX_BURN_CUDA_MEMORY` once, before the first CUDA
/// server is created; returns the name of the configuration in force (an unknown value is an
/// [`Error::Argument`] at every CUDA device use).
pub fn configure() -> Result<&'static str> {
    static CHOSEN: OnceLock<std::result::Result<&'static str, String>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let (name, config) = parse(&std::env::var("EX_BURN_CUDA_MEMORY").unwrap_or_default())?;
            cubecl_cuda::set_memory_configuration(config);
            if name == "driver" {
                keep_driver_pools();
            }
            Ok(name)
        })
        .clone()
        .map_err(Error::Argument)
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
    #[test]
    fn names_parse_and_unknown_ones_are_refused() {
        assert_eq!(super::parse("").unwrap().0, super::DEFAULT);
        assert_eq!(super::parse("exclusive").unwrap().0, "exclusive");
        assert_eq!(super::parse("pooled").unwrap().0, "pooled");
        assert_eq!(super::parse("driver").unwrap().0, "driver");
        assert!(super::parse("huge").unwrap_err().contains("huge"));
    }
}
