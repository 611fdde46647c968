//! What NVML says about the node and each GPU, as plain values.

/// What NVML says about the node and each of its GPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSnapshot {
    /// Whether NVML is initialised and answering.
    pub nvml_up: bool,
    /// Why NVML is down (`library_not_found`, `driver_not_loaded`, ...); empty while up.
    pub nvml_error: String,
    /// Driver version, e.g. `550.54.15`.
    pub driver_version: String,
    /// CUDA driver API version, e.g. `12.4`.
    pub cuda_driver_version: String,
    /// One entry per device NVML counts, lost ones included, by index.
    pub devices: Vec<GpuDevice>,
    /// The processes listed on a GPU at its last answer that still run while it (or NVML)
    /// does not answer now. They are on no device here (nothing is known of them this tick),
    /// but the sources that follow GPU processes keep following them: a slow answer must
    /// not cost a rank its host history, its stack window and its probes.
    pub unanswered_processes: Vec<u32>,
}

/// One GPU. Every measurement is `None` when this GPU or driver does not support it, or when
/// the GPU is not answering (then `up` is false and only identity remains).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuDevice {
    /// NVML index.
    pub index: u32,
    /// Stable identity, e.g. `GPU-5f2c...`; empty if it was never readable.
    pub uuid: String,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
    /// PCI bus id, e.g. `00000000:17:00.0`.
    pub pci_bus_id: String,
    /// VBIOS version, e.g. `96.00.99.00.01`.
    pub vbios_version: String,
    /// Architecture, e.g. `Hopper`.
    pub architecture: String,
    /// Brand, e.g. `Tesla` (NVML's name for data-centre boards).
    pub brand: String,
    /// NUMA node the GPU is attached to.
    pub numa_node: Option<u32>,
    /// CPUs close to the GPU, as a cpuset list (`0-15,32-47`).
    pub cpu_affinity: Option<String>,
    /// Whether the GPU answered on this tick.
    pub up: bool,
    /// Why it did not (`gpu_lost`, ...); empty while up.
    pub error: String,
    /// Instantaneous utilization as NVML's `nvmlDeviceGetUtilizationRates` reports it.
    pub utilization: Option<GpuUtilization>,
    /// Summary of the utilization samples buffered since the previous tick.
    pub busy: Option<BusySummary>,
    /// Device memory, in bytes.
    pub memory: Option<GpuMemory>,
    /// Die temperature.
    pub temperature_celsius: Option<f64>,
    /// Temperature at which the GPU starts slowing down.
    pub slowdown_temperature_celsius: Option<f64>,
    /// Performance state: 0 (P0, fastest) to 15.
    pub performance_state: Option<u32>,
    /// The board's default power limit (the enforced one below it means someone capped it).
    pub power_limit_default_watts: Option<f64>,
    /// Mean fan speed as a share of the maximum (absent on passively cooled boards).
    pub fan_speed_ratio: Option<f64>,
    /// Video encoder utilization over NVML's last sample period.
    pub encoder_ratio: Option<f64>,
    /// Video decoder utilization (NVDEC; data pipelines that decode video or JPEG on the GPU).
    pub decoder_ratio: Option<f64>,
    /// Board power draw.
    pub power_watts: Option<f64>,
    /// Enforced power limit.
    pub power_limit_watts: Option<f64>,
    /// Energy since the driver loaded.
    pub energy_joules: Option<f64>,
    /// Current and maximum clocks.
    pub clocks: Vec<GpuClock>,
    /// Raw clock-event (throttle) reason bitmask.
    pub throttle_reasons: Option<u64>,
    /// PCIe link state and traffic.
    pub pcie: PcieLink,
    /// Aggregate corrected ECC errors.
    pub ecc_corrected: Option<u64>,
    /// Aggregate uncorrected ECC errors.
    pub ecc_uncorrected: Option<u64>,
    /// Seconds the clocks were held down by the power cap since the driver loaded.
    pub violation_power_seconds: Option<f64>,
    /// Seconds the clocks were held down by thermal limits since the driver loaded.
    pub violation_thermal_seconds: Option<f64>,
    /// Row remapping (Ampere and newer): the memory's answer to failing cells.
    pub remapped_rows: Option<RemappedRows>,
    /// NVLink links and traffic; `None` on GPUs without NVLink.
    pub nvlink: Option<NvLinkState>,
    /// GPM rates over the last interval (Hopper and newer); `None` elsewhere.
    pub gpm: Option<GpmMetrics>,
    /// XID errors seen since the exporter started, by XID code.
    pub xid_errors: Vec<(u64, u64)>,
    /// MIG mode, where the GPU has it.
    pub mig_enabled: Option<bool>,
    /// MIG devices while MIG mode is on.
    pub mig_devices: Vec<MigDevice>,
    /// The busiest processes on the GPU (bounded by configuration).
    pub processes: Vec<GpuProcess>,
    /// How many distinct processes have a context on the GPU (before the bound).
    pub process_count: Option<u32>,
    /// The pods (and containers) the kubelet assigned the GPU to, sorted; several under
    /// time-slicing or MIG, none when unassigned or off Kubernetes.
    pub pods: Vec<PodRef>,
    /// Whether the kubelet can hand the GPU (or its MIG devices) to pods (`None` off Kubernetes).
    pub allocatable: Option<bool>,
    /// How long the GPU has been assigned to a pod with no process or no activity.
    pub allocated_idle_seconds: Option<f64>,
    /// Assigned but idle for longer than the configured limit.
    pub allocated_idle: bool,
    /// Features this GPU or driver does not offer (never fetched again), sorted.
    pub unsupported: Vec<&'static str>,
}

/// `nvmlDeviceGetUtilizationRates`, as ratios.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuUtilization {
    /// Share of the last sample period a kernel was running ("GPU-Util").
    pub gpu_ratio: f64,
    /// Share of the last sample period device memory was read or written.
    pub memory_ratio: f64,
}

/// Busy-fraction summary of NVML's utilization samples within one interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BusySummary {
    /// Mean utilization.
    pub mean_ratio: f64,
    /// Highest sample.
    pub max_ratio: f64,
    /// Share of samples at or near zero: the GPU waiting.
    pub idle_share_ratio: f64,
    /// Number of samples summarised.
    pub samples: u32,
}

/// Device memory, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuMemory {
    /// Installed.
    pub total_bytes: u64,
    /// Allocated by processes.
    pub used_bytes: u64,
}

/// One clock domain.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuClock {
    /// `sm`, `memory` or `graphics`.
    pub domain: &'static str,
    /// Current frequency.
    pub hertz: Option<f64>,
    /// Maximum frequency.
    pub max_hertz: Option<f64>,
}

/// PCIe link of a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PcieLink {
    /// Current generation.
    pub generation: Option<u32>,
    /// Current width (lanes).
    pub width: Option<u32>,
    /// Maximum generation of GPU and slot.
    pub max_generation: Option<u32>,
    /// Maximum width.
    pub max_width: Option<u32>,
    /// Bytes per second sent by the GPU (NVML's 20 ms sample).
    pub tx_bytes_per_second: Option<f64>,
    /// Bytes per second received by the GPU.
    pub rx_bytes_per_second: Option<f64>,
    /// Link-level replays since the driver loaded.
    pub replays: Option<u64>,
}

/// A process with a context on a GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuProcess {
    /// Process id as seen by the host.
    pub pid: u32,
    /// Command name from /proc/<pid>/comm; `unknown` when not readable.
    pub command: String,
    /// `compute` or `graphics`.
    pub kind: &'static str,
    /// Device memory the process holds.
    pub used_memory_bytes: u64,
    /// Share of the interval the process's kernels occupied the SMs; `None` when the driver
    /// does not report per-process utilization.
    pub sm_ratio: Option<f64>,
    /// Share of the interval the process read or wrote device memory.
    pub memory_ratio: Option<f64>,
    /// The MIG GPU instance the process runs in, where the driver names one.
    pub gpu_instance_id: Option<u32>,
}

/// Row-remapping state of a GPU's memory.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RemappedRows {
    /// Rows remapped after correctable errors.
    pub correctable: u64,
    /// Rows remapped after uncorrectable errors.
    pub uncorrectable: u64,
    /// A remap waits for the next GPU reset.
    pub pending: bool,
    /// A remap failed: the GPU needs service.
    pub failed: bool,
}

/// NVLink links of a GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NvLinkState {
    /// Per link index, whether it is active.
    pub links: Vec<bool>,
    /// Data bytes sent over all active links since the driver loaded.
    pub tx_bytes: Option<u64>,
    /// Data bytes received over all active links since the driver loaded.
    pub rx_bytes: Option<u64>,
}

/// GPM (GPU performance monitoring) metrics between two samples one interval apart.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpmMetrics {
    /// Share of time SMs had at least one warp resident (NVIDIA's "SM activity").
    pub sm_activity_ratio: f64,
    /// Resident warps relative to the maximum the SMs can hold.
    pub sm_occupancy_ratio: f64,
    /// Share of time any tensor core pipe was busy.
    pub tensor_activity_ratio: f64,
    /// Share of peak DRAM bandwidth used.
    pub dram_bandwidth_ratio: f64,
}

/// A MIG device (GPU instance slice) of a GPU in MIG mode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigDevice {
    /// Position among the parent's MIG devices.
    pub index: u32,
    /// MIG UUID, e.g. `MIG-2b2c...`, as device plugins hand it to pods.
    pub uuid: String,
    /// GPU instance id.
    pub gpu_instance_id: Option<u32>,
    /// Memory of the instance.
    pub memory: Option<GpuMemory>,
    /// GPM SM activity of the GPU instance over the last interval (Hopper and newer).
    pub sm_activity_ratio: Option<f64>,
    /// GPM graphics activity of the GPU instance over the last interval: the share of it any
    /// kernel ran (Hopper and newer), the instance's busy time.
    pub busy_ratio: Option<f64>,
}

/// A container of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Container name.
    pub container: String,
}
