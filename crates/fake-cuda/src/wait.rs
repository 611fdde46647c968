//! How a thread waits for the GPU inside the driver, by the context's scheduling flag
//! (cuCtxCreate's `CU_CTX_SCHED_*`): what a profiler or the exporter sees of the waiting thread.

/// `CU_CTX_SCHED_AUTO`: spin while the process's contexts are no more than the logical CPUs,
/// else yield (the CUDA driver API reference, cuCtxCreate).
pub const SCHED_AUTO: u32 = 0;
/// `CU_CTX_SCHED_SPIN`: poll without giving up the CPU.
pub const SCHED_SPIN: u32 = 1;
/// `CU_CTX_SCHED_YIELD`: poll, yielding the CPU between polls.
pub const SCHED_YIELD: u32 = 2;
/// `CU_CTX_SCHED_BLOCKING_SYNC`: sleep until the GPU is done.
pub const SCHED_BLOCKING_SYNC: u32 = 4;
pub const SCHED_MASK: u32 = 7;

/// The wait a context's flags resolve to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Running (R), 100 % of a core in user mode, inside the driver.
    Spin,
    /// Running, giving the CPU to any other runnable thread between polls.
    Yield,
    /// Sleeping (S) in a poll, as the real driver sleeps on its /dev/nvidia* descriptor.
    Block,
}

impl Wait {
    /// The wait of a context created with `flags` in a process holding `contexts` contexts.
    pub fn of(flags: u32, contexts: usize) -> Wait {
        match flags & SCHED_MASK {
            SCHED_SPIN => Wait::Spin,
            SCHED_YIELD => Wait::Yield,
            SCHED_BLOCKING_SYNC => Wait::Block,
            _ if contexts <= logical_cpus() => Wait::Spin,
            _ => Wait::Yield,
        }
    }
}

/// The logical CPUs, read once (std reads the cgroup's quota files on every call).
fn logical_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// CLOCK_MONOTONIC in nanoseconds: the timeline's clock.
pub use emu_timeline::now_ns;

/// Returns once CLOCK_MONOTONIC reaches `deadline_ns`, waiting as `wait` says.
#[inline(never)]
pub fn until(deadline_ns: u64, wait: Wait) {
    loop {
        let now = now_ns();
        if now >= deadline_ns {
            return;
        }
        match wait {
            Wait::Spin => std::hint::spin_loop(),
            // SAFETY: no arguments.
            Wait::Yield => unsafe {
                libc::sched_yield();
            },
            Wait::Block => {
                let left = deadline_ns - now;
                let timeout = libc::timespec {
                    tv_sec: (left / 1_000_000_000) as libc::time_t,
                    tv_nsec: (left % 1_000_000_000) as libc::c_long,
                };
                // SAFETY: no descriptors, a valid timeout: a sleep in ppoll.
                unsafe { libc::ppoll(std::ptr::null_mut(), 0, &timeout, std::ptr::null()) };
            }
        }
    }
}

/// Host CPU work inside the driver for `nanos` (staging a pageable buffer): the thread runs.
#[inline(never)]
pub fn busy_for(nanos: u64) {
    until(now_ns() + nanos, Wait::Spin);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_spins_until_contexts_outnumber_the_cpus() {
        assert_eq!(Wait::of(SCHED_AUTO, 1), Wait::Spin);
        assert_eq!(Wait::of(SCHED_AUTO, logical_cpus() + 1), Wait::Yield);
        assert_eq!(Wait::of(SCHED_BLOCKING_SYNC, 1), Wait::Block);
        assert_eq!(Wait::of(SCHED_YIELD | 8, 1), Wait::Yield);
    }

    /// Time the calling thread ran on a CPU.
    fn ran_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    #[test]
    fn a_spin_burns_the_waiting_thread_and_a_blocking_wait_sleeps() {
        for (wait, burns) in [(Wait::Spin, true), (Wait::Block, false)] {
            let (wall, ran) = (now_ns(), ran_ns());
            until(now_ns() + 50_000_000, wait);
            let (wall, ran) = (now_ns() - wall, ran_ns() - ran);
            assert!(wall >= 50_000_000);
            // Spinning: the thread runs whenever it gets a CPU (preempted on a loaded machine,
            // CI's test binaries side by side, it still gets far more than a fiftieth of one);
            // blocking: one system call and a wake-up, microseconds — though a VM whose host
            // deschedules it then counts that time as the thread's (14 ms of 65 seen in CI).
            let verdict = if burns {
                ran > wall / 50
            } else {
                ran > wall / 3
            };
            assert_eq!(verdict, burns, "{wait:?}: ran {ran} ns in {wall} ns");
        }
    }
}
