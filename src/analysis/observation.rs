//! What the analysis looks at: one GPU on one tick, the figures the rules need (filled by
//! [`super::observe`] from a snapshot, averaged by [`super::window`]).

use crate::snapshot::{Culprits, LinkLoad, MountLoad, ProcessStacks};

/// One GPU on one tick. `None` means the input is not available (never "0").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuObservation {
    /// Monotonic seconds of the tick.
    pub at: f64,
    /// NVML index.
    pub index: u32,
    /// UUID (the key across ticks).
    pub uuid: String,
    /// Whether the GPU answered.
    pub up: bool,
    /// Busy fraction: mean of NVML's utilization samples (or GPU-Util where samples are missing).
    pub busy: Option<f64>,
    /// Share of utilization samples near zero.
    pub idle_share: Option<f64>,
    /// GPM SM activity.
    pub sm_activity: Option<f64>,
    /// Device memory used / total.
    pub memory_used_ratio: Option<f64>,
    /// Whether a limiting throttle reason is active.
    pub throttled: Option<bool>,
    /// Degrees below the slowdown temperature.
    pub thermal_margin: Option<f64>,
    /// XID errors and uncorrected ECC errors so far (cumulative; an increase is an event).
    pub hardware_errors: Option<u64>,
    /// A row remap is pending or failed.
    pub remap_trouble: bool,
    /// Share of its maximum bandwidth the PCIe link trained at (1.0: full generation and width).
    pub pcie_bandwidth_share: Option<f64>,
    /// Bytes per second over the GPU's PCIe link, both directions (GPUDirect RDMA moves a
    /// multi-node all-reduce's data there).
    pub pcie_bytes_per_second: Option<f64>,
    /// Processes on the GPU.
    pub processes: Option<u32>,
    /// Independent jobs among the processes on the GPU (`None` when some process's owner is
    /// unknown).
    pub independent_jobs: Option<u32>,
    /// The processes on the GPU outside the main process's job, described for the evidence.
    pub other_jobs: Vec<String>,
    /// What groups this GPU with others of the same job (a process, pod or Slurm job).
    pub job: Option<String>,
    /// What groups this GPU with the other ranks its main process may exchange gradients
    /// with: its job, else its launcher (children of one parent on separate GPUs, as
    /// torchrun's ranks are on bare metal; two experiments started from one shell are too,
    /// which is why only the collective cap, never the job's busy gap, compares them).
    pub ranks: Option<String>,
    /// Processes doing a real share of the GPU's work (per-process SM samples at or above
    /// [`super::jobs::SHARER_MIN_SM`]); `None` where the driver reports no per-process utilization.
    pub working_processes: Option<u32>,
    /// Whether those working processes belong to more than one job (`None`: owners unknown).
    pub working_jobs: Option<u32>,
    /// The working processes other than the main one, described for the evidence.
    pub working_others: Vec<String>,
    /// The main process's share of the GPU's work (its SM samples over all processes').
    pub main_work_share: Option<f64>,
    /// The main GPU process's busiest thread, share of a core.
    pub busiest_thread: Option<f64>,
    /// Where the main GPU process's main thread was over the stacks source's window (`None`
    /// where its stacks are not read).
    pub stacks: Option<ProcessStacks>,
    /// The node's busiest processes outside the GPU process trees (`None` while not looked
    /// for).
    pub culprits: Option<Culprits>,
    /// Mean number of the main GPU process's main thread and workers waiting for a CPU.
    pub cpu_wait: Option<f64>,
    /// Data-loader workers of the main GPU process.
    pub workers: Option<u32>,
    /// The busiest worker's share of a core.
    pub workers_max_cpu: Option<f64>,
    /// The workers' CPU, in cores, summed.
    pub workers_cpu: Option<f64>,
    /// The part of it in the kernel (system calls), in cores.
    pub workers_system_cpu: Option<f64>,
    /// Share of the workers' context switches that were voluntary (blocking, not preempted).
    pub workers_voluntary_switches: Option<f64>,
    /// Workers in uninterruptible (I/O) wait.
    pub workers_disk_wait: Option<u32>,
    /// Mean number of workers waiting for block I/O (delay accounting).
    pub workers_blkio: Option<f64>,
    /// The GPU process's cgroup throttled-period share.
    pub cgroup_throttled: Option<f64>,
    /// The GPU process or its workers run on another NUMA node than the GPU.
    pub numa_mismatch: Option<bool>,
    /// Busiest disk's utilization.
    pub disk_util: Option<f64>,
    /// Host iowait share.
    pub iowait: Option<f64>,
    /// Host PSI io "some" share.
    pub psi_io: Option<f64>,
    /// Host CPU busy share.
    pub host_cpu: Option<f64>,
    /// CPU used outside the GPU process trees: on the CPUs the main GPU process may run on
    /// when known, else node-wide.
    pub other_cpu: Option<f64>,
    /// Share of the CPUs the main GPU process may run on that GPU process trees use.
    pub own_cpu: Option<f64>,
    /// How many CPUs the main GPU process may run on.
    pub job_cpus: Option<f64>,
    /// Host CPU steal share.
    pub steal: Option<f64>,
    /// The SM clock's share of its maximum on a tick with a limiting throttle reason (`None`
    /// when not throttled or unknown).
    pub throttled_clock_ratio: Option<f64>,
    /// Bytes per second the main GPU process's network namespace received.
    pub job_ingress: Option<f64>,
    /// Bytes per second it transmitted.
    pub job_egress: Option<f64>,
    /// Where that traffic is seen: the namespace's busiest interface, or `None` when the
    /// process shares the node's namespace (its traffic is then the node's).
    pub job_interface: Option<String>,
    /// The node's busiest physical link on this tick.
    pub link: Option<LinkLoad>,
    /// The busiest NFS mount of the node that the main GPU process has mounted, on this tick.
    pub mount: Option<MountLoad>,
    /// The network and FUSE mounts the main GPU process sees, described.
    pub network_mounts: Vec<String>,
    /// The main GPU process (`pid 4242 (python3)`).
    pub main_process: Option<String>,
    /// The pod the GPU is assigned to (`namespace/pod`).
    pub pod: Option<String>,
}
