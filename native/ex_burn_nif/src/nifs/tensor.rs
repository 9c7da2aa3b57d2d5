//! Tensor data in and out, metadata, transfers and deallocation.

use super::{scheduled, Limit, Res};
use crate::resource::TensorRes;
use crate::{decode, reply};
use ex_burn_core::Tensor;
use rustler::{Binary, Encoder, Env, NewBinary, ResourceArc, Term};

fn from_binary<'a>(
    env: Env<'a>,
    data: Binary<'a>,
    shape: Term<'a>,
    dtype: Term<'a>,
    device: Term<'a>,
) -> Term<'a> {
    reply::run(env, || {
        let (shape, dtype, device) = (
            decode::shape(shape)?,
            decode::dtype(dtype)?,
            decode::device(device)?,
        );
        let t = ex_burn_core::guard::exclusive(device, || {
            Tensor::from_bytes(data.as_slice(), &shape, dtype, device)
        })?;
        Ok(reply::tensor(env, t))
    })
}

scheduled!(from_binary, tensor_from_binary, tensor_from_binary_cpu, tensor_from_binary_io,
    (data: Binary<'a>, shape: Term<'a>, dtype: Term<'a>, device: Term<'a>));

fn to_binary<'a>(env: Env<'a>, t: ResourceArc<TensorRes>, limit: Option<usize>) -> Term<'a> {
    reply::run(env, || {
        let t = t.get()?;
        let bytes = ex_burn_core::guard::exclusive(t.device(), || t.to_bytes(limit))?;
        Ok(NewBinary::from_slice(env, &bytes).into())
    })
}

scheduled!(to_binary, tensor_to_binary, tensor_to_binary_cpu, tensor_to_binary_io,
    (t: Res, limit: Limit));

/// `{shape, type, device}` of a tensor.
#[rustler::nif]
fn tensor_info<'a>(env: Env<'a>, t: ResourceArc<TensorRes>) -> Term<'a> {
    reply::run(env, || {
        let t = t.get()?;
        let shape: Vec<Term> = t.shape().iter().map(|d| d.encode(env)).collect();
        let shape = rustler::types::tuple::make_tuple(env, &shape);
        Ok((
            shape,
            reply::dtype(env, t.dtype()),
            reply::device(env, t.device()),
        )
            .encode(env))
    })
}

/// Copies a tensor to another device (waits on the devices: dirty IO).
#[rustler::nif(schedule = "DirtyIo")]
fn tensor_to_device<'a>(env: Env<'a>, t: ResourceArc<TensorRes>, device: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        let device = decode::device(device)?;
        let t = t.get()?;
        let on = if t.device().is_host() {
            device
        } else {
            t.device()
        };
        Ok(reply::tensor(
            env,
            ex_burn_core::guard::exclusive(on, || t.to_device(device))?,
        ))
    })
}

/// Frees the tensor's memory now; returns whether it was still allocated.
#[rustler::nif]
fn tensor_deallocate<'a>(env: Env<'a>, t: ResourceArc<TensorRes>) -> Term<'a> {
    reply::run(env, || Ok(t.free()?.encode(env)))
}
