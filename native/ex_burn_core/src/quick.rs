//! A program's record of how long its host runs took, for running it where it is called (a
//! normal BEAM scheduler) rather than moving each call to a dirty one.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// A host run of a program at most this long counts as quick.
pub const QUICK_RUN: Duration = Duration::from_micros(50);

/// Quick runs in a row after which a program runs on a normal scheduler.
pub const QUICK_RUNS: u32 = 3;

/// A program's record of its host runs. Programs of tensor ops only (no loops or branches)
/// do the same work each time their inputs have the same shapes, but that work is not known
/// before a run: they start on dirty CPU schedulers, and one that has answered within
/// [`QUICK_RUN`] [`QUICK_RUNS`] times in a row runs on the caller's normal scheduler, for
/// inputs of no more elements than those runs had (moving a call to a dirty scheduler and
/// back costs more than such a run: ~20 against 4-7 us for a 16-element program on two EPYC
/// cores). Any longer run, wherever it ran, sends the program back to dirty schedulers until
/// it has been quick [`QUICK_RUNS`] times in a row again.
#[derive(Debug, Default)]
pub struct Quick {
    /// Quick runs in a row.
    runs: AtomicU32,
    /// The most input elements of those runs.
    elements: AtomicU64,
}

impl Quick {
    /// Whether a run over `elements` input elements may stay on the normal scheduler.
    pub fn allows(&self, elements: u64) -> bool {
        self.runs.load(Ordering::Relaxed) >= QUICK_RUNS
            && elements <= self.elements.load(Ordering::Relaxed)
    }

    /// Records a run over `elements` input elements that took `took`.
    pub fn record(&self, elements: u64, took: Duration) {
        if took <= QUICK_RUN {
            self.elements.fetch_max(elements, Ordering::Relaxed);
            let _ = self
                .runs
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                    Some(r.saturating_add(1))
                });
        } else {
            self.runs.store(0, Ordering::Relaxed);
            self.elements.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_runs_earn_the_normal_scheduler_and_a_long_one_loses_it() {
        let q = Quick::default();
        let short = QUICK_RUN / 2;
        for _ in 0..QUICK_RUNS - 1 {
            q.record(100, short);
            assert!(!q.allows(100));
        }
        q.record(100, short);
        assert!(q.allows(100) && q.allows(16));
        // more input elements than the quick runs had: not known to be quick
        assert!(!q.allows(101));
        // one long run, wherever it ran: dirty schedulers again until quick QUICK_RUNS times
        q.record(16, QUICK_RUN * 2);
        assert!(!q.allows(16));
        for _ in 0..QUICK_RUNS {
            q.record(16, QUICK_RUN);
        }
        assert!(q.allows(16) && !q.allows(100));
    }
}
