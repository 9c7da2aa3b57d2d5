//! The allocation guard: before an allocation whose size is known, the bytes asked are compared
//! with what the device can hold, and the request is refused with
//! [`Error::OutOfMemory`] instead of letting the allocator abort the process.
//!
//! What a device can hold: the configured limit ([`set_limit`], `ExBurn.configure!/1`'s
//! `:memory_limit`) when there is one, and otherwise, for the host, the memory the kernel says
//! is available (`MemAvailable`, and the cgroup's remaining quota) or the physical memory on
//! other Unix systems; for CUDA devices their total memory. Small requests (under
//! [`CHECK_FROM`]) skip the system query.

use crate::{Device, Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// Requests below this many bytes are not checked against the system (unless a smaller limit
/// is configured): reading the kernel's figures costs more than a small op.
pub const CHECK_FROM: u128 = 64 << 20;

/// The configured limit in bytes (0: none, the device decides).
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// Sets the largest allocation ExBurn makes on any device (`None`: what the device can hold).
pub fn set_limit(bytes: Option<u64>) {
    LIMIT.store(bytes.unwrap_or(0), Ordering::Relaxed);
}

/// The configured limit, if any.
pub fn limit() -> Option<u64> {
    match LIMIT.load(Ordering::Relaxed) {
        0 => None,
        n => Some(n),
    }
}

/// Bytes the device can hold now, as far as the system tells (`None`: unknown); on the wgpu
/// devices the largest single buffer (see `wgpu_largest_buffer`).
pub fn available(device: Device) -> Option<u64> {
    match device {
        Device::Cpu => host_available(),
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => crate::cuda::total_memory(i).ok(),
        #[cfg(any(feature = "vulkan", feature = "metal"))]
        Device::Vulkan(_) | Device::Metal(_) => wgpu_largest_buffer(device),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// The largest buffer CubeCL allocates on a wgpu device (its page size: on Vulkan a quarter of
/// the device-local heap, elsewhere the adapter's storage-binding limit). A larger tensor
/// failed inside CubeCL's device thread (on Mesa's lavapipe, a padded convolution input of
/// 2^40 elements), which left the device unusable for the rest of the process: refused before.
#[cfg(any(feature = "vulkan", feature = "metal"))]
fn wgpu_largest_buffer(device: Device) -> Option<u64> {
    use cubecl_runtime::runtime::Runtime;
    let d = match device.to_dispatch().ok()? {
        #[cfg(feature = "vulkan")]
        burn::DispatchDevice::Vulkan(d) => d,
        #[cfg(feature = "metal")]
        burn::DispatchDevice::Metal(d) => d,
        _ => return None,
    };
    let client = burn::backend::wgpu::WgpuRuntime::client(&d);
    Some(client.properties().memory.max_page_size)
}

/// What the device's memory pools hold for this process, `(bytes in use, bytes reserved)`,
/// where the backend reports it (CUDA: CubeCL's pools; `None` elsewhere).
pub fn pools(device: Device) -> Option<(u64, u64)> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => crate::cuda::memory::usage(i).ok(),
        _ => None,
    }
}

/// After a piece of work on `device`: lets the device's allocator give back what the work
/// left free, where it is configured to (CUDA, `EX_BURN_CUDA_MEMORY=driver`, the default),
/// and starts the work queued for the device (CUDA: `cuda::queue::flush`).
pub fn after_work(device: Device) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(i) = device {
        crate::cuda::memory::give_back(i);
    }
    start_queued(device);
}

/// Starts the work queued for `device` (CUDA: CubeCL's device thread takes tasks in batches,
/// see `cuda::queue::flush`); nothing elsewhere. Programs call it between their steps.
pub fn start_queued(device: Device) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(i) = device {
        crate::cuda::queue::flush(i);
    }
    let _ = device;
}

/// Refuses a request of `bytes` on `device` that exceeds the configured limit or what the
/// device can hold; `what` names the request in the error.
pub fn reserve(device: Device, bytes: u128, what: &dyn Fn() -> String) -> Result<()> {
    reserve_within(limit(), device, bytes, what)
}

fn reserve_within(
    limit: Option<u64>,
    device: Device,
    bytes: u128,
    what: &dyn Fn() -> String,
) -> Result<()> {
    if let Some(limit) = limit {
        if bytes > limit as u128 {
            return Err(refusal(
                device,
                bytes,
                limit,
                "the configured memory_limit",
                what,
            ));
        }
    }
    if bytes < CHECK_FROM {
        return Ok(());
    }
    match available(device) {
        Some(avail) if bytes > avail as u128 => {
            Err(refusal(device, bytes, avail, "available", what))
        }
        _ => Ok(()),
    }
}

fn refusal(
    device: Device,
    bytes: u128,
    have: u64,
    source: &str,
    what: &dyn Fn() -> String,
) -> Error {
    Error::OutOfMemory(format!(
        "{} would take {} ({bytes} bytes) on {device}, more than {source} ({} = {have} \
         bytes); refused before allocating",
        what(),
        human(bytes),
        human(have as u128)
    ))
}

/// A byte count for people (`1.5 GiB`).
pub fn human(bytes: u128) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(target_os = "linux")]
fn host_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let avail = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb.saturating_mul(1024))?;
    Some(match cgroup_remaining() {
        Some(c) => avail.min(c),
        None => avail,
    })
}

/// What the process's cgroup (v2) may still allocate, when it has a limit.
#[cfg(target_os = "linux")]
fn cgroup_remaining() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let max: u64 = read("memory.max")?.trim().parse().ok()?;
    let current: u64 = read("memory.current")?.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}

#[cfg(all(unix, not(target_os = "linux")))]
fn host_available() -> Option<u64> {
    // SAFETY: sysconf only reads system constants.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| pages as u64 * size as u64)
}

#[cfg(not(unix))]
fn host_available() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_limit_refuses_larger_requests_with_both_sizes() {
        let e = reserve_within(Some(1000), Device::Cpu, 1001, &|| "a test".into()).unwrap_err();
        assert_eq!(e.kind(), "out_of_memory");
        let msg = e.to_string();
        assert!(
            msg.contains("1001 bytes") && msg.contains("1000 bytes"),
            "{msg}"
        );
        assert!(reserve_within(None, Device::Cpu, 1001, &|| "a test".into()).is_ok());
    }

    #[test]
    fn the_host_refuses_what_it_cannot_hold() {
        let e = reserve(Device::Cpu, 1 << 60, &|| "a huge tensor".into()).unwrap_err();
        assert_eq!(e.kind(), "out_of_memory");
        assert!(e.to_string().contains("a huge tensor"));
    }
}
