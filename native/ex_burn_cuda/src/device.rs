//! CUDA preflight: the checks that turn a missing driver, NVRTC or CUDA headers into a clear
//! [`Error::Device`] before Burn's CUDA runtime would panic on first use; device names,
//! compute capabilities and memory; Burn's CUDA backend as ExBurn configures it.

use crate::gemm;
use cudarc::driver::result as drv;
use ex_burn_core::config::Autotune;
use ex_burn_core::{guard, Error, Result};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The CUDA toolkit root Burn's runtime compiler uses for headers (`CUDA_PATH`, else the
/// usual install locations).
pub fn cuda_path() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("CUDA_PATH") {
        return Some(PathBuf::from(p));
    }
    ["/usr/local/cuda", "/opt/cuda"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Convolutions of fewer multiply-adds than this (a 512^3 product's worth, as
/// [`gemm::MIN_WORK`]) run Burn's direct kernel instead of autotuning implicit-GEMM kernels:
/// on a cold cache each of the ~8 candidates per convolution shape is a kernel NVRTC compiles
/// in 1-3 s, against microseconds of run time for convolutions this small.
pub const CONV_AUTOTUNE_FLOOR: usize = gemm::MIN_WORK;

/// Reductions over an axis of at most this many elements run one thread per output, and those
/// over axes of at most 64 times as many one warp per output, instead of autotuning among ~12
/// compiled candidates (a thread sums 1,024 values, a warp 65,536, in microseconds).
pub const REDUCE_AUTOTUNE_FLOOR: usize = 1024;

/// Burn's CUDA backend as ExBurn runs it (once per process, before the first CUDA tensor):
/// products on cuBLAS ([`gemm`]), and the autotune floors above, unless the engine's
/// configuration says `autotune: :all` (every convolution and reduction autotuned, as Burn
/// does: slower first calls, possibly faster later ones).
pub fn configure_burn(autotune: Autotune) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        gemm::install();
        if autotune != Autotune::All {
            burn_cubecl::exburn::set_autotune_floors(CONV_AUTOTUNE_FLOOR, REDUCE_AUTOTUNE_FLOOR);
        }
    });
}

fn probe() -> Result<usize> {
    // SAFETY: only checks whether the shared libraries can be opened.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::Device(
            "the NVIDIA driver library (libcuda.so) was not found: install the NVIDIA driver"
                .into(),
        ));
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::Device(
            "NVRTC (libnvrtc.so) was not found: the cuda variant compiles kernels at run time; \
             install the CUDA toolkit's NVRTC and put its lib directory on LD_LIBRARY_PATH"
                .into(),
        ));
    }
    match cuda_path() {
        Some(p) if p.join("include").join("cuda.h").exists() || p.join("include").exists() => {}
        _ => {
            return Err(Error::Device(
                "CUDA headers were not found: set CUDA_PATH to the CUDA toolkit (it must contain include/)".into(),
            ))
        }
    }
    guard(|| {
        drv::init()
            .map_err(|e| Error::Device(format!("CUDA driver failed to initialise: {e:?}")))?;
        let n = drv::device::get_count()
            .map_err(|e| Error::Device(format!("cannot count CUDA devices: {e:?}")))?;
        Ok(n.max(0) as usize)
    })
}

fn status() -> &'static Result<usize> {
    static STATUS: OnceLock<Result<usize>> = OnceLock::new();
    STATUS.get_or_init(probe)
}

/// Number of CUDA devices, or the reason none can be used.
pub fn device_count() -> Result<usize> {
    status().clone()
}

/// Checks that CUDA device `index` can be used.
pub fn check(index: usize) -> Result<()> {
    let n = device_count()?;
    if index >= n {
        return Err(Error::Device(format!(
            "CUDA device {index} does not exist ({n} found)"
        )));
    }
    Ok(())
}

/// The device's name as the driver reports it.
pub fn device_name(index: usize) -> Result<String> {
    check(index)?;
    guard(|| {
        let dev = drv::device::get(index as i32).map_err(|e| Error::Device(format!("{e:?}")))?;
        let name = drv::device::get_name(dev).map_err(|e| Error::Device(format!("{e:?}")))?;
        // SAFETY: `dev` is a valid device handle from the driver.
        let mem = unsafe { drv::device::total_mem(dev) }.unwrap_or(0);
        Ok(format!(
            "{name} ({:.0} GiB, CUDA)",
            mem as f64 / (1u64 << 30) as f64
        ))
    })
}

/// The compute capability `(major, minor)` of CUDA device `index` (cached).
pub fn compute_capability(index: usize) -> Result<(i32, i32)> {
    static CC: OnceLock<std::sync::Mutex<std::collections::HashMap<usize, (i32, i32)>>> =
        OnceLock::new();
    let cache = CC.get_or_init(Default::default);
    if let Some(&cc) = cache
        .lock()
        .ok()
        .and_then(|c| c.get(&index).copied())
        .as_ref()
    {
        return Ok(cc);
    }
    check(index)?;
    let cc = guard(|| {
        let dev = drv::device::get(index as i32).map_err(|e| Error::Device(format!("{e:?}")))?;
        let attr = |a| {
            // SAFETY: `dev` is a valid device handle from the driver.
            unsafe { drv::device::get_attribute(dev, a) }
                .map_err(|e| Error::Device(format!("{e:?}")))
        };
        use cudarc::driver::sys::CUdevice_attribute as A;
        Ok((
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    })?;
    if let Ok(mut c) = cache.lock() {
        c.insert(index, cc);
    }
    Ok(cc)
}

/// Total memory of CUDA device `index` in bytes.
pub fn total_memory(index: usize) -> Result<u64> {
    static TOTAL: OnceLock<std::sync::Mutex<Vec<Option<u64>>>> = OnceLock::new();
    let cache = TOTAL.get_or_init(Default::default);
    if let Some(Some(v)) = cache.lock().ok().and_then(|c| c.get(index).copied()) {
        return Ok(v);
    }
    check(index)?;
    let total = guard(|| {
        let dev = drv::device::get(index as i32).map_err(|e| Error::Device(format!("{e:?}")))?;
        // SAFETY: `dev` is a valid device handle from the driver.
        unsafe { drv::device::total_mem(dev) }
            .map(|m| m as u64)
            .map_err(|e| Error::Device(format!("{e:?}")))
    })?;
    if let Ok(mut c) = cache.lock() {
        if c.len() <= index {
            c.resize(index + 1, None);
        }
        c[index] = Some(total);
    }
    Ok(total)
}
