//! The CPU compute threads. Burn's CPU backend and ExBurn's host kernels run their GEMMs and
//! element-wise loops on rayon's global pool, one thread per core. Inside the BEAM those threads
//! share the cores with the schedulers; started through [`init`], they run under Linux's
//! `SCHED_BATCH` policy at nice 19 (nice 19 alone where the policy is not permitted): the lowest
//! share of a contended core, and no wakeup preemption of a running scheduler, so that a long
//! matmul does not delay every Erlang process on the node (`test/ex_burn/resources_test.exs`
//! measures it). They still take every cycle nothing else wants.
//!
//! `SCHED_IDLE`, used before, kept a pinging process's extra latency lowest (p99 ~1 ms during an
//! 8192^2 matmul, against 1-3 ms now) but cost throughput when the node was otherwise quiet:
//! the CPU MLP training step of `bench/cpu_peers.exs` took 17.5-20.3 ms against 14.4-16.6 ms at
//! nice 19 or nice 0, alternating in one session on a 2-core AMD EPYC VM (2026-11-27). Normal
//! priority without these settings delayed the pings by 137 ms.

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
    // sched_setscheduler and setpriority with a thread id change that thread only.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::pid_t;
        // Zeroed, then the priority: musl's sched_param has more fields than glibc's.
        let mut param: libc::sched_param = std::mem::zeroed();
        param.sched_priority = 0;
        // Not permitted (e.g. by a seccomp profile): the thread keeps SCHED_OTHER.
        let _ = libc::sched_setscheduler(tid, libc::SCHED_BATCH, &param);
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
    }
}

// Elsewhere the threads keep the default priority (setpriority would change the whole
// process on macOS).
#[cfg(not(target_os = "linux"))]
fn lower_priority() {}
