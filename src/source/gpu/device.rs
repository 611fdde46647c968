//! Reading one GPU: every NVML call for a device, with the memory that makes repeated reads
//! cheap and quiet (unsupported features, last-seen sample timestamps, the previous GPM
//! sample). A [`DeviceReader`] serves one NVML index and lives on that GPU's worker thread.

use std::collections::HashMap;
use std::path::PathBuf;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformancePolicy, Sampling,
    TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::gpm::{read_gpm, read_mig_devices};
use super::memo::{ask, GpuMemo, Identity, Lost};
use super::raw::{nvlink_bytes, remapped_rows};
use super::{error_reason, summary};
use crate::snapshot::{GpuClock, GpuDevice, GpuMemory, GpuProcess, GpuUtilization, NvLinkState};

/// Reads the GPU at one NVML index, tick after tick.
pub struct DeviceReader {
    nvml: &'static Nvml,
    index: u32,
    procfs: PathBuf,
    max_processes: usize,
    /// UUID the index last answered with, to name the GPU when it stops answering.
    uuid: String,
    memo: GpuMemo,
}

impl DeviceReader {
    /// A reader for the GPU at `index`; process names are read below `procfs`.
    pub fn new(nvml: &'static Nvml, index: u32, procfs: PathBuf, max_processes: usize) -> Self {
        DeviceReader {
            nvml,
            index,
            procfs,
            max_processes,
            uuid: String::new(),
            memo: GpuMemo::default(),
        }
    }

    /// One tick's reading. A GPU that does not answer comes back with `up == false`, the
    /// reason in `error`, and identity only: no stale or partial measurements.
    pub fn read(&mut self) -> GpuDevice {
        let answered = self
            .nvml
            .device_by_index(self.index)
            .and_then(|device| Ok((device.uuid()?, device)));
        let result = match answered {
            Ok((uuid, device)) => {
                if uuid != self.uuid {
                    self.memo = GpuMemo::default();
                    self.uuid = uuid.clone();
                }
                let mut gpu = GpuDevice {
                    uuid,
                    ..GpuDevice::default()
                };
                read_device(
                    self.nvml,
                    &device,
                    &mut self.memo,
                    &mut gpu,
                    &self.procfs,
                    self.max_processes,
                )
                .map(|()| gpu)
            }
            // A lost GPU fails even its handle lookup.
            Err(error) => Err(Lost(error_reason(&error))),
        };
        let mut gpu = result.unwrap_or_else(|Lost(reason)| GpuDevice {
            error: reason.to_string(),
            ..GpuDevice::default()
        });
        gpu.index = self.index;
        gpu.up = gpu.error.is_empty();
        gpu.uuid = self.uuid.clone();
        if let Some(identity) = &self.memo.identity {
            identity.apply(&mut gpu);
        }
        gpu.unsupported = self.memo.unsupported.iter().copied().collect();
        gpu
    }
}

fn mhz(value: u32) -> f64 {
    f64::from(value) * 1e6
}

fn read_device(
    nvml: &'static Nvml,
    device: &Device<'static>,
    memo: &mut GpuMemo,
    gpu: &mut GpuDevice,
    procfs: &std::path::Path,
    max_processes: usize,
) -> Result<(), Lost> {
    let uuid = gpu.uuid.clone();
    if memo.identity.is_none() {
        memo.identity = Some(Identity::read(memo, &uuid, device)?);
    }

    gpu.utilization =
        ask(memo, &uuid, "utilization", || device.utilization_rates())?.map(|u| GpuUtilization {
            gpu_ratio: f64::from(u.gpu) / 100.0,
            memory_ratio: f64::from(u.memory) / 100.0,
        });
    let last_sample = memo.last_sample;
    if let Some(samples) = ask(memo, &uuid, "utilization_samples", || {
        device.samples(Sampling::GpuUtilization, last_sample)
    })? {
        memo.last_sample = samples
            .iter()
            .map(|s| s.timestamp)
            .max()
            .unwrap_or(last_sample);
        let percentages: Vec<u32> = samples
            .iter()
            .map(|s| match s.value {
                SampleValue::U32(v) => v,
                SampleValue::U64(v) => v.min(100) as u32,
                SampleValue::F64(v) => v.clamp(0.0, 100.0) as u32,
                SampleValue::I64(v) => v.clamp(0, 100) as u32,
            })
            .collect();
        gpu.busy = summary::busy_summary(&percentages);
    }
    gpu.memory = ask(memo, &uuid, "memory", || device.memory_info())?.map(|m| GpuMemory {
        total_bytes: m.total,
        used_bytes: m.used,
    });
    gpu.temperature_celsius = ask(memo, &uuid, "temperature", || {
        device.temperature(TemperatureSensor::Gpu)
    })?
    .map(f64::from);
    gpu.slowdown_temperature_celsius = ask(memo, &uuid, "temperature_thresholds", || {
        device.temperature_threshold(TemperatureThreshold::Slowdown)
    })?
    .map(f64::from);
    gpu.power_watts =
        ask(memo, &uuid, "power", || device.power_usage())?.map(|mw| f64::from(mw) / 1000.0);
    gpu.power_limit_watts = ask(memo, &uuid, "power_limit", || device.enforced_power_limit())?
        .map(|mw| f64::from(mw) / 1000.0);
    gpu.energy_joules = ask(memo, &uuid, "energy", || device.total_energy_consumption())?
        .map(|mj| mj as f64 / 1000.0);
    gpu.power_limit_default_watts = ask(memo, &uuid, "power_limit_default", || {
        device.power_management_limit_default()
    })?
    .map(|mw| f64::from(mw) / 1000.0);
    gpu.performance_state = ask(memo, &uuid, "performance_state", || {
        device.performance_state()
    })?
    .map(|p| p.as_c())
    .filter(|p| *p <= 15);
    gpu.fan_speed_ratio = match ask(memo, &uuid, "fans", || device.num_fans())? {
        Some(fans) if fans > 0 => {
            let speeds: Option<Vec<u32>> = (0..fans)
                .map(|fan| ask(memo, &uuid, "fans", || device.fan_speed(fan)))
                .collect::<Result<Vec<_>, Lost>>()?
                .into_iter()
                .collect();
            // The mean over the board's fans (a card has one to three).
            speeds.map(|s| s.iter().map(|p| f64::from(*p)).sum::<f64>() / 100.0 / s.len() as f64)
        }
        _ => None,
    };
    gpu.encoder_ratio = ask(memo, &uuid, "encoder", || device.encoder_utilization())?
        .map(|u| f64::from(u.utilization.min(100)) / 100.0);
    gpu.decoder_ratio = ask(memo, &uuid, "decoder", || device.decoder_utilization())?
        .map(|u| f64::from(u.utilization.min(100)) / 100.0);
    // The graphics clock is left out: it runs with the SM clock on data-centre GPUs.
    for (domain, clock) in [("sm", Clock::SM), ("memory", Clock::Memory)] {
        let hertz = ask(memo, &uuid, "clocks", || device.clock_info(clock))?.map(mhz);
        let max_hertz = ask(memo, &uuid, "max_clocks", || device.max_clock_info(clock))?.map(mhz);
        if hertz.is_some() || max_hertz.is_some() {
            gpu.clocks.push(GpuClock {
                domain,
                hertz,
                max_hertz,
            });
        }
    }
    gpu.throttle_reasons = ask(memo, &uuid, "throttle_reasons", || {
        device.current_throttle_reasons()
    })?
    .map(|r| r.bits());
    gpu.pcie.generation = ask(memo, &uuid, "pcie_link", || device.current_pcie_link_gen())?;
    gpu.pcie.width = ask(memo, &uuid, "pcie_link", || {
        device.current_pcie_link_width()
    })?;
    gpu.pcie.max_generation = ask(memo, &uuid, "pcie_max_link", || device.max_pcie_link_gen())?;
    gpu.pcie.max_width = ask(memo, &uuid, "pcie_max_link", || {
        device.max_pcie_link_width()
    })?;
    // NVML reports PCIe throughput in KB/s.
    gpu.pcie.tx_bytes_per_second = ask(memo, &uuid, "pcie_throughput", || {
        device.pcie_throughput(PcieUtilCounter::Send)
    })?
    .map(|kb| f64::from(kb) * 1024.0);
    gpu.pcie.rx_bytes_per_second = ask(memo, &uuid, "pcie_throughput", || {
        device.pcie_throughput(PcieUtilCounter::Receive)
    })?
    .map(|kb| f64::from(kb) * 1024.0);
    gpu.pcie.replays =
        ask(memo, &uuid, "pcie_replays", || device.pcie_replay_counter())?.map(u64::from);
    gpu.ecc_corrected = ask(memo, &uuid, "ecc", || {
        device.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate)
    })?;
    gpu.ecc_uncorrected = ask(memo, &uuid, "ecc", || {
        device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
    })?;
    gpu.violation_power_seconds = ask(memo, &uuid, "violation_time", || {
        device.violation_status(PerformancePolicy::Power)
    })?
    .map(|v| v.violation_time as f64 / 1e9);
    gpu.violation_thermal_seconds = ask(memo, &uuid, "violation_time", || {
        device.violation_status(PerformancePolicy::Thermal)
    })?
    .map(|v| v.violation_time as f64 / 1e9);
    gpu.remapped_rows = ask(memo, &uuid, "remapped_rows", || remapped_rows(device))?;
    gpu.nvlink = read_nvlink(nvml, device, memo, &uuid)?;
    gpu.gpm = read_gpm(nvml, device, memo, &uuid)?;
    if let Some(mode) = ask(memo, &uuid, "mig", || device.mig_mode())? {
        gpu.mig_enabled = Some(mode.current == 1);
        if mode.current == 1 {
            gpu.mig_devices = read_mig_devices(nvml, device, memo, &uuid)?;
        }
    }
    (gpu.process_count, gpu.processes) =
        read_processes(device, memo, &uuid, procfs, max_processes)?;
    Ok(())
}

/// NVML has at most this many NVLink links per GPU (NVML_NVLINK_MAX_LINKS).
const NVLINK_MAX_LINKS: u32 = 18;

fn read_nvlink(
    nvml: &Nvml,
    device: &Device,
    memo: &mut GpuMemo,
    uuid: &str,
) -> Result<Option<NvLinkState>, Lost> {
    let mut links = Vec::new();
    for link in 0..NVLINK_MAX_LINKS {
        if memo.unsupported.contains("nvlink") {
            return Ok(None);
        }
        match device.link_wrapper_for(link).is_active() {
            Ok(active) => links.push(active),
            // Past the last link of this GPU.
            Err(NvmlError::InvalidArg) => break,
            Err(error) => {
                // Routes NOT_SUPPORTED (no NVLink at all) and GPU_IS_LOST through the cache.
                ask(memo, uuid, "nvlink", || Err::<(), _>(error))?;
                return Ok(None);
            }
        }
    }
    let active: Vec<u32> = (0..links.len() as u32)
        .filter(|&l| links[l as usize])
        .collect();
    let traffic = if active.is_empty() {
        None
    } else {
        ask(memo, uuid, "nvlink_throughput", || {
            nvlink_bytes(nvml, device, &active)
        })?
    };
    Ok(Some(NvLinkState {
        links,
        tx_bytes: traffic.map(|(tx, _)| tx),
        rx_bytes: traffic.map(|(_, rx)| rx),
    }))
}

/// The processes on a GPU: how many there are (`None` when the driver cannot list them) and
/// the top `limit` of them with their utilization and command name.
fn read_processes(
    device: &Device,
    memo: &mut GpuMemo,
    uuid: &str,
    procfs: &std::path::Path,
    limit: usize,
) -> Result<(Option<u32>, Vec<GpuProcess>), Lost> {
    let compute = ask(memo, uuid, "processes", || {
        device.running_compute_processes()
    })?;
    let graphics = ask(memo, uuid, "graphics_processes", || {
        device.running_graphics_processes()
    })?;
    let answered = compute.is_some() || graphics.is_some();
    let mut by_pid: HashMap<u32, GpuProcess> = HashMap::new();
    for (kind, list) in [("graphics", graphics), ("compute", compute)] {
        for info in list.into_iter().flatten() {
            let used = match info.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => bytes,
                UsedGpuMemory::Unavailable => 0,
            };
            // A process with both contexts is listed once, as compute.
            by_pid.insert(
                info.pid,
                GpuProcess {
                    pid: info.pid,
                    kind,
                    used_memory_bytes: used,
                    gpu_instance_id: info.gpu_instance_id,
                    ..GpuProcess::default()
                },
            );
        }
    }
    let count = answered.then_some(by_pid.len() as u32);
    if by_pid.is_empty() {
        return Ok((count, Vec::new()));
    }
    let last_seen = memo.last_process_sample;
    let utilization = ask(memo, uuid, "process_utilization", || {
        device.process_utilization_stats(last_seen)
    })?;
    let supported = !memo.unsupported.contains("process_utilization");
    let mut newest: HashMap<u32, (u64, f64, f64)> = HashMap::new();
    for sample in utilization.into_iter().flatten() {
        memo.last_process_sample = memo.last_process_sample.max(sample.timestamp);
        let entry = newest.entry(sample.pid).or_insert((0, 0.0, 0.0));
        if sample.timestamp >= entry.0 {
            *entry = (
                sample.timestamp,
                f64::from(sample.sm_util.min(100)) / 100.0,
                f64::from(sample.mem_util.min(100)) / 100.0,
            );
        }
    }
    let processes = by_pid
        .into_values()
        .map(|mut p| {
            if supported {
                // No sample for a listed process means it ran no kernel in the interval.
                let (_, sm, mem) = newest.get(&p.pid).copied().unwrap_or_default();
                p.sm_ratio = Some(sm);
                p.memory_ratio = Some(mem);
            }
            p
        })
        .collect();
    let mut top = summary::top_processes(processes, limit);
    for process in &mut top {
        process.command =
            std::fs::read_to_string(procfs.join(process.pid.to_string()).join("comm"))
                .map(|c| c.trim_end().to_string())
                .unwrap_or_else(|_| "unknown".into());
    }
    Ok((count, top))
}
