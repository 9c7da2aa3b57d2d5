//! Native training: models live in a resource; every step, epoch, evaluation or prediction
//! is one call on a dirty scheduler (dirty CPU for host devices, dirty IO for GPUs).

use crate::resource::{ModelRes, TensorRes};
use crate::{decode, reply};
use ex_burn_core::train::checkpoint;
use ex_burn_core::train::{CompileOptions, Data, EpochOptions, Model, ModelSpec, Stats};
use ex_burn_core::{Error, Result, Tensor};
use rustler::{Binary, Encoder, Env, LocalPid, NewBinary, ResourceArc, Term};
use serde::Deserialize;

rustler::atoms! { loss, accuracy, samples, steps, seconds, forward_ms, backward_ms, optimizer_ms, ex_burn_progress, device, frozen, shapes, params }

type M = ResourceArc<ModelRes>;
type Refs = Vec<ResourceArc<TensorRes>>;
type Target = Option<ResourceArc<TensorRes>>;

/// Declares a model NIF in a dirty-CPU and a dirty-IO flavour sharing one body.
macro_rules! dirty {
    ($body:path, $cpu:ident, $io:ident, ($($arg:ident : $ty:ident $(<$lt:lifetime>)?),*)) => {
        #[rustler::nif(schedule = "DirtyCpu")]
        fn $cpu<'a>(env: Env<'a>, $($arg: $ty $(<$lt>)?),*) -> Term<'a> {
            $body(env, $($arg),*)
        }

        #[rustler::nif(schedule = "DirtyIo")]
        fn $io<'a>(env: Env<'a>, $($arg: $ty $(<$lt>)?),*) -> Term<'a> {
            $body(env, $($arg),*)
        }
    };
}

fn data(inputs: &Refs, target: &Target) -> Result<Data> {
    Ok(Data {
        inputs: inputs.iter().map(|r| r.get()).collect::<Result<_>>()?,
        target: target.as_ref().map(|t| t.get()).transpose()?,
    })
}

fn stats<'a>(env: Env<'a>, s: &Stats) -> Result<Term<'a>> {
    let mut pairs = vec![
        (loss().encode(env), s.loss.encode(env)),
        (samples().encode(env), s.samples.encode(env)),
        (steps().encode(env), s.steps.encode(env)),
        (seconds().encode(env), s.seconds.encode(env)),
    ];
    if let Some(a) = s.accuracy {
        pairs.push((accuracy().encode(env), a.encode(env)));
    }
    Term::map_from_pairs(env, &pairs).map_err(|_| Error::Execution("map".into()))
}

fn named<'a>(env: Env<'a>, ts: Vec<(String, Tensor)>) -> Term<'a> {
    ts.into_iter()
        .map(|(n, t)| (n, reply::tensor(env, t)))
        .collect::<Vec<_>>()
        .encode(env)
}

/// Builds a model from a spec and training options on a device.
#[rustler::nif(schedule = "DirtyCpu")]
fn model_new<'a>(env: Env<'a>, spec: Term<'a>, options: Term<'a>, dev: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        let spec: ModelSpec = decode::decode(spec, "model spec")?;
        let options: CompileOptions = decode::decode(options, "compile options")?;
        let model = Model::new(spec, options, decode::device(dev)?)?;
        Ok(ResourceArc::new(ModelRes::new(model)).encode(env))
    })
}

/// `%{shapes: [...], params: [[{name, shape}]]}` of a spec, without building it.
#[rustler::nif]
fn spec_info<'a>(env: Env<'a>, spec: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        let spec: ModelSpec = decode::decode(spec, "model spec")?;
        let s = spec.infer_shapes()?;
        let p: Vec<Vec<(String, Vec<usize>)>> = (0..spec.layers.len())
            .map(|i| {
                spec.params_of(i, &s)
                    .into_iter()
                    .map(|(n, sh)| (n.to_string(), sh))
                    .collect()
            })
            .collect();
        Term::map_from_pairs(
            env,
            &[
                (shapes().encode(env), s.encode(env)),
                (params().encode(env), p.encode(env)),
            ],
        )
        .map_err(|_| Error::Execution("map".into()))
    })
}

fn train_step<'a>(env: Env<'a>, m: M, inputs: Refs, target: Target, lr: f64) -> Term<'a> {
    reply::run(env, || {
        let d = data(&inputs, &target)?;
        Ok(m.with(|model| model.train_step(&d, lr))?.encode(env))
    })
}
dirty!(train_step, model_train_step_cpu, model_train_step_io, (m: M, inputs: Refs, target: Target, lr: f64));

/// Epoch options as Elixir sends them.
#[derive(Deserialize)]
struct EpochOpts {
    batch_size: usize,
    #[serde(default)]
    shuffle: Option<u64>,
    #[serde(default)]
    lrs: Vec<f64>,
    #[serde(default)]
    accumulate: usize,
    #[serde(default)]
    progress_every: usize,
    #[serde(default = "counts_accuracy")]
    accuracy: bool,
}

/// Epochs count correct predictions unless told not to.
fn counts_accuracy() -> bool {
    true
}

fn train_epoch<'a>(
    env: Env<'a>,
    m: M,
    inputs: Refs,
    target: Target,
    opts: Term<'a>,
    pid: Term<'a>,
) -> Term<'a> {
    reply::run(env, || {
        let d = data(&inputs, &target)?;
        let o: EpochOpts = decode::decode(opts, "epoch options")?;
        let opts = EpochOptions {
            batch_size: o.batch_size,
            shuffle: o.shuffle,
            lrs: o.lrs,
            accumulate: o.accumulate,
            progress_every: o.progress_every,
            accuracy: o.accuracy,
        };
        let pid: Option<LocalPid> = pid.decode().ok();
        let mut progress = |done: usize, total: usize, l: f64| {
            if let Some(p) = &pid {
                let _ = env.send(p, (ex_burn_progress(), done, total, l));
            }
        };
        let s = m.with(|model| model.train_epoch(&d, &opts, &mut progress))?;
        stats(env, &s)
    })
}
dirty!(train_epoch, model_train_epoch_cpu, model_train_epoch_io, (m: M, inputs: Refs, target: Target, opts: Term<'a>, pid: Term<'a>));

fn evaluate<'a>(
    env: Env<'a>,
    m: M,
    inputs: Refs,
    target: Target,
    batch_size: usize,
    accuracy: bool,
) -> Term<'a> {
    reply::run(env, || {
        let d = data(&inputs, &target)?;
        let s = m.with(|model| model.evaluate(&d, batch_size, accuracy))?;
        stats(env, &s)
    })
}
dirty!(evaluate, model_evaluate_cpu, model_evaluate_io, (m: M, inputs: Refs, target: Target, batch_size: usize, accuracy: bool));

fn predict<'a>(env: Env<'a>, m: M, inputs: Refs, batch_size: usize) -> Term<'a> {
    reply::run(env, || {
        let d = data(&inputs, &None)?;
        Ok(reply::tensor(
            env,
            m.with(|model| model.predict(&d.inputs, batch_size))?,
        ))
    })
}
dirty!(predict, model_predict_cpu, model_predict_io, (m: M, inputs: Refs, batch_size: usize));

fn gradients<'a>(env: Env<'a>, m: M, inputs: Refs, target: Target) -> Term<'a> {
    reply::run(env, || {
        let d = data(&inputs, &target)?;
        Ok(named(env, m.with(|model| model.compute_gradients(&d))?))
    })
}
dirty!(gradients, model_gradients_cpu, model_gradients_io, (m: M, inputs: Refs, target: Target));

fn profile<'a>(env: Env<'a>, m: M, inputs: Refs, target: Target, lr: f64) -> Term<'a> {
    reply::run(env, || {
        let d = data(&inputs, &target)?;
        let p = m.with(|model| model.profile_step(&d, lr))?;
        Term::map_from_pairs(
            env,
            &[
                (forward_ms().encode(env), p.forward_ms.encode(env)),
                (backward_ms().encode(env), p.backward_ms.encode(env)),
                (optimizer_ms().encode(env), p.optimizer_ms.encode(env)),
            ],
        )
        .map_err(|_| Error::Execution("map".into()))
    })
}
dirty!(profile, model_profile_step_cpu, model_profile_step_io, (m: M, inputs: Refs, target: Target, lr: f64));

/// What a model-level operation does; one NIF dispatches them (all cheap or I/O bound).
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Request {
    Parameters,
    Info,
    Freeze(Vec<String>),
    Unfreeze(Vec<String>),
    Clone,
    ToDevice(ex_burn_core::Device),
    Cast(ex_burn_core::DType),
    Save(String),
    Serialize,
    Meta,
    SetOptimizer(ex_burn_core::train::optim::OptimConfig),
}

/// Parameters, info, freezing, copies, device moves, casts and saving, by request.
#[rustler::nif(schedule = "DirtyIo")]
fn model_call<'a>(env: Env<'a>, m: M, request: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        let req: Request = decode::decode(request, "model request")?;
        Ok(match req {
            Request::Parameters => named(env, m.with(|model| model.parameters())?),
            Request::Info => {
                let (dev, st, fr) =
                    m.with(|model| Ok((model.device(), model.steps(), model.frozen_layers())))?;
                Term::map_from_pairs(
                    env,
                    &[
                        (device().encode(env), reply::device(env, dev)),
                        (steps().encode(env), st.encode(env)),
                        (frozen().encode(env), fr.encode(env)),
                    ],
                )
                .map_err(|_| Error::Execution("map".into()))?
            }
            Request::Freeze(names) => {
                m.with(|model| model.freeze(&names))?;
                rustler::types::atom::ok().encode(env)
            }
            Request::Unfreeze(names) => {
                m.with(|model| {
                    model.unfreeze(&names);
                    Ok(())
                })?;
                rustler::types::atom::ok().encode(env)
            }
            Request::Clone => {
                ResourceArc::new(ModelRes::new(m.with(|model| Ok(model.clone()))?)).encode(env)
            }
            Request::ToDevice(d) => {
                ResourceArc::new(ModelRes::new(m.with(|model| model.to_device(d))?)).encode(env)
            }
            Request::Cast(t) => {
                ResourceArc::new(ModelRes::new(m.with(|model| model.cast(t))?)).encode(env)
            }
            Request::Save(path) => {
                m.with(|model| checkpoint::save(model, std::path::Path::new(&path)))?;
                rustler::types::atom::ok().encode(env)
            }
            Request::Meta => {
                m.with(|model| crate::encode::encode(env, &(&model.spec, &model.options)))?
            }
            Request::SetOptimizer(c) => {
                m.with(|model| model.set_optimizer(c))?;
                rustler::types::atom::ok().encode(env)
            }
            Request::Serialize => {
                let bytes = m.with(|model| checkpoint::to_bytes(model))?;
                NewBinary::from_slice(env, &bytes).into()
            }
        })
    })
}

/// Replaces parameters by name.
#[rustler::nif(schedule = "DirtyIo")]
fn model_set_parameters<'a>(
    env: Env<'a>,
    m: M,
    params: Vec<(String, ResourceArc<TensorRes>)>,
) -> Term<'a> {
    reply::run(env, || {
        let ps: Vec<(String, Tensor)> = params
            .iter()
            .map(|(n, t)| Ok((n.clone(), t.get()?)))
            .collect::<Result<_>>()?;
        m.with(|model| model.set_parameters(&ps, None))?;
        Ok(rustler::types::atom::ok().encode(env))
    })
}

/// Loads a model from a file (path) or from bytes (binary) onto a device.
#[rustler::nif(schedule = "DirtyIo")]
fn model_load<'a>(env: Env<'a>, source: Term<'a>, dev: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        let dev = decode::device(dev)?;
        let model = if let Ok(path) = source.decode::<String>() {
            checkpoint::load(std::path::Path::new(&path), dev)?
        } else {
            let b: Binary = source
                .decode()
                .map_err(|_| Error::Argument("expected a path or a binary".into()))?;
            checkpoint::from_bytes(b.as_slice(), dev)?
        };
        Ok(ResourceArc::new(ModelRes::new(model)).encode(env))
    })
}

/// Writes named tensors to a safetensors file (atomically) with string metadata.
#[rustler::nif(schedule = "DirtyIo")]
fn tensors_save<'a>(
    env: Env<'a>,
    tensors: Vec<(String, ResourceArc<TensorRes>)>,
    path: String,
    metadata: Vec<(String, String)>,
) -> Term<'a> {
    reply::run(env, || {
        let ts: Vec<(String, Tensor)> = tensors
            .iter()
            .map(|(n, t)| Ok((n.clone(), t.get()?)))
            .collect::<Result<_>>()?;
        let bytes = checkpoint::tensors_to_bytes(&ts, metadata.into_iter().collect())?;
        checkpoint::write_atomic(std::path::Path::new(&path), &bytes)?;
        Ok(rustler::types::atom::ok().encode(env))
    })
}

/// Reads a safetensors file (path) or bytes (binary) into `{named tensors, metadata}`.
#[rustler::nif(schedule = "DirtyIo")]
fn tensors_load<'a>(env: Env<'a>, source: Term<'a>, dev: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        let dev = decode::device(dev)?;
        let bytes = if let Ok(path) = source.decode::<String>() {
            std::fs::read(&path).map_err(|e| Error::Io(format!("cannot read {path}: {e}")))?
        } else {
            let b: Binary = source
                .decode()
                .map_err(|_| Error::Argument("expected a path or a binary".into()))?;
            b.as_slice().to_vec()
        };
        let (ts, meta) = checkpoint::tensors_from_bytes(&bytes, dev)?;
        let meta: Vec<(String, String)> = meta.into_iter().collect();
        Ok((named(env, ts), meta).encode(env))
    })
}
