//! Families of the GPUs: identity, utilization, memory, thermals, clocks, links, health,
//! MIG devices, NVML's per-process figures and the kubelet's pod assignment.

use super::*;
use crate::snapshot::{GpuDevice, GpuSnapshot, PodRef};

/// NVML's clock-event reason bits, named as the exporter labels them.
const THROTTLE_REASONS: [(&str, u64); 9] = [
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
];

/// A per-GPU family: one sample per answering GPU with a value.
pub(super) fn per_gpu(
    out: &mut Vec<Family>,
    def: &'static MetricDef,
    gpus: &[GpuDevice],
    value: impl Fn(&GpuDevice) -> Option<f64>,
) {
    let mut family = Family::new(def);
    for gpu in gpus.iter().filter(|g| g.up) {
        if let Some(v) = value(gpu) {
            family.add(&gpu_key(gpu), v);
        }
    }
    out.push(family);
}

pub(super) fn gpu_families(snapshot: &GpuSnapshot, node: &str, out: &mut Vec<Family>) {
    out.push(Family::single(&NVML_UP, flag(snapshot.nvml_up)));
    if !snapshot.nvml_up {
        let mut error = Family::new(&NVML_ERROR);
        error.add(&[&snapshot.nvml_error], 1.0);
        out.push(error);
        return;
    }
    let gpus = &snapshot.devices;
    out.push(Family::single(&GPU_DEVICES, gpus.len() as f64));
    let mut info = Family::new(&GPU_INFO);
    let mut up = Family::new(&GPU_UP);
    let mut features = Family::new(&GPU_FEATURE);
    for gpu in gpus {
        let index = gpu.index.to_string();
        let numa = gpu.numa_node.map(|n| n.to_string()).unwrap_or_default();
        let affinity = gpu.cpu_affinity.clone().unwrap_or_default();
        info.add(
            &[
                &index,
                &gpu.uuid,
                &gpu.model,
                &gpu.pci_bus_id,
                &numa,
                &affinity,
                &gpu.vbios_version,
                &gpu.architecture,
                &gpu.brand,
                &snapshot.driver_version,
                &snapshot.cuda_driver_version,
                node,
            ],
            1.0,
        );
        let key = gpu_key(gpu);
        up.add(&key, flag(gpu.up));
        // Only what is missing: a fully supported GPU adds no series here.
        if gpu.up {
            for feature in &gpu.unsupported {
                features.add(&key_and(&key, feature), 0.0);
            }
        }
    }
    out.extend([info, up, features]);
    per_gpu(out, &GPU_UTIL, gpus, |g| g.utilization.map(|u| u.gpu_ratio));
    per_gpu(out, &GPU_MEM_UTIL, gpus, |g| {
        g.utilization.map(|u| u.memory_ratio)
    });
    per_gpu(out, &BUSY_MEAN, gpus, |g| g.busy.map(|b| b.mean_ratio));
    per_gpu(out, &BUSY_IDLE, gpus, |g| {
        g.busy.map(|b| b.idle_share_ratio)
    });
    per_gpu(out, &BUSY_SAMPLES, gpus, |g| {
        g.busy.map(|b| f64::from(b.samples))
    });
    per_gpu(out, &GPU_MEM_TOTAL, gpus, |g| {
        g.memory.map(|m| m.total_bytes as f64)
    });
    per_gpu(out, &GPU_MEM_USED, gpus, |g| {
        g.memory.map(|m| m.used_bytes as f64)
    });
    per_gpu(out, &GPU_TEMP, gpus, |g| g.temperature_celsius);
    per_gpu(out, &GPU_TEMP_SLOWDOWN, gpus, |g| {
        g.slowdown_temperature_celsius
    });
    per_gpu(out, &GPU_POWER, gpus, |g| g.power_watts);
    per_gpu(out, &GPU_POWER_LIMIT, gpus, |g| g.power_limit_watts);
    per_gpu(out, &GPU_POWER_LIMIT_DEFAULT, gpus, |g| {
        g.power_limit_default_watts
    });
    per_gpu(out, &GPU_PSTATE, gpus, |g| {
        g.performance_state.map(f64::from)
    });
    per_gpu(out, &GPU_FAN, gpus, |g| g.fan_speed_ratio);
    per_gpu(out, &GPU_ENCODER, gpus, |g| g.encoder_ratio);
    per_gpu(out, &GPU_DECODER, gpus, |g| g.decoder_ratio);
    per_gpu(out, &GPU_ENERGY, gpus, |g| g.energy_joules);
    let mut clock = Family::new(&GPU_CLOCK);
    let mut clock_max = Family::new(&GPU_CLOCK_MAX);
    let mut throttle = Family::new(&GPU_THROTTLE);
    let mut ecc = Family::new(&GPU_ECC);
    for gpu in gpus.iter().filter(|g| g.up) {
        let key = gpu_key(gpu);
        for c in &gpu.clocks {
            if let Some(hertz) = c.hertz {
                clock.add(&key_and(&key, c.domain), hertz);
            }
            if let Some(hertz) = c.max_hertz {
                clock_max.add(&key_and(&key, c.domain), hertz);
            }
        }
        // Only the active reasons; none active (or unsupported, see gpu_feature_supported)
        // adds no series.
        if let Some(bits) = gpu.throttle_reasons {
            for (reason, bit) in THROTTLE_REASONS {
                if bits & bit != 0 {
                    throttle.add(&key_and(&key, reason), 1.0);
                }
            }
        }
        for (kind, count) in [
            ("corrected", gpu.ecc_corrected),
            ("uncorrected", gpu.ecc_uncorrected),
        ] {
            if let Some(count) = count {
                ecc.add(&key_and(&key, kind), count as f64);
            }
        }
    }
    out.extend([clock, clock_max, throttle]);
    per_gpu(out, &PCIE_GEN, gpus, |g| g.pcie.generation.map(f64::from));
    per_gpu(out, &PCIE_WIDTH, gpus, |g| g.pcie.width.map(f64::from));
    per_gpu(out, &PCIE_MAX_GEN, gpus, |g| {
        g.pcie.max_generation.map(f64::from)
    });
    per_gpu(out, &PCIE_MAX_WIDTH, gpus, |g| {
        g.pcie.max_width.map(f64::from)
    });
    per_gpu(out, &PCIE_TX, gpus, |g| g.pcie.tx_bytes_per_second);
    per_gpu(out, &PCIE_RX, gpus, |g| g.pcie.rx_bytes_per_second);
    per_gpu(out, &PCIE_REPLAYS, gpus, |g| {
        g.pcie.replays.map(|r| r as f64)
    });
    out.push(ecc);
    gpu_health_families(gpus, out);
    per_gpu(out, &GPM_SM_ACTIVITY, gpus, |g| {
        g.gpm.map(|m| m.sm_activity_ratio)
    });
    per_gpu(out, &GPM_SM_OCCUPANCY, gpus, |g| {
        g.gpm.map(|m| m.sm_occupancy_ratio)
    });
    per_gpu(out, &GPM_TENSOR, gpus, |g| {
        g.gpm.map(|m| m.tensor_activity_ratio)
    });
    per_gpu(out, &GPM_DRAM, gpus, |g| {
        g.gpm.map(|m| m.dram_bandwidth_ratio)
    });
    mig_families(gpus, out);
    let mut memory = Family::new(&PROC_MEM);
    let mut sm = Family::new(&PROC_SM);
    let mut memory_util = Family::new(&PROC_MEM_UTIL);
    for gpu in gpus.iter().filter(|g| g.up) {
        let index = gpu.index.to_string();
        for p in &gpu.processes {
            let pid = p.pid.to_string();
            let labels = [index.as_str(), &gpu.uuid, &pid, &p.command, p.kind];
            memory.add(&labels, p.used_memory_bytes as f64);
            if let Some(ratio) = p.sm_ratio {
                sm.add(&labels, ratio);
            }
            if let Some(ratio) = p.memory_ratio {
                memory_util.add(&labels, ratio);
            }
        }
    }
    out.extend([memory, sm, memory_util]);
}

/// Clock limits, row remapping, NVLink and XID errors: the slower-moving health signals.
fn gpu_health_families(gpus: &[GpuDevice], out: &mut Vec<Family>) {
    let mut limited = Family::new(&GPU_VIOLATION);
    let mut remapped = Family::new(&REMAPPED_ROWS);
    let mut inactive = Family::new(&NVLINK_INACTIVE);
    let mut xids = Family::new(&XID_ERRORS);
    for gpu in gpus.iter().filter(|g| g.up) {
        let key = gpu_key(gpu);
        for (limit, seconds) in [
            ("power", gpu.violation_power_seconds),
            ("thermal", gpu.violation_thermal_seconds),
        ] {
            if let Some(seconds) = seconds {
                limited.add(&key_and(&key, limit), seconds);
            }
        }
        if let Some(rows) = gpu.remapped_rows {
            remapped.add(&key_and(&key, "correctable"), rows.correctable as f64);
            remapped.add(&key_and(&key, "uncorrectable"), rows.uncorrectable as f64);
        }
        for (link, active) in gpu.nvlink.iter().flat_map(|n| n.links.iter().enumerate()) {
            if !active {
                inactive.add(&key_and(&key, &link.to_string()), 1.0);
            }
        }
        for (code, count) in &gpu.xid_errors {
            xids.add(&key_and(&key, &code.to_string()), *count as f64);
        }
    }
    out.extend([limited, remapped]);
    // Listed only while true (row remapping unsupported shows in gpu_feature_supported).
    per_gpu(out, &REMAP_PENDING, gpus, |g| {
        g.remapped_rows.filter(|r| r.pending).map(|_| 1.0)
    });
    per_gpu(out, &REMAP_FAILED, gpus, |g| {
        g.remapped_rows.filter(|r| r.failed).map(|_| 1.0)
    });
    per_gpu(out, &NVLINK_ACTIVE, gpus, |g| {
        let links = &g.nvlink.as_ref()?.links;
        Some(links.iter().filter(|active| **active).count() as f64)
    });
    out.push(inactive);
    per_gpu(out, &NVLINK_TX, gpus, |g| {
        g.nvlink.as_ref()?.tx_bytes.map(|b| b as f64)
    });
    per_gpu(out, &NVLINK_RX, gpus, |g| {
        g.nvlink.as_ref()?.rx_bytes.map(|b| b as f64)
    });
    out.push(xids);
}

fn mig_families(gpus: &[GpuDevice], out: &mut Vec<Family>) {
    per_gpu(out, &MIG_ENABLED, gpus, |g| g.mig_enabled.map(flag));
    let mut info = Family::new(&MIG_INFO);
    let mut total = Family::new(&MIG_MEM_TOTAL);
    let mut used = Family::new(&MIG_MEM_USED);
    let mut activity = Family::new(&MIG_SM_ACTIVITY);
    let mut busy = Family::new(&MIG_BUSY);
    for gpu in gpus.iter().filter(|g| g.up) {
        let index = gpu.index.to_string();
        for mig in &gpu.mig_devices {
            let instance = mig
                .gpu_instance_id
                .map(|i| i.to_string())
                .unwrap_or_default();
            info.add(
                &[
                    &index,
                    &gpu.uuid,
                    &mig.uuid,
                    &mig.index.to_string(),
                    &instance,
                ],
                1.0,
            );
            let labels = [index.as_str(), &gpu.uuid, &mig.uuid];
            if let Some(memory) = mig.memory {
                total.add(&labels, memory.total_bytes as f64);
                used.add(&labels, memory.used_bytes as f64);
            }
            if let Some(ratio) = mig.sm_activity_ratio {
                activity.add(&labels, ratio);
            }
            if let Some(ratio) = mig.busy_ratio {
                busy.add(&labels, ratio);
            }
        }
    }
    out.extend([info, total, used, activity, busy]);
}

/// The labels every GPU-level series starts with: index, UUID and the GPU's pod labels.
pub(super) fn gpu_key(gpu: &GpuDevice) -> [String; 5] {
    let [namespace, pod, container] = pod_labels(Some(gpu));
    [
        gpu.index.to_string(),
        gpu.uuid.clone(),
        namespace,
        pod,
        container,
    ]
}

/// A GPU key followed by one more label value.
pub(super) fn key_and<'a>(key: &'a [String; 5], extra: &'a str) -> [&'a str; 6] {
    [&key[0], &key[1], &key[2], &key[3], &key[4], extra]
}

/// The pod labels of a GPU: its assignment, or several joined with commas (time-slicing,
/// MIG), or empty.
pub(super) fn pod_labels(gpu: Option<&GpuDevice>) -> [String; 3] {
    let pods = gpu.map_or(&[][..], |g| &g.pods[..]);
    let join = |f: fn(&PodRef) -> &str| {
        let mut values: Vec<&str> = pods.iter().map(f).collect();
        values.dedup();
        values.join(",")
    };
    [
        join(|p| &p.namespace),
        join(|p| &p.pod),
        join(|p| &p.container),
    ]
}

/// Pod assignments of the GPUs (kubelet pod-resources) and allocated-but-idle flags.
pub(super) fn pod_families(gpu: &GpuSnapshot, out: &mut Vec<Family>) {
    let mut pods = Family::new(&GPU_POD);
    let mut idle = Family::new(&ALLOCATED_IDLE);
    let mut idle_seconds = Family::new(&ALLOCATED_IDLE_SECONDS);
    for device in gpu.devices.iter().filter(|d| !d.pods.is_empty()) {
        let index = device.index.to_string();
        for p in &device.pods {
            pods.add(
                &[&index, &device.uuid, &p.namespace, &p.pod, &p.container],
                1.0,
            );
        }
        let [namespace, pod, container] = pod_labels(Some(device));
        let labels = [index.as_str(), &device.uuid, &namespace, &pod, &container];
        idle.add(&labels, flag(device.allocated_idle));
        if let Some(seconds) = device.allocated_idle_seconds {
            idle_seconds.add(&labels, seconds);
        }
    }
    out.extend([pods, idle, idle_seconds]);
    per_gpu(out, &ALLOCATABLE, &gpu.devices, |g| g.allocatable.map(flag));
}
