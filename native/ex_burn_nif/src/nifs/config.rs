//! The engine's run-time switches (`ex_burn_core::config`), read and set by `ExBurn.configure!/1`
//! and at the library's first use from the application environment.

use crate::sched::Here;
use crate::{decode, encode, reply};
use ex_burn_core::config::{self, Config};
use ex_burn_core::Error;
use rustler::{Encoder, Env, Term};

/// `()`: the configuration in force as a map (`ExBurn.configure!/1`'s option names); an
/// `{:argument, message}` error when it would be the environment's and a variable is bad.
pub fn config_get<'a>(env: Env<'a>, _a: &[Term<'a>], _here: Here) -> Term<'a> {
    reply::run(env, || encode::encode(env, &config::get()?))
}

/// `(config)`: replaces the configuration with a whole [`Config`] (a map or keyword list,
/// unknown keys refused; decoded within the normal scheduler's budget, a larger term is
/// refused); the device settings of a started CUDA device may not change.
pub fn config_set<'a>(env: Env<'a>, a: &[Term<'a>], _here: Here) -> Term<'a> {
    reply::run(env, || {
        let c: Config = decode::decode_bounded(a[0], "configuration")?.ok_or_else(|| {
            Error::Argument("invalid configuration: the term is too large".into())
        })?;
        config::set(c)?;
        Ok(rustler::types::atom::ok().encode(env))
    })
}
