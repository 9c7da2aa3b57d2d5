//! Build and device queries.

use crate::{decode, reply};
use ex_burn_core::{device, Device};
use rustler::{Atom, Encoder, Env, Term};

rustler::atoms! { version, backends, nif_version, name, family, available, count, target }

/// `%{version, backends, nif_version, target}` of the loaded library.
#[rustler::nif]
fn build_info<'a>(env: Env<'a>) -> Term<'a> {
    reply::run(env, || {
        let backends: Vec<Atom> = device::compiled_backends()
            .iter()
            .filter_map(|b| Atom::from_str(env, b).ok())
            .collect();
        let map = Term::map_from_pairs(
            env,
            &[
                (version().encode(env), env!("CARGO_PKG_VERSION").encode(env)),
                (self::backends().encode(env), backends.encode(env)),
                (nif_version().encode(env), "2.15".encode(env)),
                (target().encode(env), std::env::consts::ARCH.encode(env)),
            ],
        )
        .map_err(|_| ex_burn_core::Error::Execution("map".into()))?;
        Ok(map)
    })
}

/// `%{name, family, available, count}` of a device; probing a GPU driver can block (dirty IO).
#[rustler::nif(schedule = "DirtyIo")]
fn device_info<'a>(env: Env<'a>, dev: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        let d: Device = decode::device(dev)?;
        let ok = d.to_dispatch().is_ok();
        let map = Term::map_from_pairs(
            env,
            &[
                (name().encode(env), d.name().encode(env)),
                (
                    family().encode(env),
                    Atom::from_str(env, d.family())
                        .map_err(|_| ex_burn_core::Error::Execution("atom".into()))?
                        .encode(env),
                ),
                (available().encode(env), ok.encode(env)),
                (count().encode(env), Device::count(d.family()).encode(env)),
            ],
        )
        .map_err(|_| ex_burn_core::Error::Execution("map".into()))?;
        Ok(map)
    })
}

/// Waits for all queued work on a device.
#[rustler::nif(schedule = "DirtyIo")]
fn device_sync<'a>(env: Env<'a>, dev: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        decode::device(dev)?.sync()?;
        Ok(rustler::types::atom::ok().encode(env))
    })
}
