//! The CPU compute threads. Burn's CPU backend runs its GEMMs and element-wise kernels on
//! rayon's global pool, one thread per core. Inside the BEAM those threads share the cores with
//! the schedulers; started through [`init`], they run under Linux's `SCHED_IDLE` policy (nice 19
//! where that is not permitted), so that a scheduler thread that wakes up preempts them at once
//! and a long matmul does not delay every Erlang process on the node
//! (`test/ex_burn/resources_test.exs` measures it). They still take every cycle nothing else
//! wants: on a machine busy with other work, ExBurn's CPU ops get what is left.

/// Builds rayon's global pool with ExBurn's compute threads. Call it before any CPU op (the
/// NIF does at load); `false` when the global pool already exists (it is then used as is).
pub fn init() -> bool {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("ex_burn-cpu-{i}"))
        .start_handler(|_| lower_priority())
        .build_global()
        .is_ok()
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // SAFETY: gettid has no arguments; sched_param is plain data (all-zero is valid);
    // sched_setscheduler with a thread id changes the policy of that thread only.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::pid_t;
        // Zeroed, then the priority: musl's sched_param has more fields than glibc's.
        let mut param: libc::sched_param = std::mem::zeroed();
        param.sched_priority = 0;
        if libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) != 0 {
            // Not permitted (e.g. by a seccomp profile): the lowest niceness instead.
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
        }
    }
}

// Elsewhere the threads keep the default priority (setpriority would change the whole
// process on macOS).
#[cfg(not(target_os = "linux"))]
fn lower_priority() {}
