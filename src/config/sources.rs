//! Per-source switches and settings (`sources.*`).

use super::*;

/// Per-source switches and settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Sources {
    /// Node-wide CPU time per mode, task counts and context switches (/proc/stat).
    pub cpu: Toggle,
    /// Per block device I/O counters and iostat-style rates (/proc/diskstats).
    pub disk: DiskConfig,
    /// Pressure stall information for cpu, io and memory (/proc/pressure).
    pub pressure: Toggle,
    /// Available memory and swap activity (/proc/meminfo, /proc/vmstat).
    pub memory: Toggle,
    /// NICs, InfiniBand / RoCE ports, network filesystems and the traffic of each GPU
    /// process's network namespace (/proc/net/dev, /sys/class/net, /sys/class/infiniband,
    /// mountstats).
    pub network: NetworkConfig,
    /// InfiniBand and RoCE ports: data rates, congestion waits, link rate and errors
    /// (/sys/class/infiniband).
    pub infiniband: Toggle,
    /// Mounts of network and FUSE filesystems, with NFS operation rates and round trips
    /// (/proc/1/mountstats).
    pub network_filesystems: MountsConfig,
    /// GPUs through NVML.
    pub gpu: GpuConfig,
    /// Host context of each GPU process: its workers, cgroup, NUMA placement.
    pub process: ProcessConfig,
    /// Python stacks of the GPU processes: where each training loop's main thread waits.
    pub stacks: StacksConfig,
    /// Uprobes on the CUDA driver each GPU process maps: launches, copies and the time each
    /// thread waits inside the driver. Needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN);
    /// without them the source reports itself unsupported and the verdicts stay as the
    /// stacks and counters make them.
    pub cuda: CudaConfig,
    /// NCCL's RAS service (NCCL 2.24 and later), asked which ranks answer and how many
    /// collectives each launched while a GPU's hang is tracked. Reached inside the job's
    /// network namespace: needs CAP_SYS_ADMIN unless the job shares the exporter's; without
    /// it the source reports itself unsupported and the hang is named without that evidence.
    pub nccl_ras: Toggle,
    /// The node's busiest processes outside the GPU process trees, named in the evidence.
    pub culprits: CulpritsConfig,
    /// Pod attribution through the kubelet's pod-resources socket.
    pub kubernetes: KubernetesConfig,
}

/// Settings of the kubernetes (pod attribution) source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// Whether the source runs; off Kubernetes (no socket directory) it reports itself
    /// unsupported and stays quiet.
    pub enabled: bool,
    /// The kubelet's pod-resources socket.
    pub pod_resources_socket: PathBuf,
    /// How often the assignment is refreshed, in the background.
    pub refresh_interval: ConfigDuration,
    /// A GPU assigned to a pod with no process or no activity for this long is flagged.
    pub allocated_idle_after: ConfigDuration,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            enabled: true,
            pod_resources_socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
            refresh_interval: ConfigDuration(Duration::from_secs(10)),
            allocated_idle_after: ConfigDuration(Duration::from_secs(600)),
        }
    }
}

/// Settings of the process-context source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessConfig {
    /// Whether the source is sampled at all (it needs the gpu source for its process list).
    pub enabled: bool,
    /// How often the descendants (data-loader workers) of each GPU process are rediscovered;
    /// between discoveries only the known processes are read, which keeps a tick cheap on
    /// nodes with thousands of processes. Between discoveries each tick reads which children
    /// the GPU process's main thread has, and those of its threads seen forking before (a
    /// training function on a thread of its own, a thread prefetching from the loader), and
    /// rediscovers at once where they changed (a DataLoader without persistent workers
    /// replaces them every epoch); workers a thread not yet seen forking starts appear within
    /// six discoveries (every thread is read on the first three and every sixth after).
    pub discovery_interval: ConfigDuration,
    /// How often every thread of each GPU process is read, for the busiest thread's share of
    /// a core and the NUMA nodes the threads run on. Training ranks carry 100-200 threads, so
    /// reading them every tick would make the tick's cost grow with the thread count; the main
    /// thread (the one a host-bound loop pins) is still read every tick, and the figure is the
    /// larger of its share over the tick and the busiest thread's between two passes.
    pub thread_interval: ConfigDuration,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            enabled: true,
            discovery_interval: ConfigDuration(Duration::from_secs(5)),
            thread_interval: ConfigDuration(Duration::from_secs(15)),
        }
    }
}

/// Settings of the Python-stacks source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StacksConfig {
    /// Whether GPU processes' Python stacks are sampled (about 0.5 % of a core for 8 ranks at
    /// the default interval). Needs ptrace access to them (their user, or root with
    /// CAP_SYS_PTRACE); without it the source reports itself unsupported and nothing else
    /// changes.
    pub enabled: bool,
    /// How far back the activity shares and top frames reach.
    pub window: ConfigDuration,
    /// Mean time between two samples of each GPU process's main thread, a quarter of it while
    /// the process's GPU is less than half busy; samples are taken at random moments so that
    /// they do not beat with a training step's period (a sample costs about 0.2 ms of the
    /// exporter's CPU).
    pub interval: ConfigDuration,
}

impl Default for StacksConfig {
    fn default() -> Self {
        StacksConfig {
            enabled: true,
            window: ConfigDuration(Duration::from_secs(30)),
            interval: ConfigDuration(Duration::from_millis(500)),
        }
    }
}

/// Settings of the culprits source: the node's busiest processes outside the GPU process
/// trees, by CPU and by disk bytes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CulpritsConfig {
    /// Whether they are looked for. Even when on, a pass runs only while some GPU scores
    /// data_io, data_cpu or contention past the leave score (unless `always`).
    pub enabled: bool,
    /// Look for them on every pass, whatever the verdicts (for a dashboard of the node's top
    /// processes; costs a pass every `interval`).
    pub always: bool,
    /// Time between two passes over every process (each about 10 µs a process).
    pub interval: ConfigDuration,
    /// How many processes are named by CPU and by disk bytes (series and evidence).
    pub top: usize,
}

impl Default for CulpritsConfig {
    fn default() -> Self {
        CulpritsConfig {
            enabled: true,
            always: false,
            interval: ConfigDuration(Duration::from_secs(5)),
            top: 5,
        }
    }
}

/// Settings of the GPU (NVML) source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuConfig {
    /// Whether the source is sampled at all.
    pub enabled: bool,
    /// The NVML library to load: a name the dynamic loader resolves, or a path (GPU-operator
    /// installs keep the driver under e.g. /run/nvidia/driver/usr/lib64).
    pub nvml_library: PathBuf,
    /// Per GPU, how many processes get their own series (most memory first).
    pub max_processes_per_gpu: usize,
    /// Longest wait between two attempts to initialise NVML while it is failing; attempts
    /// start one interval apart and double up to this.
    pub nvml_retry_max_interval: ConfigDuration,
    /// How long one tick waits for a GPU's readings; a GPU that takes longer is reported
    /// down (`timeout`) for that tick while the others and the host sources carry on.
    pub timeout: ConfigDuration,
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            enabled: true,
            nvml_library: PathBuf::from("libnvidia-ml.so.1"),
            max_processes_per_gpu: 10,
            nvml_retry_max_interval: ConfigDuration(Duration::from_secs(60)),
            timeout: ConfigDuration(Duration::from_millis(500)),
        }
    }
}

/// Settings of the CUDA probes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CudaConfig {
    /// Whether the source runs.
    pub enabled: bool,
    /// How often kernel launches are counted: their entry points are probed for 20 ms about
    /// this often (at a random phase), since a probe on every launch would slow a
    /// launch-heavy loop several times over. Each window slows the job's launches while the
    /// probes are attached, 60-80 ms with the kernel's attaching and detaching (measured on
    /// the development VM, bench/probe_cost.py): at 8 s a launch-bound loop spends 1-2 % of
    /// its time in them, about a point more with one window in three also timing the
    /// launches (the launch queue's reading). Shorter finds the threads that drive the GPU sooner; under 1 s is refused
    /// (the windows would trap most launches).
    #[serde(deserialize_with = "launch_windows_every")]
    pub launch_windows_every: ConfigDuration,
}

/// A launch windows' period: a duration of at least a second, since each window traps the
/// job's launches for 60-80 ms.
fn launch_windows_every<'de, D: Deserializer<'de>>(d: D) -> Result<ConfigDuration, D::Error> {
    let every = ConfigDuration::deserialize(d)?;
    if every.0 < Duration::from_secs(1) {
        return Err(D::Error::custom(format!(
            "{:?} is too short: expected at least 1s (each launch window traps the job's launches for 60-80 ms)",
            every.0
        )));
    }
    Ok(every)
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig {
            enabled: true,
            launch_windows_every: ConfigDuration(Duration::from_secs(8)),
        }
    }
}

/// A source that has nothing to configure but whether it runs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Toggle {
    /// Whether the source is sampled at all.
    pub enabled: bool,
}

impl Default for Toggle {
    fn default() -> Self {
        Toggle { enabled: true }
    }
}

/// Settings of the disk source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiskConfig {
    /// Whether the source is sampled at all.
    pub enabled: bool,
    /// Only devices whose name matches this regex are reported (empty: every device).
    pub include: Pattern,
    /// Devices whose name matches this regex are never reported.
    pub exclude: Pattern,
    /// Report partitions too (they double-count their disk's I/O, so they are off by default).
    pub include_partitions: bool,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            enabled: true,
            include: Pattern::parse("").expect("empty regex is valid"),
            exclude: Pattern::parse(DEFAULT_DISK_EXCLUDE).expect("default regex is valid"),
            include_partitions: false,
        }
    }
}

/// Settings of the network source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// Whether the source is sampled at all.
    pub enabled: bool,
    /// Only interfaces whose name matches this regex are reported (empty: every interface).
    pub include: Pattern,
    /// Interfaces whose name matches this regex are never reported.
    pub exclude: Pattern,
    /// Report virtual interfaces too (loopback, veth, bridges, docker, CNI, bonds: those
    /// without a device behind them in sysfs). They carry the physical links' traffic a second
    /// time, so they are off by default.
    pub include_virtual: bool,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            enabled: true,
            include: Pattern::parse("").expect("empty regex is valid"),
            exclude: Pattern::parse("").expect("empty regex is valid"),
            include_virtual: false,
        }
    }
}

/// Settings of the network_filesystems source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MountsConfig {
    /// Whether the source is sampled at all.
    pub enabled: bool,
    /// At most this many mounts are reported: the NFS mounts that read the most first, then
    /// the others by mount point (a node with a mount per pod stays bounded).
    pub max_mounts: usize,
}

impl Default for MountsConfig {
    fn default() -> Self {
        MountsConfig {
            enabled: true,
            max_mounts: 16,
        }
    }
}

/// Virtual devices that never back a training data set: RAM disks, loop and zram devices,
/// floppies, optical drives and network block devices.
pub const DEFAULT_DISK_EXCLUDE: &str = r"^(ram|loop|zram|fd|sr|nbd)\d+$";
