//! The scenario file: the whole fake machine, as a test writes it.

use super::*;

// ---------------------------------------------------------------------------------------------
// Scenario file
// ---------------------------------------------------------------------------------------------

/// The whole fake machine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    /// What nvmlInit_v2 answers, e.g. `driver_not_loaded`; none means success.
    pub init_error: Option<String>,
    pub driver_version: String,
    pub nvml_version: String,
    pub cuda_driver_version: i32,
    pub devices: Vec<Device>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            init_error: None,
            driver_version: "550.54.15".into(),
            nvml_version: "12.550.54.15".into(),
            cuda_driver_version: 12040,
            devices: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Device {
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub numa_node: Option<u32>,
    /// CPU affinity bitmask words (64 CPUs per word).
    pub cpu_affinity: Vec<u64>,
    pub memory_total: u64,
    pub memory_used: u64,
    pub memory_reserved: u64,
    pub utilization_gpu: u32,
    pub utilization_memory: u32,
    /// GPU utilization samples repeat this pattern, one value per `sample_period_ms`.
    pub samples: Vec<u32>,
    pub sample_period_ms: u64,
    pub temperature: u32,
    pub slowdown_temperature: u32,
    pub shutdown_temperature: u32,
    pub power_mw: u32,
    pub power_limit_mw: u32,
    /// The board's default power limit.
    pub power_default_limit_mw: u32,
    /// Performance state: 0 (P0, fastest) to 15; 32 is NVML's "unknown".
    pub performance_state: u32,
    /// Fan speeds in percent, one per fan; empty on passively cooled boards (NOT_SUPPORTED).
    pub fans: Vec<u32>,
    /// Video encoder and decoder utilization in percent.
    pub encoder_utilization: u32,
    pub decoder_utilization: u32,
    pub vbios_version: String,
    /// nvmlDeviceArchitecture_t: 7 Ampere, 8 Ada, 9 Hopper, 10 Blackwell.
    pub architecture: u32,
    /// nvmlBrandType_t: 2 Tesla (data-centre boards), 5 GeForce, 14 NVIDIA.
    pub brand: u32,
    /// Energy counter at library load; it then grows by power × time, as a real one does.
    pub energy_mj: u64,
    pub clock_sm_mhz: u32,
    pub clock_memory_mhz: u32,
    pub clock_graphics_mhz: u32,
    pub max_clock_sm_mhz: u32,
    pub max_clock_memory_mhz: u32,
    pub max_clock_graphics_mhz: u32,
    pub throttle_reasons: u64,
    pub pcie_generation: u32,
    pub pcie_width: u32,
    pub pcie_max_generation: u32,
    pub pcie_max_width: u32,
    pub pcie_tx_kbps: u32,
    pub pcie_rx_kbps: u32,
    pub pcie_replays: u32,
    pub ecc_corrected: u64,
    pub ecc_uncorrected: u64,
    /// Rows remapped after correctable / uncorrectable errors; a remap pending a reset; a
    /// failed remap (field values 142-145).
    pub remapped_correctable: u64,
    pub remapped_uncorrectable: u64,
    pub remap_pending: bool,
    pub remap_failed: bool,
    /// Time held down by the power cap / thermal limits since the driver loaded, in ns.
    pub violation_power_ns: u64,
    pub violation_thermal_ns: u64,
    /// NVLink links, each active or not; empty on a PCIe-only GPU (NOT_SUPPORTED).
    pub nvlinks: Vec<NvLink>,
    /// GPM metrics in percent; absent on GPUs before Hopper (GPM not supported).
    pub gpm: Option<Gpm>,
    /// XID errors this GPU raised, delivered once each, in order, to registered event sets.
    pub xids: Vec<u64>,
    /// MIG mode: absent on GPUs without MIG (NOT_SUPPORTED), else on or off.
    pub mig_mode: Option<bool>,
    /// MIG devices (instances) while MIG mode is on.
    pub mig: Vec<Mig>,
    pub processes: Vec<Process>,
    /// An emulated GPU: the timeline file a workload drives through `workloads/emugpu.py`.
    /// When set, utilization, samples, per-process utilization, GPM (on Hopper and later),
    /// memory used and the process list come from what the workload's kernels did, not from
    /// the fields above.
    pub timeline: Option<std::path::PathBuf>,
    /// Fallen off the bus: every call answers GPU_IS_LOST.
    pub lost: bool,
    /// A MIG device's handle (set by the library, never by a scenario): no utilization rates,
    /// samples or per-process utilization, as on its parent.
    #[serde(skip)]
    pub gpu_instance: bool,
    /// Function name → error it answers (`not_supported`, `gpu_lost`, `insufficient_size`, ...).
    pub errors: HashMap<String, String>,
    /// Function name → milliseconds it blocks before answering.
    pub delays_ms: HashMap<String, u64>,
}

impl Default for Device {
    fn default() -> Self {
        Device {
            uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: "00000000:17:00.0".into(),
            numa_node: Some(0),
            cpu_affinity: vec![0xffff],
            memory_total: 85_899_345_920,
            memory_used: 0,
            memory_reserved: 536_870_912,
            utilization_gpu: 0,
            utilization_memory: 0,
            samples: Vec::new(),
            sample_period_ms: 167,
            temperature: 35,
            slowdown_temperature: 87,
            shutdown_temperature: 92,
            power_mw: 70_000,
            power_limit_mw: 700_000,
            power_default_limit_mw: 700_000,
            performance_state: 0,
            fans: Vec::new(),
            encoder_utilization: 0,
            decoder_utilization: 0,
            vbios_version: "96.00.99.00.01".into(),
            architecture: 9,
            brand: 2,
            energy_mj: 1_000_000,
            clock_sm_mhz: 1980,
            clock_memory_mhz: 2619,
            clock_graphics_mhz: 1980,
            max_clock_sm_mhz: 1980,
            max_clock_memory_mhz: 2619,
            max_clock_graphics_mhz: 1980,
            throttle_reasons: 0,
            pcie_generation: 5,
            pcie_width: 16,
            pcie_max_generation: 5,
            pcie_max_width: 16,
            pcie_tx_kbps: 0,
            pcie_rx_kbps: 0,
            pcie_replays: 0,
            ecc_corrected: 0,
            ecc_uncorrected: 0,
            remapped_correctable: 0,
            remapped_uncorrectable: 0,
            remap_pending: false,
            remap_failed: false,
            violation_power_ns: 0,
            violation_thermal_ns: 0,
            nvlinks: Vec::new(),
            gpm: None,
            xids: Vec::new(),
            mig_mode: None,
            mig: Vec::new(),
            processes: Vec::new(),
            timeline: None,
            lost: false,
            gpu_instance: false,
            errors: HashMap::new(),
            delays_ms: HashMap::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvLink {
    pub active: bool,
    /// Data sent and received over the link since the driver loaded, in KiB.
    #[serde(default)]
    pub tx_kib: u64,
    #[serde(default)]
    pub rx_kib: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mig {
    pub uuid: String,
    pub gpu_instance_id: u32,
    pub memory_total: u64,
    #[serde(default)]
    pub memory_used: u64,
    /// GPM SM activity of the GPU instance, in percent.
    pub sm_util: Option<f64>,
    /// GPM graphics activity of the GPU instance (the share of time any kernel ran), in
    /// percent; with `sm_util`.
    pub graphics_util: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpm {
    /// The share of time any kernel ran (GRAPHICS_UTIL); NOT_SUPPORTED when absent.
    #[serde(default)]
    pub graphics_util: Option<f64>,
    pub sm_util: f64,
    pub sm_occupancy: f64,
    pub tensor_util: f64,
    pub dram_bw_util: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub pid: u32,
    pub used_memory: u64,
    /// `compute` (default) or `graphics`.
    #[serde(default = "compute")]
    pub kind: String,
    /// SM and memory utilization in percent, reported in per-process samples when set.
    pub sm: Option<u32>,
    #[serde(default)]
    pub mem: u32,
}

pub fn compute() -> String {
    "compute".into()
}
