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
mod held;
mod nifs;
mod reply;
mod resource;
mod sched;
mod watch;

extern "C" {
    // mimalloc's option setter, from the library libmimalloc-sys links (its Rust binding is
    // behind the crate's `extended` feature).
    fn mi_option_set(option: std::os::raw::c_int, value: std::os::raw::c_long);
}

/// `mi_option_purge_delay` in `mi_option_e` (mimalloc.h, the same in mimalloc v2 and v3).
const MI_OPTION_PURGE_DELAY: std::os::raw::c_int = 15;

/// How long freed memory stays mapped before mimalloc returns it to the OS. mimalloc's 10 ms
/// is shorter than a training step: every step's multi-megabyte tensors came back as fresh
/// pages that the kernel zeroed (a quarter of a CPU MLP step's time); one second keeps them
/// across steps and still returns memory soon after the work stops.
const PURGE_DELAY_MS: std::os::raw::c_long = 1000;

fn load(_env: rustler::Env, _info: rustler::Term) -> bool {
    // SAFETY: a plain setter of a global option, valid at any time.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    // Install the panic hook now so the first guarded call does not race to install it.
    let _ = ex_burn_core::guard(|| Ok(()));
    // CPU compute threads below the schedulers' priority, before any op can start the pool.
    ex_burn_core::threads::init();
    // an exit with GPU work in flight waits for it before the GPU libraries shut down
    ex_burn_core::exit::install();
    // ExBurn's CUDA kernels (cuBLAS, fused kernels, ...) behind the engine's device-kernel seam
    #[cfg(feature = "cuda")]
    ex_burn_cuda::install();
    true
}

rustler::init!("Elixir.ExBurn.Nif", load = load);
