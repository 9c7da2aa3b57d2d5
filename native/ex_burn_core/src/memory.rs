//! The allocation guard: before an allocation whose size is known, the bytes asked are compared
//! with what the device can hold, and the request is refused with
//! [`Error::OutOfMemory`] instead of letting the allocator abort the process or the kernel
//! kill it.
//!
//! What a device can hold ([`bound`]): for the host, the least of the configured limit
//! ([`set_limit`], `ExBurn.configure!/1`'s `:memory_limit`), `MemAvailable`, what every
//! cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`) from the process's own up to the
//! hierarchy's root leaves, and the address space `RLIMIT_AS` leaves above the process's
//! `VmSize`; the physical memory on other Unix systems; for CUDA devices their total memory.
//!
//! Requests are counted in one ledger: [`reserve`] returns a [`Reservation`] that holds its
//! bytes until it is dropped, and a request is refused when it and the bytes held by live
//! reservations exceed what the device can hold, so two requests that each fit but not
//! together cannot both pass. Held bytes are counted again in the system's figures once they
//! are allocated: the guard errs on the side of refusing. Small requests (under
//! [`CHECK_FROM`]) are counted but skip the system query.

use crate::{Device, Error, Result};
#[cfg(target_os = "linux")]
use figures::{cgroup_bound, cgroup_v1_memory_path, cgroup_v2_path, kib_field, V1, V2};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Requests below this many bytes are not checked against the system (unless a smaller limit
/// is configured): reading the kernel's figures costs more than a small op.
pub const CHECK_FROM: u128 = 64 << 20;

/// Limits at or above this many bytes mean "no limit" (cgroup v1 writes its unlimited value
/// as the largest page-aligned `i64`, 2^63 - 4096).
const UNLIMITED: u64 = 1 << 62;

/// The configured limit in bytes (0: none, the device decides).
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// Sets the most ExBurn holds at once on any device (`None`: what the device can hold).
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

/// What a device can still hold, and what sets that figure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// Bytes that can still be allocated.
    pub bytes: u64,
    /// Where the figure comes from (`MemAvailable`, a cgroup's file, `RLIMIT_AS`, ...).
    pub source: String,
}

impl Bound {
    fn new(bytes: u64, source: impl Into<String>) -> Bound {
        Bound {
            bytes,
            source: source.into(),
        }
    }
}

/// Bytes the device can hold now, as far as the system tells (`None`: unknown); on the wgpu
/// devices the largest single buffer (see `wgpu_largest_buffer`). The configured limit and
/// the bytes held by reservations are not subtracted.
pub fn available(device: Device) -> Option<u64> {
    bound(device).map(|b| b.bytes)
}

/// The tightest of the system's bounds on what `device` can hold now (see [`available`]).
pub fn bound(device: Device) -> Option<Bound> {
    match device {
        Device::Cpu => host_bound(),
        Device::Cuda(_) => device
            .kernels()
            .and_then(|(k, i)| k.total_memory(i))
            .map(|b| Bound::new(b, "the GPU's memory")),
        #[cfg(any(feature = "vulkan", feature = "metal"))]
        Device::Vulkan(_) | Device::Metal(_) => {
            wgpu_largest_buffer(device).map(|b| Bound::new(b, "the largest buffer of the device"))
        }
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
/// where the device kernels report it (CUDA: CubeCL's pools; `None` elsewhere).
pub fn pools(device: Device) -> Option<(u64, u64)> {
    device.kernels().and_then(|(k, i)| k.pool_usage(i))
}

/// After a piece of work on `device`: lets the device's allocator give back what the work
/// left free, where it is configured to (CUDA, `cuda_memory: :driver`, the default),
/// and starts the work queued for the device.
pub fn after_work(device: Device) {
    if let Some((k, i)) = device.kernels() {
        k.after_work(i);
    }
    start_queued(device);
}

/// Starts the work queued for `device` (CUDA: CubeCL's device thread takes tasks in
/// batches); nothing elsewhere. Programs call it between their steps.
pub fn start_queued(device: Device) {
    if let Some((k, i)) = device.kernels() {
        k.start_queued(i);
    }
}

// ---- the ledger ----

/// Bytes held by live reservations, per device (all threads).
static HELD: Mutex<Vec<(Device, u128)>> = Mutex::new(Vec::new());

thread_local! {
    /// Bytes held by this thread's live reservations, per device: a request made inside a
    /// reservation (an op's own check of a temporary, an op inside a training step) is taken
    /// from it first, so planned bytes are not counted twice.
    static COVERED: RefCell<Vec<(Device, u128)>> = const { RefCell::new(Vec::new()) };
}

fn entry(v: &mut Vec<(Device, u128)>, device: Device) -> &mut u128 {
    let i = match v.iter().position(|(d, _)| *d == device) {
        Some(i) => i,
        None => {
            v.push((device, 0));
            v.len() - 1
        }
    };
    &mut v[i].1
}

fn get(v: &[(Device, u128)], device: Device) -> u128 {
    v.iter().find(|(d, _)| *d == device).map_or(0, |(_, b)| *b)
}

fn ledger() -> std::sync::MutexGuard<'static, Vec<(Device, u128)>> {
    // the ledger is only added to and subtracted from: a panic elsewhere leaves it whole
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes held now on `device` by live reservations (of every thread).
pub fn held(device: Device) -> u128 {
    get(&ledger(), device)
}

/// Bytes granted by [`reserve`], held in the ledger until this is dropped. Keep it alive for
/// as long as the work it was asked for allocates (`let _held = reserve(...)?;`); it stays
/// on the thread that made it.
#[must_use = "the bytes are held only while the reservation lives: bind it to a variable \
              for the duration of the work"]
#[derive(Debug)]
pub struct Reservation {
    device: Device,
    /// Bytes this reservation added to the ledger (a nested request adds only what the
    /// thread's outer reservations do not cover).
    bytes: u128,
    /// Not `Send`: the thread's covered bytes are given back on the thread that took them.
    _thread: PhantomData<*const ()>,
}

impl Reservation {
    /// Bytes this reservation holds in the ledger.
    pub fn bytes(&self) -> u128 {
        self.bytes
    }

    /// The device it holds them on.
    pub fn device(&self) -> Device {
        self.device
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        {
            let mut held = ledger();
            let h = entry(&mut held, self.device);
            *h = h.saturating_sub(self.bytes);
        }
        // (during the thread's teardown the thread-local may be gone: nothing left to cover)
        let _ = COVERED.try_with(|c| {
            let mut c = c.borrow_mut();
            let h = entry(&mut c, self.device);
            *h = h.saturating_sub(self.bytes);
        });
    }
}

/// Reserves `bytes` on `device` for the work `what` names (in the error): refused with
/// [`Error::OutOfMemory`] when they and the bytes held by live reservations exceed the
/// configured limit or what the device can hold ([`bound`]); granted, they are held until the
/// returned [`Reservation`] is dropped.
pub fn reserve(device: Device, bytes: u128, what: &dyn Fn() -> String) -> Result<Reservation> {
    if !device.is_host() {
        return reserve_with(device, bytes, limit(), &|| bound(device), what);
    }
    // The host's figures cost tens of microseconds to read (several files under /proc and
    // /sys), more than many ops: a recent reading less what was granted since decides a grant,
    // and a refusal is decided again on a fresh reading.
    let r = match reserve_with(device, bytes, limit(), &reading::recent, what) {
        Err(e) if e.kind() == "out_of_memory" => {
            reading::forget();
            reserve_with(device, bytes, limit(), &reading::recent, what)
        }
        r => r,
    };
    if let Ok(granted) = &r {
        reading::granted(granted.bytes);
    }
    r
}

/// The last reading of the host's bound, reused for [`reading::FRESH_FOR`] with the bytes
/// granted since it was taken subtracted (so it can only err on the side of refusing).
mod reading {
    use super::{host_bound, Bound};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// How long a reading stands in for the system's figures.
    pub const FRESH_FOR: Duration = Duration::from_millis(50);

    /// A reading of the system's figures and the bytes granted since.
    pub struct Reading {
        bound: Bound,
        at: Instant,
        granted: u128,
    }

    static LAST: Mutex<Option<Reading>> = Mutex::new(None);

    fn lock(m: &Mutex<Option<Reading>>) -> std::sync::MutexGuard<'_, Option<Reading>> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The host's bound: the last reading less what was granted since, or a fresh one.
    pub fn recent() -> Option<Bound> {
        recent_in(&LAST, Instant::now(), &host_bound)
    }

    /// [`recent`] over the reading kept in `last`, at `now`, reading the system with `read`.
    pub fn recent_in(
        last: &Mutex<Option<Reading>>,
        now: Instant,
        read: &dyn Fn() -> Option<Bound>,
    ) -> Option<Bound> {
        let mut last = lock(last);
        let fresh = |r: &&Reading| now.saturating_duration_since(r.at) < FRESH_FOR;
        if let Some(r) = last.as_ref().filter(fresh) {
            let left = (r.bound.bytes as u128).saturating_sub(r.granted);
            return Some(Bound::new(left as u64, r.bound.source.clone()));
        }
        let bound = read();
        *last = bound.clone().map(|bound| Reading {
            bound,
            at: now,
            granted: 0,
        });
        bound
    }

    /// Counts `bytes` granted against the last reading.
    pub fn granted(bytes: u128) {
        granted_in(&LAST, bytes)
    }

    /// [`granted`] against the reading kept in `last`.
    pub fn granted_in(last: &Mutex<Option<Reading>>, bytes: u128) {
        if let Some(r) = lock(last).as_mut() {
            r.granted = r.granted.saturating_add(bytes);
        }
    }

    /// Drops the last reading: the next query reads the system.
    pub fn forget() {
        *lock(&LAST) = None;
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_reading_stands_for_a_while_less_what_was_granted() {
            let last = Mutex::new(None);
            let reads = std::cell::Cell::new(0);
            let read = || {
                reads.set(reads.get() + 1);
                Some(Bound::new(1000, "test"))
            };
            let t0 = Instant::now();
            assert_eq!(recent_in(&last, t0, &read).map(|b| b.bytes), Some(1000));
            granted_in(&last, 300);
            let soon = t0 + FRESH_FOR / 2;
            assert_eq!(recent_in(&last, soon, &read).map(|b| b.bytes), Some(700));
            assert_eq!(reads.get(), 1);
            granted_in(&last, 5000);
            assert_eq!(recent_in(&last, soon, &read).map(|b| b.bytes), Some(0));
            // stale: read again, nothing granted since
            let later = t0 + FRESH_FOR;
            assert_eq!(recent_in(&last, later, &read).map(|b| b.bytes), Some(1000));
            assert_eq!(reads.get(), 2);
        }
    }
}

fn reserve_with(
    device: Device,
    bytes: u128,
    limit: Option<u64>,
    system: &dyn Fn() -> Option<Bound>,
    what: &dyn Fn() -> String,
) -> Result<Reservation> {
    let covered = COVERED.try_with(|c| get(&c.borrow(), device)).unwrap_or(0);
    let extra = bytes.saturating_sub(covered);
    let granted = |bytes| Reservation {
        device,
        bytes,
        _thread: PhantomData,
    };
    if extra == 0 {
        return Ok(granted(0));
    }
    let mut held = ledger();
    let all = get(&held, device);
    let total = extra.saturating_add(all);
    // held by other threads (this thread's own part is what `covered` took from `bytes`)
    let others = all.saturating_sub(covered);
    if let Some(limit) = limit {
        if total > limit as u128 {
            let b = Bound::new(limit, "the configured memory_limit");
            return Err(refusal(device, bytes, others, &b, what));
        }
    }
    if extra >= CHECK_FROM {
        if let Some(b) = system() {
            if total > b.bytes as u128 {
                return Err(refusal(device, bytes, others, &b, what));
            }
        }
    }
    *entry(&mut held, device) += extra;
    drop(held);
    let _ = COVERED.try_with(|c| *entry(&mut c.borrow_mut(), device) += extra);
    Ok(granted(extra))
}

fn refusal(
    device: Device,
    bytes: u128,
    others: u128,
    bound: &Bound,
    what: &dyn Fn() -> String,
) -> Error {
    let have = bound.bytes as u128;
    let held = if others > 0 {
        format!(
            " with {} ({others} bytes) held by work in progress",
            human(others)
        )
    } else {
        String::new()
    };
    Error::OutOfMemory(format!(
        "{} would take {} ({bytes} bytes) on {device}{held}, more than {} allows ({} = {have} \
         bytes); refused before allocating",
        what(),
        human(bytes),
        bound.source,
        human(have)
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

// ---- the host's figures ----

#[cfg(target_os = "linux")]
fn host_bound() -> Option<Bound> {
    use std::path::Path;
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let mut bounds = Vec::with_capacity(4);
    if let Some(b) = read(Path::new("/proc/meminfo")).and_then(|t| kib_field(&t, "MemAvailable:")) {
        bounds.push(Bound::new(b, "MemAvailable"));
    }
    if let Some(cgroups) = read(Path::new("/proc/self/cgroup")) {
        let m = mounts();
        let v2 = m.v2.as_ref().zip(cgroup_v2_path(&cgroups));
        if let Some(levels) = v2.and_then(|(m, p)| m.levels(p)) {
            bounds.extend(cgroup_bound(&levels, V2, &read));
        }
        let v1 = m.v1_memory.as_ref().zip(cgroup_v1_memory_path(&cgroups));
        if let Some(levels) = v1.and_then(|(m, p)| m.levels(p)) {
            bounds.extend(cgroup_bound(&levels, V1, &read));
        }
    }
    if let Some(soft) = address_space_limit() {
        let size = read(Path::new("/proc/self/status")).and_then(|t| kib_field(&t, "VmSize:"));
        if let Some(size) = size {
            bounds.push(Bound::new(
                soft.saturating_sub(size),
                format!(
                    "the address space RLIMIT_AS leaves ({} less the process's {} VmSize)",
                    human(soft as u128),
                    human(size as u128)
                ),
            ));
        }
    }
    bounds.into_iter().min_by_key(|b| b.bytes)
}

#[cfg(all(unix, not(target_os = "linux")))]
fn host_bound() -> Option<Bound> {
    // SAFETY: sysconf only reads system constants.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| Bound::new(pages as u64 * size as u64, "the physical memory"))
}

#[cfg(not(unix))]
fn host_bound() -> Option<Bound> {
    None
}

/// The soft `RLIMIT_AS` (`ulimit -v`), when one is set.
#[cfg(unix)]
fn address_space_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limits into `r`, which lives for the call.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
    // (`rlim_t` is not u64 on every Unix)
    #[allow(clippy::unnecessary_cast)]
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur as u64)
}

/// The files of `/proc` and of the cgroup hierarchies, parsed (pure functions of their text).
mod figures {
    #![cfg_attr(not(target_os = "linux"), allow(dead_code))]
    use super::{Bound, UNLIMITED};

    /// A `Name:   1234 kB` field of `/proc/meminfo` or `/proc/self/status`, in bytes.
    pub(super) fn kib_field(text: &str, name: &str) -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    }

    /// A limit file's value: `None` for `max` (v2) and the huge values that mean no limit (v1).
    pub(super) fn limit_value(text: &str) -> Option<u64> {
        text.trim().parse::<u64>().ok().filter(|&v| v < UNLIMITED)
    }

    /// A `name value` line of a cgroup's `memory.stat`.
    pub(super) fn stat_field(stat: &str, name: &str) -> Option<u64> {
        stat.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse().ok()).flatten()
        })
    }

    /// The process's cgroup v2 path (the `0::` line of `/proc/self/cgroup`).
    pub(super) fn cgroup_v2_path(cgroups: &str) -> Option<&str> {
        cgroups
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::trim)
    }

    /// The process's cgroup v1 path in the hierarchy that holds the memory controller (the
    /// `N:...memory...:path` line of `/proc/self/cgroup`).
    pub(super) fn cgroup_v1_memory_path(cgroups: &str) -> Option<&str> {
        cgroups.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then_some(path.trim())
        })
    }

    /// Which files a cgroup version keeps its limit, usage and reclaimable cache in.
    pub(super) struct Files {
        limit: &'static str,
        usage: &'static str,
        /// `memory.stat`'s count of inactive file pages, which the kernel reclaims before it
        /// kills anything (what container runtimes subtract for the "working set").
        inactive_file: &'static str,
        /// `memory.stat`'s limit inherited from the ancestors, where the version keeps one.
        inherited: Option<&'static str>,
        version: &'static str,
    }

    pub(super) const V2: &Files = &Files {
        limit: "memory.max",
        usage: "memory.current",
        inactive_file: "inactive_file",
        inherited: None,
        version: "v2",
    };

    pub(super) const V1: &Files = &Files {
        limit: "memory.limit_in_bytes",
        usage: "memory.usage_in_bytes",
        inactive_file: "total_inactive_file",
        inherited: Some("hierarchical_memory_limit"),
        version: "v1",
    };

    /// What one cgroup's files leave, `limit - (usage - inactive file pages)` (`None`: no limit).
    pub(super) fn cgroup_left(limit: &str, usage: &str, stat: &str, files: &Files) -> Option<u64> {
        let inherited = files
            .inherited
            .and_then(|f| stat_field(stat, f))
            .filter(|&v| v < UNLIMITED);
        let limit = match (limit_value(limit), inherited) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        let usage: u64 = usage.trim().parse().ok()?;
        let reclaimable = stat_field(stat, files.inactive_file).unwrap_or(0);
        Some(limit.saturating_sub(usage.saturating_sub(reclaimable)))
    }

    /// The tightest of what the cgroups in `levels` (the hierarchy's root first, the process's
    /// own last) leave.
    pub(super) fn cgroup_bound(
        levels: &[std::path::PathBuf],
        files: &Files,
        read: &dyn Fn(&std::path::Path) -> Option<String>,
    ) -> Option<Bound> {
        levels
            .iter()
            .filter_map(|dir| {
                // most levels have no limit: their usage and statistics are not read
                let limit = read(&dir.join(files.limit))?;
                let stat = read(&dir.join("memory.stat")).unwrap_or_default();
                if limit_value(&limit).is_none()
                    && files
                        .inherited
                        .and_then(|f| stat_field(&stat, f))
                        .is_none_or(|v| v >= UNLIMITED)
                {
                    return None;
                }
                let usage = read(&dir.join(files.usage))?;
                let left = cgroup_left(&limit, &usage, &stat, files)?;
                Some(Bound::new(
                    left,
                    format!("the cgroup ({}) {}", files.version, dir.display()),
                ))
            })
            .min_by_key(|b| b.bytes)
    }

    /// A cgroup hierarchy's mount: the cgroup it shows at its mount point, and where.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(super) struct Mount {
        pub(super) root: String,
        pub(super) point: std::path::PathBuf,
    }

    impl Mount {
        /// The directories of the cgroup at `path` (as `/proc/self/cgroup` writes it) and of its
        /// ancestors up to the mount point, the root first (`None`: outside this mount).
        pub(super) fn levels(&self, path: &str) -> Option<Vec<std::path::PathBuf>> {
            let rel = if self.root == "/" {
                path
            } else {
                let rest = path.strip_prefix(self.root.as_str())?;
                if !rest.is_empty() && !rest.starts_with('/') {
                    return None;
                }
                rest
            };
            let mut dir = self.point.clone();
            let mut levels = vec![dir.clone()];
            for part in rel.split('/').filter(|p| !p.is_empty()) {
                if part == ".." {
                    return None;
                }
                dir = dir.join(part);
                levels.push(dir.clone());
            }
            Some(levels)
        }
    }

    /// Where the cgroup v2 hierarchy and the v1 memory controller's hierarchy are mounted.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub(super) struct Mounts {
        pub(super) v2: Option<Mount>,
        pub(super) v1_memory: Option<Mount>,
    }

    /// Reads the cgroup mounts out of `/proc/self/mountinfo` (`ID PARENT DEV ROOT POINT OPTIONS
    /// [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`); the first of each kind.
    pub(super) fn parse_mountinfo(text: &str) -> Mounts {
        let mut m = Mounts::default();
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            let (Some(root), Some(point), Some(fstype)) = (l.get(3), l.get(4), r.first()) else {
                continue;
            };
            let mount = || Mount {
                root: root.to_string(),
                point: point.replace("\\040", " ").into(),
            };
            match *fstype {
                "cgroup2" if m.v2.is_none() => m.v2 = Some(mount()),
                "cgroup"
                    if m.v1_memory.is_none()
                        && r.get(2)
                            .is_some_and(|o| o.split(',').any(|o| o == "memory")) =>
                {
                    m.v1_memory = Some(mount())
                }
                _ => {}
            }
        }
        m
    }
}

/// This process's cgroup mounts, read once (mounts rarely change; the process's cgroup,
/// which may, is read at every check).
#[cfg(target_os = "linux")]
fn mounts() -> &'static figures::Mounts {
    static MOUNTS: std::sync::OnceLock<figures::Mounts> = std::sync::OnceLock::new();
    MOUNTS.get_or_init(|| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .map(|t| figures::parse_mountinfo(&t))
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::figures::*;
    use super::*;
    use std::path::{Path, PathBuf};

    fn none() -> Option<Bound> {
        None
    }

    #[test]
    fn a_configured_limit_refuses_larger_requests_with_both_sizes() {
        let e = reserve_with(Device::Metal(901), 1001, Some(1000), &none, &|| {
            "a test".into()
        })
        .unwrap_err();
        assert_eq!(e.kind(), "out_of_memory");
        let msg = e.to_string();
        assert!(
            msg.contains("1001 bytes") && msg.contains("1000 bytes"),
            "{msg}"
        );
        let ok = reserve_with(Device::Metal(901), 1001, None, &none, &|| "a test".into());
        assert_eq!(ok.unwrap().bytes(), 1001);
    }

    #[test]
    fn the_host_refuses_what_it_cannot_hold() {
        let e = reserve(Device::Cpu, 1 << 60, &|| "a huge tensor".into()).unwrap_err();
        assert_eq!(e.kind(), "out_of_memory");
        assert!(e.to_string().contains("a huge tensor"));
    }

    #[test]
    fn live_reservations_count_against_later_requests_until_dropped() {
        let d = Device::Metal(902);
        let gib = 1u128 << 30;
        let four = || Some(Bound::new(4 << 30, "a 4 GiB machine"));
        let first = reserve_with(d, 3 * gib, None, &four, &|| "first".into()).unwrap();
        assert_eq!(held(d), 3 * gib);
        // on another thread (this one's reservation would cover the request)
        let second = std::thread::spawn(move || {
            reserve_with(d, 3 * gib, None, &four, &|| "second".into()).map(|r| r.bytes())
        })
        .join()
        .unwrap();
        let msg = second.unwrap_err().to_string();
        assert!(msg.contains("held by work in progress"), "{msg}");
        assert!(msg.contains("a 4 GiB machine"), "{msg}");
        drop(first);
        assert_eq!(held(d), 0);
        let again = std::thread::spawn(move || {
            reserve_with(d, 3 * gib, None, &four, &|| "again".into()).map(|r| r.bytes())
        })
        .join()
        .unwrap();
        assert_eq!(again.unwrap(), 3 * gib);
        assert_eq!(held(d), 0);
    }

    #[test]
    fn the_configured_limit_counts_held_bytes_and_small_requests() {
        let d = Device::Metal(903);
        let a = reserve_with(d, 600, Some(1000), &none, &|| "a".into()).unwrap();
        let b = std::thread::spawn(move || {
            reserve_with(d, 600, Some(1000), &none, &|| "b".into()).map(|r| r.bytes())
        })
        .join()
        .unwrap();
        assert_eq!(b.unwrap_err().kind(), "out_of_memory");
        drop(a);
    }

    #[test]
    fn small_requests_skip_the_system_but_large_ones_ask_it() {
        let d = Device::Metal(904);
        let asked = std::cell::Cell::new(0);
        let system = || {
            asked.set(asked.get() + 1);
            Some(Bound::new(0, "nothing"))
        };
        let small = reserve_with(d, CHECK_FROM - 1, None, &system, &|| "small".into());
        assert!(small.is_ok());
        assert_eq!(asked.get(), 0);
        drop(small);
        let large = reserve_with(d, CHECK_FROM, None, &system, &|| "large".into());
        assert_eq!(large.unwrap_err().kind(), "out_of_memory");
        assert_eq!(asked.get(), 1);
    }

    #[test]
    fn a_request_inside_a_reservation_of_its_thread_adds_only_the_excess() {
        let d = Device::Metal(905);
        let ten = || Some(Bound::new(10 << 30, "ten"));
        let outer = reserve_with(d, 4 << 30, None, &ten, &|| "outer".into()).unwrap();
        let inner = reserve_with(d, 3 << 30, None, &ten, &|| "inner".into()).unwrap();
        assert_eq!(inner.bytes(), 0);
        let larger = reserve_with(d, 5 << 30, None, &ten, &|| "larger".into()).unwrap();
        assert_eq!(larger.bytes(), 1 << 30);
        assert_eq!(held(d), 5 << 30);
        // 4 + 1 held; a further 6 GiB of this thread asks 1 more: 6 <= 10
        let more = reserve_with(d, 6 << 30, None, &ten, &|| "more".into()).unwrap();
        assert_eq!(more.bytes(), 1 << 30);
        let too_much = reserve_with(d, 11 << 30, None, &ten, &|| "too much".into());
        assert_eq!(too_much.unwrap_err().kind(), "out_of_memory");
        drop((more, larger, inner, outer));
        assert_eq!(held(d), 0);
        assert_eq!(COVERED.with(|c| get(&c.borrow(), d)), 0);
    }

    #[test]
    fn meminfo_and_status_fields_in_bytes() {
        let meminfo = "MemTotal:       24567808 kB\nMemFree:        20000000 kB\n\
                       MemAvailable:   22000000 kB\nBuffers:           12345 kB\n";
        assert_eq!(kib_field(meminfo, "MemAvailable:"), Some(22_000_000 * 1024));
        let status = "Name:\tbeam.smp\nVmPeak:\t 4000000 kB\nVmSize:\t 3500000 kB\n";
        assert_eq!(kib_field(status, "VmSize:"), Some(3_500_000 * 1024));
        assert_eq!(kib_field(status, "VmRSS:"), None);
    }

    #[test]
    fn limits_max_and_v1_unlimited_are_no_limit() {
        assert_eq!(limit_value("max\n"), None);
        assert_eq!(limit_value("9223372036854771712\n"), None);
        assert_eq!(limit_value("3221225472\n"), Some(3 << 30));
        assert_eq!(limit_value(""), None);
    }

    #[test]
    fn cgroup_paths_of_both_versions() {
        let hybrid =
            "9:name=systemd:/\n5:devices:/\n4:cpu,memory:/process_api/abc\n0::/user.slice\n";
        assert_eq!(cgroup_v2_path(hybrid), Some("/user.slice"));
        assert_eq!(cgroup_v1_memory_path(hybrid), Some("/process_api/abc"));
        assert_eq!(cgroup_v1_memory_path("0::/a/b\n"), None);
        assert_eq!(cgroup_v2_path("4:memory:/x\n"), None);
    }

    #[test]
    fn what_a_cgroup_leaves_counts_inactive_file_pages_as_free() {
        let stat = "anon 1000\nfile 5000\ninactive_file 3000\nactive_file 2000\n";
        assert_eq!(cgroup_left("10000\n", "7000\n", stat, V2), Some(6000));
        assert_eq!(cgroup_left("max\n", "7000\n", stat, V2), None);
        // usage above the limit leaves nothing
        assert_eq!(cgroup_left("5000\n", "9000\n", "", V2), Some(0));
        // v1: the limit inherited from an ancestor above the mount counts too
        let v1 = "cache 100\ntotal_inactive_file 500\nhierarchical_memory_limit 4000\n";
        assert_eq!(
            cgroup_left("9223372036854771712\n", "1500\n", v1, V1),
            Some(3000)
        );
        assert_eq!(cgroup_left("2000\n", "1500\n", v1, V1), Some(1000));
        let unlimited = "hierarchical_memory_limit 9223372036854771712\n";
        assert_eq!(
            cgroup_left("9223372036854771712\n", "1500\n", unlimited, V1),
            None
        );
    }

    #[test]
    fn mountinfo_gives_both_hierarchies() {
        let text = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
41 31 0:38 /docker/abc /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        let m = parse_mountinfo(text);
        let v1 = m.v1_memory.unwrap();
        assert_eq!(v1.point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(v1.root, "/");
        let v2 = m.v2.unwrap();
        assert_eq!(v2.root, "/docker/abc");
        assert_eq!(
            v2.levels("/docker/abc/job").unwrap(),
            vec![
                PathBuf::from("/sys/fs/cgroup/unified"),
                PathBuf::from("/sys/fs/cgroup/unified/job")
            ]
        );
        assert_eq!(v2.levels("/docker/abcdef"), None);
        assert_eq!(v2.levels("/elsewhere"), None);
        assert_eq!(
            v1.levels("/").unwrap(),
            vec![PathBuf::from("/sys/fs/cgroup/memory")]
        );
        assert_eq!(parse_mountinfo("garbage\n"), Mounts::default());
    }

    #[test]
    fn the_tightest_ancestor_bounds_the_cgroup() {
        // a limit on the parent, none on the leaf ("max"): the parent's figure
        let files: Vec<(&str, &str)> = vec![
            ("/cg/memory.max", "max"),
            ("/cg/app/memory.max", "3000"),
            ("/cg/app/memory.current", "1000"),
            ("/cg/app/memory.stat", "inactive_file 0\n"),
            ("/cg/app/vm/memory.max", "max"),
            ("/cg/app/vm/memory.current", "900"),
        ];
        let read = |p: &Path| {
            files
                .iter()
                .find(|(f, _)| Path::new(f) == p)
                .map(|(_, v)| v.to_string())
        };
        let levels = [
            PathBuf::from("/cg"),
            PathBuf::from("/cg/app"),
            PathBuf::from("/cg/app/vm"),
        ];
        let b = cgroup_bound(&levels, V2, &read).unwrap();
        assert_eq!(b.bytes, 2000);
        assert!(b.source.contains("/cg/app"), "{}", b.source);
        assert_eq!(cgroup_bound(&levels[..1], V2, &read), None);
    }

    #[test]
    fn this_host_has_a_bound() {
        if cfg!(target_os = "linux") {
            let b = bound(Device::Cpu).unwrap();
            assert!(b.bytes > 0, "{b:?}");
        }
    }
}
