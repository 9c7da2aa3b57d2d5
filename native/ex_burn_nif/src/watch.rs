//! Dirty work stops when its caller dies: each call on a dirty scheduler monitors the calling
//! process from a small resource; the monitor's `down` callback sets the flag that the
//! engine's loops check (`ex_burn_core::cancel`), so the work unwinds within one step and
//! frees its scheduler.

use ex_burn_core::cancel::{self, Token};
use rustler::{Env, LocalPid, Monitor, ResourceArc};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The flag of one running call, set when its caller exits.
pub struct CallerRes {
    flag: Arc<AtomicBool>,
}

#[rustler::resource_impl]
impl rustler::Resource for CallerRes {
    const IMPLEMENTS_DOWN: bool = true;

    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, _monitor: Monitor) {
        self.flag.store(true, Ordering::Relaxed);
    }
}

/// Runs `work` (on a dirty scheduler) so that it stops when the calling process exits.
pub fn watched<T>(env: Env<'_>, work: impl FnOnce() -> T) -> T {
    let flag = Arc::new(AtomicBool::new(false));
    let res = ResourceArc::new(CallerRes { flag: flag.clone() });
    let monitor = env.monitor(&res, &env.pid());
    let out = cancel::scope(Token::new(flag), work);
    if let Some(m) = monitor {
        env.demonitor(&res, &m);
    }
    out
}
