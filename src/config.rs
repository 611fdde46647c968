//! Typed configuration: YAML file, then command-line overrides, on top of the defaults.
//!
//! Every value is validated while it is deserialized (durations, addresses, regexes), so an
//! invalid value is reported with the file, line and column of that value, exactly like a
//! syntax error or an unknown key.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// The port we listen on by default: not node_exporter's 9100, dcgm-exporter's 9400 nor
/// nvidia_gpu_exporter's 9835, so the exporter can run beside all of them.
pub const DEFAULT_PORT: u16 = 9842;

/// The whole configuration of the daemon.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address and port the HTTP server listens on.
    pub listen_address: ListenAddress,
    /// HTTP server hardening, TLS and authentication.
    pub web: Web,
    /// How often the sampler reads every source and publishes a new exposition.
    pub sample_interval: ConfigDuration,
    /// Log verbosity: error, warn, info, debug or trace.
    pub log_level: LogLevel,
    /// Where the host's pseudo-filesystems are mounted (inside a container: /host/proc, /host/sys).
    pub paths: Paths,
    /// Which sources run and how each one selects what it reads.
    pub sources: Sources,
    /// How verdicts are decided: window, hysteresis and every rule's thresholds.
    pub analysis: Analysis,
    /// Which metric families `/metrics` serves.
    pub metrics: Metrics,
}

/// Which metric families are served, like node_exporter's collector flags or dcgm-exporter's
/// counters file. Selection only trims the page: the analysis still reads every signal, so
/// verdicts do not change.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    /// When not empty, only families whose name matches one of these regexes are served.
    pub include: Vec<FamilyPattern>,
    /// Families whose name matches one of these regexes are not served (after `include`).
    pub exclude: Vec<FamilyPattern>,
}

impl Metrics {
    /// Whether a family is served; `name` is the family name and `sample_name` the name its
    /// samples carry (with `_total` or `_info`), so either spelling selects it.
    pub fn serves(&self, name: &str, sample_name: &str) -> bool {
        let matches =
            |FamilyPattern(Pattern(p)): &FamilyPattern| p.is_match(name) || p.is_match(sample_name);
        (self.include.is_empty() || self.include.iter().any(matches))
            && !self.exclude.iter().any(matches)
    }
}

/// A regular expression that must match a whole metric family name (it is anchored).
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyPattern(pub Pattern);

impl<'de> Deserialize<'de> for FamilyPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Pattern::parse(&format!("^(?:{text})$"))
            .map(FamilyPattern)
            .map_err(|e| {
                D::Error::custom(format!(
                    "invalid metric family pattern {text:?}: expected a regex over family names such as gpu_process_.*: {e}"
                ))
            })
    }
}

/// Verdict settings. Each rule's condition scores 0.5 exactly at its threshold and 0.3 at 60 %
/// of the way, and 1.0 at twice the threshold (or at saturation, for a ratio bounded by 1);
/// categorical facts score by their certainty (see `analysis::rules`); a kind turns active when its score stays at or
/// above `enter_score` for `min_duration`, and inactive when it stays below `leave_score` as
/// long, so bursty workloads do not flap.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Analysis {
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
    /// separates `gpu_busy_above` from full use).
    pub lost_share_high: f64,
    /// Stack samples of the main thread in the window from which what they show decides the
    /// pipeline kinds (observed) instead of the counters (inferred); at the default sampling
    /// rate, about 10 s.
    pub stack_samples_min: f64,
    /// Share of the main thread's samples below which the stacks contradict a pipeline kind's
    /// premise, whatever it costs: the loader wait for the data kinds, Python for host_bound,
    /// synchronizing for sync_stall, collectives for communication, the loader wait or Python
    /// for CPU contention (ours: a quarter of the samples; a loop mostly elsewhere is not
    /// bound by it).
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

impl Default for Analysis {
    fn default() -> Self {
        Analysis {
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
            premise_share_min: 0.25,
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

impl Default for Config {
    fn default() -> Self {
        Config {
            listen_address: ListenAddress(SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT))),
            web: Web::default(),
            sample_interval: ConfigDuration(Duration::from_secs(1)),
            log_level: LogLevel::Info,
            paths: Paths::default(),
            sources: Sources::default(),
            analysis: Analysis::default(),
            metrics: Metrics::default(),
        }
    }
}

/// Limits that keep slow or hostile clients from tying the server up, and the optional
/// TLS/authentication file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Web {
    /// Web configuration file in the Prometheus exporter-toolkit format (TLS certificate and
    /// key, client certificates, basic-auth users with bcrypt hashes, security headers); empty:
    /// plain HTTP without authentication. Re-read when it or a file it names changes.
    pub config_file: PathBuf,
    /// Most connections served at once; a connection past it gets 503 (over TLS: is closed).
    #[serde(deserialize_with = "at_least::<1, _>")]
    pub max_connections: usize,
    /// A request head must arrive complete within this long of the connection opening or of
    /// the previous response; also how long an idle keep-alive connection is kept.
    pub header_read_timeout: ConfigDuration,
    /// Longest a request may take to answer, basic-auth check included (503 past it).
    pub request_timeout: ConfigDuration,
    /// A response write that makes no progress this long closes the connection (a client
    /// that stopped reading).
    pub write_timeout: ConfigDuration,
    /// Largest request head (request line and headers) accepted; larger gets 431.
    #[serde(deserialize_with = "at_least::<1024, _>")]
    pub max_header_bytes: usize,
}

impl Default for Web {
    fn default() -> Self {
        Web {
            config_file: PathBuf::new(),
            max_connections: 256,
            header_read_timeout: ConfigDuration(Duration::from_secs(30)),
            request_timeout: ConfigDuration(Duration::from_secs(10)),
            write_timeout: ConfigDuration(Duration::from_secs(10)),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// A count that must be at least `MIN` to make sense.
fn at_least<'de, const MIN: usize, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let value = usize::deserialize(d)?;
    if value < MIN {
        return Err(D::Error::custom(format!(
            "{value} is too small: expected at least {MIN}"
        )));
    }
    Ok(value)
}

/// Roots of the host pseudo-filesystems, like node_exporter's `--path.procfs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Paths {
    /// Mount point of procfs.
    pub procfs: PathBuf,
    /// Mount point of sysfs.
    pub sysfs: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            procfs: PathBuf::from("/proc"),
            sysfs: PathBuf::from("/sys"),
        }
    }
}

/// Per-source switches and settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Sources {
    /// Node-wide CPU time per mode, task counts and context switches (/proc/stat).
    pub cpu: Toggle,
    /// Per block device I/O counters and iostat-style rates (/proc/diskstats).
    pub disk: DiskSource,
    /// Pressure stall information for cpu, io and memory (/proc/pressure).
    pub pressure: Toggle,
    /// Available memory and swap activity (/proc/meminfo, /proc/vmstat).
    pub memory: Toggle,
    /// NICs, InfiniBand / RoCE ports, network filesystems and the traffic of each GPU
    /// process's network namespace (/proc/net/dev, /sys/class/net, /sys/class/infiniband,
    /// mountstats).
    pub network: NetworkSource,
    /// InfiniBand and RoCE ports: data rates, congestion waits, link rate and errors
    /// (/sys/class/infiniband).
    pub infiniband: Toggle,
    /// Mounts of network and FUSE filesystems, with NFS operation rates and round trips
    /// (/proc/1/mountstats).
    pub network_filesystems: NetworkFilesystemsSource,
    /// GPUs through NVML.
    pub gpu: GpuSource,
    /// Host context of each GPU process: its workers, cgroup, NUMA placement.
    pub process: ProcessSource,
    /// Python stacks of the GPU processes: where each training loop's main thread waits.
    pub stacks: StacksSource,
    /// The node's busiest processes outside the GPU process trees, named in the evidence.
    pub culprits: CulpritsSource,
    /// Pod attribution through the kubelet's pod-resources socket.
    pub kubernetes: KubernetesSource,
}

/// Settings of the kubernetes (pod attribution) source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesSource {
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

impl Default for KubernetesSource {
    fn default() -> Self {
        KubernetesSource {
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
pub struct ProcessSource {
    /// Whether the source is sampled at all (it needs the gpu source for its process list).
    pub enabled: bool,
    /// How often the descendants (data-loader workers) of each GPU process are rediscovered;
    /// between discoveries only the known processes are read, which keeps a tick cheap on
    /// nodes with thousands of processes. Workers started in between appear at the next one.
    pub discovery_interval: ConfigDuration,
    /// How often every thread of each GPU process is read, for the busiest thread's share of
    /// a core and the NUMA nodes the threads run on. Training ranks carry 100-200 threads, so
    /// reading them every tick would make the tick's cost grow with the thread count; the main
    /// thread (the one a host-bound loop pins) is still read every tick, and the figure is the
    /// larger of its share over the tick and the busiest thread's between two passes.
    pub thread_interval: ConfigDuration,
}

impl Default for ProcessSource {
    fn default() -> Self {
        ProcessSource {
            enabled: true,
            discovery_interval: ConfigDuration(Duration::from_secs(5)),
            thread_interval: ConfigDuration(Duration::from_secs(15)),
        }
    }
}

/// Settings of the Python-stacks source.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StacksSource {
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

impl Default for StacksSource {
    fn default() -> Self {
        StacksSource {
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
pub struct CulpritsSource {
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

impl Default for CulpritsSource {
    fn default() -> Self {
        CulpritsSource {
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
pub struct GpuSource {
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

impl Default for GpuSource {
    fn default() -> Self {
        GpuSource {
            enabled: true,
            nvml_library: PathBuf::from("libnvidia-ml.so.1"),
            max_processes_per_gpu: 10,
            nvml_retry_max_interval: ConfigDuration(Duration::from_secs(60)),
            timeout: ConfigDuration(Duration::from_millis(500)),
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
pub struct DiskSource {
    /// Whether the source is sampled at all.
    pub enabled: bool,
    /// Only devices whose name matches this regex are reported (empty: every device).
    pub include: Pattern,
    /// Devices whose name matches this regex are never reported.
    pub exclude: Pattern,
    /// Report partitions too (they double-count their disk's I/O, so they are off by default).
    pub include_partitions: bool,
}

impl Default for DiskSource {
    fn default() -> Self {
        DiskSource {
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
pub struct NetworkSource {
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

impl Default for NetworkSource {
    fn default() -> Self {
        NetworkSource {
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
pub struct NetworkFilesystemsSource {
    /// Whether the source is sampled at all.
    pub enabled: bool,
    /// At most this many mounts are reported: the NFS mounts that read the most first, then
    /// the others by mount point (a node with a mount per pod stays bounded).
    pub max_mounts: usize,
}

impl Default for NetworkFilesystemsSource {
    fn default() -> Self {
        NetworkFilesystemsSource {
            enabled: true,
            max_mounts: 16,
        }
    }
}

/// Virtual devices that never back a training data set: RAM disks, loop and zram devices,
/// floppies, optical drives and network block devices.
pub const DEFAULT_DISK_EXCLUDE: &str = r"^(ram|loop|zram|fd|sr|nbd)\d+$";

/// A socket address, validated while parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddress(pub SocketAddr);

impl<'de> Deserialize<'de> for ListenAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map(ListenAddress).map_err(|_| {
            D::Error::custom(format!(
                "invalid listen address {text:?}: expected HOST:PORT such as 0.0.0.0:{DEFAULT_PORT} or [::]:{DEFAULT_PORT}"
            ))
        })
    }
}

/// A positive duration written with a unit: `500ms`, `1s`, `2m`, `1h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    /// Parses `<number><unit>` with unit ms, s, m or h; zero is refused.
    pub fn parse(text: &str) -> Result<Self, String> {
        let expected = "expected a positive duration such as 500ms, 1s, 2m or 1h";
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("invalid duration {text:?}: missing unit; {expected}"))?;
        let (number, unit) = text.split_at(split);
        let number: f64 = number
            .parse()
            .map_err(|_| format!("invalid duration {text:?}: {expected}"))?;
        let seconds = match unit {
            "ms" => number / 1000.0,
            "s" => number,
            "m" => number * 60.0,
            "h" => number * 3600.0,
            _ => return Err(format!("invalid duration unit {unit:?}: {expected}")),
        };
        if !(seconds > 0.0 && seconds.is_finite()) {
            return Err(format!("invalid duration {text:?}: {expected}"));
        }
        // Found by tests/fuzz.rs: a duration past u64 seconds must be an error, not a panic.
        Duration::try_from_secs_f64(seconds)
            .map(ConfigDuration)
            .map_err(|_| format!("invalid duration {text:?}: too long; {expected}"))
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ConfigDuration::parse(&text).map_err(D::Error::custom)
    }
}

/// A regular expression, compiled while parsing. The empty pattern matches everything.
#[derive(Debug, Clone)]
pub struct Pattern(pub regex::Regex);

impl Pattern {
    /// Compiles `text`, with the regex crate's message on failure.
    pub fn parse(text: &str) -> Result<Self, String> {
        regex::Regex::new(text)
            .map(Pattern)
            .map_err(|e| format!("invalid regex {text:?}: {e}"))
    }

    /// Whether the pattern is empty (and so selects everything).
    pub fn is_empty(&self) -> bool {
        self.0.as_str().is_empty()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Pattern::parse(&text).map_err(D::Error::custom)
    }
}

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Only failures.
    Error,
    /// Failures and degraded sources.
    Warn,
    /// Start-up, shutdown and source state changes.
    Info,
    /// Plus per-source details such as unsupported features.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The matching `tracing` level.
    pub fn as_tracing(self) -> tracing::Level {
        match self {
            LogLevel::Error => tracing::Level::ERROR,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Trace => tracing::Level::TRACE,
        }
    }
}

/// Command-line values that, when given, replace what the file says.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen`
    pub listen_address: Option<SocketAddr>,
    /// `--web.config.file`
    pub web_config_file: Option<PathBuf>,
    /// `--path.procfs`
    pub procfs: Option<PathBuf>,
    /// `--path.sysfs`
    pub sysfs: Option<PathBuf>,
    /// `--log-level`
    pub log_level: Option<LogLevel>,
}

/// A configuration that could not be loaded; the message names file, line and column.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses YAML text; `origin` names the file in error messages.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        // serde-saphyr's message starts with "error: line L column C: what was expected"
        // and ends with a snippet pointing at the value.
        serde_saphyr::from_str::<Config>(text)
            .map_err(|e| ConfigError(format!("invalid configuration in {origin}: {e}")))
    }

    /// Reads the file if one is given (defaults otherwise), then applies the overrides.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError(format!("cannot read configuration {}: {e}", path.display()))
                })?;
                Config::from_yaml(&text, &path.display().to_string())?
            }
            None => Config::default(),
        };
        if let Some(address) = overrides.listen_address {
            config.listen_address = ListenAddress(address);
        }
        if let Some(file) = &overrides.web_config_file {
            config.web.config_file = file.clone();
        }
        if let Some(procfs) = &overrides.procfs {
            config.paths.procfs = procfs.clone();
        }
        if let Some(sysfs) = &overrides.sysfs {
            config.paths.sysfs = sysfs.clone();
        }
        if let Some(level) = overrides.log_level {
            config.log_level = level;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(yaml: &str) -> String {
        Config::from_yaml(yaml, "test.yaml").unwrap_err().0
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(Config::from_yaml("", "x").unwrap(), Config::default());
        assert_eq!(
            Config::from_yaml("# nothing\n", "x").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn example_file_lists_every_default() {
        let text = include_str!("../config.example.yaml");
        assert_eq!(
            Config::from_yaml(text, "config.example.yaml").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn values_are_read() {
        let config = Config::from_yaml(
            "listen_address: 127.0.0.1:1234\nsample_interval: 250ms\nlog_level: debug\nsources:\n  disk:\n    include: '^nvme'\n  pressure:\n    enabled: false\n",
            "x",
        )
        .unwrap();
        assert_eq!(config.listen_address.0, "127.0.0.1:1234".parse().unwrap());
        assert_eq!(config.sample_interval.0, Duration::from_millis(250));
        assert_eq!(config.log_level, LogLevel::Debug);
        assert!(config.sources.disk.include.0.is_match("nvme0n1"));
        assert!(!config.sources.pressure.enabled);
        assert!(config.sources.cpu.enabled);
    }

    #[test]
    fn unknown_key_names_file_line_and_column() {
        let message = error_of("sources:\n  disk:\n    exclud: x\n");
        assert!(message.contains("test.yaml"), "{message}");
        assert!(message.contains("line 3 column 5"), "{message}");
        assert!(message.contains("unknown field `exclud`"), "{message}");
    }

    #[test]
    fn wrong_type_is_refused() {
        let message = error_of("sources:\n  cpu:\n    enabled: maybe\n");
        assert!(message.contains("line 3 column 14"), "{message}");
    }

    #[test]
    fn invalid_values_are_refused_at_their_position() {
        let message = error_of("sample_interval: 0s\n");
        assert!(message.contains("line 1 column 18"), "{message}");
        assert!(message.contains("positive duration"), "{message}");

        let message = error_of("listen_address: localhost\n");
        assert!(message.contains("line 1 column 17"), "{message}");
        assert!(message.contains("HOST:PORT"), "{message}");

        let message = error_of("sources:\n  disk:\n    include: '(unclosed'\n");
        assert!(message.contains("line 3 column 14"), "{message}");
        assert!(message.contains("invalid regex"), "{message}");

        let message = error_of("web:\n  max_connections: 0\n");
        assert!(message.contains("line 2 column 20"), "{message}");
        assert!(message.contains("at least 1"), "{message}");

        let message = error_of("log_level: loud\n");
        assert!(message.contains("line 1 column 12"), "{message}");

        // The second pattern of the list is the bad one: its own position is reported.
        let message = error_of("metrics:\n  exclude:\n    - gpu_process_.*\n    - 'gpu_(xid'\n");
        assert!(message.contains("line 4 column 7"), "{message}");
        assert!(
            message.contains("invalid metric family pattern"),
            "{message}"
        );
    }

    #[test]
    fn metric_patterns_match_whole_family_names_in_either_spelling() {
        let config: Config = serde_saphyr::from_str(
            "metrics:\n  include: ['gpu_.*']\n  exclude: [gpu_xid_errors_total, gpu_process_.*]\n",
        )
        .unwrap();
        let m = &config.metrics;
        assert!(m.serves("gpu_up", "gpu_up"));
        assert!(!m.serves("gpu_xid_errors", "gpu_xid_errors_total"));
        assert!(!m.serves("gpu_process_threads", "gpu_process_threads"));
        // Anchored: `gpu_.*` does not select a family that merely contains it.
        assert!(!m.serves("node_gpu_up", "node_gpu_up"));
        assert!(Metrics::default().serves("anything", "anything"));
    }

    #[test]
    fn durations() {
        assert_eq!(
            ConfigDuration::parse("1.5s").unwrap().0,
            Duration::from_millis(1500)
        );
        assert_eq!(
            ConfigDuration::parse("2m").unwrap().0,
            Duration::from_secs(120)
        );
        for bad in [
            "",
            "1",
            "s",
            "0ms",
            "-1s",
            "1d",
            "1 s x",
            "99999999999999999999999999999999999991s",
        ] {
            assert!(ConfigDuration::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overrides_win_over_the_file() {
        let dir = std::env::temp_dir().join(format!("gbe-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(&file, "listen_address: 127.0.0.1:1\npaths:\n  procfs: /a\n").unwrap();
        let overrides = Overrides {
            listen_address: Some("127.0.0.1:2".parse().unwrap()),
            ..Overrides::default()
        };
        let config = Config::load(Some(&file), &overrides).unwrap();
        assert_eq!(config.listen_address.0.port(), 2);
        assert_eq!(config.paths.procfs, PathBuf::from("/a"));
        assert!(Config::load(Some(&dir.join("missing.yaml")), &overrides).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
