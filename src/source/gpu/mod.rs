//! GPUs through NVML (nvml-wrapper, which loads the library at run time).
//!
//! Failure is normal here and stays local: without a usable library the source reports NVML
//! down with the reason and retries with doubling waits; a call one GPU or driver does not
//! support is tried once, remembered and never logged again; a GPU that falls off the bus is
//! reported down while the others keep answering. All calls run on the sampler thread.

pub mod summary;
mod xid;

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformancePolicy, Sampling,
    TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, GpmSample, Nvml};

use super::{Source, SourceError};
use crate::config::GpuSource as GpuConfig;
use crate::snapshot::{
    GpmMetrics, GpuClock, GpuDevice, GpuMemory, GpuProcess, GpuSnapshot, GpuUtilization,
    NvLinkState, RemappedRows, Snapshot,
};

/// A short, stable reason for an NVML error, used as a label value and in logs.
pub fn error_reason(error: &NvmlError) -> &'static str {
    match error {
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => "library_not_found",
        NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound => "symbol_missing",
        NvmlError::DriverNotLoaded => "driver_not_loaded",
        NvmlError::NoPermission => "no_permission",
        NvmlError::Uninitialized => "uninitialized",
        NvmlError::GpuLost => "gpu_lost",
        NvmlError::Timeout => "timeout",
        NvmlError::NotSupported => "not_supported",
        NvmlError::InsufficientSize(_) => "insufficient_size",
        NvmlError::ResetRequired => "reset_required",
        NvmlError::IrqIssue => "irq_issue",
        NvmlError::CorruptedInfoROM => "corrupted_inforom",
        _ => "unknown",
    }
}

/// Every feature the source asks NVML for, as exported in `gpu_feature_supported`.
pub const FEATURES: [&str; 27] = [
    "name",
    "pci_info",
    "numa_node",
    "cpu_affinity",
    "utilization",
    "utilization_samples",
    "memory",
    "temperature",
    "temperature_thresholds",
    "power",
    "power_limit",
    "energy",
    "clocks",
    "max_clocks",
    "throttle_reasons",
    "pcie_link",
    "pcie_max_link",
    "pcie_throughput",
    "pcie_replays",
    "ecc",
    "processes",
    "process_utilization",
    "violation_time",
    "remapped_rows",
    "nvlink",
    "nvlink_throughput",
    "gpm",
];

/// What the source remembers about one GPU between ticks, keyed by UUID so that a different
/// GPU appearing at an index starts afresh.
#[derive(Debug, Default)]
struct GpuMemo {
    /// Features answered with NOT_SUPPORTED or missing from the library: never asked again.
    unsupported: BTreeSet<&'static str>,
    /// Newest utilization sample already summarised (driver clock, opaque).
    last_sample: u64,
    /// Newest per-process utilization sample already used (driver clock, opaque).
    last_process_sample: u64,
    /// Identity read once: model, PCI bus id, NUMA node, CPU affinity.
    identity: Option<(String, String, Option<u32>, Option<String>)>,
    /// Features that failed with an unexpected error on the last tick (logged on change).
    failing: BTreeSet<&'static str>,
    /// The GPM sample of the previous tick: GPM rates come from two samples.
    gpm_previous: Option<GpmSample<'static>>,
}

/// A GPU that stopped answering part-way through a tick.
struct Lost(&'static str);

/// The gpu source.
pub struct GpuSource {
    config: GpuConfig,
    procfs: PathBuf,
    nvml: Option<&'static Nvml>,
    /// When to try initialising NVML next, and how long to wait after that if it fails.
    next_attempt: Duration,
    backoff: Duration,
    last_error: Option<&'static str>,
    versions: (String, String),
    memos: HashMap<String, GpuMemo>,
    /// UUID each index last answered with, to name a GPU that stops answering.
    uuids: HashMap<u32, String>,
    /// Indexes currently down, to log only changes.
    down: BTreeSet<u32>,
    /// XID errors counted by the event thread, and the watcher over the current GPUs.
    xid_counts: xid::XidCounts,
    xid_watcher: Option<xid::XidWatcher>,
}

impl GpuSource {
    /// A source loading `config.nvml_library`; process names are read below `procfs`.
    pub fn new(config: GpuConfig, procfs: PathBuf) -> Self {
        GpuSource {
            config,
            procfs,
            nvml: None,
            next_attempt: Duration::ZERO,
            backoff: Duration::ZERO,
            last_error: None,
            versions: Default::default(),
            memos: HashMap::new(),
            uuids: HashMap::new(),
            down: BTreeSet::new(),
            xid_counts: Default::default(),
            xid_watcher: None,
        }
    }

    /// Initialises NVML if it is time to try; `Err(reason)` while it cannot be had.
    fn connect(&mut self, now: Duration) -> Result<&'static Nvml, &'static str> {
        if let Some(nvml) = self.nvml {
            return Ok(nvml);
        }
        if now < self.next_attempt {
            return Err(self.last_error.unwrap_or("uninitialized"));
        }
        match Nvml::builder()
            .lib_path(OsStr::new(&self.config.nvml_library))
            .init()
        {
            Ok(nvml) => {
                // Devices borrow the Nvml: it lives as long as the process, like the driver.
                let nvml: &'static Nvml = Box::leak(Box::new(nvml));
                let driver = nvml.sys_driver_version().unwrap_or_default();
                let cuda = nvml
                    .sys_cuda_driver_version()
                    .map(|v| format!("{}.{}", v / 1000, v % 1000 / 10))
                    .unwrap_or_default();
                tracing::info!(driver = %driver, cuda = %cuda, library = %self.config.nvml_library.display(), "NVML initialised");
                self.versions = (driver, cuda);
                self.nvml = Some(nvml);
                self.last_error = None;
                self.backoff = Duration::ZERO;
                Ok(nvml)
            }
            Err(error) => {
                let reason = error_reason(&error);
                if self.last_error != Some(reason) {
                    tracing::warn!(reason, error = %error, library = %self.config.nvml_library.display(), "NVML unavailable; GPU metrics are off until it can be loaded (retrying)");
                }
                self.last_error = Some(reason);
                self.backoff = (self.backoff * 2).clamp(
                    Duration::from_secs(1),
                    self.config.nvml_retry_max_interval.0,
                );
                self.next_attempt = now + self.backoff;
                Err(reason)
            }
        }
    }

    fn sample_device(&mut self, nvml: &'static Nvml, index: u32) -> GpuDevice {
        let answered = nvml
            .device_by_index(index)
            .and_then(|device| Ok((device.uuid()?, device)));
        let (uuid, result) = match answered {
            Ok((uuid, device)) => {
                self.uuids.insert(index, uuid.clone());
                let memo = self.memos.entry(uuid.clone()).or_default();
                let mut gpu = GpuDevice {
                    uuid: uuid.clone(),
                    ..GpuDevice::default()
                };
                let result = read_device(
                    nvml,
                    &device,
                    memo,
                    &mut gpu,
                    &self.procfs,
                    self.config.max_processes_per_gpu,
                )
                .map(|()| gpu);
                (uuid, result)
            }
            // A lost GPU fails even its handle lookup: report it under the UUID it last had.
            Err(error) => (
                self.uuids.get(&index).cloned().unwrap_or_default(),
                Err(Lost(error_reason(&error))),
            ),
        };
        let memo = self.memos.entry(uuid.clone()).or_default();
        let mut gpu = result.unwrap_or_else(|Lost(reason)| GpuDevice {
            // Identity only: no stale or partial measurements of a GPU that is not answering.
            error: reason.to_string(),
            ..GpuDevice::default()
        });
        gpu.index = index;
        gpu.up = gpu.error.is_empty();
        gpu.uuid = uuid;
        if let Some((model, bus_id, numa, affinity)) = &memo.identity {
            gpu.model = model.clone();
            gpu.pci_bus_id = bus_id.clone();
            gpu.numa_node = *numa;
            gpu.cpu_affinity = affinity.clone();
        }
        gpu.unsupported = memo.unsupported.iter().copied().collect();
        let was_down = self.down.remove(&index);
        match (was_down, gpu.up) {
            (true, true) => tracing::info!(gpu = index, uuid = %gpu.uuid, "GPU answering again"),
            (false, false) => {
                tracing::warn!(gpu = index, uuid = %gpu.uuid, reason = %gpu.error, "GPU not answering; reported down, other GPUs continue")
            }
            _ => {}
        }
        if !gpu.up {
            self.down.insert(index);
        }
        gpu
    }
}

impl GpuSource {
    /// Keeps an XID watcher registered on exactly the answering GPUs, and copies its counts.
    fn watch_xids(&mut self, nvml: &'static Nvml, devices: &mut [GpuDevice]) {
        let answering: Vec<(u32, String)> = devices
            .iter()
            .filter(|d| d.up)
            .map(|d| (d.index, d.uuid.clone()))
            .collect();
        if self.xid_watcher.as_ref().map(|w| &w.gpus) != Some(&answering) {
            // Replacing the watcher stops the old thread.
            self.xid_watcher = Some(xid::watch(nvml, answering, self.xid_counts.clone()));
        }
        let counts = self.xid_counts.lock().unwrap_or_else(|p| p.into_inner());
        for device in devices {
            if let Some(codes) = counts.get(&device.uuid) {
                device.xid_errors = codes.iter().map(|(code, n)| (*code, *n)).collect();
            }
        }
    }
}

/// Asks NVML for one feature through `memo`: unsupported features are skipped, a lost GPU
/// aborts the device's tick, "not found" is an empty answer, other errors drop the feature
/// for this tick and are logged when they start and stop.
fn ask<T>(
    memo: &mut GpuMemo,
    uuid: &str,
    feature: &'static str,
    call: impl FnOnce() -> Result<T, NvmlError>,
) -> Result<Option<T>, Lost> {
    if memo.unsupported.contains(feature) {
        return Ok(None);
    }
    match call() {
        Ok(value) => {
            if memo.failing.remove(feature) {
                tracing::info!(gpu = uuid, feature, "NVML call recovered");
            }
            Ok(Some(value))
        }
        Err(NvmlError::NotFound) => Ok(None),
        Err(
            error @ (NvmlError::NotSupported
            | NvmlError::FailedToLoadSymbol(_)
            | NvmlError::FunctionNotFound),
        ) => {
            tracing::debug!(
                gpu = uuid,
                feature,
                reason = error_reason(&error),
                "not supported on this GPU or driver; not asked again"
            );
            memo.unsupported.insert(feature);
            Ok(None)
        }
        Err(NvmlError::GpuLost) => Err(Lost("gpu_lost")),
        Err(error) => {
            if memo.failing.insert(feature) {
                tracing::warn!(gpu = uuid, feature, error = %error, "NVML call failed");
            }
            Ok(None)
        }
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
        let model = ask(memo, &uuid, "name", || device.name())?.unwrap_or_default();
        let bus_id = ask(memo, &uuid, "pci_info", || device.pci_info())?
            .map(|p| p.bus_id)
            .unwrap_or_default();
        let numa = ask(memo, &uuid, "numa_node", || device.numa_node_id())?;
        let affinity = ask(memo, &uuid, "cpu_affinity", || device.cpu_affinity(16))?
            .map(|words| summary::cpu_list(&words));
        memo.identity = Some((model, bus_id, numa, affinity));
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
        free_bytes: m.free,
        reserved_bytes: m.reserved,
    });
    gpu.temperature_celsius = ask(memo, &uuid, "temperature", || {
        device.temperature(TemperatureSensor::Gpu)
    })?
    .map(f64::from);
    gpu.slowdown_temperature_celsius = ask(memo, &uuid, "temperature_thresholds", || {
        device.temperature_threshold(TemperatureThreshold::Slowdown)
    })?
    .map(f64::from);
    gpu.shutdown_temperature_celsius = ask(memo, &uuid, "temperature_thresholds", || {
        device.temperature_threshold(TemperatureThreshold::Shutdown)
    })?
    .map(f64::from);
    gpu.power_watts =
        ask(memo, &uuid, "power", || device.power_usage())?.map(|mw| f64::from(mw) / 1000.0);
    gpu.power_limit_watts = ask(memo, &uuid, "power_limit", || device.enforced_power_limit())?
        .map(|mw| f64::from(mw) / 1000.0);
    gpu.energy_joules = ask(memo, &uuid, "energy", || device.total_energy_consumption())?
        .map(|mj| mj as f64 / 1000.0);
    for (domain, clock) in [
        ("sm", Clock::SM),
        ("memory", Clock::Memory),
        ("graphics", Clock::Graphics),
    ] {
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
    gpu.processes = read_processes(device, memo, &uuid, procfs, max_processes)?;
    Ok(())
}

/// Field ids of nvml.h: NVLink data counters (per link, in KiB) and row remapping.
const FI_NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
const FI_NVLINK_THROUGHPUT_DATA_RX: u32 = 139;
const FI_REMAPPED_ROWS: [u32; 4] = [142, 143, 144, 145];

/// NVML has at most this many NVLink links per GPU (NVML_NVLINK_MAX_LINKS).
const NVLINK_MAX_LINKS: u32 = 18;

fn remapped_rows(device: &Device) -> Result<RemappedRows, NvmlError> {
    let ids = FI_REMAPPED_ROWS.map(FieldId);
    let mut values = [0u64; 4];
    for (slot, sample) in values.iter_mut().zip(device.field_values_for(&ids)?) {
        *slot = match sample?.value? {
            SampleValue::U64(v) => v,
            SampleValue::U32(v) => u64::from(v),
            _ => return Err(NvmlError::UnexpectedVariant(0)),
        };
    }
    Ok(RemappedRows {
        correctable: values[0],
        uncorrectable: values[1],
        pending: values[2] != 0,
        failed: values[3] != 0,
    })
}

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

/// Data bytes (sent, received) over `links`, summed. These fields are per link (scope id =
/// link index), which nvml-wrapper's field-value call cannot express, so this calls
/// nvmlDeviceGetFieldValues directly.
fn nvlink_bytes(nvml: &Nvml, device: &Device, links: &[u32]) -> Result<(u64, u64), NvmlError> {
    use nvml_wrapper_sys::bindings::nvmlFieldValue_t;
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetFieldValues.as_ref())?;
    let mut values: Vec<nvmlFieldValue_t> = links
        .iter()
        .flat_map(|&link| {
            [FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX].map(|field| {
                // SAFETY: a plain C struct for which all zeroes is a valid value.
                let mut value: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
                value.fieldId = field;
                value.scopeId = link;
                value
            })
        })
        .collect();
    // SAFETY: the handle is valid while `device` lives, and `values` holds exactly the
    // number of initialised entries we pass.
    nvml_try(unsafe { sym(device.handle(), values.len() as i32, values.as_mut_ptr()) })?;
    let (mut tx, mut rx) = (0u64, 0u64);
    for value in &values {
        nvml_try(value.nvmlReturn)?;
        // SAFETY: NVML reports these counters as unsigned long long.
        let kib = unsafe { value.value.ullVal };
        match value.fieldId {
            FI_NVLINK_THROUGHPUT_DATA_TX => tx = tx.saturating_add(kib),
            _ => rx = rx.saturating_add(kib),
        }
    }
    Ok((tx.saturating_mul(1024), rx.saturating_mul(1024)))
}

/// GPM rates between the previous tick's sample and a new one (none on the first tick).
fn read_gpm(
    nvml: &'static Nvml,
    device: &Device<'static>,
    memo: &mut GpuMemo,
    uuid: &str,
) -> Result<Option<GpmMetrics>, Lost> {
    if memo.gpm_previous.is_none() {
        // GPUs before Hopper answer NOT_SUPPORTED or plainly "no": either way, unsupported.
        match ask(memo, uuid, "gpm", || device.gpm_support())? {
            Some(true) => {}
            Some(false) => {
                memo.unsupported.insert("gpm");
                return Ok(None);
            }
            None => return Ok(None),
        }
    }
    let Some(sample) = ask(memo, uuid, "gpm", || device.gpm_sample())? else {
        return Ok(None);
    };
    let Some(previous) = memo.gpm_previous.replace(sample) else {
        return Ok(None);
    };
    let current = memo.gpm_previous.as_ref().expect("just stored");
    let ids = [
        GpmMetricId::SmUtil,
        GpmMetricId::SmOccupancy,
        GpmMetricId::AnyTensorUtil,
        GpmMetricId::DramBwUtil,
    ];
    let results = match nvml_wrapper::gpm::gpm_metrics_get(nvml, &previous, current, &ids) {
        Ok(results) => results,
        Err(NvmlError::GpuLost) => return Err(Lost("gpu_lost")),
        Err(_) => return Ok(None),
    };
    let values: Vec<f64> = results
        .into_iter()
        .map(|r| {
            r.map(|m| (m.value / 100.0).clamp(0.0, 1.0))
                .unwrap_or(f64::NAN)
        })
        .collect();
    if values.iter().any(|v| v.is_nan()) {
        return Ok(None);
    }
    Ok(Some(GpmMetrics {
        sm_activity_ratio: values[0],
        sm_occupancy_ratio: values[1],
        tensor_activity_ratio: values[2],
        dram_bandwidth_ratio: values[3],
    }))
}

fn read_processes(
    device: &Device,
    memo: &mut GpuMemo,
    uuid: &str,
    procfs: &std::path::Path,
    limit: usize,
) -> Result<Vec<GpuProcess>, Lost> {
    let compute = ask(memo, uuid, "processes", || {
        device.running_compute_processes()
    })?;
    let graphics = ask(memo, uuid, "graphics_processes", || {
        device.running_graphics_processes()
    })?;
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
                    ..GpuProcess::default()
                },
            );
        }
    }
    if by_pid.is_empty() {
        return Ok(Vec::new());
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
    Ok(top)
}

impl Source for GpuSource {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let nvml = match self.connect(now) {
            Ok(nvml) => nvml,
            Err(reason) => {
                snapshot.gpu = Some(GpuSnapshot {
                    nvml_error: reason.to_string(),
                    ..GpuSnapshot::default()
                });
                return Err(SourceError::Failed(format!("NVML unavailable: {reason}")));
            }
        };
        let count = match nvml.device_count() {
            Ok(count) => count,
            Err(error) => {
                let reason = error_reason(&error);
                snapshot.gpu = Some(GpuSnapshot {
                    nvml_error: reason.to_string(),
                    ..GpuSnapshot::default()
                });
                return Err(SourceError::Failed(format!(
                    "nvmlDeviceGetCount failed: {reason}"
                )));
            }
        };
        let mut devices: Vec<GpuDevice> = (0..count)
            .map(|index| self.sample_device(nvml, index))
            .collect();
        self.watch_xids(nvml, &mut devices);
        // Forget GPUs no longer counted (re-discovery when the count or UUIDs change).
        self.uuids.retain(|index, _| *index < count);
        self.memos
            .retain(|uuid, _| devices.iter().any(|d| &d.uuid == uuid));
        snapshot.gpu = Some(GpuSnapshot {
            nvml_up: true,
            nvml_error: String::new(),
            driver_version: self.versions.0.clone(),
            cuda_driver_version: self.versions.1.clone(),
            devices,
        });
        Ok(())
    }
}
