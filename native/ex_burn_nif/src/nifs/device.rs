//! Build and device queries, and the memory limit.

use crate::sched::{self, Class, Here};
use crate::{args, reply};
use ex_burn_core::{device, memory, Device};
use rustler::{Atom, Encoder, Env, Term};

rustler::atoms! { version, backends, nif_version, name, family, available, count, target, memory_available, tensors_held, bytes_held, pool_in_use, pool_reserved }
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
/// bytes_held, pool_in_use, pool_reserved}` (tensor resources the BEAM holds on the device and
/// their bytes; what the device's memory pools hold in live buffers and in all, where the
/// backend reports it and the device holds tensors, else `nil`); probing a GPU driver can block
/// (dirty IO).
pub fn device_info<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyIo, || {
        let d: Device = args::device(a[0])?;
        let ok = d.to_dispatch().is_ok();
        let (held_count, held_bytes) = crate::held::of(d);
        // only a device already in use reports its pools (no device is started for it)
        let pools = (held_count > 0).then(|| memory::pools(d)).flatten();
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
                (pool_in_use().encode(env), pools.map(|p| p.0).encode(env)),
                (pool_reserved().encode(env), pools.map(|p| p.1).encode(env)),
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
