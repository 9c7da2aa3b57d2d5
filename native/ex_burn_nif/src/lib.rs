//! Erlang NIF bindings of ExBurn: the only crate that knows Erlang terms. Each NIF decodes
//! its arguments (`decode`), calls `ex_burn_core` inside a panic guard, and encodes the result
//! as `{:ok, value}` or `{:error, {kind, message}}` (`reply`).
//!
//! Scheduling by cost class: metadata NIFs run on normal schedulers; the data and compute NIFs
//! come in three flavours (`name`, `name_cpu`, `name_io`) for normal, dirty-CPU and dirty-IO
//! schedulers, chosen on the Elixir side by device and size.

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
