//! What the BEAM holds: the number of tensor resources alive on each device and their bytes
//! (shape x element size), counted when a resource is made and when its tensor is freed
//! (`deallocate` or garbage collection). Reported by `device_info`, so that a test or a user
//! can see whether tensors Elixir dropped were released.

use ex_burn_core::Device;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Tensors alive per device, and their bytes.
fn table() -> &'static Mutex<HashMap<Device, (u64, u64)>> {
    static TABLE: OnceLock<Mutex<HashMap<Device, (u64, u64)>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Counts a tensor of `bytes` on `device` as held.
pub fn add(device: Device, bytes: u64) {
    let mut t = table().lock().unwrap_or_else(PoisonError::into_inner);
    let e = t.entry(device).or_insert((0, 0));
    e.0 += 1;
    e.1 += bytes;
}

/// Counts a tensor of `bytes` on `device` as released.
pub fn remove(device: Device, bytes: u64) {
    let mut t = table().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(e) = t.get_mut(&device) {
        e.0 = e.0.saturating_sub(1);
        e.1 = e.1.saturating_sub(bytes);
    }
}

/// `(tensors, bytes)` held on `device`.
pub fn of(device: Device) -> (u64, u64) {
    let t = table().lock().unwrap_or_else(PoisonError::into_inner);
    t.get(&device).copied().unwrap_or((0, 0))
}
