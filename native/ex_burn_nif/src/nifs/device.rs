//! Build and device queries, and the memory limit.

use crate::sched::{self, Class, Here};
use crate::{args, reply};
use ex_burn_core::{device, memory, Device};
use rustler::{Atom, Encoder, Env, Term};

rustler::atoms! { version, backends, nif_version, name, family, available, count, target, memory_available, tensors_held, bytes_held }
mod keys {
    rustler::atoms! { memory_limit }
}

/// `()`: `%{version, backends, nif_version, target}` of the loaded library.
pub fn build_info<'a>(env: Env<'a>, _a: &[Term<'a>], _here: Here) -> Term<'a> {
    reply::run(env, || {
        let backends: Vec<Atom> = device::compiled_backends()
            .iter()
            .filter_map(|b| Atom::from_str(env, b).ok())
            .collect();
        reply::map(
            env,
            &[
                (version().encode(env), env!("CARGO_PKG_VERSION").encode(env)),
                (self::backends().encode(env), backends.encode(env)),
                (nif_version().encode(env), "2.15".encode(env)),
                (target().encode(env), std::env::consts::ARCH.encode(env)),
            ],
        )
    })
}

/// `(device)`: `%{name, family, available, count, memory_limit, memory_available, tensors_held,
/// bytes_held}` (the last two: tensor resources the BEAM holds on the device and their bytes);
/// probing a GPU driver can block (dirty IO).
pub fn device_info<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyIo, || {
        let d: Device = args::device(a[0])?;
        let ok = d.to_dispatch().is_ok();
        let (held_count, held_bytes) = crate::held::of(d);
        reply::map(
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
                (
                    keys::memory_limit().encode(env),
                    memory::limit().encode(env),
                ),
                (
                    memory_available().encode(env),
                    memory::available(d).encode(env),
                ),
                (tensors_held().encode(env), held_count.encode(env)),
                (bytes_held().encode(env), held_bytes.encode(env)),
            ],
        )
    })
}

/// `(device)`: waits for all queued work on a device.
pub fn device_sync<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyIo, || {
        args::device(a[0])?.sync()?;
        Ok(rustler::types::atom::ok().encode(env))
    })
}

/// `(bytes | nil)`: the largest allocation ExBurn makes (`nil`: what each device can hold).
pub fn memory_limit<'a>(env: Env<'a>, a: &[Term<'a>], _here: Here) -> Term<'a> {
    reply::run(env, || {
        let limit = if args::is_nil(a[0]) {
            None
        } else {
            Some(args::get::<u64>(
                a[0],
                "memory limit (expected nil or a positive integer)",
            )?)
            .filter(|&b| b > 0)
        };
        memory::set_limit(limit);
        Ok(rustler::types::atom::ok().encode(env))
    })
}
