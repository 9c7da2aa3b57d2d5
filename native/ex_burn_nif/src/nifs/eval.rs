//! Running ops (eager: a one-instruction program) and compiled programs.

use crate::decode;
use crate::resource::{devices, ProgramRes};
use crate::sched::{self, Class, Here};
use crate::{args, reply};
use ex_burn_core::program::HookSink;
use ex_burn_core::{cancel, guard, Program};
use rustler::{Encoder, Env, LocalPid, ResourceArc, Term};

rustler::atoms! { ex_burn_hook }
use ex_burn_core::Device;
use std::time::{Duration, Instant};

/// `(op, inputs, device)`: runs one op; creation ops place their result on `device`, the
/// others run where their inputs are. Small host ops answer on the normal scheduler.
pub fn eval_op<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            // Long input lists and op terms too large to decode here are decoded on a dirty
            // scheduler.
            if args::many(a[1]) {
                return Ok((None, sched::Class::DirtyCpu));
            }
            let inputs = args::tensors(a[1])?;
            let device = args::device(a[2])?;
            let on = inputs.first().map_or(device, |t| t.device());
            let Some(op) = decode::op(a[0])? else {
                return Ok((Some((None, inputs, device)), sched::Class::DirtyCpu));
            };
            let work = op
                .plan(&inputs)
                .map(|p| p.work)
                .map_err(|e| e.in_op(&op.name()))?;
            Ok((Some((Some(op), inputs, device)), sched::by_cost(on, work)))
        },
        |decoded| {
            let (op, inputs, device) = match decoded {
                Some(decoded) => decoded,
                None => (None, args::tensors(a[1])?, args::device(a[2])?),
            };
            let op = match op {
                Some(op) => op,
                None => decode::decode(a[0], "op")?,
            };
            let touched = devices(&inputs, [device]);
            let out = guard::exclusive(&touched, || {
                ex_burn_core::program::eval(&op, &inputs, device)
            })?;
            Ok(reply::tensors(env, out))
        },
    )
}

/// `(program, constants)`: decodes and validates a program, attaches its constant tensors
/// (kept with it) and returns a handle to run it many times. Programs can be large: always
/// on a dirty scheduler.
pub fn program_build<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::always(env, a, here, Class::DirtyCpu, || {
        let p: Program = decode::decode(a[0], "program")?;
        let p = p.with_constants(args::tensors(a[1])?)?;
        Ok(ResourceArc::new(ProgramRes::new(p)).encode(env))
    })
}

/// `(program, inputs, device, timeout, hooks)`: runs a program and returns
/// `{outputs, hook_log}`; `timeout` (milliseconds or `nil`) stops it with a `cancelled` error
/// once passed. With `hooks` a pid, each hook's values are sent to it as the program reaches the
/// hook, `{:ex_burn_hook, id, [tensor]}` (the log is then empty); with `nil` they come back in
/// the log. Programs (loops, long chains) always run on a dirty scheduler.
pub fn program_run<'a>(env: Env<'a>, a: &[Term<'a>], here: Here) -> Term<'a> {
    sched::run(
        env,
        a,
        here,
        || {
            let device = args::device(a[2])?;
            // a long input list is decoded there, on the device's dirty scheduler
            let class = match args::first(a[1]) {
                Some(t) => sched::compute(args::tensor(t)?.device()),
                None => sched::compute(device),
            };
            let quick = match class {
                Class::DirtyCpu => quick_elements(a, device)?,
                _ => None,
            };
            let class = match quick {
                Some((_, true, _)) => Class::Normal,
                _ => class,
            };
            let decoded = quick.map(|(elements, _, inputs)| (elements, inputs));
            Ok(((device, decoded), class))
        },
        |(device, decoded)| {
            let p = args::program(a[0])?;
            // the inputs `quick_elements` decoded, else decoded here
            let (recorded, inputs) = match decoded {
                Some((elements, inputs)) => (Some(elements), inputs),
                None => (None, args::tensors(a[1])?),
            };
            let timeout: Option<u64> = args::get(a[3], "timeout (milliseconds or nil)")?;
            let hooks = args::opt_pid(a[4])?;
            let touched = devices(
                &inputs,
                p.program.constant_devices().into_iter().chain([device]),
            );
            let started = Instant::now();
            let (out, log) = cancel::within(timeout.map(Duration::from_millis), || {
                guard::exclusive(&touched, || match hooks {
                    Some(pid) => {
                        let out = p
                            .program
                            .run_streaming(inputs, device, hook_sender(env, pid))?;
                        Ok((out, vec![]))
                    }
                    None => match p.program.run_small(&inputs, device)? {
                        Some(out) => Ok((out, vec![])),
                        None => p.program.run_hooked(inputs, device),
                    },
                })
            })?;
            if let Some(elements) = recorded {
                p.quick.record(elements, started.elapsed());
            }
            let log: Vec<Term> = log
                .into_iter()
                .map(|(id, values)| (id, reply::tensors(env, values)).encode(env))
                .collect();
            Ok((reply::tensors(env, out), log).encode(env))
        },
    )
}

/// For a host run of a program of tensor ops only, without a timeout or hooks, over a short
/// list of host tensors: its input elements, whether it may run on a normal scheduler (see
/// [`ex_burn_core::quick::Quick`]) and the inputs (decoded once for the run); `None` for
/// other runs, which record nothing.
fn quick_elements(
    a: &[Term],
    device: Device,
) -> ex_burn_core::Result<Option<(u64, bool, Vec<ex_burn_core::Tensor>)>> {
    if !device.is_host() || !args::is_nil(a[3]) || !args::is_nil(a[4]) || args::many(a[1]) {
        return Ok(None);
    }
    let p = args::program(a[0])?;
    if !p.program.straight_line() || p.program.constant_devices().iter().any(|d| !d.is_host()) {
        return Ok(None);
    }
    let inputs = args::tensors(a[1])?;
    if inputs.iter().any(|t| !t.device().is_host()) {
        return Ok(None);
    }
    let elements = inputs.iter().map(|t| t.numel() as u64).sum();
    Ok(Some((elements, p.quick.allows(elements), inputs)))
}

/// Sends each hook's values to `pid` as `{:ex_burn_hook, id, [tensor]}` from the calling
/// process's environment `env` (the only way a dirty scheduler thread may send); a receiver that
/// is gone stops the program (its caller is waiting for the hooks it would run). The sink must
/// only be used during this NIF call, on its thread: `Program::run_streaming` drops it before
/// returning.
fn hook_sender(env: Env<'_>, pid: LocalPid) -> HookSink {
    let raw = env.as_c_arg();
    Box::new(move |id, values| {
        let lifetime = ();
        // SAFETY: `raw` is the environment of the NIF call that runs the program, valid for
        // the whole call, and the sink runs only inside that run, on the call's thread.
        let env = unsafe { Env::new(&lifetime, raw) };
        env.send(&pid, (ex_burn_hook(), id, reply::tensors(env, values)))
            .map_err(|_| {
                ex_burn_core::Error::Cancelled("the process running the hooks is gone".into())
            })
    })
}

/// `()`: the op vocabulary (`ex_burn_core::vocabulary`) as `[{family, name, facts}]`, facts a
/// map of the facts that differ from the plain ones; what `lib/ex_burn/op/table.eterm` holds,
/// which the Elixir side checks against it.
pub fn op_table<'a>(env: Env<'a>, _a: &[Term<'a>], _here: Here) -> Term<'a> {
    reply::run(env, || {
        let atom = |s: &str| {
            rustler::Atom::from_str(env, s)
                .map_err(|_| ex_burn_core::Error::Execution(format!("bad atom {s}")))
        };
        let out = ex_burn_core::vocabulary::entries()
            .iter()
            .map(|e| {
                let pairs = e
                    .fact_pairs()
                    .into_iter()
                    .map(|(k, v)| Ok((atom(k)?.encode(env), atom(v)?.encode(env))))
                    .collect::<ex_burn_core::Result<Vec<_>>>()?;
                let facts = reply::map(env, &pairs)?;
                Ok((atom(e.family)?, atom(&e.name)?, facts))
            })
            .collect::<ex_burn_core::Result<Vec<_>>>()?;
        Ok(out.encode(env))
    })
}
