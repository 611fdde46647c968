//! GPM rates (SM activity, occupancy, tensor and DRAM use: Hopper and newer) between two
//! samples one tick apart, for the GPU and for each of its MIG slices.

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::memo::{ask, GpuMemo, Lost};
use super::raw::gpu_instance_id;
use crate::snapshot::{GpmMetrics, GpuMemory, MigDevice};

/// The MIG devices of a GPU in MIG mode. NVML gives each one's UUID, memory and (through
/// GPM on Hopper and newer) busy time and SM activity; it gives no utilization rates, clocks,
/// power or per-process samples per MIG device, so those stay per physical GPU.
pub(super) fn read_mig_devices(
    nvml: &'static Nvml,
    device: &Device<'static>,
    memo: &mut GpuMemo,
    uuid: &str,
) -> Result<Vec<MigDevice>, Lost> {
    let slots = ask(memo, uuid, "mig", || device.mig_device_count())?.unwrap_or(0);
    let mut found = Vec::new();
    for slot in 0..slots {
        let mig = match device.mig_device_by_index(slot) {
            Ok(mig) => mig,
            Err(NvmlError::GpuLost) => return Err(Lost("gpu_lost")),
            // An empty slot, or one being reconfigured.
            Err(_) => continue,
        };
        let gpu_instance_id = gpu_instance_id(nvml, &mig).ok();
        let (busy_ratio, sm_activity_ratio) = match gpu_instance_id {
            Some(id) if !memo.unsupported.contains("gpm") => mig_gpm(nvml, device, memo, id),
            _ => (None, None),
        };
        found.push(MigDevice {
            index: slot,
            uuid: mig.uuid().unwrap_or_default(),
            gpu_instance_id,
            memory: mig.memory_info().ok().map(|m| GpuMemory {
                total_bytes: m.total,
                used_bytes: m.used,
            }),
            sm_activity_ratio,
            busy_ratio,
        });
    }
    Ok(found)
}

/// Busy time (graphics activity) and SM activity of one GPU instance between this tick's GPM
/// sample and the previous one, each `None` where the driver does not give it.
fn mig_gpm(
    nvml: &'static Nvml,
    device: &Device<'static>,
    memo: &mut GpuMemo,
    gpu_instance: u32,
) -> (Option<f64>, Option<f64>) {
    let Ok(sample) = device.gpm_mig_sample(gpu_instance) else {
        return (None, None);
    };
    let Some(previous) = memo.mig_gpm_previous.insert(gpu_instance, sample) else {
        return (None, None);
    };
    let current = &memo.mig_gpm_previous[&gpu_instance];
    let ids = [GpmMetricId::GraphicsUtil, GpmMetricId::SmUtil];
    let Ok(results) = nvml_wrapper::gpm::gpm_metrics_get(nvml, &previous, current, &ids) else {
        return (None, None);
    };
    let mut ratios = results
        .into_iter()
        .map(|r| r.ok().map(|m| (m.value / 100.0).clamp(0.0, 1.0)));
    (ratios.next().flatten(), ratios.next().flatten())
}

/// GPM rates between the previous tick's sample and a new one (none on the first tick).
pub(super) fn read_gpm(
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
