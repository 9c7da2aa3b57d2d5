//! Model checkpoints and safetensors files: reading and writing (dirty IO).

use crate::args::{self, Source};
use crate::reply;
use crate::resource::{ModelRes, TensorRes};
use crate::sched::{self, Class, Here};
use ex_burn_core::files;
use ex_burn_core::train::checkpoint;
use ex_burn_core::{guard, Result, Tensor};
use rustler::{Encoder, Env, ResourceArc, Term};
use std::path::Path;

fn bytes_of(source: Source<'_>) -> Result<std::borrow::Cow<'_, [u8]>> {
    Ok(match source {
        Source::Path(p) => std::borrow::Cow::Owned(files::read_regular(Path::new(&p))?),
        Source::Bytes(b) => std::borrow::Cow::Borrowed(b.as_slice()),
    })
}

/// `({:path, p} | {:bytes, b}, device)`: a model saved by `Model.save/2`.
pub fn model_load<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyIo, || {
        let dev = args::device(a[1])?;
        let bytes = bytes_of(args::source(a[0])?)?;
        let model = guard::exclusive(&[dev], || checkpoint::from_bytes(&bytes, dev))?;
        Ok(ResourceArc::new(ModelRes::new(model)).encode(env))
    })
}

/// `([{name, tensor}], path, [{key, value}])`: writes a safetensors file atomically.
pub fn tensors_save<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyIo, || {
        let tensors: Vec<(String, ResourceArc<TensorRes>)> =
            args::get(a[0], "tensors (expected [{name, tensor}])")?;
        let path: String = args::get(a[1], "path")?;
        let metadata: Vec<(String, String)> =
            args::get(a[2], "metadata (expected [{string, string}])")?;
        let ts: Vec<(String, Tensor)> = tensors
            .iter()
            .map(|(n, t)| Ok((n.clone(), t.get()?)))
            .collect::<Result<_>>()?;
        let on: Vec<_> = ts.iter().map(|(_, t)| t.device()).collect();
        let bytes = guard::exclusive(&on, || {
            files::tensors_to_bytes(&ts, metadata.into_iter().collect())
        })?;
        files::write_atomic(Path::new(&path), &bytes)?;
        Ok(rustler::types::atom::ok().encode(env))
    })
}

/// `({:path, p} | {:bytes, b}, device)`: `{[{name, tensor}], [{key, value}]}` of a
/// safetensors file.
pub fn tensors_load<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyIo, || {
        let dev = args::device(a[1])?;
        let bytes = bytes_of(args::source(a[0])?)?;
        let (ts, meta) = guard::exclusive(&[dev], || files::tensors_from_bytes(&bytes, dev))?;
        let meta: Vec<(String, String)> = meta.into_iter().collect();
        Ok((reply::named(env, ts), meta).encode(env))
    })
}
