//! The host side of each GPU process: its context (CPU, threads, workers, cgroup), where its
//! main thread waits (Python stacks), and the node's busiest processes outside the GPU
//! process trees.

use super::{PerActivity, PressureSnapshot};

/// What the host says about one GPU process and the processes below it (data-loader workers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessContext {
    /// Process id.
    pub pid: u32,
    /// Parent process id (to tell siblings of one launcher, e.g. torchrun's ranks).
    pub ppid: u32,
    /// One-letter state of the main process (R, S, D, Z, T, I, ...).
    pub state: char,
    /// Threads of the main process.
    pub threads: u32,
    /// Real user id.
    pub uid: Option<u32>,
    /// Resident host memory of the main process, in bytes.
    pub resident_bytes: Option<u64>,
    /// When the process started, in seconds since the epoch.
    pub start_time_seconds: Option<f64>,
    /// User-mode CPU seconds since the process started.
    pub cpu_user_seconds: f64,
    /// Kernel-mode CPU seconds since the process started.
    pub cpu_system_seconds: f64,
    /// CPU used over the last interval, in cores (1.0 = one core fully busy).
    pub cpu_cores: Option<f64>,
    /// CPU share of one core used by the busiest thread over the last interval: near 1.0 is
    /// the host-bound signature of a Python launch loop.
    pub busiest_thread_ratio: Option<f64>,
    /// Mean number of the process's main thread, its busiest other thread (the autograd
    /// engine's, a training thread) and its workers' main threads waiting runnable for a CPU
    /// over the last interval (run-queue delay per second from schedstat): the job wants CPU
    /// it does not get.
    pub cpu_wait_ratio: Option<f64>,
    /// The part of it of the threads that run the loop's host work: the main thread and the
    /// busiest other thread. Beside `busiest_thread_ratio`, the share of their runnable time
    /// they spent waiting for a CPU.
    pub loop_cpu_wait_ratio: Option<f64>,
    /// Voluntary context switches since start.
    pub voluntary_switches: u64,
    /// Involuntary context switches since start.
    pub involuntary_switches: u64,
    /// Time spent waiting for block I/O since start (delay accounting; `None` when it is off).
    pub blkio_delay_seconds: Option<f64>,
    /// Bytes the process caused to be read from storage (`None` when /proc/<pid>/io is not
    /// readable, e.g. without CAP_SYS_PTRACE for another user's process).
    pub read_bytes: Option<u64>,
    /// CPUs the process may run on (its affinity mask or cpuset), by number.
    pub allowed_cpus: Vec<u32>,
    /// Share of those CPUs used over the last interval by processes outside every GPU process
    /// tree: the CPU others take from this job (`None` before CPU rates exist).
    pub others_cpu_ratio: Option<f64>,
    /// Share of those CPUs used over the last interval by GPU process trees: the job's own
    /// demand (its main process, loader workers, and any other rank pinned alongside).
    pub own_cpu_ratio: Option<f64>,
    /// NUMA nodes the threads of the process and of its workers last ran on, sorted.
    pub numa_nodes: Vec<u32>,
    /// Its data-loader workers (`pt_data_worker`, or told by structure: see
    /// source::process::children).
    pub workers: WorkerSummary,
    /// The processes below it that are not loader workers (wandb-core, compile workers, a
    /// forkserver, ...), summed the same way: reported apart, so that idle sidecars do not
    /// dilute the workers.
    pub other_children: WorkerSummary,
    /// Every process below it, as last discovered (to tell one job's processes from another's).
    pub descendants: Vec<u32>,
    /// Its cgroup, where readable.
    pub cgroup: Option<CgroupContext>,
    /// The distributed job it is a rank of, as its launcher described it in its environment
    /// (`None`: not launched as a rank, or the environment is unreadable without ptrace).
    pub world: Option<World>,
}

/// A set of descendants of a GPU process (its loader workers, or its other children),
/// aggregated (cardinality stays one set per process).
/// A distributed job as its launcher tells its ranks: torchrun and the Kubeflow operators
/// (`WORLD_SIZE`, `LOCAL_WORLD_SIZE`), Open MPI (`OMPI_COMM_WORLD_SIZE`,
/// `OMPI_COMM_WORLD_LOCAL_SIZE`), Slurm (`SLURM_NTASKS`, `SLURM_JOB_NUM_NODES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    /// Ranks in the job.
    pub ranks: u32,
    /// Ranks on this node, where said.
    pub local_ranks: Option<u32>,
    /// Nodes the job runs on, where said.
    pub nodes: Option<u32>,
}

impl World {
    /// Whether some of the job's ranks run on other nodes (`None`: not said).
    pub fn spans_nodes(&self) -> Option<bool> {
        match (self.nodes, self.local_ranks) {
            (Some(nodes), _) => Some(nodes > 1),
            (None, Some(local)) => Some(self.ranks > local),
            (None, None) => None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerSummary {
    /// How many there are.
    pub count: u32,
    /// CPU they used over the last interval, in cores, summed.
    pub cpu_cores: Option<f64>,
    /// The part of it spent in the kernel (system calls: reads and receives, page faults):
    /// the I/O side of their work rather than decoding.
    pub system_cpu_cores: Option<f64>,
    /// Share of their context switches over the last interval that were voluntary (blocking
    /// for I/O or a queue) rather than preemptions while computing: how their waits for a CPU
    /// split between the two.
    pub voluntary_switch_share: Option<f64>,
    /// Voluntary context switches a second of one worker over the last interval (the mean
    /// over those read): how many sleeps and blocks their time off a CPU came in.
    pub voluntary_switches_per_second: Option<f64>,
    /// CPU share of one core of the busiest worker over the last interval.
    pub max_cpu_ratio: Option<f64>,
    /// Workers running or runnable (R).
    pub running: u32,
    /// Workers in uninterruptible wait, usually for I/O (D).
    pub disk_wait: u32,
    /// Workers that exited and were not reaped (Z).
    pub zombie: u32,
    /// Block-I/O delay over the last interval, summed: the mean number of workers waiting for
    /// the disk (`None` without delay accounting).
    pub blkio_delay_ratio: Option<f64>,
    /// Run-queue delay over the last interval, summed: the mean number of workers waiting for
    /// a CPU.
    pub cpu_wait_ratio: Option<f64>,
    /// Bytes read from storage per second over the last interval, summed.
    pub read_bytes_per_second: Option<f64>,
    /// What the sleeping ones were seen waiting on this tick (loader workers only; `None`
    /// where their system calls cannot be read: no ptrace access).
    pub asleep: Option<AsleepWorkers>,
}

/// What a sleeping loader worker was seen waiting on, from its blocking system call and the
/// descriptor it names (least telling first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WaitTarget {
    /// Its own queues (a pipe: the index queue, the result queue when full), a sleep, a lock:
    /// no input. Back-pressure, or nothing to do.
    Idle,
    /// A file on a local filesystem.
    LocalFile,
    /// A socket, or a file on a network or FUSE mount: remote input.
    Remote,
}

/// The sleeping loader workers of one tick, by what they waited on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AsleepWorkers {
    /// Sleeping workers whose wait was read.
    pub sampled: u32,
    /// Of those, waiting for remote input.
    pub remote: u32,
    /// Waiting in a read of a local file.
    pub local_file: u32,
}

impl WorkerSummary {
    /// Their CPU over the last interval, in cores: none at all when there are none.
    pub fn known_cpu_cores(&self) -> Option<f64> {
        self.cpu_cores.or((self.count == 0).then_some(0.0))
    }
}

/// The cgroup of a GPU process: owner and CPU throttling.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupContext {
    /// Kubernetes pod UID.
    pub pod_uid: String,
    /// Container ID.
    pub container_id: String,
    /// Slurm job ID.
    pub slurm_job: String,
    /// CPU quota in cores (`None`: no quota).
    pub cpu_quota_cores: Option<f64>,
    /// Share of the enforcement periods of the last interval in which the cgroup was throttled.
    pub throttled_ratio: Option<f64>,
    /// The cgroup's own pressure stall shares over the last interval (cgroup v2).
    pub pressure: Vec<PressureSnapshot>,
}

/// What a training loop's main thread is doing in one stack sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Activity {
    /// Waiting for the data loader (its iterator or its result queue).
    DataLoader,
    /// Synchronizing with the GPU (`.item()`, `.cpu()`, `synchronize`, blocking copies).
    GpuSync,
    /// In a collective (`torch.distributed` all-reduce, barrier, ...).
    Collective,
    /// Running Python code: the model, the optimizer, kernel launches.
    Python,
    /// Anything else (sleeping, blocked outside those).
    Other,
}

impl Activity {
    /// Every activity, in label order.
    pub const ALL: [Activity; 5] = [
        Activity::DataLoader,
        Activity::GpuSync,
        Activity::Collective,
        Activity::Python,
        Activity::Other,
    ];

    /// The `activity` label value.
    pub fn name(self) -> &'static str {
        match self {
            Activity::DataLoader => "data_loader",
            Activity::GpuSync => "gpu_sync",
            Activity::Collective => "collective",
            Activity::Python => "python",
            Activity::Other => "other",
        }
    }
}

/// A frame seen innermost in the main thread's samples, with how often.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameShare {
    /// Qualified function name (`EmulatedGPU.synchronize`).
    pub function: String,
    /// Source file and line (`/job/train.py:42`).
    pub location: String,
    /// What the samples it was seen in were classified as.
    pub activity: Activity,
    /// Share of the window's samples.
    pub share: f64,
}

/// Where a GPU process's main thread (or the thread that drives its GPU) was over the stack
/// window.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessStacks {
    /// Process id.
    pub pid: u32,
    /// Samples in the window.
    pub samples: u32,
    /// Share of the samples per activity.
    pub shares: PerActivity<f64>,
    /// The innermost frames seen most, most first (at most five).
    pub top_frames: Vec<FrameShare>,
    /// Samples of the last few seconds (5 s).
    pub recent_samples: u32,
    /// Their shares per activity: where the thread was lately, for attributing each tick's
    /// time by what it saw.
    pub recent_shares: PerActivity<f64>,
    /// Share of the samples in which the thread waited for its loader while its GPU still
    /// worked through kernels queued before (the batch's upload after the wait waited for
    /// them, as the CUDA probes timed it; 0 without the probes), and of the recent samples.
    pub loader_queued: f64,
    pub recent_loader_queued: f64,
    /// The thread the latest samples came from where it is not the main thread: the one that
    /// drives the GPU while the main thread launches nothing (the training function on a
    /// thread of its own).
    pub followed_thread: Option<u32>,
}

impl ProcessStacks {
    /// The share of samples in `activity`.
    pub fn share(&self, activity: Activity) -> f64 {
        self.shares[activity]
    }

    /// A test's stacks: `samples` in the window, the recent ones alike, shared as `shares`.
    #[cfg(test)]
    pub fn sampled(samples: u32, shares: PerActivity<f64>) -> ProcessStacks {
        ProcessStacks {
            pid: 1,
            samples,
            shares,
            top_frames: Vec::new(),
            recent_samples: 10,
            recent_shares: shares,
            loader_queued: 0.0,
            recent_loader_queued: 0.0,
            followed_thread: None,
        }
    }
}

/// One of the node's busiest processes outside the GPU process trees.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeProcess {
    /// Process id.
    pub pid: u32,
    /// Command name (`comm`).
    pub command: String,
    /// Kubernetes pod UID from its cgroup path (empty where none).
    pub pod_uid: String,
    /// Container ID from its cgroup path (empty where none).
    pub container_id: String,
    /// CPU used since the previous pass, in cores.
    pub cpu_cores: f64,
    /// Bytes read from storage per second since its previous reading (`None` where its
    /// `/proc/<pid>/io` is unreadable or was not read twice yet).
    pub read_bytes_per_second: Option<f64>,
    /// Bytes written to storage per second, likewise.
    pub write_bytes_per_second: Option<f64>,
}

impl NodeProcess {
    /// Bytes read and written per second (0 where unknown).
    pub fn disk_bytes_per_second(&self) -> f64 {
        self.read_bytes_per_second.unwrap_or(0.0) + self.write_bytes_per_second.unwrap_or(0.0)
    }

    /// How the evidence names it: `updatedb (pid 812, pod 3f2a...)`.
    pub fn describe(&self) -> String {
        let owner = if !self.pod_uid.is_empty() {
            format!(", pod {}", self.pod_uid)
        } else if !self.container_id.is_empty() {
            format!(", container {:.12}", self.container_id)
        } else {
            String::new()
        };
        format!("{} (pid {}{owner})", self.command, self.pid)
    }
}

/// The node's busiest processes outside the GPU process trees, looked for only while a GPU's
/// data or contention verdict might need them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Culprits {
    /// The busiest by CPU, most first (those using any).
    pub by_cpu: Vec<NodeProcess>,
    /// The busiest by bytes read and written, most first (those doing any).
    pub by_disk: Vec<NodeProcess>,
}
