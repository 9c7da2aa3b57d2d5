//! Native training: models live in a resource; every step, epoch, evaluation or prediction is
//! one call on a dirty scheduler (dirty CPU for host devices, dirty IO for GPUs).

use crate::resource::{devices, ModelRes, TensorRes};
use crate::sched::{self, Class, Here};
use crate::{args, decode, reply};
use ex_burn_core::train::checkpoint;
use ex_burn_core::train::{
    CompileOptions, Data, EpochOptions, EvalOptions, Model, ModelSpec, StepOptions,
};
use ex_burn_core::{cancel, guard, Device, Error, Result, Tensor};
use rustler::{Encoder, Env, NewBinary, NifMap, ResourceArc, Term};

rustler::atoms! { ex_burn_progress, device, steps, frozen, shapes, params, ok }

type Model_ = ResourceArc<ModelRes>;

/// Runs a model call where its device's compute belongs.
fn on_model<'a>(
    env: Env<'a>,
    a: &[Term<'a>],
    here: Here,
    work: impl FnOnce(Model_) -> Result<Term<'a>>,
) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            let m = args::model(a[0])?;
            let class = sched::compute(m.device());
            Ok((m, class))
        },
        work,
    )
}

fn data(inputs: Term, target: Term) -> Result<Data> {
    Ok(Data {
        inputs: args::tensors(inputs)?,
        target: args::opt_tensor(target)?,
    })
}

/// What an epoch or an evaluation measured (floats never non-finite terms).
#[derive(NifMap)]
#[rustler(encode)]
struct StatsTerm {
    loss: reply::Num,
    accuracy: Option<reply::Num>,
    samples: u64,
    steps: u64,
    seconds: reply::Num,
    skipped: u64,
    stopped: bool,
}

impl From<&ex_burn_core::train::Stats> for StatsTerm {
    fn from(s: &ex_burn_core::train::Stats) -> Self {
        StatsTerm {
            loss: reply::Num(s.loss),
            accuracy: s.accuracy.map(reply::Num),
            samples: s.samples as u64,
            steps: s.steps as u64,
            seconds: reply::Num(s.seconds),
            skipped: s.skipped as u64,
            stopped: s.stopped,
        }
    }
}

/// Phases of a profiled step.
#[derive(NifMap)]
#[rustler(encode)]
struct ProfileTerm {
    forward_ms: reply::Num,
    backward_ms: reply::Num,
    optimizer_ms: reply::Num,
}

fn size(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// `(spec, options, device)`: builds a model.
pub fn new<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            let dev = args::device(a[2])?;
            Ok((dev, sched::compute(dev)))
        },
        |dev| {
            let spec: ModelSpec = decode::decode(a[0], "model spec")?;
            let options: CompileOptions = decode::decode(a[1], "compile options")?;
            let model = guard::exclusive(&[dev], || Model::new(spec, options, dev))?;
            Ok(ResourceArc::new(ModelRes::new(model)).encode(env))
        },
    )
}

/// `(spec)`: `%{shapes: [...], params: [[{name, shape}]]}` of a spec, without building it.
pub fn spec_info<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyCpu, || {
        let spec: ModelSpec = decode::decode(a[0], "model spec")?;
        let s = spec.infer_shapes()?;
        let p: Vec<Vec<(String, Vec<usize>)>> = (0..spec.layers.len())
            .map(|i| {
                spec.params_of(i, &s)
                    .into_iter()
                    .map(|(n, sh)| (n.to_string(), sh))
                    .collect()
            })
            .collect();
        reply::map(
            env,
            &[
                (shapes().encode(env), s.encode(env)),
                (params().encode(env), p.encode(env)),
            ],
        )
    })
}

/// `(model, inputs, target, options)`: one optimizer step (`options`: a [`StepOptions`]); returns
/// `{loss, applied}`.
pub fn train_step<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    on_model(env, a, here, |m| {
        let d = data(a[1], a[2])?;
        let o: StepOptions = decode::decode(a[3], "step options")?;
        let step = m.update(&d.devices(), |model| {
            model.train_step(&d, o.learning_rate, o.on_non_finite)
        })?;
        Ok((reply::Num(step.loss), step.applied).encode(env))
    })
}

/// `(model, inputs, target, options, validation, progress_pid, copies)`: one epoch
/// (`options`: an [`EpochOptions`]; with `check_inputs`, the data and `validation`,
/// `{inputs, target}` or `nil`, are checked for NaN and infinities first); progress messages
/// `{:ex_burn_progress, done, total, loss}` go to the pid when it is not `nil`; `copies`: the
/// data on each other device of the options' `devices`, a list of `{inputs, target}` (empty:
/// the epoch copies it).
pub fn train_epoch<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    on_model(env, a, here, |m| {
        let d = data(a[1], a[2])?;
        let o: EpochOptions = decode::decode(a[3], "epoch options")?;
        let validation = if args::is_nil(a[4]) {
            None
        } else {
            let (i, t): (Term, Term) = args::get(a[4], "validation data")?;
            Some(data(i, t)?)
        };
        let pid = args::opt_pid(a[5])?;
        let copies = args::get::<Vec<(Term, Term)>>(a[6], "data copies")?
            .into_iter()
            .map(|(i, t)| data(i, t))
            .collect::<Result<Vec<_>>>()?;
        let mut progress = |done: usize, total: usize, l: f64| {
            if let Some(p) = &pid {
                let _ = env.send(p, (ex_burn_progress(), done, total, reply::Num(l)));
            }
        };
        let mut touched = d.devices();
        touched.extend(validation.iter().chain(&copies).flat_map(Data::devices));
        touched.extend_from_slice(&o.devices);
        let s = cancel::within(o.time_limit(), || {
            m.update(&touched, |model| {
                if o.check_inputs {
                    model.check_inputs(&d, validation.as_ref())?;
                }
                model.train_epoch_with(&d, &copies, &o, &mut progress)
            })
        })?;
        Ok(StatsTerm::from(&s).encode(env))
    })
}

/// `(model, inputs, target, options)`: loss (and accuracy) without training (`options`: an
/// [`EvalOptions`]).
pub fn evaluate<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    on_model(env, a, here, |m| {
        let d = data(a[1], a[2])?;
        let o: EvalOptions = decode::decode(a[3], "evaluation options")?;
        let s = m.read(&d.devices(), |model| {
            model.evaluate(&d, o.batch_size, o.accuracy)
        })?;
        Ok(StatsTerm::from(&s).encode(env))
    })
}

/// `(model, inputs, batch_size)`: the output in inference mode.
pub fn predict<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    on_model(env, a, here, |m| {
        let inputs = args::tensors(a[1])?;
        let bs: u64 = args::get(a[2], "batch size")?;
        let out = m.read(&devices(&inputs, []), |model| {
            model.predict(&inputs, size(bs))
        })?;
        Ok(reply::tensor(env, out))
    })
}

/// `(model, inputs, target)`: gradients of the loss by parameter name.
pub fn gradients<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    on_model(env, a, here, |m| {
        let d = data(a[1], a[2])?;
        Ok(reply::named(
            env,
            m.read(&d.devices(), |model| model.compute_gradients(&d))?,
        ))
    })
}

/// `(model, inputs, target, learning_rate)`: one step, timing its phases.
pub fn profile_step<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    on_model(env, a, here, |m| {
        let d = data(a[1], a[2])?;
        let lr = args::float(a[3], "learning rate")?;
        let p = m.update(&d.devices(), |model| model.profile_step(&d, lr))?;
        Ok(ProfileTerm {
            forward_ms: reply::Num(p.forward_ms),
            backward_ms: reply::Num(p.backward_ms),
            optimizer_ms: reply::Num(p.optimizer_ms),
        }
        .encode(env))
    })
}

/// What a model-level call does.
enum Request<'a> {
    Parameters,
    Info,
    Freeze(Vec<String>),
    Unfreeze(Vec<String>),
    Clone,
    ToDevice(Term<'a>),
    Cast(Term<'a>),
    Save(String),
    Serialize,
    Meta,
    SetOptimizer(Term<'a>),
}

/// `:parameters`, `:info`, `:clone`, `:serialize`, `:meta`, `{:freeze, names}`,
/// `{:unfreeze, names}`, `{:to_device, device}`, `{:cast, type}`, `{:save, path}` or
/// `{:set_optimizer, settings}`.
fn request(term: Term) -> Result<Request> {
    let names = |v: Term| args::get::<Vec<String>>(v, "layer names");
    let request = match args::tagged(term) {
        Some((tag, None)) => match tag.as_str() {
            "parameters" => Some(Request::Parameters),
            "info" => Some(Request::Info),
            "clone" => Some(Request::Clone),
            "serialize" => Some(Request::Serialize),
            "meta" => Some(Request::Meta),
            _ => None,
        },
        Some((tag, Some(v))) => match tag.as_str() {
            "freeze" => Some(Request::Freeze(names(v)?)),
            "unfreeze" => Some(Request::Unfreeze(names(v)?)),
            "to_device" => Some(Request::ToDevice(v)),
            "cast" => Some(Request::Cast(v)),
            "save" => Some(Request::Save(args::get(v, "path")?)),
            "set_optimizer" => Some(Request::SetOptimizer(v)),
            _ => None,
        },
        None => None,
    };
    request
        .ok_or_else(|| Error::Argument(format!("invalid model request: {}", args::preview(term))))
}

/// `(model, request)`: parameters, info, freezing, copies, device moves, casts and saving.
/// These wait for the model's lock (a running epoch holds it) and for files: dirty IO.
pub fn call<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyIo, || {
        let m = args::model(a[0])?;
        let req = request(a[1])?;
        let new = |model: Model| ResourceArc::new(ModelRes::new(model)).encode(env);
        Ok(match req {
            Request::Parameters => reply::named(env, m.read(&[], |model| model.parameters())?),
            Request::Info => {
                let (st, fr) = m.read(&[], |model| Ok((model.steps(), model.frozen_layers())))?;
                reply::map(
                    env,
                    &[
                        (device().encode(env), reply::device(env, m.device())),
                        (steps().encode(env), st.encode(env)),
                        (frozen().encode(env), fr.encode(env)),
                    ],
                )?
            }
            Request::Freeze(names) => {
                m.update(&[], |model| model.freeze(&names))?;
                ok().encode(env)
            }
            Request::Unfreeze(names) => {
                m.update(&[], |model| {
                    model.unfreeze(&names);
                    Ok(())
                })?;
                ok().encode(env)
            }
            Request::Clone => new(m.read(&[], |model| Ok(model.clone()))?),
            Request::ToDevice(d) => {
                let d = args::device(d)?;
                new(m.read(&[d], |model| model.to_device(d))?)
            }
            Request::Cast(t) => {
                let t = args::dtype(t)?;
                new(m.read(&[], |model| model.cast(t))?)
            }
            Request::Save(path) => {
                m.read(&[], |model| {
                    checkpoint::save(model, std::path::Path::new(&path))
                })?;
                ok().encode(env)
            }
            Request::Meta => m.read(&[], |model| {
                crate::encode::encode(env, &(&model.spec, &model.options))
            })?,
            Request::SetOptimizer(c) => {
                let c = decode::decode(c, "optimizer settings")?;
                m.update(&[], |model| model.set_optimizer(c))?;
                ok().encode(env)
            }
            Request::Serialize => {
                let bytes = m.read(&[], checkpoint::to_bytes)?;
                NewBinary::from_slice(env, &bytes).into()
            }
        })
    })
}

/// `(model, [{name, tensor}], convert)`: replaces parameters by name; types must be the
/// model's unless `convert`.
pub fn set_parameters<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyIo, || {
        let m = args::model(a[0])?;
        let params: Vec<(String, ResourceArc<TensorRes>)> =
            args::get(a[1], "parameters (expected [{name, tensor}])")?;
        let convert: bool = args::get(a[2], "convert flag")?;
        let ps: Vec<(String, Tensor)> = params
            .iter()
            .map(|(n, t)| Ok((n.clone(), t.get()?)))
            .collect::<Result<_>>()?;
        let touched: Vec<Device> = ps.iter().map(|(_, t)| t.device()).collect();
        m.update(&touched, |model| model.set_parameters(&ps, None, convert))?;
        Ok(ok().encode(env))
    })
}
