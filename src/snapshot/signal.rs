//! The inputs a verdict's evidence names: one line per signal with its label (the `input` of
//! `/api/v1/diagnosis` and the diagnose report, a public contract) and its role in the
//! attribution.

/// What a signal's evidence does once the main thread's stacks decide a kind's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A counter condition of a rule: stands only where no stacks decide (it is what the
    /// stacks, when seen, overrule).
    Condition,
    /// The starvation condition every pipeline kind shares: kept beside the observation.
    Gate,
    /// A fact that stands whatever the stacks show (the device, its link, who runs work on
    /// it, where the job is placed): its strength stands beside the observed cost.
    Standing,
    /// Names where the cost went (who else takes the disk or the CPUs, the mount or link the
    /// input or the collectives cross) without deciding whether the kind is active.
    Supporting,
    /// Seen in the main thread's stacks or measured by the attribution.
    Observed,
    /// A straggler's gap to its job's busiest GPU: the consequence of whatever slows it, so
    /// a kind resting on it alone yields to any other active kind.
    Consequence,
}

macro_rules! signals {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $role:ident;)*) => {
        /// An input a rule or the attribution weighs, named in the evidence.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Signal {
            $($(#[$doc])* $variant,)*
        }

        impl Signal {
            /// Every signal, in declaration order.
            pub const ALL: &'static [Signal] = &[$(Signal::$variant,)*];

            /// The name the evidence carries (JSON, report, goldens).
            pub fn name(self) -> &'static str {
                match self {
                    $(Signal::$variant => $name,)*
                }
            }

            /// What its evidence does beside an observed cost.
            pub fn role(self) -> Role {
                match self {
                    $(Signal::$variant => Role::$role,)*
                }
            }
        }
    };
}

signals! {
    /// The GPU's busy fraction against the starvation threshold.
    GpuBusy = "gpu_busy", Gate;
    /// A GPU that runs no work at all (not stalled between bursts).
    GpuRunsNoWork = "gpu_runs_no_work", Condition;
    /// Share of near-zero utilization samples (bursts).
    IdleShare = "idle_share", Condition;
    /// GPM SM activity.
    SmActivity = "sm_activity", Condition;
    /// Peak device memory used share.
    MemoryUsedPeak = "memory_used_peak", Condition;
    /// Busiest disk's utilization.
    DiskUtil = "disk_util", Condition;
    /// Host iowait share.
    Iowait = "iowait", Condition;
    /// Host PSI io "some" share.
    PsiIo = "psi_io", Condition;
    /// Workers waiting for block I/O (delay accounting).
    WorkersBlkio = "workers_blkio", Condition;
    /// Workers in uninterruptible wait.
    WorkersInIoWait = "workers_in_io_wait", Condition;
    /// The busiest loader worker's share of a core.
    WorkersMaxCpu = "workers_max_cpu", Condition;
    /// The main process's busiest thread, share of a core.
    BusiestThread = "busiest_thread", Condition;
    /// Host CPU busy share.
    HostCpu = "host_cpu", Condition;
    /// Share of the job's CPUs its own process trees use.
    OwnCpu = "own_cpu", Condition;
    /// CPU used outside the GPU process trees.
    OtherCpu = "other_cpu", Condition;
    /// The job's threads waiting for a CPU.
    CpuWait = "cpu_wait", Condition;
    /// The cgroup's throttled-period share.
    CgroupThrottled = "cgroup_throttled", Condition;
    /// Hypervisor steal.
    Steal = "steal", Condition;
    /// Share of ticks with a limiting throttle reason.
    ThrottledShare = "throttled_share", Condition;
    /// Degrees below the slowdown temperature.
    ThermalMarginCelsius = "thermal_margin_celsius", Condition;
    /// The GPU stopped answering.
    GpuNotAnswering = "gpu_not_answering", Condition;
    /// New XID or uncorrected ECC errors in the window.
    NewXidOrUncorrectedEcc = "new_xid_or_uncorrected_ecc", Condition;
    /// A row remap is pending or failed.
    RowRemapPendingOrFailed = "row_remap_pending_or_failed", Condition;
    /// Busy spread to the busiest GPU of the same job.
    JobBusyGap = "job_busy_gap", Consequence;
    /// Share of the time the GPU spun in NCCL collectives for its peers: its host waiting in
    /// the CUDA driver while the process issued them, at most its excess of empty-SM busy
    /// time over its job's least busy rank.
    SpunForPeers = "spun_for_peers", Observed;
    /// Share of the time a pipeline stage's GPU spun in its schedule's bubble (GPipe's and
    /// 1F1B's, from its microbatches a step) beyond the spin seen: inferred, not seen.
    PipelineBubble = "pipeline_bubble", Condition;
    /// The PCIe link trained below its maximum generation or width.
    PcieBandwidthShare = "pcie_bandwidth_share", Standing;
    /// Other jobs run work on the GPU (or, without per-process utilization, hold it).
    OtherJobsOnGpu = "other_jobs_on_gpu", Standing;
    /// Several processes of the job itself each run real work on the GPU.
    OwnProcessesShareGpu = "own_processes_share_gpu", Standing;
    /// Several processes of unknown owners on the GPU.
    ProcessesOnGpu = "processes_on_gpu", Standing;
    /// The job's threads run on another NUMA node than its GPU.
    NumaMismatch = "numa_mismatch", Standing;
    /// The node's busiest processes by CPU, outside the GPU process trees.
    BusiestCpuProcesses = "busiest_cpu_processes", Supporting;
    /// The node's busiest processes by disk bytes, outside the GPU process trees.
    BusiestDiskProcesses = "busiest_disk_processes", Supporting;
    /// The NFS mount the job reads most, with its READ round trip.
    BusiestMount = "busiest_mount", Supporting;
    /// The bytes the job's network namespace received.
    JobIngress = "job_ingress", Supporting;
    /// The network and FUSE filesystems the job has mounted.
    NetworkMounts = "network_mounts", Supporting;
    /// The node's busiest physical link.
    BusiestLink = "busiest_link", Supporting;
    /// A link slower than multi-node training needs, carrying traffic.
    SlowLink = "slow_link", Supporting;
    /// The main thread seen waiting for its loader.
    MainThreadWaitsForLoader = "main_thread_waits_for_loader", Observed;
    /// The main thread seen synchronizing with the GPU.
    MainThreadInGpuSync = "main_thread_in_gpu_sync", Observed;
    /// The main thread seen in a collective.
    MainThreadInCollective = "main_thread_in_collective", Observed;
    /// The main thread seen running the loop's own Python.
    MainThreadInPython = "main_thread_in_python", Observed;
    /// The share of the window's GPU time the attribution charges the kind.
    LostTimeShare = "lost_time_share", Observed;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signal_has_its_own_name() {
        let mut names: Vec<&str> = Signal::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Signal::ALL.len());
    }
}
