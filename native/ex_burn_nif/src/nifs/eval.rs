//! Running ops (eager: a one-instruction program) and compiled programs.

use super::{scheduled, Prog, Refs};
use crate::resource::{ProgramRes, TensorRes};
use crate::{decode, reply};
use ex_burn_core::{Op, Program, Result, Tensor};
use rustler::{Encoder, Env, ResourceArc, Term};

fn inputs(refs: &[ResourceArc<TensorRes>]) -> Result<Vec<Tensor>> {
    refs.iter().map(|r| r.get()).collect()
}

fn eval<'a>(
    env: Env<'a>,
    op: Term<'a>,
    args: Vec<ResourceArc<TensorRes>>,
    device: Term<'a>,
) -> Term<'a> {
    reply::run(env, || {
        let op: Op = decode::op(op)?;
        let device = decode::device(device)?;
        let inputs = inputs(&args)?;
        let on = inputs.first().map(|t| t.device()).unwrap_or(device);
        let out = ex_burn_core::guard::exclusive(on, || ex_burn_core::eval(&op, &inputs, device))?;
        Ok(reply::tensors(env, out))
    })
}

scheduled!(eval, eval_op, eval_op_cpu, eval_op_io,
    (op: Term<'a>, args: Refs, device: Term<'a>));

fn run<'a>(
    env: Env<'a>,
    p: ResourceArc<ProgramRes>,
    args: Vec<ResourceArc<TensorRes>>,
    device: Term<'a>,
) -> Term<'a> {
    reply::run(env, || {
        let device = decode::device(device)?;
        let inputs = inputs(&args)?;
        let on = inputs.first().map(|t| t.device()).unwrap_or(device);
        let (out, log) =
            ex_burn_core::guard::exclusive(on, || p.program.run_hooked(inputs, device))?;
        let log: Vec<Term> = log
            .into_iter()
            .map(|(id, values)| (id, reply::tensors(env, values)).encode(env))
            .collect();
        Ok((reply::tensors(env, out), log).encode(env))
    })
}

scheduled!(run, program_run, program_run_cpu, program_run_io,
    (p: Prog, args: Refs, device: Term<'a>));

/// Decodes and validates a program once; returns a handle to run it many times.
#[rustler::nif]
fn program_compile<'a>(env: Env<'a>, program: Term<'a>) -> Term<'a> {
    reply::run(env, || {
        let mut p: Program = decode::decode(program, "program")?;
        p.validate()?;
        Ok(ResourceArc::new(ProgramRes { program: p }).encode(env))
    })
}

/// Decodes and validates a program and attaches its constant tensors (uploaded once, kept
/// with the program); returns a handle to run it many times.
#[rustler::nif]
fn program_build<'a>(
    env: Env<'a>,
    program: Term<'a>,
    constants: Vec<ResourceArc<TensorRes>>,
) -> Term<'a> {
    reply::run(env, || {
        let p: Program = decode::decode(program, "program")?;
        let p = p.with_constants(inputs(&constants)?)?;
        Ok(ResourceArc::new(ProgramRes { program: p }).encode(env))
    })
}
