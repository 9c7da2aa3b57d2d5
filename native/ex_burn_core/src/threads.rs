//! The CPU compute threads. Burn's CPU backend and ExBurn's host kernels run their GEMMs and
//! element-wise loops on rayon's global pool, one thread per core. Inside the BEAM those threads
//! share the cores with the schedulers; started through [`init`], they run under Linux's
//! `SCHED_BATCH` policy at nice 19 with a 0.1 ms time slice (`sched_setattr`'s custom slice,
//! Linux >= 6.12; older kernels keep the default slice): the lowest share of a contended core,
//! no wakeup preemption of a running scheduler, and a core handed back within 0.1 ms to a
//! scheduler that wakes up, so that a long matmul does not delay every Erlang process on the
//! node (`test/ex_burn/resources_test.exs` measures it). They still take every cycle nothing
//! else wants.
//!
//! ExBurn's own parallel loops run on the calling thread and these threads together
//! ([`for_each_claimed`]: items claimed from a shared counter, so nothing waits for a thread
//! still waking), and a thread that finished a loop watches briefly for the next one
//! (`team`) instead of going back to sleep between a program's loops.
//!
//! Why this policy: at normal priority a long matmul delays the schedulers' wake-ups by a
//! whole time slice of every compute thread; `SCHED_IDLE` keeps them prompt but starves the
//! compute threads whenever anything else runs (a slower training step on a quiet node);
//! `SCHED_BATCH` at nice 19 keeps most of both, and the short slice bounds the worst delays
//! (measurements: `bench/results/cpu_peers.md`).

mod claim;
mod team;

pub(crate) use claim::{for_each_chunk_mut, for_each_claimed, map_claimed};

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
    /// Linux's `struct sched_attr` (its first version, 48 bytes).
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }
    // SAFETY: gettid has no arguments; sched_param and SchedAttr are plain data (all-zero
    // sched_param is valid) that outlive the calls; sched_setscheduler, setpriority and
    // sched_setattr with a thread id change that thread only and only read their arguments.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::pid_t;
        // Zeroed, then the priority: musl's sched_param has more fields than glibc's.
        let mut param: libc::sched_param = std::mem::zeroed();
        param.sched_priority = 0;
        // Not permitted (e.g. by a seccomp profile): the thread keeps SCHED_OTHER.
        let _ = libc::sched_setscheduler(tid, libc::SCHED_BATCH, &param);
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
        // The same policy and nice level with a 0.1 ms slice (the kernel's minimum); refused
        // or ignored by kernels without custom slices, which keep the settings above.
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_BATCH as u32,
            flags: 0,
            nice: 19,
            priority: 0,
            runtime: 100_000,
            deadline: 0,
            period: 0,
        };
        let _ = libc::syscall(
            libc::SYS_sched_setattr,
            tid,
            &attr as *const SchedAttr,
            0u32,
        );
    }
}

// Elsewhere the threads keep the default priority (setpriority would change the whole
// process on macOS).
#[cfg(not(target_os = "linux"))]
fn lower_priority() {}
