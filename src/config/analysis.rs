//! The verdict settings: the thresholds of the rules and the attribution, the window and the
//! hysteresis, each default with why it is what it is.

use super::*;

/// Verdict settings. Each rule's condition scores 0.5 exactly at its threshold and 0.3 at 60 %
/// of the way, and 1.0 at twice the threshold (or at saturation, for a ratio bounded by 1);
/// categorical facts score by their certainty (see `analysis::score`); a kind turns active when its score stays at or
/// above `enter_score` for `min_duration`, and inactive when it stays below `leave_score` as
/// long, so bursty workloads do not flap.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// Sliding window the inputs are averaged over.
    pub window: ConfigDuration,
    /// How long a score must stay past a threshold before a verdict changes.
    pub min_duration: ConfigDuration,
    /// Score at or above which a kind may turn active.
    pub enter_score: f64,
    /// Score below which an active kind may turn inactive.
    pub leave_score: f64,
    /// Busy fraction at or below which a GPU counts as starved (SageMaker Debugger's
    /// LowGPUUtilization rule uses 70 % as its p95 threshold).
    pub gpu_starved_below: f64,
    /// Busy fraction at or above which a GPU with no bottleneck is `busy` (compute-bound).
    pub gpu_busy_above: f64,
    /// Share of near-zero utilization samples that makes a GPU's work bursty (ours: one
    /// sample in five idle is already visible as gaps in a step timeline). Evidence for
    /// sync_stall, not a condition: steps shorter than a 1/6 s sample leave no idle sample.
    pub bursty_idle_share: f64,
    /// Disk utilization that counts as saturated (iostat guidance: sustained > 80 %).
    pub disk_util_high: f64,
    /// Host iowait share that counts as storage-bound (ours: 10 % of all CPU time waiting on
    /// I/O is well above the ~1 % of a healthy node).
    pub iowait_high: f64,
    /// Host PSI io "some" share that counts as storage-bound (ours: tasks stalled on I/O a
    /// fifth of the time; the kernel's PSI documentation uses 10-20 % as pressure triggers).
    pub psi_io_high: f64,
    /// Mean number of workers blocked on I/O that counts as storage-bound (ours: half a
    /// worker waiting at any time).
    pub workers_blkio_high: f64,
    /// Share of one core at which the busiest data-loader worker counts as saturated
    /// (SageMaker Debugger's CPUBottleneck rule uses 90 % CPU).
    pub worker_cpu_high: f64,
    /// Host CPU busy share that counts as saturated (as the worker threshold: 90 %).
    pub host_cpu_high: f64,
    /// Share of one core at which the main training thread counts as pinned (host-bound; as
    /// for loader workers, 90 % of a core).
    pub main_thread_high: f64,
    /// Share of the main thread's Python stack samples spent synchronizing with the GPU that
    /// makes waiting for the GPU its business: sync_stall however busy the thread looks (CUDA
    /// spin-waits), not host_bound (ours: 40 % of the samples; a loop that waits on the GPU
    /// that often serialises on it).
    pub stack_share_high: f64,
    /// Share of the window's GPU time a cause must cost for its kind to score 0.5 where the
    /// cost is observed (stacks): twice this scores 1.0 (ours: 10 % of the GPU's time, what
    /// separates `gpu_busy_above` from full use); also the floor a kind's cost must reach to
    /// be named the primary verdict.
    pub lost_share_high: f64,
    /// Stack samples of the main thread in the window from which what they show decides the
    /// pipeline kinds (observed) instead of the counters (inferred); at the default sampling
    /// rate, about 10 s.
    pub stack_samples_min: f64,
    /// Share of the main thread's samples below which the stacks contradict a pipeline kind's
    /// premise, whatever it costs: the loader wait for the data kinds, Python for host_bound,
    /// synchronizing for sync_stall, collectives for communication, the loader wait or Python
    /// for CPU contention (ours: one sample in ten, the share from which the reasons describe
    /// an activity. An observed cost comes from the samples that show its premise, so it is
    /// no larger than their share (twice it for a sync, with the queue it drained); a higher
    /// bar only hides costs above the floor that the stacks do show).
    pub premise_share_min: f64,
    /// Below this, disk, threads, workers and host CPU count as "far from busy" (sync stalls;
    /// ours: half of the saturation thresholds above).
    pub quiet_below: f64,
    /// GPU-Util at or above which low SM activity means inefficient kernels (ours: the GPU
    /// looks busy, 80 %).
    pub kernel_util_high: f64,
    /// GPM SM activity at or below which a busy-looking GPU's SMs are mostly empty (NVIDIA's
    /// DCGM profiling guidance treats SM activity under 0.5 as poor use of the GPU).
    pub sm_activity_low: f64,
    /// Device memory used share that counts as memory pressure (the design guide's 95 %).
    pub memory_used_high: f64,
    /// Spread of busy fraction between the GPUs of one job that counts as imbalance (ours:
    /// a rank 30 points behind the busiest spends most of that time in collectives).
    pub job_imbalance: f64,
    /// cgroup throttled-period share that counts as CPU-quota contention (ours: throttled in
    /// one CFS period of ten).
    pub cgroup_throttled_high: f64,
    /// Host CPU used outside the GPU process trees that counts as contention (ours: other
    /// tenants using half the node).
    pub other_cpu_high: f64,
    /// contention: mean number of the job's threads (main thread and loader workers) waiting
    /// runnable for a CPU, below which CPU taken by others is not what holds the job back.
    pub cpu_wait_high: f64,
    /// Hypervisor steal share that counts as contention (ours: 10 %, where cloud guidance
    /// starts to call a VM noisy-neighboured).
    pub steal_high: f64,
    /// Share of the window with a limiting throttle reason active (ours: held down 30 % of
    /// the time costs more than run-to-run noise).
    pub throttled_share_high: f64,
    /// Degrees below the slowdown temperature that count as thermally limited (ours: within
    /// 3 °C the GPU is about to slow down).
    pub thermal_margin_celsius: f64,
    /// Mean NFS READ round trip, seconds, at which a starving loop's network filesystem is
    /// slow (ours: 5 ms, several times a healthy LAN round trip of under a millisecond or two).
    pub nfs_rtt_high: f64,
    /// Share of a physical link's speed, in its busier direction, at which the link is near
    /// saturation (ours: 80 %, where queues and retransmits grow).
    pub link_utilization_high: f64,
    /// Link speed in bytes per second below which a link carrying a multi-node job's
    /// collectives is named as too slow (25 Gb/s, the usual floor for multi-node training).
    pub link_speed_min: f64,
    /// How long a main thread sits in one collective, seen there in every stack sample while
    /// its GPU reads busy (NCCL's kernels spin while they wait), before the GPU is reported
    /// hung (ours: 2 minutes; a step's all-reduce takes milliseconds to seconds, and NCCL's
    /// own watchdog waits 10 minutes before it aborts).
    pub hang_after: ConfigDuration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            window: ConfigDuration(Duration::from_secs(30)),
            min_duration: ConfigDuration(Duration::from_secs(10)),
            enter_score: 0.5,
            leave_score: 0.3,
            gpu_starved_below: 0.7,
            gpu_busy_above: 0.9,
            bursty_idle_share: 0.2,
            disk_util_high: 0.8,
            iowait_high: 0.1,
            psi_io_high: 0.2,
            workers_blkio_high: 0.5,
            worker_cpu_high: 0.9,
            host_cpu_high: 0.9,
            main_thread_high: 0.9,
            stack_share_high: 0.4,
            lost_share_high: 0.1,
            stack_samples_min: 20.0,
            premise_share_min: 0.1,
            quiet_below: 0.5,
            kernel_util_high: 0.8,
            sm_activity_low: 0.5,
            memory_used_high: 0.95,
            job_imbalance: 0.3,
            cgroup_throttled_high: 0.1,
            other_cpu_high: 0.5,
            cpu_wait_high: 0.5,
            steal_high: 0.1,
            throttled_share_high: 0.3,
            thermal_margin_celsius: 3.0,
            nfs_rtt_high: 0.005,
            link_utilization_high: 0.8,
            link_speed_min: 3.125e9,
            hang_after: ConfigDuration(Duration::from_secs(120)),
        }
    }
}
