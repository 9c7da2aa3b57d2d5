//! Time of program runs by step, for finding where a compiled program's time goes
//! (`ExBurn.configure!(profile: :host | :sync | :gpu)`, or `EX_BURN_PROFILE=1`, `sync` or `gpu`
//! before it: [`crate::config`]; when off, each step reads one flag).
//!
//! With `host` (`1`) the time is the host's: how long each step took to return. On a GPU that is the
//! cost of issuing the work (Burn's dispatch, kernel launches, allocations), not of running
//! it, unless the step waited for the device. With `sync` each step also waits for the device
//! to finish its work before its time is taken: the device time of each step (plus one
//! launch and one synchronisation each; the whole run is slower). With `gpu` (CUDA) a CUDA
//! event is queued before and after each step: the GPU's own time for the step (its kernels
//! and the gaps between them), and, as `(GPU idle between steps)`, how long the GPU waited
//! for the host or CubeCL's device thread to queue the next step, and the device thread's own
//! time on ExBurn's queued work (buffer lookups and in all); the run is not synchronised
//! (other devices: host time). Every 16 runs (sub-program runs of loops and branches
//! included) the table of those 16 runs (steps by total time, with counts) goes to standard
//! error and starts again, so that later tables show warm runs only.
//!
//! The profile sits below the op table: ops and device kernels label their entries
//! ([`note`], [`note_detail`]).

use crate::config::Profile;
use crate::kernels::Mark;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The configured profile: off (0), host time (1), device time (2) or GPU time (3).
fn mode() -> u8 {
    match crate::config::profile() {
        Profile::Off => 0,
        Profile::Host => 1,
        Profile::Sync => 2,
        Profile::Gpu => 3,
    }
}

/// Whether steps are timed on the GPU by events (`gpu`).
pub fn gpu_mode() -> bool {
    mode() == 3
}

/// Whether steps are labelled with computed details and the device is noted (`sync`, `gpu`).
fn on_device_modes() -> bool {
    matches!(mode(), 2 | 3)
}

/// A started measurement: the host's clock and, in `gpu` mode on a device whose kernels
/// time work (CUDA), the event queued before the step.
pub(crate) struct Started {
    at: Instant,
    mark: Option<Mark>,
}

impl Started {
    fn now(events: bool) -> Started {
        Started {
            at: Instant::now(),
            mark: events.then(device_mark).flatten(),
        }
    }
}

/// An event on this thread's stream of the device of the program running on this thread.
fn device_mark() -> Option<Mark> {
    let (kernels, index) = DEVICE.with(|d| d.get())?.kernels()?;
    kernels.mark(index)
}

thread_local! {
    /// Steps of `gpu` mode whose events are not read yet: name and the events around it.
    static PENDING: std::cell::RefCell<Vec<(String, Mark, Mark)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn enabled() -> bool {
    mode() != 0
}

fn table() -> &'static Mutex<HashMap<String, (u64, Duration)>> {
    static TABLE: OnceLock<Mutex<HashMap<String, (u64, Duration)>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

thread_local! {
    /// A label the op just run left for its profile entry (see [`note`]).
    static NOTE: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
    /// The device of the program running on this thread (waited for in `sync` mode).
    static DEVICE: std::cell::Cell<Option<crate::Device>> = const { std::cell::Cell::new(None) };
}

/// Notes the device the program starting on this thread runs on.
pub(crate) fn on_device(device: crate::Device) {
    if on_device_modes() {
        DEVICE.with(|d| d.set(Some(device)));
    }
}

/// Labels the profile entry of the op running on this thread (`dot[cublas]`), so that the
/// table tells the paths of one op apart. Costs nothing when profiling is off.
pub fn note(label: &'static str) {
    if enabled() {
        NOTE.with(|n| n.set(Some(label)));
    }
}

/// Labels the profile entry of the op running on this thread with a computed name (the
/// shapes of a product, say) when steps are timed on the device (`sync`, `gpu`); nothing
/// otherwise.
pub fn note_detail(label: impl FnOnce() -> String) {
    if on_device_modes() {
        static NAMES: OnceLock<Mutex<std::collections::HashSet<&'static str>>> = OnceLock::new();
        let name = label();
        let Ok(mut names) = NAMES.get_or_init(Default::default).lock() else {
            return;
        };
        // each distinct label is kept for the process (a program has a few)
        let name: &'static str = match names.get(name.as_str()) {
            Some(&n) => n,
            None => {
                let n: &'static str = Box::leak(name.into_boxed_str());
                names.insert(n);
                n
            }
        };
        NOTE.with(|n| n.set(Some(name)));
    }
}

/// A started measurement of a part of a step, taken only when steps are timed on the device
/// (`sync`), where the parts' device times tell where a step's time goes.
pub(crate) fn start_detail() -> Option<Started> {
    (mode() == 2).then(|| Started::now(false))
}

/// A started measurement (`None` when profiling is off).
pub(crate) fn start() -> Option<Started> {
    enabled().then(|| Started::now(mode() == 3))
}

/// Adds `time` to the step `name` of the table.
fn add(name: String, time: Duration) {
    if let Ok(mut t) = table().lock() {
        let e = t.entry(name).or_insert((0, Duration::ZERO));
        e.0 += 1;
        e.1 += time;
    }
}

/// Adds the time since `started` to the step `name`.
pub(crate) fn record(started: Option<Started>, name: impl FnOnce() -> String) {
    let Some(started) = started else {
        return;
    };
    if mode() == 2 {
        if let Some(device) = DEVICE.with(|d| d.get()) {
            // a failed wait shows in the step's time; the program's own reads report errors
            let _ = device.sync();
            if let Some((in_use, reserved)) = crate::memory::pools(device) {
                POOL_PEAK.fetch_max(in_use, Ordering::Relaxed);
                POOL_RESERVED.fetch_max(reserved, Ordering::Relaxed);
            }
        }
    }
    let name = match NOTE.with(|n| n.take()) {
        Some(label) => format!("{}[{label}]", name()),
        None => name(),
    };
    if let Some(first) = started.mark {
        if let Some(last) = device_mark() {
            PENDING.with(|p| p.borrow_mut().push((name, first, last)));
            return;
        }
    }
    add(name, started.at.elapsed());
}

/// In `gpu` mode, reads the events of the steps queued so far (waiting for the device) into
/// the table, with the time the GPU waited between them (the run's span less its steps).
fn read_events() {
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let Some((kernels, index)) = DEVICE.with(|d| d.get()).and_then(|d| d.kernels()) else {
        return;
    };
    if pending.is_empty() {
        return;
    }
    let pairs = pending
        .iter()
        .map(|(_, a, b)| (a.clone(), b.clone()))
        .collect();
    let times = kernels.elapsed(index, pairs);
    let (mut steps, mut whole) = (0f64, None);
    for ((name, _, _), time) in pending.into_iter().zip(times) {
        let Some(ms) = time else { continue };
        if name == "(whole run)" {
            whole = Some(ms);
        } else {
            steps += ms;
        }
        add(name, Duration::from_secs_f64(ms / 1e3));
    }
    if let Some(w) = whole {
        add(
            "(GPU idle between steps)".into(),
            Duration::from_secs_f64((w - steps).max(0.0) / 1e3),
        );
    }
    // the device thread's time on ExBurn's own queued work (kernels, products, events),
    // counted once per queued piece: host time there, not GPU time
    // (and by kind of work: the events of this profile are pieces too)
    let by_kind = kernels.queued_work_time();
    if let Ok(mut t) = table().lock() {
        for (what, pieces, lookups, total) in by_kind {
            // (parts of other pieces, named `within ...`, are not counted again in all)
            let whole = !what.starts_with("within ");
            let rows = [
                (
                    "(device thread: our work, buffer lookups)".to_string(),
                    lookups,
                ),
                ("(device thread: our work, in all)".to_string(), total),
            ];
            let rows = rows.into_iter().filter(|_| whole);
            for (name, time) in rows.chain([(format!("(device thread: {what})"), total)]) {
                let e = t.entry(name).or_insert((0, Duration::ZERO));
                e.0 += pieces;
                e.1 += time;
            }
        }
    }
}

/// In `sync` mode, the most bytes the device's memory pools held in live buffers after any
/// step, and the most they held in all, since the last table.
static POOL_PEAK: AtomicU64 = AtomicU64::new(0);
static POOL_RESERVED: AtomicU64 = AtomicU64::new(0);

/// Counts a finished run; every 16 runs prints the table of those runs and clears it.
pub(crate) fn run_finished(started: Option<Started>) {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    if started.is_none() {
        return;
    }
    NOTE.with(|n| n.take());
    record(started, || "(whole run)".into());
    read_events();
    let n = RUNS.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_multiple_of(16) {
        if let Ok(mut t) = table().lock() {
            let mut rows: Vec<_> = t.iter().collect();
            rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
            let mut out = format!(
                "ex_burn profile, runs {} to {n} ({} time by step):\n",
                n - 15,
                match mode() {
                    2 => "device",
                    3 => "GPU (CUDA events; host elsewhere)",
                    _ => "host",
                }
            );
            for (name, (count, total)) in rows {
                out += &format!(
                    "  {name:<28} {count:>9} calls {:>12.3} ms {:>9.2} us/call\n",
                    total.as_secs_f64() * 1e3,
                    total.as_secs_f64() * 1e6 / *count as f64
                );
            }
            let (peak, reserved) = (
                POOL_PEAK.swap(0, Ordering::Relaxed),
                POOL_RESERVED.swap(0, Ordering::Relaxed),
            );
            if peak > 0 {
                out += &format!(
                    "  (memory pools: at most {:.1} MiB in live buffers after a step, {:.1} MiB held)\n",
                    peak as f64 / 1048576.0,
                    reserved as f64 / 1048576.0
                );
            }
            eprint!("{out}");
            t.clear();
        }
    }
}
