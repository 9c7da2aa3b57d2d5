//! Tensor data in and out, metadata, transfers, sums across devices and deallocation.

use crate::resource::TensorRes;
use crate::sched::{self, Class, Here};
use crate::{args, reply};
use ex_burn_core::{collective, guard, Device, Result, Tensor};
use rustler::{Binary, Encoder, Env, NewBinary, ResourceArc, Term};

/// Copying this many bytes or fewer stays on a normal scheduler.
const NORMAL_BYTES: usize = 256 << 10;

fn copy_class(device: Device, bytes: usize) -> Class {
    match (device.is_host(), bytes <= NORMAL_BYTES) {
        (false, _) => Class::DirtyIo,
        (true, true) => Class::Normal,
        (true, false) => Class::DirtyCpu,
    }
}

/// `(data, shape, type, device)`: a tensor from Nx-layout bytes.
pub fn from_binary<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            let data: Binary = args::get(a[0], "data (expected a binary)")?;
            let device = args::device(a[3])?;
            Ok(((data, device), copy_class(device, data.len())))
        },
        |(data, device)| {
            let (shape, dtype) = (args::shape(a[1])?, args::dtype(a[2])?);
            let t = guard::exclusive(&[device], || {
                Tensor::from_bytes(data.as_slice(), &shape, dtype, device)
            })?;
            Ok(reply::tensor(env, t))
        },
    )
}

/// `(tensor, limit)`: the data as Nx-layout bytes (the first `limit` elements).
pub fn to_binary<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            let (t, limit) = (args::tensor(a[0])?, args::limit(a[1])?);
            let n = limit.map_or(t.numel(), |l| l.min(t.numel()));
            let class = copy_class(t.device(), n.saturating_mul(t.dtype().size()));
            Ok(((t, limit), class))
        },
        |(t, limit)| {
            let bytes = guard::exclusive(&[t.device()], || t.to_bytes(limit))?;
            let mut bin = NewBinary::new(env, bytes.len());
            bin.as_mut_slice().copy_from_slice(&bytes);
            Ok(bin.into())
        },
    )
}

/// `(tensor)`: `{shape, type, device}`.
pub fn info<'a>(env: Env<'a>, a: &[Term<'a>], _here: Here) -> Term<'a> {
    reply::run(env, || {
        let t = args::tensor(a[0])?;
        Ok((
            reply::shape(env, t.shape()),
            reply::dtype(env, t.dtype()),
            reply::device(env, t.device()),
        )
            .encode(env))
    })
}

/// `(tensor, device)`: a copy on another device.
pub fn to_device<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            let (t, to) = (args::tensor(a[0])?, args::device(a[1])?);
            let class = if t.device().is_host() && to.is_host() {
                Class::Normal
            } else {
                Class::DirtyIo
            };
            Ok(((t, to), class))
        },
        |(t, to)| {
            let moved = guard::exclusive(&[t.device(), to], || t.to_device(to))?;
            Ok(reply::tensor(env, moved))
        },
    )
}

/// Host tensors of at least this many bytes are freed on a dirty scheduler.
const FREE_ON_DIRTY_FROM: usize = 1 << 20;

/// `(tensor)`: frees the memory now; answers whether it was still allocated.
pub fn deallocate<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            let r = args::tensor_ref(a[0])?;
            // Freeing GPU memory waits for the device lock; giving a large host buffer back to
            // the system (munmap) took over 100 ms under memory pressure.
            let class = match r.device() {
                Some(d) if !d.is_host() => Class::DirtyIo,
                Some(_) if r.byte_size().unwrap_or(0) >= FREE_ON_DIRTY_FROM => Class::DirtyCpu,
                _ => Class::Normal,
            };
            Ok((r, class))
        },
        |r| Ok(r.free().encode(env)),
    )
}

/// `(sets)`: a list of sets, each a list of one tensor per device (the devices in the same order
/// in every set): every tensor replaced by its set's sum, on its own device
/// (`ex_burn_core::collective::all_reduce`).
pub fn all_reduce<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            let refs: Vec<Vec<ResourceArc<TensorRes>>> = args::get(a[0], "sets of tensors")?;
            let sets = refs
                .iter()
                .map(|set| set.iter().map(|r| r.get()).collect::<Result<Vec<_>>>())
                .collect::<Result<Vec<_>>>()?;
            let on: Vec<Device> = sets.iter().flatten().map(Tensor::device).collect();
            let class = if on.iter().any(|d| !d.is_host()) {
                Class::DirtyIo
            } else {
                Class::DirtyCpu
            };
            Ok(((sets, on), class))
        },
        |(sets, on)| {
            let summed = guard::exclusive(&on, || collective::all_reduce(sets))?;
            Ok(summed
                .into_iter()
                .map(|set| reply::tensors(env, set))
                .collect::<Vec<_>>()
                .encode(env))
        },
    )
}
