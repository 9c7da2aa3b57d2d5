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

/// Serialises work on GPU devices: ExBurn issues all its work on one Burn stream (see
/// `EXBURN_STREAM`), and a stream takes one submitter at a time. Host (CPU) work runs
/// concurrently without the lock. Afterwards the device's allocator may give back what the
/// work left free (`memory::after_work`).
pub fn exclusive<T>(device: crate::Device, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if device.is_host() {
        return f();
    }
    let result = locked(f);
    let _ = guard(|| {
        locked(|| {
            crate::memory::after_work(device);
            Ok(())
        })
    });
    result
}

/// Runs `f` holding the GPU lock.
fn locked<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f()
}

/// Drops device data on ExBurn's stream, holding the GPU lock: a handle dropped from another
/// thread's stream (the BEAM's garbage collector runs anywhere) would otherwise confuse the
/// stream that owns it. This waits for the lock: callers on normal schedulers use
/// [`release_later`].
pub fn release<T>(device: crate::Device, value: T) {
    if device.is_host() {
        drop(value);
        return;
    }
    let _ = guard(|| {
        locked(|| {
            drop(value);
            Ok(())
        })
    });
}

type Release = Box<dyn FnOnce() + Send>;

/// Drops device data like [`release`] without waiting: host data is dropped at once, GPU data
/// by a background thread that takes the GPU lock (the garbage collector must not wait for a
/// long GPU op to finish).
pub fn release_later<T: Send + 'static>(device: crate::Device, value: T) {
    if device.is_host() {
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
    let job: Release = Box::new(move || release(device, value));
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
