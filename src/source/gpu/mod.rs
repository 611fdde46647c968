//! GPUs through NVML (nvml-wrapper, which loads the library at run time).
//!
//! Failure is normal here and stays local: without a usable library the source reports NVML
//! down with the reason and retries with doubling waits; a call one GPU or driver does not
//! support is tried once, remembered and never logged again; a GPU that falls off the bus or
//! does not answer in time is reported down while the others keep answering. Each GPU is read
//! on a thread of its own (`worker`), XID events are awaited on another (`xid`).

mod device;
mod gpm;
mod memo;
mod raw;
pub mod summary;
mod worker;
mod xid;

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::{Source, SourceError};
use crate::config::GpuConfig;
use crate::snapshot::{GpuDevice, GpuSnapshot, Snapshot};

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
    /// One worker thread per GPU index.
    workers: Vec<worker::GpuWorker>,
    /// Indexes currently down, to log only changes.
    down: BTreeSet<u32>,
    /// Each GPU's processes at its last answer, by index.
    listed: HashMap<u32, Vec<u32>>,
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
            workers: Vec::new(),
            down: BTreeSet::new(),
            listed: HashMap::new(),
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

    /// Reads every GPU on its own thread, all against one deadline. Workers follow the device
    /// count, so GPUs that appear get a thread and those that vanish lose theirs.
    fn read_devices(&mut self, nvml: &'static Nvml, count: u32) -> Vec<GpuDevice> {
        self.workers.truncate(count as usize);
        for index in self.workers.len() as u32..count {
            let procfs = self.procfs.clone();
            let max = self.config.max_processes_per_gpu;
            self.workers
                .push(worker::GpuWorker::start(nvml, index, procfs, max));
        }
        let deadline = Instant::now() + self.config.timeout.0;
        self.workers.iter_mut().for_each(worker::GpuWorker::request);
        let devices: Vec<GpuDevice> = self
            .workers
            .iter_mut()
            .map(|w| w.collect(deadline))
            .collect();
        for gpu in &devices {
            match (self.down.contains(&gpu.index), gpu.up) {
                (true, true) => {
                    self.down.remove(&gpu.index);
                    // At the loss's level: a log read at `warn` that shows the loss shows its
                    // end (a loss alone reads as a GPU gone for good).
                    tracing::warn!(gpu = gpu.index, uuid = %gpu.uuid, "GPU answering again");
                }
                (false, false) => {
                    self.down.insert(gpu.index);
                    tracing::warn!(gpu = gpu.index, uuid = %gpu.uuid, reason = %gpu.error, "GPU not answering; reported down, other GPUs continue");
                }
                _ => {}
            }
        }
        self.down.retain(|index| *index < count);
        devices
    }

    /// The processes listed at their GPU's last answer that still run, of every GPU not among
    /// the `devices` that answered now.
    fn still_running(&self, devices: &[GpuDevice]) -> Vec<u32> {
        let answered: BTreeSet<u32> = devices.iter().filter(|d| d.up).map(|d| d.index).collect();
        unanswered(&self.listed, &answered, |pid| {
            self.procfs.join(pid.to_string()).exists()
        })
    }

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

/// Of the processes `listed` per GPU index, those of the GPUs not `answered` that are
/// `running`, in pid order.
fn unanswered(
    listed: &HashMap<u32, Vec<u32>>,
    answered: &BTreeSet<u32>,
    running: impl Fn(u32) -> bool,
) -> Vec<u32> {
    let pids: BTreeSet<u32> = listed
        .iter()
        .filter(|(index, _)| !answered.contains(index))
        .flat_map(|(_, pids)| pids.iter().copied())
        .filter(|&pid| running(pid))
        .collect();
    pids.into_iter().collect()
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
                    unanswered_processes: self.still_running(&[]),
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
                    unanswered_processes: self.still_running(&[]),
                    ..GpuSnapshot::default()
                });
                return Err(SourceError::Failed(format!(
                    "nvmlDeviceGetCount failed: {reason}"
                )));
            }
        };
        let mut devices = self.read_devices(nvml, count);
        self.watch_xids(nvml, &mut devices);
        let unanswered_processes = self.still_running(&devices);
        for device in devices.iter().filter(|d| d.up) {
            let pids = device.processes.iter().map(|p| p.pid).collect();
            self.listed.insert(device.index, pids);
        }
        self.listed.retain(|index, _| *index < count);
        snapshot.gpu = Some(GpuSnapshot {
            nvml_up: true,
            nvml_error: String::new(),
            driver_version: self.versions.0.clone(),
            cuda_driver_version: self.versions.1.clone(),
            devices,
            unanswered_processes,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_processes_of_a_gpu_not_answering_are_held_while_they_run() {
        let listed = HashMap::from([(0, vec![30, 10]), (1, vec![20, 10]), (2, vec![40])]);
        let running = |pid| pid != 40;
        // GPU 0 answered; 1 did not (its processes run); 2 did not (its process is gone).
        let held = unanswered(&listed, &BTreeSet::from([0]), running);
        assert_eq!(held, vec![10, 20]);
        // Every GPU answered: nothing is held.
        assert!(unanswered(&listed, &BTreeSet::from([0, 1, 2]), running).is_empty());
        // NVML itself did not answer: every process that runs.
        assert_eq!(
            unanswered(&listed, &BTreeSet::new(), running),
            vec![10, 20, 30]
        );
    }
}
