//! Stopping native work whose caller is gone or whose time is up.
//!
//! The NIF layer runs each piece of dirty work inside [`scope`] with a [`Token`]: a flag it
//! sets when the calling process exits, and an optional deadline. Long-running engine loops
//! (program instructions, `while` iterations, fold slices, training steps) call [`check`] at
//! their boundaries; it returns [`Error::Cancelled`] once the flag is set or the deadline has
//! passed, so the work unwinds and frees its scheduler. Outside a scope `check` never fails.

use crate::{Error, Result};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What stops one piece of work: a shared flag and an optional deadline.
#[derive(Clone, Debug, Default)]
pub struct Token {
    flag: Arc<AtomicBool>,
    deadline: Option<(Instant, Duration)>,
}

impl Token {
    /// A token that stops work once `flag` is set.
    pub fn new(flag: Arc<AtomicBool>) -> Token {
        Token {
            flag,
            deadline: None,
        }
    }

    /// Why work under this token must stop, if it must.
    fn stop(&self) -> Option<Error> {
        if self.flag.load(Ordering::Relaxed) {
            return Some(Error::Cancelled(
                "the calling process exited; its native work was stopped".into(),
            ));
        }
        match self.deadline {
            Some((at, after)) if Instant::now() >= at => Some(Error::Cancelled(format!(
                "timed out after {} ms; the native work was stopped",
                after.as_millis()
            ))),
            _ => None,
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Token>> = const { RefCell::new(None) };
}

/// Runs `f` with `token` as the current thread's token (the previous one is restored after).
pub fn scope<T>(token: Token, f: impl FnOnce() -> T) -> T {
    let outer = CURRENT.with(|c| c.replace(Some(token)));
    let out = f();
    CURRENT.with(|c| *c.borrow_mut() = outer);
    out
}

/// Runs `f` with a deadline `after` from now added to the current token (or to a new one;
/// `None`: no deadline). An earlier deadline already in force is kept.
pub fn within<T>(after: Option<Duration>, f: impl FnOnce() -> T) -> T {
    let Some(after) = after else { return f() };
    let mut token = CURRENT.with(|c| c.borrow().clone()).unwrap_or_default();
    let at = Instant::now() + after;
    if token.deadline.is_none_or(|(old, _)| at < old) {
        token.deadline = Some((at, after));
    }
    scope(token, f)
}

/// `Err(Error::Cancelled)` when the current work must stop (its caller exited or its deadline
/// passed); `Ok(())` otherwise and outside any [`scope`]. Cheap: an atomic load, and a clock
/// read when a deadline is set.
pub fn check() -> Result<()> {
    CURRENT.with(|c| match c.borrow().as_ref().and_then(Token::stop) {
        Some(e) => Err(e),
        None => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_flag_or_a_passed_deadline_stops_work_inside_the_scope_only() {
        assert!(check().is_ok());
        let flag = Arc::new(AtomicBool::new(false));
        scope(Token::new(flag.clone()), || {
            assert!(check().is_ok());
            flag.store(true, Ordering::Relaxed);
            assert_eq!(check().unwrap_err().kind(), "cancelled");
        });
        assert!(check().is_ok());
        within(Some(Duration::ZERO), || {
            let e = check().unwrap_err();
            assert!(e.to_string().contains("timed out after 0 ms"), "{e}");
        });
        within(None, || assert!(check().is_ok()));
    }
}
