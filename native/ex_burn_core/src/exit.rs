//! The process's exit while GPU work is in flight.
//!
//! The BEAM's `halt` (an uncaught error ending a script, `System.halt/1`) ends the process with
//! C's `exit`, which runs every exit handler registered so far, the C++ static destructors of
//! the GPU libraries (NVRTC, cuBLAS, the driver's own) among them. ExBurn's GPU work does not
//! stop for that: the device threads go on running queued kernels and dirty schedulers go on
//! issuing work, into libraries being torn down, and the process dies of SIGSEGV instead of
//! exiting with the VM's status.
//!
//! Once a GPU device has done work, ExBurn registers an exit handler of its own: it keeps new
//! GPU work from starting, waits for the devices' queues to drain ([`DRAIN_LIMIT`] at most),
//! and lets the exit go on; when GPU work is still running at the limit, it ends the process
//! at once with the exit's status (`_exit`, after flushing C's output buffers), skipping the
//! destructors that would crash. Exit handlers run last registered first, so the handler is
//! registered again whenever a GPU library may have registered handlers of its own since
//! ([`after_load`]: cuBLAS sets up each kind of product on its first use, NCCL on its first
//! collective). Linux with glibc only (`on_exit` gives the status); elsewhere nothing is
//! registered.
//!
//! Seen on an H200 before this handler: a VM halting while another process issued products
//! died of SIGSEGV in cuBLAS's heuristics (`cublasLtSSSMatmulAlgoGetHeuristic`, on CubeCL's
//! device thread), after cuBLAS's exit handlers had run.

use crate::Device;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLockWriteGuard;
use std::time::{Duration, Instant};

/// How long an exit waits for running GPU work to end and the devices' queues to drain.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Set by the first exit handler that runs (the others return at once).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
static DONE: AtomicBool = AtomicBool::new(false);

/// Set by [`install`].
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Registers the exit handler after the first piece of work on each GPU device (so after the
/// libraries that work loaded). Called once by the library's loader; without it no handler is
/// registered.
pub fn install() {
    INSTALLED.store(true, Ordering::SeqCst);
    crate::guard::on_first_use(register);
}

/// Registers the exit handler again, ahead of the exit handlers a GPU library has just
/// registered (called by device kernels after a library loads or sets up state lazily). Before
/// any GPU work nothing is registered: [`install`]'s hook does it after that work.
pub fn after_load() {
    if INSTALLED.load(Ordering::SeqCst) && !crate::guard::used_gpus().is_empty() {
        register();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn register() {
    extern "C" {
        /// glibc's `on_exit`: like `atexit`, and the handler receives the exit status.
        fn on_exit(
            f: extern "C" fn(libc::c_int, *mut libc::c_void),
            arg: *mut libc::c_void,
        ) -> libc::c_int;
    }
    // SAFETY: registers a handler with a null argument; the handler never unwinds.
    unsafe {
        on_exit(at_exit, std::ptr::null_mut());
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn register() {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn at_exit(status: libc::c_int, _arg: *mut libc::c_void) {
    if DONE.swap(true, Ordering::SeqCst) {
        return;
    }
    let quiet = std::panic::catch_unwind(|| {
        let devices = crate::guard::used_gpus();
        // never given back: no GPU work starts again in this process
        quiesce(&devices, Instant::now() + DRAIN_LIMIT).map(std::mem::forget)
    });
    if !matches!(quiet, Ok(Some(()))) {
        // SAFETY: flushes C's buffers, then ends the process without running the rest of the
        // exit handlers (the GPU libraries' destructors would run under live GPU work).
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::_exit(status);
        }
    }
}

/// Keeps new GPU work from starting (for as long as the returned guard lives) and waits for
/// every queue of `devices` to drain; `None` when GPU work still runs, or a queue has not
/// drained or failed, at `deadline`.
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
fn quiesce(devices: &[Device], deadline: Instant) -> Option<RwLockWriteGuard<'static, ()>> {
    let stopped = crate::guard::stop_gpu_work(deadline)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let list = devices.to_vec();
    std::thread::Builder::new()
        .name("ex_burn_exit".into())
        .spawn(move || {
            let drained = list
                .iter()
                .all(|d| crate::guard::guard(|| d.sync()).is_ok());
            let _ = tx.send(drained);
        })
        .ok()?;
    let left = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(true) => Some(stopped),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiesce_waits_for_running_gpu_work_and_gives_up_at_the_deadline() {
        let (started, wait) = std::sync::mpsc::channel();
        let (finish, hold) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // the locks of GPU work; the closure never touches a device
            crate::guard::exclusive(&[Device::Cuda(0)], || {
                started.send(()).unwrap();
                hold.recv().unwrap();
                Ok(())
            })
        });
        wait.recv().unwrap();
        let t = Instant::now();
        assert!(quiesce(&[], Instant::now() + Duration::from_millis(50)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(50));
        finish.send(()).unwrap();
        worker.join().unwrap().unwrap();
        let held = quiesce(&[], Instant::now() + Duration::from_secs(10));
        assert!(held.is_some(), "no GPU work runs: quiet at once");
        // while it is held, no GPU work can start
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let blocked = std::thread::spawn(move || {
            crate::guard::exclusive(&[Device::Cuda(0)], || Ok(())).unwrap();
            done_tx.send(()).unwrap();
        });
        assert!(done_rx.recv_timeout(Duration::from_millis(50)).is_err());
        drop(held);
        done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        blocked.join().unwrap();
        assert!(crate::guard::used_gpus().contains(&Device::Cuda(0)));
    }
}
