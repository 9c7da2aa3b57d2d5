//! Scheduling by cost. Every NIF is registered once and starts on a normal scheduler; a body
//! that finds its work costly (it has decoded its arguments and knows the shapes, the device
//! and the op) moves the call to a dirty scheduler with `enif_schedule_nif`, passing the same
//! arguments. Cheap work (metadata, small host ops) answers at once; host compute goes to dirty
//! CPU schedulers, GPU work and waits (locks, files, device queues) to dirty IO schedulers.
//! Work on a dirty scheduler stops when its caller exits (`watch`).
//!
//! [`nif!`] generates, for each body, the registered NIF and the raw entry point the dirty
//! scheduler calls.

use ex_burn_core::{Device, Error};
use rustler::sys::{c_char, c_int, ErlNifEnv, ErlNifTerm as ERL_NIF_TERM};
use rustler::{Env, Term};

/// Where a piece of work belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Answers in well under a millisecond: stays on the normal scheduler.
    Normal,
    /// Host compute.
    DirtyCpu,
    /// GPU work, file I/O and anything that waits.
    DirtyIo,
}

/// Host work estimated at or below this many element operations stays on a normal scheduler
/// (a few tens of microseconds on one core).
pub const NORMAL_WORK: u128 = 1 << 16;

/// The class of `work` element operations on `device`.
pub fn by_cost(device: Device, work: u128) -> Class {
    if !device.is_host() {
        Class::DirtyIo
    } else if work <= NORMAL_WORK {
        Class::Normal
    } else {
        Class::DirtyCpu
    }
}

/// Compute on `device`, whatever its size (training, programs).
pub fn compute(device: Device) -> Class {
    if device.is_host() {
        Class::DirtyCpu
    } else {
        Class::DirtyIo
    }
}

/// The raw entry point of a NIF body on a dirty scheduler.
pub type RawNif = unsafe extern "C" fn(*mut ErlNifEnv, c_int, *const ERL_NIF_TERM) -> ERL_NIF_TERM;

/// Where a body is running, and how to move it.
#[derive(Clone, Copy)]
pub struct Here {
    dirty: bool,
    name: &'static [u8],
    entry: RawNif,
}

impl Here {
    /// A call on a normal scheduler of the NIF `name` (NUL-terminated) whose dirty entry is
    /// `entry`.
    pub fn normal(name: &'static [u8], entry: RawNif) -> Here {
        Here {
            dirty: false,
            name,
            entry,
        }
    }

    /// The same call, now on a dirty scheduler.
    pub fn dirty(self) -> Here {
        Here {
            dirty: true,
            ..self
        }
    }

    /// On a normal scheduler, moves the call to the dirty scheduler `class` asks for and
    /// returns the term the NIF must return; `None` means: run here.
    pub fn reschedule<'a>(
        &self,
        env: Env<'a>,
        args: &[Term<'a>],
        class: Class,
    ) -> Option<Term<'a>> {
        let flags = match class {
            Class::Normal => return None,
            _ if self.dirty => return None,
            Class::DirtyCpu => rustler::sys::ERL_NIF_DIRTY_JOB_CPU_BOUND,
            Class::DirtyIo => rustler::sys::ERL_NIF_DIRTY_JOB_IO_BOUND,
        };
        let argv: Vec<ERL_NIF_TERM> = args.iter().map(Term::as_c_arg).collect();
        // SAFETY: `name` is NUL-terminated and static, `entry` is this NIF's dirty entry, and
        // `argv` holds terms of this environment; the VM copies the arguments.
        let term = unsafe {
            rustler::sys::enif_schedule_nif(
                env.as_c_arg(),
                self.name.as_ptr() as *const c_char,
                flags as c_int,
                self.entry,
                argv.len() as c_int,
                argv.as_ptr(),
            )
        };
        // SAFETY: the VM's answer is a term of this environment.
        Some(unsafe { Term::new(env, term) })
    }
}

/// Runs a NIF body. `prepare` decodes what the decision needs and says where the work
/// belongs; on a normal scheduler a dirty class moves the call (which starts over there),
/// otherwise `work` runs now. Errors and panics of either step come back as error terms.
pub fn run<'a, P>(
    env: Env<'a>,
    args: &[Term<'a>],
    here: Here,
    prepare: impl FnOnce() -> ex_burn_core::Result<(P, Class)>,
    work: impl FnOnce(P) -> ex_burn_core::Result<Term<'a>>,
) -> Term<'a> {
    let (p, class) = match ex_burn_core::guard(prepare) {
        Ok(ready) => ready,
        Err(e) => return crate::reply::error(env, &e),
    };
    if let Some(moved) = here.reschedule(env, args, class) {
        return moved;
    }
    if here.dirty {
        crate::watch::watched(env, || crate::reply::run(env, || work(p)))
    } else {
        crate::reply::run(env, || work(p))
    }
}

/// Runs a NIF body that always belongs to `class` (moved there before decoding anything).
pub fn always<'a>(
    env: Env<'a>,
    args: &[Term<'a>],
    here: Here,
    class: Class,
    work: impl FnOnce() -> ex_burn_core::Result<Term<'a>>,
) -> Term<'a> {
    if let Some(moved) = here.reschedule(env, args, class) {
        return moved;
    }
    if here.dirty {
        crate::watch::watched(env, || crate::reply::run(env, work))
    } else {
        crate::reply::run(env, work)
    }
}

/// The body of a dirty entry: rebuilds the environment and arguments, runs `body`, and never
/// lets a panic cross the C boundary.
///
/// # Safety
/// `env`, `argc` and `argv` must come from the VM's call of a NIF.
pub unsafe fn dirty_entry(
    env: *mut ErlNifEnv,
    argc: c_int,
    argv: *const ERL_NIF_TERM,
    here: Here,
    body: for<'a> fn(Env<'a>, &[Term<'a>], Here) -> Term<'a>,
) -> ERL_NIF_TERM {
    let lifetime = ();
    let env = Env::new(&lifetime, env);
    let args: Vec<Term> = std::slice::from_raw_parts(argv, argc.max(0) as usize)
        .iter()
        .map(|t| Term::new(env, *t))
        .collect();
    let run = std::panic::AssertUnwindSafe(|| body(env, &args, here.dirty()));
    match std::panic::catch_unwind(run) {
        Ok(term) => term.as_c_arg(),
        Err(_) => {
            crate::reply::error(env, &Error::Panic("panic outside the guard".into())).as_c_arg()
        }
    }
}

/// Declares NIFs by body: `nif!(name(arg, ...) => body);` registers the Erlang function
/// `name/arity` on a normal scheduler and its dirty entry; `body(env, args, here)` decides
/// where it runs with [`Here::reschedule`].
macro_rules! nif {
    ($($name:ident($($arg:ident),*) => $body:path;)+) => {
        $(
            #[allow(non_snake_case)]
            mod $name {
                use rustler::{Env, Term};

                const NAME: &[u8] = concat!(stringify!($name), "\0").as_bytes();

                /// The dirty scheduler's entry.
                unsafe extern "C" fn dirty(
                    env: *mut rustler::sys::ErlNifEnv,
                    argc: rustler::sys::c_int,
                    argv: *const rustler::sys::ErlNifTerm,
                ) -> rustler::sys::ErlNifTerm {
                    let here = $crate::sched::Here::normal(NAME, dirty);
                    $crate::sched::dirty_entry(env, argc, argv, here, $body)
                }

                // one parameter per argument of the Erlang function
                #[allow(clippy::too_many_arguments)]
                #[rustler::nif]
                fn $name<'a>(env: Env<'a>, $($arg: Term<'a>),*) -> Term<'a> {
                    $body(env, &[$($arg),*], $crate::sched::Here::normal(NAME, dirty))
                }
            }
        )+
    };
}

pub(crate) use nif;
