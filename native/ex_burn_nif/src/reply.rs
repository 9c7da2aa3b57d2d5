//! Encoding of results: `{:ok, value}` / `{:error, {kind, message}}`, tensor handles, types,
//! devices and numbers. No float term is ever made from a NaN or an infinity: [`Num`] encodes
//! them as Nx spells them (`:nan`, `:infinity`, `:neg_infinity`).

use crate::resource::TensorRes;
use ex_burn_core::{DType, Device, Error, Result, Tensor};
use rustler::{Atom, Encoder, Env, ResourceArc, Term};

mod atoms {
    rustler::atoms! { ok, error, cpu, cuda, vulkan, metal, nan, infinity, neg_infinity }
}
use atoms::{cpu, cuda, infinity, metal, nan, neg_infinity, ok, vulkan};

/// Runs `f` under the panic guard and encodes its result.
pub fn run<'a>(env: Env<'a>, f: impl FnOnce() -> Result<Term<'a>>) -> Term<'a> {
    match ex_burn_core::guard(f) {
        Ok(t) => (ok(), t).encode(env),
        Err(e) => error(env, &e),
    }
}

/// Longest error message returned (messages quote values; a value can be huge).
const MAX_MESSAGE: usize = 4096;

/// `{:error, {kind, message}}`, the message cut to [`MAX_MESSAGE`] bytes.
pub fn error<'a>(env: Env<'a>, e: &Error) -> Term<'a> {
    let kind = Atom::from_str(env, e.kind()).unwrap_or_else(|_| atoms::error());
    let mut message = e.to_string();
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    (atoms::error(), (kind, message)).encode(env)
}

/// A float that encodes as an Erlang float when finite and as `:nan`, `:infinity` or
/// `:neg_infinity` otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Num(pub f64);

impl Encoder for Num {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let v = self.0;
        if v.is_finite() {
            v.encode(env)
        } else if v.is_nan() {
            nan().encode(env)
        } else if v > 0.0 {
            infinity().encode(env)
        } else {
            neg_infinity().encode(env)
        }
    }
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

/// `[{name, tensor}]`.
pub fn named<'a>(env: Env<'a>, ts: Vec<(String, Tensor)>) -> Term<'a> {
    ts.into_iter()
        .map(|(n, t)| (n, tensor(env, t)))
        .collect::<Vec<_>>()
        .encode(env)
}

/// A shape as an Nx tuple.
pub fn shape<'a>(env: Env<'a>, dims: &[usize]) -> Term<'a> {
    let terms: Vec<Term> = dims.iter().map(|d| d.encode(env)).collect();
    rustler::types::tuple::make_tuple(env, &terms)
}

/// A map with atom keys.
pub fn map<'a>(env: Env<'a>, pairs: &[(Term<'a>, Term<'a>)]) -> Result<Term<'a>> {
    Term::map_from_pairs(env, pairs).map_err(|_| Error::Execution("duplicate map keys".into()))
}
