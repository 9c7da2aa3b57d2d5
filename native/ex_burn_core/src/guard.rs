//! Turns panics (from Burn, cubecl or the engine) into [`Error::Panic`] values.
//!
//! A process-wide panic hook records the message of a panic raised while a [`guard`] runs on
//! the current thread, instead of printing it; panics elsewhere keep the default hook.

use crate::{Error, Result};
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static GUARDED: Cell<usize> = const { Cell::new(0) };
    static MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if GUARDED.with(|g| g.get()) > 0 {
                let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
                    (*s).to_string()
                } else if let Some(s) = info.payload().downcast_ref::<String>() {
                    s.clone()
                } else {
                    "unknown panic".to_string()
                };
                let at = info
                    .location()
                    .map(|l| format!(" (at {}:{})", l.file(), l.line()))
                    .unwrap_or_default();
                MESSAGE.with(|m| *m.borrow_mut() = Some(format!("{msg}{at}")));
            } else {
                default(info);
            }
        }));
    });
}

/// The one Burn stream all ExBurn work is issued on. Burn keys streams by OS thread; BEAM
/// processes hop between scheduler threads, and work on different streams synchronises on
/// every hand-over, a wait on every eager GPU op. One fixed stream avoids that.
const EXBURN_STREAM: u64 = u64::MAX - 0xE8B;

/// Runs `f` on ExBurn's stream, returning its result, or `Error::Panic` with the panic's
/// message.
pub fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch(f).and_then(|r| r)
}

/// Like [`guard`], but tells a panic (the outer `Err`, classified) from an error `f` returned
/// (the inner one), so that callers can restore state a panic may have left half-changed.
pub fn catch<T>(f: impl FnOnce() -> Result<T>) -> std::result::Result<Result<T>, Error> {
    install_hook();
    GUARDED.with(|g| g.set(g.get() + 1));
    let stream = burn::tensor::StreamId {
        value: EXBURN_STREAM,
    };
    let r = panic::catch_unwind(AssertUnwindSafe(|| stream.executes(f)));
    GUARDED.with(|g| g.set(g.get() - 1));
    match r {
        Ok(r) => Ok(r),
        Err(_) => {
            let msg = MESSAGE
                .with(|m| m.borrow_mut().take())
                .unwrap_or_else(|| "panic".into());
            Err(classify(msg))
        }
    }
}

/// Runs `f` on `value` under the guard; when `f` panics, `value` is put back as it was before
/// the call (a clone taken first) and the panic is returned as an error, so state shared
/// across calls is never left half-changed or poisoned.
pub fn restoring<T: Clone, R>(value: &mut T, f: impl FnOnce(&mut T) -> Result<R>) -> Result<R> {
    let backup = value.clone();
    match catch(|| f(value)) {
        Ok(result) => result,
        Err(panic) => {
            *value = backup;
            Err(panic)
        }
    }
}

/// Maps well-known backend panics onto clearer error kinds.
fn classify(msg: String) -> Error {
    let lower = msg.to_lowercase();
    if lower.contains("out of memory") || lower.contains("outofmemory") {
        Error::OutOfMemory(format!("device out of memory: {msg}"))
    } else if lower.contains("nvrtc")
        || lower.contains("cuda_path")
        || lower.contains("cuda installation")
    {
        Error::Device(format!(
            "CUDA runtime pieces are missing: {msg}. The cuda variant needs the NVIDIA driver, NVRTC \
             (libnvrtc) and the CUDA headers; install the CUDA toolkit and set CUDA_PATH"
        ))
    } else {
        Error::Panic(msg)
    }
}

/// Serialises work on each GPU device: ExBurn issues all its work on one Burn stream (see
/// `EXBURN_STREAM`), and a device's stream takes one submitter at a time. `devices` are all
/// the devices the work touches (its tensors', its model's and its target's). Work on CUDA
/// devices holds those devices' locks only, so calls on different GPUs run side by side; work
/// touching a GPU of another kind (or a CUDA index from [`SLOTS`] on) holds every device's
/// lock. Host (CPU) work runs concurrently without a lock. Afterwards each device's allocator may give
/// back what the work left free (`memory::after_work`).
pub fn exclusive<T>(devices: &[crate::Device], f: impl FnOnce() -> Result<T>) -> Result<T> {
    let turn = Turn::take(devices);
    if turn.is_free() {
        return f();
    }
    let result = f();
    note_used(turn.devices());
    let _ = guard(|| {
        for d in turn.devices() {
            crate::memory::after_work(*d);
        }
        Ok(())
    });
    result
}

/// The GPU devices that have done work in this process.
static USED: std::sync::Mutex<Vec<crate::Device>> = std::sync::Mutex::new(Vec::new());

/// Called after the first piece of work on each GPU device ends (set once; see
/// [`on_first_use`]).
static FIRST_USE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets the function called after the first piece of work on each GPU device has ended (so
/// after the libraries that work loaded): once per process, later calls do nothing.
pub fn on_first_use(f: fn()) {
    let _ = FIRST_USE.set(f);
}

/// The GPU devices that have done work in this process.
pub fn used_gpus() -> Vec<crate::Device> {
    USED.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Records `devices` as used, calling the [`on_first_use`] function when one is new.
fn note_used(devices: &[crate::Device]) {
    let mut used = USED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = used.len();
    for d in devices {
        if !used.contains(d) {
            used.push(*d);
        }
    }
    let new = used.len() > before;
    drop(used);
    if let (true, Some(f)) = (new, FIRST_USE.get()) {
        f();
    }
}

/// Waits until no GPU work runs, up to `deadline`, and keeps any from starting for as long as
/// the returned guard lives (every piece of GPU work holds the all-devices lock, for reading
/// or writing); `None` when GPU work still ran at the deadline.
pub fn stop_gpu_work(
    deadline: std::time::Instant,
) -> Option<std::sync::RwLockWriteGuard<'static, ()>> {
    loop {
        match ALL.try_write() {
            Ok(held) => return Some(held),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// CUDA devices from this index on share the all-devices lock.
const SLOTS: usize = 64;

/// Taken for reading by work on CUDA devices (with those devices' slots) and for writing by
/// work on a non-CUDA GPU.
static ALL: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// One lock per CUDA device index below [`SLOTS`].
static EACH: [std::sync::Mutex<()>; SLOTS] = [const { std::sync::Mutex::new(()) }; SLOTS];

/// The locks a piece of GPU work holds while it runs, with the GPU devices it touches (none:
/// host work, no lock).
struct Turn {
    devices: Vec<crate::Device>,
    _held: Held,
}

/// Locks held for as long as they live.
enum Held {
    /// None (host work).
    Nothing,
    /// CUDA devices' own, under the shared all-devices lock.
    Cuda {
        _all: std::sync::RwLockReadGuard<'static, ()>,
        _devices: Vec<std::sync::MutexGuard<'static, ()>>,
    },
    /// The all-devices lock alone.
    All {
        _all: std::sync::RwLockWriteGuard<'static, ()>,
    },
}

impl Turn {
    /// Waits for the locks of `devices` (their GPU devices): CUDA devices' own, else all of
    /// them. The all-devices lock is always taken before any device's and devices' locks in
    /// increasing order, so no two calls can each hold a lock the other waits for.
    fn take(devices: &[crate::Device]) -> Turn {
        use std::sync::PoisonError;
        let mut gpus: Vec<crate::Device> =
            devices.iter().copied().filter(|d| !d.is_host()).collect();
        gpus.sort_unstable();
        gpus.dedup();
        let slots: Option<Vec<usize>> = gpus
            .iter()
            .map(|d| match d {
                crate::Device::Cuda(i) if *i < SLOTS => Some(*i),
                _ => None,
            })
            .collect();
        let held = match slots {
            _ if gpus.is_empty() => Held::Nothing,
            // in increasing order: the devices are sorted
            Some(slots) => {
                let all = ALL.read().unwrap_or_else(PoisonError::into_inner);
                let devices = slots
                    .into_iter()
                    .map(|i| EACH[i].lock().unwrap_or_else(PoisonError::into_inner))
                    .collect();
                Held::Cuda {
                    _all: all,
                    _devices: devices,
                }
            }
            None => Held::All {
                _all: ALL.write().unwrap_or_else(PoisonError::into_inner),
            },
        };
        Turn {
            devices: gpus,
            _held: held,
        }
    }

    fn is_free(&self) -> bool {
        self.devices.is_empty()
    }

    /// The GPU devices the turn covers.
    fn devices(&self) -> &[crate::Device] {
        &self.devices
    }
}

/// Drops device data on ExBurn's stream, holding the locks of `devices` (those the data lives
/// on): a handle dropped from another thread's stream (the BEAM's garbage collector runs
/// anywhere) would otherwise confuse the stream that owns it. This waits for the locks:
/// callers on normal schedulers use [`release_later`].
pub fn release<T>(devices: &[crate::Device], value: T) {
    if devices.iter().all(|d| d.is_host()) {
        drop(value);
        return;
    }
    let _turn = Turn::take(devices);
    let _ = guard(|| {
        drop(value);
        Ok(())
    });
}

type Release = Box<dyn FnOnce() + Send>;

/// Drops device data like [`release`] without waiting: host data is dropped at once, GPU data
/// by a background thread that takes the GPU lock (the garbage collector must not wait for a
/// long GPU op to finish).
pub fn release_later<T: Send + 'static>(devices: Vec<crate::Device>, value: T) {
    if devices.iter().all(|d| d.is_host()) {
        drop(value);
        return;
    }
    static QUEUE: std::sync::OnceLock<Option<std::sync::Mutex<std::sync::mpsc::Sender<Release>>>> =
        std::sync::OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Release>();
        std::thread::Builder::new()
            .name("ex_burn_release".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .ok()
            .map(|_| std::sync::Mutex::new(tx))
    });
    let job: Release = Box::new(move || release(&devices, value));
    match queue {
        Some(tx) => match tx.lock() {
            Ok(tx) => {
                if let Err(e) = tx.send(job) {
                    (e.0)();
                }
            }
            Err(_) => job(),
        },
        None => job(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Takes the turn of `devices` on another thread; the receiver answers once it is held
    /// (the thread keeps it until the returned sender is dropped).
    fn take_elsewhere(devices: Vec<Device>) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let _turn = Turn::take(&devices);
            let _ = held_tx.send(());
            let _ = release_rx.recv();
        });
        (held_rx, release_tx)
    }

    #[test]
    fn each_cuda_device_has_its_own_turn_and_other_gpus_take_all() {
        let long = Duration::from_secs(10);
        let short = Duration::from_millis(300);
        let zero = Turn::take(&[Device::Cuda(40), Device::Cpu]);
        assert_eq!(zero.devices(), &[Device::Cuda(40)]);
        // another GPU runs beside it
        let (one, free_one) = take_elsewhere(vec![Device::Cuda(41)]);
        one.recv_timeout(long).expect("cuda:41 waited for cuda:40");
        // the same GPU waits for it
        let (same, free_same) = take_elsewhere(vec![Device::Cuda(40)]);
        assert!(same.recv_timeout(short).is_err(), "cuda:40 was taken twice");
        // work on two GPUs waits for both
        let (both, free_both) = take_elsewhere(vec![Device::Cuda(41), Device::Cuda(40)]);
        assert!(both.recv_timeout(short).is_err(), "two GPUs taken in use");
        drop(zero);
        same.recv_timeout(long).expect("cuda:40 not handed over");
        drop(free_same);
        assert!(both.recv_timeout(short).is_err(), "cuda:41 still in use");
        drop(free_one);
        both.recv_timeout(long).expect("both GPUs not handed over");
        // while it runs, another GPU is free and its own are not
        let (other, free_other) = take_elsewhere(vec![Device::Cuda(42)]);
        other
            .recv_timeout(long)
            .expect("cuda:42 waited for work on cuda:40 and 41");
        let (mine, free_mine) = take_elsewhere(vec![Device::Cuda(42), Device::Cuda(41)]);
        assert!(mine.recv_timeout(short).is_err(), "cuda:41 taken in use");
        drop(free_both);
        assert!(mine.recv_timeout(short).is_err(), "cuda:42 still in use");
        drop(free_other);
        mine.recv_timeout(long)
            .expect("cuda:41 and 42 not handed over");
        drop(free_mine);
        // host work takes nothing; other GPU kinds take every device
        assert!(Turn::take(&[Device::Cpu]).is_free());
        let v = Turn::take(&[Device::Vulkan(0)]);
        let (cuda, free_cuda) = take_elsewhere(vec![Device::Cuda(40)]);
        assert!(
            cuda.recv_timeout(short).is_err(),
            "a GPU taken during Vulkan work"
        );
        drop(v);
        cuda.recv_timeout(long).expect("cuda:40 not handed over");
        drop(free_cuda);
    }

    #[test]
    fn a_panic_restores_the_value_and_becomes_an_error() {
        let mut v = vec![1, 2, 3];
        let r: Result<()> = restoring(&mut v, |v| {
            v.push(4);
            v[0] = 9;
            panic!("half-way");
        });
        assert_eq!(r.unwrap_err().kind(), "panic");
        assert_eq!(v, vec![1, 2, 3]);
        let ok = restoring(&mut v, |v| {
            v.push(4);
            Ok(v.len())
        });
        assert_eq!(ok.unwrap(), 4);
        assert_eq!(v, vec![1, 2, 3, 4]);
    }
}
