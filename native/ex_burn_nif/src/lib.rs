//! Erlang NIF bindings of ExBurn: the only crate that knows Erlang terms. Each NIF decodes
//! its arguments (`args` for fixed-shape terms, `decode` for ops, programs and specs), calls
//! `ex_burn_core` inside a panic guard, and encodes the result as `{:ok, value}` or
//! `{:error, {kind, message}}` (`reply`). Every NIF starts on a normal scheduler and moves
//! itself to a dirty one when its work is costly (`sched`).

/// mimalloc for everything Rust allocates in the NIF. Training allocates and frees
/// multi-megabyte tensors every step; glibc malloc serves those with fresh mmaps (page faults on
/// every step) and ran a CPU training step 1.5-2.7x slower inside the BEAM
/// (bench/results/training_cpu.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod args;
mod decode;
mod encode;
mod nifs;
mod reply;
mod resource;
mod sched;

fn load(_env: rustler::Env, _info: rustler::Term) -> bool {
    // Install the panic hook now so the first guarded call does not race to install it.
    let _ = ex_burn_core::guard(|| Ok(()));
    // CPU compute threads below the schedulers' priority, before any op can start the pool.
    ex_burn_core::threads::init();
    true
}

rustler::init!("Elixir.ExBurn.Nif", load = load);
