//! The compute threads that stay for the next parallel loop. A helper that has finished its
//! part of a loop ([`super::claim`]) keeps watching for [`LINGER`] before it goes back to the
//! pool (where it would soon sleep), and joins the next loop posted in that time at once.
//!
//! A program's parallel loops follow each other tens of microseconds apart (the caller's
//! work between them), and a sleeping thread took 52-65 us to wake on the 16-core Xeon of
//! the device tool: every loop of an MLP training step began on the caller alone and ended
//! with the caller waiting 130-165 us for helpers that had started late (loops of ~650 us).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A loop that helpers can join.
pub(super) trait Open: Send + Sync {
    /// Claims and runs the loop's items until none is left.
    fn join(&self);
    /// Whether items are left to claim.
    fn open(&self) -> bool;
}

/// How long a helper watches for the next loop after its last one.
const LINGER: Duration = Duration::from_micros(300);

/// The loop posted last (cleared by its caller when it is done).
static POSTED: Mutex<Option<Arc<dyn Open>>> = Mutex::new(None);
/// Counts posts, so that a watching helper sees a new one.
static EPOCH: AtomicUsize = AtomicUsize::new(0);
/// Helpers started and not yet back in the pool (working or watching).
static MEMBERS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread is running a loop's items (a loop inside one runs on its thread).
    static IN_LOOP: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is a helper watching for loops ([`linger`]).
    static LINGERING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is already watching for loops (a helper job that it ran from
/// the pool's queue while watching ends after its loop: the watch goes on around it).
pub(super) fn lingering() -> bool {
    LINGERING.with(Cell::get)
}

/// Whether the calling thread is running a loop's items.
pub(super) fn nested() -> bool {
    IN_LOOP.with(Cell::get)
}

/// Runs `f` (a participant's share of a loop) marked as inside a loop.
pub(super) fn inside<R>(f: impl FnOnce() -> R) -> R {
    let before = IN_LOOP.with(|c| c.replace(true));
    let r = f();
    IN_LOOP.with(|c| c.set(before));
    r
}

/// Posts `l` for watching helpers to join.
pub(super) fn post(l: Arc<dyn Open>) {
    *POSTED.lock().unwrap_or_else(|p| p.into_inner()) = Some(l);
    EPOCH.fetch_add(1, Ordering::Release);
}

/// Takes `l` down if it is still the posted loop.
pub(super) fn unpost(l: &Arc<dyn Open>) {
    let mut posted = POSTED.lock().unwrap_or_else(|p| p.into_inner());
    let same = |p: &Arc<dyn Open>| std::ptr::addr_eq(Arc::as_ptr(p), Arc::as_ptr(l));
    if posted.as_ref().is_some_and(same) {
        *posted = None;
    }
}

/// Helpers started and not yet back in the pool.
pub(super) fn members() -> usize {
    MEMBERS.load(Ordering::Relaxed)
}

/// A helper counted in [`members`] until it is dropped.
pub(super) struct Member(());

impl Drop for Member {
    fn drop(&mut self) {
        MEMBERS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a helper about to start (before it is spawned, so that the count is never low).
pub(super) fn enlist() -> Member {
    MEMBERS.fetch_add(1, Ordering::Relaxed);
    Member(())
}

/// After a helper's first loop: joins loops posted until none has come for [`LINGER`]; then
/// the thread goes back to the pool (and `member` leaves the team). Meanwhile it also runs
/// the pool's other jobs (Burn's own parallel loops), so that watching never holds them back.
pub(super) fn linger(member: Member) {
    LINGERING.with(|c| c.set(true));
    let mut seen = EPOCH.load(Ordering::Acquire);
    let mut since = Instant::now();
    let mut spins = 0u32;
    loop {
        let epoch = EPOCH.load(Ordering::Acquire);
        if epoch != seen {
            seen = epoch;
            let posted = POSTED.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(l) = posted.filter(|l| l.open()) {
                inside(|| l.join());
            }
            since = Instant::now();
            continue;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(8) && rayon::yield_now() == Some(rayon::Yield::Executed) {
            since = Instant::now();
            continue;
        }
        if since.elapsed() >= LINGER {
            break;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
    LINGERING.with(|c| c.set(false));
    drop(member);
}
