//! What the GPU does: utilization, samples, memory in use, processes and GPM.

use super::*;
use emu_timeline::{self as timeline, Timeline};

const SECOND_NS: u64 = 1_000_000_000;

/// An emulated device's timeline from `since_ns` (monotonic) on: `None` for a scenario device,
/// the code to answer when its file cannot be read.
fn emulated(d: &Device, since_ns: u64) -> Option<Result<Timeline, nvmlReturn_t>> {
    let path = d.timeline.as_ref()?;
    Some(timeline::read(path, since_ns).map_err(|_| nvmlReturn_enum_NVML_ERROR_UNKNOWN))
}

/// Now on the monotonic clock, as the driver clock reads it.
fn now_ns() -> u64 {
    monotonic_of(driver_clock_us())
}

fn percent(share: f64) -> u32 {
    (share * 100.0).round() as u32
}

/// The processes with a context on the device: an emulated device's live ones, or the
/// scenario's.
fn processes_of(d: &Device) -> Result<Vec<Process>, nvmlReturn_t> {
    let Some(timeline) = emulated(d, u64::MAX) else {
        return Ok(d.processes.clone());
    };
    Ok(timeline?
        .live_processes(holds_a_context)
        .into_iter()
        .map(|(pid, used_memory)| Process {
            pid,
            used_memory,
            kind: compute(),
            sm: None,
            mem: 0,
        })
        .collect())
}

/// Whether a process still holds its GPU context: the driver tears a context down when the
/// process exits, before its parent reaps it, so a zombie holds none.
fn holds_a_context(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command's closing parenthesis.
    match stat.rsplit_once(") ") {
        Some((_, rest)) => !rest.starts_with('Z') && !rest.starts_with('X'),
        None => false,
    }
}

/// Whether MIG mode is on (or the device is a MIG device): utilization rates, samples and
/// per-process utilization are then not supported (NVML reference), whatever the GPU.
fn mig_on(d: &Device) -> bool {
    d.mig_mode == Some(true) || d.gpu_instance
}

/// Whether the device has GPM: a scenario says so, an emulated Hopper or later has it.
fn has_gpm(d: &Device) -> bool {
    d.gpm.is_some() || (d.timeline.is_some() && d.architecture >= 9)
}

// ---------------------------------------------------------------------------------------------
// Utilization and samples
// ---------------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    rates: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetUtilizationRates", |d| {
        if mig_on(d) {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        // The real driver reports the last sample period (1/6 s to 1 s); emulated: 1 s.
        let now = now_ns();
        let (gpu, memory) = match emulated(d, now - SECOND_NS) {
            None => (d.utilization_gpu, d.utilization_memory),
            Some(Err(code)) => return code,
            Some(Ok(t)) => (
                percent(t.busy(now - SECOND_NS, now)),
                percent(t.weighted(now - SECOND_NS, now, |k| k.dram)),
            ),
        };
        set(rates, nvmlUtilization_t { gpu, memory })
    })
}

/// The samples the driver's ring buffer holds now, newer than `last_seen`: one every
/// `sample_period_ms` on the driver clock, at most the last 120 (about 20 s). An emulated
/// device's sample is the share of its period in which a kernel ran (memory: DRAM share).
fn buffered_samples(
    d: &Device,
    kind: nvmlSamplingType_t,
    last_seen: u64,
) -> Result<Vec<(u64, u32)>, nvmlReturn_t> {
    let period = d.sample_period_ms.max(1) * 1000;
    let now = driver_clock_us();
    let newest = (now - CLOCK_BASE_US) / period;
    let oldest = newest.saturating_sub(119);
    let ticks: Vec<u64> = (oldest..=newest)
        .filter(|k| CLOCK_BASE_US + k * period > last_seen)
        .collect();
    let memory = kind == nvmlSamplingType_enum_NVML_MEMORY_UTILIZATION_SAMPLES;
    let since = ticks.first().map_or(u64::MAX, |k| {
        monotonic_of(CLOCK_BASE_US + k.saturating_sub(1) * period)
    });
    let emulated = emulated(d, since).transpose()?;
    Ok(ticks
        .into_iter()
        .map(|k| {
            let timestamp = CLOCK_BASE_US + k * period;
            let value = match &emulated {
                Some(t) => {
                    let (from, to) = (
                        monotonic_of(timestamp.saturating_sub(period)),
                        monotonic_of(timestamp),
                    );
                    percent(if memory {
                        t.weighted(from, to, |k| k.dram)
                    } else {
                        t.busy(from, to)
                    })
                }
                None if memory => d.utilization_memory,
                None if d.samples.is_empty() => d.utilization_gpu,
                None => d.samples[(k % d.samples.len() as u64) as usize],
            };
            (timestamp, value)
        })
        .collect())
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSamples(
    device: nvmlDevice_t,
    kind: nvmlSamplingType_t,
    last_seen: c_ulonglong,
    value_type: *mut nvmlValueType_t,
    count: *mut c_uint,
    samples: *mut nvmlSample_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetSamples", |d| {
        if mig_on(d) {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        if kind != nvmlSamplingType_enum_NVML_GPU_UTILIZATION_SAMPLES
            && kind != nvmlSamplingType_enum_NVML_MEMORY_UTILIZATION_SAMPLES
        {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        if count.is_null() || value_type.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let buffered = match buffered_samples(d, kind, last_seen) {
            Ok(buffered) => buffered,
            Err(code) => return code,
        };
        if buffered.is_empty() {
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        *value_type = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
        if samples.is_null() {
            *count = buffered.len() as c_uint;
            return SUCCESS;
        }
        let written = buffered.len().min(*count as usize);
        for (i, (timestamp, value)) in buffered.iter().take(written).enumerate() {
            *samples.add(i) = nvmlSample_t {
                timeStamp: *timestamp,
                sampleValue: nvmlValue_t { uiVal: *value },
            };
        }
        *count = written as c_uint;
        SUCCESS
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetProcessUtilization", |d| {
        if mig_on(d) {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        if count.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        // Each active process has one sample at the newest tick of the sample grid.
        let newest = match buffered_samples(
            d,
            nvmlSamplingType_enum_NVML_GPU_UTILIZATION_SAMPLES,
            last_seen,
        ) {
            Ok(buffered) => buffered.last().map(|(timestamp, _)| *timestamp),
            Err(code) => return code,
        };
        let sample = |pid, timestamp, sm, mem| nvmlProcessUtilizationSample_t {
            pid,
            timeStamp: timestamp,
            smUtil: sm,
            memUtil: mem,
            encUtil: 0,
            decUtil: 0,
        };
        let active: Vec<nvmlProcessUtilizationSample_t> = match newest {
            None => Vec::new(),
            Some(timestamp) => {
                // Emulated: each process's share of the time since the last sample seen
                // (at most the last second) in which its kernels ran.
                let from = monotonic_of(last_seen.max(timestamp.saturating_sub(1_000_000)));
                let to = monotonic_of(timestamp);
                match emulated(d, from) {
                    Some(Err(code)) => return code,
                    Some(Ok(t)) => t
                        .by_process(from, to)
                        .into_iter()
                        .map(|(pid, busy, dram)| {
                            sample(pid, timestamp, percent(busy), percent(dram))
                        })
                        .collect(),
                    None => d
                        .processes
                        .iter()
                        .filter_map(|p| Some(sample(p.pid, timestamp, p.sm?, p.mem)))
                        .collect(),
                }
            }
        };
        if active.is_empty() {
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        if utilization.is_null() || (*count as usize) < active.len() {
            *count = active.len() as c_uint;
            return nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (i, sample) in active.iter().enumerate() {
            *utilization.add(i) = *sample;
        }
        *count = active.len() as c_uint;
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// Memory, thermals, power, clocks
// ---------------------------------------------------------------------------------------------

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMemoryInfo_v2", |d| {
        if memory.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        // NVML_STRUCT_VERSION(Memory, 2): the caller must say which layout it passes.
        let expected = (std::mem::size_of::<nvmlMemory_v2_t>() | (2 << 24)) as c_uint;
        if (*memory).version != expected {
            return nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        // An emulated device's memory in use is what its live processes hold.
        let used = match d.timeline {
            None => d.memory_used,
            Some(_) => match processes_of(d) {
                Ok(processes) => processes.iter().map(|p| p.used_memory).sum(),
                Err(code) => return code,
            },
        };
        (*memory).total = d.memory_total;
        (*memory).reserved = d.memory_reserved;
        (*memory).used = used;
        (*memory).free = d.memory_total.saturating_sub(used + d.memory_reserved);
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// The GPU instance a process of the device runs in: on a GPU in MIG mode with one instance,
/// that one; else not known (NVML's "none", all ones).
fn instance_of(d: &Device) -> c_uint {
    match d.mig.as_slice() {
        [only] if d.mig_mode == Some(true) => only.gpu_instance_id,
        _ => u32::MAX,
    }
}

unsafe fn running_processes(
    d: &Device,
    kind: &str,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    if count.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let listed = match processes_of(d) {
        Ok(listed) => listed,
        Err(code) => return code,
    };
    let matching: Vec<&Process> = listed.iter().filter(|p| p.kind == kind).collect();
    if matching.len() > *count as usize || (infos.is_null() && !matching.is_empty()) {
        *count = matching.len() as c_uint;
        return nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i, p) in matching.iter().enumerate() {
        *infos.add(i) = nvmlProcessInfo_t {
            pid: p.pid,
            usedGpuMemory: p.used_memory,
            gpuInstanceId: instance_of(d),
            computeInstanceId: u32::MAX,
        };
    }
    *count = matching.len() as c_uint;
    SUCCESS
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetComputeRunningProcesses_v3", |d| {
        running_processes(d, "compute", count, infos)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetGraphicsRunningProcesses_v3", |d| {
        running_processes(d, "graphics", count, infos)
    })
}

// ---------------------------------------------------------------------------------------------
// GPM: samples are heap cells recording device and time; metrics read the scenario's values
// ---------------------------------------------------------------------------------------------

struct GpmCell {
    /// The device (or MIG device, for a GPU-instance sample) the sample was taken on.
    device: usize,
    taken_us: u64,
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    support: *mut nvmlGpmSupport_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlGpmQueryDeviceSupport", |d| {
        if support.is_null() || (*support).version != NVML_GPM_SUPPORT_VERSION {
            return nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        (*support).isSupportedDevice = u32::from(has_gpm(d));
        SUCCESS
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut nvmlGpmSample_t) -> nvmlReturn_t {
    with_scenario(|_| {
        set(
            sample,
            Box::into_raw(Box::new(GpmCell {
                device: 0,
                taken_us: 0,
            })) as nvmlGpmSample_t,
        )
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: nvmlGpmSample_t) -> nvmlReturn_t {
    if sample.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    drop(Box::from_raw(sample as *mut GpmCell));
    SUCCESS
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleGet(
    device: nvmlDevice_t,
    sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlGpmSampleGet", |d| {
        if !has_gpm(d) {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        if sample.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let cell = &mut *(sample as *mut GpmCell);
        cell.device = device as usize;
        cell.taken_us = driver_clock_us();
        SUCCESS
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    if request.is_null() || (*request).sample1.is_null() || (*request).sample2.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    if (*request).version != NVML_GPM_METRICS_GET_VERSION {
        return nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    let first = &*((*request).sample1 as *const GpmCell);
    let second = &*((*request).sample2 as *const GpmCell);
    if first.device != second.device || first.taken_us >= second.taken_us {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    device_call(second.device as nvmlDevice_t, "nvmlGpmMetricsGet", |d| {
        if !has_gpm(d) {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        // Emulated: the time-weighted shares of the kernels between the two samples.
        let (from, to) = (monotonic_of(first.taken_us), monotonic_of(second.taken_us));
        let gpm = match emulated(d, from) {
            None => d.gpm.unwrap_or_default(),
            Some(Err(code)) => return code,
            Some(Ok(t)) => Gpm {
                graphics_util: Some(100.0 * t.busy(from, to)),
                sm_util: 100.0 * t.weighted(from, to, |k| k.sm),
                sm_occupancy: 100.0 * t.weighted(from, to, |k| k.occupancy),
                tensor_util: 100.0 * t.weighted(from, to, |k| k.tensor),
                dram_bw_util: 100.0 * t.weighted(from, to, |k| k.dram),
            },
        };
        let request = &mut *request;
        for metric in request.metrics.iter_mut().take(request.numMetrics as usize) {
            let (value, name): (Option<f64>, &'static std::ffi::CStr) = match metric.metricId {
                nvmlGpmMetricId_t_NVML_GPM_METRIC_GRAPHICS_UTIL => {
                    (gpm.graphics_util, c"GRAPHICS_UTIL")
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL => (Some(gpm.sm_util), c"SM_UTIL"),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_OCCUPANCY => {
                    (Some(gpm.sm_occupancy), c"SM_OCCUPANCY")
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_ANY_TENSOR_UTIL => {
                    (Some(gpm.tensor_util), c"ANY_TENSOR_UTIL")
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_DRAM_BW_UTIL => {
                    (Some(gpm.dram_bw_util), c"DRAM_BW_UTIL")
                }
                _ => (None, c"UNSUPPORTED"),
            };
            metric.nvmlReturn = if value.is_some() {
                SUCCESS
            } else {
                nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
            };
            metric.value = value.unwrap_or(0.0);
            let text = name.as_ptr() as *mut c_char;
            metric.metricInfo.shortName = text;
            metric.metricInfo.longName = text;
            metric.metricInfo.unit = c"%".as_ptr() as *mut c_char;
        }
        SUCCESS
    })
}
