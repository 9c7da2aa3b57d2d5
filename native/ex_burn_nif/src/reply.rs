//! Encoding of results: `{:ok, value}` / `{:error, {kind, message}}`, tensor handles and types.

use crate::resource::TensorRes;
use ex_burn_core::{DType, Device, Error, Result, Tensor};
use rustler::{Atom, Encoder, Env, ResourceArc, Term};

rustler::atoms! { ok, error, cpu, cuda, vulkan, metal, f, bf, s, u }

/// Runs `f` under the panic guard and encodes its result.
pub fn run<'a>(env: Env<'a>, f: impl FnOnce() -> Result<Term<'a>>) -> Term<'a> {
    match ex_burn_core::guard(f) {
        Ok(t) => (ok(), t).encode(env),
        Err(e) => error_term(env, &e),
    }
}

/// `{:error, {kind, message}}`.
pub fn error_term<'a>(env: Env<'a>, e: &Error) -> Term<'a> {
    let kind = Atom::from_str(env, e.kind()).unwrap_or_else(|_| error());
    (error(), (kind, e.to_string())).encode(env)
}

/// `{class, bits}` as Nx spells a type.
pub fn dtype<'a>(env: Env<'a>, t: DType) -> Term<'a> {
    let (class, bits) = t.nx();
    let class = Atom::from_str(env, class)
        .map(|a| a.encode(env))
        .unwrap_or_else(|_| class.encode(env));
    (class, bits).encode(env)
}

/// `:cpu` or `{:cuda, i}` and friends.
pub fn device<'a>(env: Env<'a>, d: Device) -> Term<'a> {
    match d {
        Device::Cpu => cpu().encode(env),
        Device::Cuda(i) => (cuda(), i).encode(env),
        Device::Vulkan(i) => (vulkan(), i).encode(env),
        Device::Metal(i) => (metal(), i).encode(env),
    }
}

/// `{ref, shape, type, device}`: everything Elixir needs to build an `%ExBurn.Tensor{}`.
pub fn tensor<'a>(env: Env<'a>, t: Tensor) -> Term<'a> {
    let shape = shape(env, t.shape());
    let (ty, dev) = (dtype(env, t.dtype()), device(env, t.device()));
    let handle = ResourceArc::new(TensorRes::new(t));
    (handle, shape, ty, dev).encode(env)
}

/// A list of tensor handles.
pub fn tensors<'a>(env: Env<'a>, ts: Vec<Tensor>) -> Term<'a> {
    ts.into_iter()
        .map(|t| tensor(env, t))
        .collect::<Vec<_>>()
        .encode(env)
}

/// A shape as an Nx tuple.
pub fn shape<'a>(env: Env<'a>, dims: &[usize]) -> Term<'a> {
    let terms: Vec<Term> = dims.iter().map(|d| d.encode(env)).collect();
    rustler::types::tuple::make_tuple(env, &terms)
}
