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
/// every hand-over (measured: ~2 ms per eager GPU op). One fixed stream avoids that.
const EXBURN_STREAM: u64 = u64::MAX - 0xE8B;

/// Runs `f` on ExBurn's stream, returning its result, or `Error::Panic` with the panic's
/// message.
pub fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    install_hook();
    GUARDED.with(|g| g.set(g.get() + 1));
    let stream = burn::tensor::StreamId {
        value: EXBURN_STREAM,
    };
    let r = panic::catch_unwind(AssertUnwindSafe(|| stream.executes(f)));
    GUARDED.with(|g| g.set(g.get() - 1));
    match r {
        Ok(r) => r,
        Err(_) => {
            let msg = MESSAGE
                .with(|m| m.borrow_mut().take())
                .unwrap_or_else(|| "panic".into());
            Err(classify(msg))
        }
    }
}

/// Maps well-known backend panics onto clearer error kinds.
fn classify(msg: String) -> Error {
    let lower = msg.to_lowercase();
    if lower.contains("out of memory") || lower.contains("outofmemory") {
        Error::Execution(format!("device out of memory: {msg}"))
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
/// concurrently without the lock.
pub fn exclusive<T>(device: crate::Device, f: impl FnOnce() -> Result<T>) -> Result<T> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if device.is_host() {
        return f();
    }
    let _turn = GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f()
}

/// Drops device data on ExBurn's stream, holding the GPU lock: a handle dropped from another
/// thread's stream (the BEAM's garbage collector runs anywhere) would otherwise confuse the
/// stream that owns it.
pub fn release<T>(device: crate::Device, value: T) {
    if device.is_host() {
        drop(value);
        return;
    }
    let _ = guard(|| {
        exclusive(device, || {
            drop(value);
            Ok(())
        })
    });
}
