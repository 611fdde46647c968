//! What a GPU's reader remembers between ticks, and the one way it asks NVML for a feature:
//! unsupported features asked once, a lost GPU aborting the tick, failures logged on change.

use std::collections::{BTreeSet, HashMap};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, GpmSample};

use super::{error_reason, summary};
use crate::snapshot::GpuDevice;

/// Every feature the source asks NVML for: the values of `gpu_feature_supported`'s `feature`
/// label (docs/metrics.md lists them).
const FEATURES: [&str; 37] = [
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
    "power_limit_default",
    "performance_state",
    "fans",
    "encoder",
    "decoder",
    "vbios",
    "architecture",
    "brand",
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
    "graphics_processes",
    "process_utilization",
    "violation_time",
    "remapped_rows",
    "nvlink",
    "nvlink_throughput",
    "gpm",
    "mig",
];

/// What the reader remembers about the GPU at its index between ticks; reset when a GPU
/// with another UUID appears there.
#[derive(Debug, Default)]
pub(super) struct GpuMemo {
    /// Features answered with NOT_SUPPORTED or missing from the library: never asked again.
    pub(super) unsupported: BTreeSet<&'static str>,
    /// Newest utilization sample already summarised (driver clock, opaque).
    pub(super) last_sample: u64,
    /// Newest per-process utilization sample already used (driver clock, opaque).
    pub(super) last_process_sample: u64,
    /// Identity, read once.
    pub(super) identity: Option<Identity>,
    /// Features that failed with an unexpected error on the last tick (logged on change).
    pub(super) failing: BTreeSet<&'static str>,
    /// The GPM sample of the previous tick: GPM rates come from two samples.
    pub(super) gpm_previous: Option<GpmSample<'static>>,
    /// The same per MIG GPU instance id.
    pub(super) mig_gpm_previous: HashMap<u32, GpmSample<'static>>,
}

/// What does not change while a GPU is at its index.
#[derive(Debug, Clone)]
pub(super) struct Identity {
    model: String,
    pci_bus_id: String,
    numa_node: Option<u32>,
    cpu_affinity: Option<String>,
    vbios_version: String,
    architecture: String,
    brand: String,
}

impl Identity {
    pub(super) fn read(
        memo: &mut GpuMemo,
        uuid: &str,
        device: &Device<'static>,
    ) -> Result<Self, Lost> {
        Ok(Identity {
            model: ask(memo, uuid, "name", || device.name())?.unwrap_or_default(),
            pci_bus_id: ask(memo, uuid, "pci_info", || device.pci_info())?
                .map(|p| p.bus_id)
                .unwrap_or_default(),
            numa_node: ask(memo, uuid, "numa_node", || device.numa_node_id())?,
            cpu_affinity: ask(memo, uuid, "cpu_affinity", || device.cpu_affinity(16))?
                .map(|words| summary::cpu_list(&words)),
            vbios_version: ask(memo, uuid, "vbios", || device.vbios_version())?.unwrap_or_default(),
            architecture: ask(memo, uuid, "architecture", || device.architecture())?
                .map(|a| a.to_string())
                .unwrap_or_default(),
            brand: ask(memo, uuid, "brand", || device.brand())?
                .map(|b| format!("{b:?}"))
                .unwrap_or_default(),
        })
    }

    pub(super) fn apply(&self, gpu: &mut GpuDevice) {
        gpu.model = self.model.clone();
        gpu.pci_bus_id = self.pci_bus_id.clone();
        gpu.numa_node = self.numa_node;
        gpu.cpu_affinity = self.cpu_affinity.clone();
        gpu.vbios_version = self.vbios_version.clone();
        gpu.architecture = self.architecture.clone();
        gpu.brand = self.brand.clone();
    }
}

/// A GPU that stopped answering part-way through a tick.
pub(super) struct Lost(pub(super) &'static str);

/// Asks NVML for one feature through `memo`: unsupported features are skipped, a lost GPU
/// aborts the device's tick, "not found" is an empty answer, other errors drop the feature
/// for this tick and are logged when they start and stop.
pub(super) fn ask<T>(
    memo: &mut GpuMemo,
    uuid: &str,
    feature: &'static str,
    call: impl FnOnce() -> Result<T, NvmlError>,
) -> Result<Option<T>, Lost> {
    debug_assert!(FEATURES.contains(&feature), "{feature} is not in FEATURES");
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
