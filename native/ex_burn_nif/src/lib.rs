//! Erlang NIF bindings of ExBurn: the only crate that knows Erlang terms. Each NIF decodes
//! its arguments (`decode`), calls `ex_burn_core` inside a panic guard, and encodes the result
//! as `{:ok, value}` or `{:error, {kind, message}}` (`reply`).
//!
//! Scheduling by cost class: metadata NIFs run on normal schedulers; the data and compute NIFs
//! come in three flavours (`name`, `name_cpu`, `name_io`) for normal, dirty-CPU and dirty-IO
//! schedulers, chosen on the Elixir side by device and size.

/// mimalloc for everything Rust allocates in the NIF. Training allocates and frees
/// multi-megabyte tensors every step; glibc malloc serves those with fresh mmaps (page faults on
/// every step) and ran a CPU training step 1.5-2.7x slower inside the BEAM
/// (bench/results/training_cpu.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod decode;
mod encode;
mod nifs;
mod reply;
mod resource;

fn load(_env: rustler::Env, _info: rustler::Term) -> bool {
    // Install the panic hook now so the first guarded call does not race to install it.
    let _ = ex_burn_core::guard(|| Ok(()));
    true
}

rustler::init!("Elixir.ExBurn.Nif", load = load);
