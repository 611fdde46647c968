//! What the analysis looks at: per GPU and tick, the figures the rules need, pulled out of a
//! snapshot (pure), and their averages over the window.

use std::collections::BTreeMap;

use crate::snapshot::{GpuDevice, ProcessContext, Snapshot};

/// Throttle-reason bits that hold clocks down for a reason worth reporting: software power
/// cap, hardware slowdown, software and hardware thermal slowdown, power brake. (Idle, sync
/// boost, application clocks and display clock settings are not bottlenecks.)
pub const LIMITING_THROTTLE_REASONS: u64 = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

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
    /// PCIe link below its maximum.
    pub pcie_degraded: Option<bool>,
    /// Processes on the GPU.
    pub processes: Option<u32>,
    /// What groups this GPU with others of the same job (a process, pod or Slurm job).
    pub job: Option<String>,
    /// The main GPU process's busiest thread, share of a core.
    pub busiest_thread: Option<f64>,
    /// Data-loader workers of the main GPU process.
    pub workers: Option<u32>,
    /// The busiest worker's share of a core.
    pub workers_max_cpu: Option<f64>,
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
    /// Host CPU used outside the GPU process trees.
    pub other_cpu: Option<f64>,
    /// Host CPU steal share.
    pub steal: Option<f64>,
}

/// Extracts one observation per GPU from a snapshot taken at `at` seconds.
pub fn observe(snapshot: &Snapshot, at: f64) -> Vec<GpuObservation> {
    let Some(gpu) = &snapshot.gpu else {
        return Vec::new();
    };
    let contexts: BTreeMap<u32, &ProcessContext> =
        snapshot.processes.iter().map(|c| (c.pid, c)).collect();
    // A process on several GPUs makes them one job.
    let mut gpus_per_pid: BTreeMap<u32, u32> = BTreeMap::new();
    for device in &gpu.devices {
        for p in &device.processes {
            *gpus_per_pid.entry(p.pid).or_default() += 1;
        }
    }
    let disk_util = snapshot
        .disks
        .iter()
        .filter_map(|d| d.rates.map(|r| r.utilization_ratio))
        .fold(None, |max: Option<f64>, u| {
            Some(max.map_or(u, |m| m.max(u)))
        });
    let rates = snapshot.cpu.as_ref().and_then(|c| c.rates);
    let psi_io = snapshot
        .pressure
        .iter()
        .find(|p| p.resource == "io")
        .and_then(|p| p.rates.map(|r| r.some_ratio));
    gpu.devices
        .iter()
        .map(|device| {
            // The main GPU process: the one holding the most memory (processes are ranked).
            let main = device.processes.first();
            let context = main.and_then(|p| contexts.get(&p.pid).copied());
            let job = main.and_then(|p| {
                let cgroup = context.and_then(|c| c.cgroup.as_ref());
                if gpus_per_pid.get(&p.pid).copied().unwrap_or(0) > 1 {
                    Some(format!("pid:{}", p.pid))
                } else if let Some(g) = cgroup.filter(|g| !g.pod_uid.is_empty()) {
                    Some(format!("pod:{}", g.pod_uid))
                } else {
                    cgroup
                        .filter(|g| !g.slurm_job.is_empty())
                        .map(|g| format!("slurm:{}", g.slurm_job))
                }
            });
            GpuObservation {
                at,
                index: device.index,
                uuid: device.uuid.clone(),
                up: device.up,
                busy: device
                    .busy
                    .map(|b| b.mean_ratio)
                    .or(device.utilization.map(|u| u.gpu_ratio)),
                idle_share: device.busy.map(|b| b.idle_share_ratio),
                sm_activity: device.gpm.map(|g| g.sm_activity_ratio),
                memory_used_ratio: device
                    .memory
                    .filter(|m| m.total_bytes > 0)
                    .map(|m| m.used_bytes as f64 / m.total_bytes as f64),
                throttled: device
                    .throttle_reasons
                    .map(|r| r & LIMITING_THROTTLE_REASONS != 0),
                thermal_margin: device
                    .slowdown_temperature_celsius
                    .zip(device.temperature_celsius)
                    .map(|(s, t)| s - t),
                hardware_errors: hardware_errors(device),
                remap_trouble: device.remapped_rows.is_some_and(|r| r.pending || r.failed),
                pcie_degraded: pcie_degraded(device),
                processes: device.process_count,
                job,
                busiest_thread: context.and_then(|c| c.busiest_thread_ratio),
                workers: context.map(|c| c.workers.count),
                workers_max_cpu: context.and_then(|c| c.workers.max_cpu_ratio),
                workers_disk_wait: context.map(|c| c.workers.disk_wait),
                workers_blkio: context.and_then(|c| c.workers.blkio_delay_ratio),
                cgroup_throttled: context.and_then(|c| c.cgroup.as_ref()?.throttled_ratio),
                numa_mismatch: context.and_then(|c| {
                    let node = device.numa_node?;
                    (!c.numa_nodes.is_empty()).then(|| c.numa_nodes.iter().any(|n| *n != node))
                }),
                disk_util,
                iowait: rates.map(|r| r.iowait_ratio),
                psi_io,
                host_cpu: rates.map(|r| r.busy_ratio),
                other_cpu: snapshot.other_cpu_ratio,
                steal: rates.map(|r| r.steal_ratio),
            }
        })
        .collect()
}

fn hardware_errors(device: &GpuDevice) -> Option<u64> {
    let xids: u64 = device.xid_errors.iter().map(|(_, n)| n).sum();
    Some(xids + device.ecc_uncorrected.unwrap_or(0))
}

fn pcie_degraded(device: &GpuDevice) -> Option<bool> {
    let p = device.pcie;
    Some(p.generation? < p.max_generation? || p.width? < p.max_width?)
}

/// Mean of the values present over the window; `None` if none is.
pub fn mean(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let (sum, n) = values
        .flatten()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Share of the window in which a flag was set, over the ticks where it is known.
pub fn share(values: impl Iterator<Item = Option<bool>>) -> Option<f64> {
    mean(values.map(|v| v.map(|b| if b { 1.0 } else { 0.0 })))
}
