//! Parallel loops that start on the calling thread: the items of a loop are claimed one at a
//! time from a shared counter by the caller and by helpers on the compute threads, so the
//! caller computes from the first moment and never waits for a helper that has not started.
//!
//! rayon's own parallel iterators hand the whole loop to the pool and block the caller until
//! every job has run, including jobs no thread has picked up yet. On a virtual machine a
//! sleeping compute thread can take 50-150 us to wake, and the BEAM's schedulers (nice 0,
//! busy-waiting after their work) hold a core for a while before they sleep, so a compute
//! thread at the compute threads' low priority (see [`super`]) waited for a core: a 512 x
//! 1024 element-wise run took 230-290 us on two EPYC cores although each half took 105-140
//! us, the halves running one after the other. Here a helper that starts late finds the
//! items taken and ends; helpers still watching after an earlier loop (`team`) join at once.

use super::team::{self, Open};
use crate::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// A participant's work on one item, with its own state.
type Work<S> = dyn Fn(&mut S, usize) -> Result<()> + Sync;
/// Makes a participant's state (once it has claimed an item).
type Init<S> = dyn Fn() -> S + Sync;

/// What the caller and its helpers share. `work` and `init` point into the caller's frame:
/// they are only called for a claimed item, and the caller does not return before every
/// claimed item is done, so no helper calls them after that.
struct Shared<S> {
    work: *const Work<S>,
    init: *const Init<S>,
    /// Items to run.
    n: usize,
    /// The next item to claim (`>= n`: none left).
    next: AtomicUsize,
    /// Helpers still to start.
    unspawned: AtomicUsize,
    /// Items done (run, failed or skipped after a failure).
    done: AtomicUsize,
    /// Whether an item failed (the rest are skipped).
    failed: AtomicBool,
    /// The first failure.
    error: Mutex<Option<Error>>,
    /// Set with `done == n` by the participant that finished the last item.
    finished: Mutex<bool>,
    wake: Condvar,
}

// SAFETY: `work` and `init` are `Sync` closures called from any thread only while the caller
// waits (see `Shared`); everything else is thread-safe.
unsafe impl<S> Send for Shared<S> {}
// SAFETY: as above.
unsafe impl<S> Sync for Shared<S> {}

impl<S: Send + 'static> Shared<S> {
    /// Starts up to `k` more helpers on the compute threads while items are left. Each helper
    /// starts two more, so that the caller wakes one thread and the wake-ups spread as a tree
    /// (waking a sleeping thread costs its waker a few microseconds).
    fn spawn_helpers(self: &Arc<Self>, k: usize) {
        for _ in 0..k {
            let take = |u: usize| u.checked_sub(1);
            if self.next.load(Ordering::Relaxed) >= self.n
                || self
                    .unspawned
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, take)
                    .is_err()
            {
                return;
            }
            let shared = Arc::clone(self);
            let member = team::enlist();
            rayon::spawn(move || {
                shared.spawn_helpers(2);
                team::inside(|| shared.participate());
                drop(shared);
                if team::lingering() {
                    // run from the queue by a watching helper: its watch goes on
                    drop(member);
                } else {
                    team::linger(member);
                }
            });
        }
    }
}

impl<S: Send + 'static> Open for Shared<S> {
    fn join(&self) {
        self.participate();
    }

    fn open(&self) -> bool {
        self.next.load(Ordering::Relaxed) < self.n
    }
}

impl<S> Shared<S> {
    /// Claims and runs items until none is left.
    fn participate(&self) {
        let mut state: Option<S> = None;
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return;
            }
            if !self.failed.load(Ordering::Relaxed) {
                // SAFETY: item `i` is claimed and not done, so the caller is still waiting and
                // the closures it lent are alive (see `Shared`).
                let (work, init) = unsafe { (&*self.work, &*self.init) };
                let run = std::panic::AssertUnwindSafe(|| work(state.get_or_insert_with(init), i));
                let result = std::panic::catch_unwind(run)
                    .unwrap_or_else(|_| Err(Error::Execution("a compute thread panicked".into())));
                if let Err(e) = result {
                    self.failed.store(true, Ordering::Relaxed);
                    let mut first = self.error.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert(e);
                }
            }
            if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
                let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
                *finished = true;
                self.wake.notify_all();
            }
        }
    }

    /// Waits until every item is done: briefly spinning (the last items are usually a few
    /// microseconds from done), then asleep.
    fn wait(&self) {
        for _ in 0..2_000 {
            if self.done.load(Ordering::Acquire) == self.n {
                return;
            }
            std::hint::spin_loop();
        }
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        while !*finished {
            finished = self.wake.wait(finished).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Runs `work(state, i)` for every `i` in `0..n`, on the calling thread and on up to one fewer
/// compute threads than the pool has (together as many threads as cores), each item once;
/// each participant makes its `state` with `init` before its first item. Returns when every
/// item is done: the first error (a panic is an error), the items not yet started skipped.
pub(crate) fn for_each_claimed<S: Send + 'static>(
    n: usize,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize) -> Result<()> + Sync,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    if team::nested() {
        // a loop inside an item of another: the other keeps the threads busy
        let mut state = init();
        return (0..n).try_for_each(|i| work(&mut state, i));
    }
    let wanted = rayon::current_num_threads().saturating_sub(1).min(n - 1);
    let work: &(dyn Fn(&mut S, usize) -> Result<()> + Sync + '_) = &work;
    let init: &(dyn Fn() -> S + Sync + '_) = &init;
    // SAFETY: only the closures' lifetimes are erased (the same fat pointers); see `Shared`
    // for why no call through them outlives the closures.
    let (work, init): (*const Work<S>, *const Init<S>) =
        unsafe { (std::mem::transmute(work), std::mem::transmute(init)) };
    let shared = Arc::new(Shared {
        work,
        init,
        n,
        next: AtomicUsize::new(0),
        // helpers still watching from earlier loops join without being started
        unspawned: AtomicUsize::new(wanted.saturating_sub(team::members())),
        done: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        finished: Mutex::new(false),
        wake: Condvar::new(),
    });
    let open: Arc<dyn Open> = shared.clone();
    team::post(Arc::clone(&open));
    shared.spawn_helpers(1);
    team::inside(|| shared.participate());
    shared.wait();
    team::unpost(&open);
    let error = shared
        .error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    error.map_or(Ok(()), Err)
}

/// A pointer to the elements of a slice that the participants of [`for_each_chunk_mut`] cut
/// into disjoint chunks.
struct Elements<T>(*mut T);

// SAFETY: each chunk is handed to one participant only (each item is claimed once), so the
// elements are shared between threads only as `&mut [T]` of disjoint ranges.
unsafe impl<T: Send> Send for Elements<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Elements<T> {}

/// `f(i, chunk)` for every chunk of `len` elements of `data` (chunk `i` starts at `i * len`;
/// the last may be shorter), as [`for_each_claimed`] runs items; a panic in `f` is an error.
pub(crate) fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    len: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) -> Result<()> {
    let (total, len) = (data.len(), len.max(1));
    let elements = Elements(data.as_mut_ptr());
    let chunk = |(): &mut (), i: usize| {
        let elements = &elements;
        let start = i * len;
        // SAFETY: chunk `i` is `start..start + len` clamped to the slice, disjoint from every
        // other chunk, and claimed by one participant only; `data` is borrowed mutably for
        // the whole call.
        let part = unsafe {
            std::slice::from_raw_parts_mut(elements.0.add(start), len.min(total - start))
        };
        f(i, part);
        Ok(())
    };
    for_each_claimed(total.div_ceil(len), || (), chunk)
}

/// `f(i)` for every `i` in `0..n`, as [`for_each_claimed`] runs items; the results in order,
/// or the first error (a panic in `f` is an error).
pub(crate) fn map_claimed<R: Send>(
    n: usize,
    f: impl Fn(usize) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let slots: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let item = |(): &mut (), i: usize| {
        let r = f(i)?;
        *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        Ok(())
    };
    for_each_claimed(n, || (), item)?;
    slots
        .into_iter()
        .map(|s| {
            s.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .ok_or_else(|| Error::Execution("a parallel item was not run".into()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once_whatever_the_count() {
        for n in [0, 1, 2, 3, 17, 1000] {
            let runs: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for_each_claimed(
                n,
                || (),
                |(), i| {
                    runs[i].fetch_add(1, Ordering::Relaxed);
                    Ok(())
                },
            )
            .unwrap();
            assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1), "{n}");
        }
    }

    #[test]
    fn each_participant_makes_its_state_once() {
        let made = AtomicUsize::new(0);
        let seen = Mutex::new(0usize);
        for_each_claimed(
            500,
            || {
                made.fetch_add(1, Ordering::Relaxed);
                0usize
            },
            |count, _| {
                *count += 1;
                *seen.lock().unwrap() += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(*seen.lock().unwrap(), 500);
        let made = made.load(Ordering::Relaxed);
        assert!(
            made >= 1 && made <= rayon::current_num_threads().max(1),
            "{made}"
        );
    }

    #[test]
    fn the_first_error_is_returned_and_later_items_are_skipped() {
        let ran = AtomicUsize::new(0);
        let r = for_each_claimed(
            10_000,
            || (),
            |(), i| {
                ran.fetch_add(1, Ordering::Relaxed);
                if i == 3 {
                    Err(Error::Execution("item 3".into()))
                } else {
                    Ok(())
                }
            },
        );
        assert!(matches!(r, Err(Error::Execution(m)) if m == "item 3"));
        // items claimed after the failure was seen are skipped
        assert!(ran.load(Ordering::Relaxed) < 10_000);
    }

    #[test]
    fn a_panicking_item_is_an_error_and_the_caller_returns() {
        let r = for_each_claimed(
            64,
            || (),
            |(), i| {
                if i == 40 {
                    panic!("item 40");
                }
                Ok(())
            },
        );
        assert!(matches!(r, Err(Error::Execution(_))));
        let r = map_claimed(8, |i| if i == 5 { panic!() } else { Ok(i) });
        assert!(matches!(r, Err(Error::Execution(_))));
    }

    #[test]
    fn chunks_cover_the_slice_and_results_keep_their_order() {
        for (len, chunk) in [(0, 4), (1, 4), (10, 3), (4096, 1000), (4096, 4096), (5, 0)] {
            let mut v = vec![usize::MAX; len];
            for_each_chunk_mut(&mut v, chunk, |i, part| {
                for (j, x) in part.iter_mut().enumerate() {
                    *x = i * chunk.max(1) + j;
                }
            })
            .unwrap();
            assert!(v.iter().enumerate().all(|(i, &x)| x == i), "{len} {chunk}");
        }
        assert_eq!(
            map_claimed(100, |i| Ok(i * i)).unwrap(),
            (0..100).map(|i| i * i).collect::<Vec<_>>()
        );
    }

    #[test]
    fn loops_nest_and_helpers_that_start_late_touch_nothing() {
        // Many short loops over data dropped right after each returns: a helper that starts
        // after its loop ended must not call into it (it finds every item claimed).
        for round in 0..2_000 {
            let data: Vec<usize> = (0..8).map(|i| i + round).collect();
            let total = AtomicUsize::new(0);
            for_each_claimed(
                data.len(),
                || (),
                |(), i| {
                    let inner = map_claimed(3, |j| Ok(data[i] + j))?;
                    total.fetch_add(inner.iter().sum::<usize>(), Ordering::Relaxed);
                    Ok(())
                },
            )
            .unwrap();
            let want: usize = data.iter().map(|d| 3 * d + 3).sum();
            assert_eq!(total.load(Ordering::Relaxed), want);
        }
    }
}
