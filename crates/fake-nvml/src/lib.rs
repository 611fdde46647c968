//! A fake `libnvidia-ml.so.1` for tests, where no GPU exists.
//!
//! It exports the subset of the NVML C ABI that the exporter calls, with the real struct
//! layouts (taken from `nvml-wrapper-sys`, generated from nvml.h), and answers from a scenario
//! file named by `FAKE_NVML_SCENARIO`. The file is re-read whenever it changes, so a test can
//! make a GPU fall off the bus, a process start or exit, or a call hang, while the exporter runs.
//!
//! It behaves like the real library where the exporter depends on it: handles are opaque,
//! a lost GPU answers `GPU_IS_LOST` to every call (its handle lookup included) while the device
//! count still includes it, "no samples newer than the last seen timestamp" is `NOT_FOUND`,
//! list calls answer `INSUFFICIENT_SIZE` with the needed count, and sample timestamps are
//! microseconds on a clock of the driver's own (stepped by hand with `FAKE_NVML_FROZEN_CLOCK_US`). Built as `fake-nvml-old`, the functions marked
//! `cfg(not(old_driver))` are not exported at all, as with an old driver.
#![allow(dead_code, unused_imports)] // the old-driver build leaves some helpers unused
#![allow(non_snake_case, non_upper_case_globals)] // the C names
#![allow(clippy::missing_safety_doc)] // every export follows the NVML contract for its pointers

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_ulonglong};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper_sys::bindings::*;
use serde::Deserialize;

// ---------------------------------------------------------------------------------------------
// Scenario file
// ---------------------------------------------------------------------------------------------

/// The whole fake machine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Scenario {
    /// What nvmlInit_v2 answers, e.g. `driver_not_loaded`; none means success.
    init_error: Option<String>,
    driver_version: String,
    nvml_version: String,
    cuda_driver_version: i32,
    devices: Vec<Device>,
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
struct Device {
    uuid: String,
    name: String,
    pci_bus_id: String,
    numa_node: Option<u32>,
    /// CPU affinity bitmask words (64 CPUs per word).
    cpu_affinity: Vec<u64>,
    memory_total: u64,
    memory_used: u64,
    memory_reserved: u64,
    utilization_gpu: u32,
    utilization_memory: u32,
    /// GPU utilization samples repeat this pattern, one value per `sample_period_ms`.
    samples: Vec<u32>,
    sample_period_ms: u64,
    temperature: u32,
    slowdown_temperature: u32,
    shutdown_temperature: u32,
    power_mw: u32,
    power_limit_mw: u32,
    /// The board's default power limit.
    power_default_limit_mw: u32,
    /// Performance state: 0 (P0, fastest) to 15; 32 is NVML's "unknown".
    performance_state: u32,
    /// Fan speeds in percent, one per fan; empty on passively cooled boards (NOT_SUPPORTED).
    fans: Vec<u32>,
    /// Video encoder and decoder utilization in percent.
    encoder_utilization: u32,
    decoder_utilization: u32,
    vbios_version: String,
    /// nvmlDeviceArchitecture_t: 7 Ampere, 8 Ada, 9 Hopper, 10 Blackwell.
    architecture: u32,
    /// nvmlBrandType_t: 2 Tesla (data-centre boards), 5 GeForce, 14 NVIDIA.
    brand: u32,
    /// Energy counter at library load; it then grows by power × time, as a real one does.
    energy_mj: u64,
    clock_sm_mhz: u32,
    clock_memory_mhz: u32,
    clock_graphics_mhz: u32,
    max_clock_sm_mhz: u32,
    max_clock_memory_mhz: u32,
    max_clock_graphics_mhz: u32,
    throttle_reasons: u64,
    pcie_generation: u32,
    pcie_width: u32,
    pcie_max_generation: u32,
    pcie_max_width: u32,
    pcie_tx_kbps: u32,
    pcie_rx_kbps: u32,
    pcie_replays: u32,
    ecc_corrected: u64,
    ecc_uncorrected: u64,
    /// Rows remapped after correctable / uncorrectable errors; a remap pending a reset; a
    /// failed remap (field values 142-145).
    remapped_correctable: u64,
    remapped_uncorrectable: u64,
    remap_pending: bool,
    remap_failed: bool,
    /// Time held down by the power cap / thermal limits since the driver loaded, in ns.
    violation_power_ns: u64,
    violation_thermal_ns: u64,
    /// NVLink links, each active or not; empty on a PCIe-only GPU (NOT_SUPPORTED).
    nvlinks: Vec<NvLink>,
    /// GPM metrics in percent; absent on GPUs before Hopper (GPM not supported).
    gpm: Option<Gpm>,
    /// XID errors this GPU raised, delivered once each, in order, to registered event sets.
    xids: Vec<u64>,
    /// MIG mode: absent on GPUs without MIG (NOT_SUPPORTED), else on or off.
    mig_mode: Option<bool>,
    /// MIG devices (instances) while MIG mode is on.
    mig: Vec<Mig>,
    processes: Vec<Process>,
    /// Fallen off the bus: every call answers GPU_IS_LOST.
    lost: bool,
    /// Function name → error it answers (`not_supported`, `gpu_lost`, `insufficient_size`, ...).
    errors: HashMap<String, String>,
    /// Function name → milliseconds it blocks before answering.
    delays_ms: HashMap<String, u64>,
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
            lost: false,
            errors: HashMap::new(),
            delays_ms: HashMap::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct NvLink {
    active: bool,
    /// Data sent and received over the link since the driver loaded, in KiB.
    #[serde(default)]
    tx_kib: u64,
    #[serde(default)]
    rx_kib: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Mig {
    uuid: String,
    gpu_instance_id: u32,
    memory_total: u64,
    #[serde(default)]
    memory_used: u64,
    /// GPM SM activity of the GPU instance, in percent.
    sm_util: Option<f64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct Gpm {
    sm_util: f64,
    sm_occupancy: f64,
    tensor_util: f64,
    dram_bw_util: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Process {
    pid: u32,
    used_memory: u64,
    /// `compute` (default) or `graphics`.
    #[serde(default = "compute")]
    kind: String,
    /// SM and memory utilization in percent, reported in per-process samples when set.
    sm: Option<u32>,
    #[serde(default)]
    mem: u32,
}

fn compute() -> String {
    "compute".into()
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

struct State {
    path: PathBuf,
    modified: Option<SystemTime>,
    scenario: Scenario,
    initialised: u32,
    /// Per event set: registered device indexes and, per device, XIDs already delivered.
    event_sets: HashMap<usize, HashMap<usize, usize>>,
    next_handle: usize,
}

/// Microseconds of the fake driver clock at library load; deliberately not wall time.
const CLOCK_BASE_US: u64 = 1_700_000_000_000_000;

fn loaded_at() -> Instant {
    static LOADED: OnceLock<Instant> = OnceLock::new();
    *LOADED.get_or_init(Instant::now)
}

/// Microseconds since the library was loaded, or the value `FAKE_NVML_FROZEN_CLOCK_US` holds
/// at the moment of the call, so that golden tests step the clock themselves and see the
/// same samples, energy and GPM intervals on every run.
fn elapsed_us() -> u64 {
    std::env::var("FAKE_NVML_FROZEN_CLOCK_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| loaded_at().elapsed().as_micros() as u64)
}

fn driver_clock_us() -> u64 {
    CLOCK_BASE_US + elapsed_us()
}

fn state() -> MutexGuard<'static, Option<State>> {
    static STATE: Mutex<Option<State>> = Mutex::new(None);
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read_scenario(path: &PathBuf) -> Result<(Scenario, Option<SystemTime>), String> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let scenario = serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((scenario, modified))
}

/// Re-reads the scenario when its file changed. A file caught half-written keeps the old one.
fn refresh(state: &mut State) {
    let modified = std::fs::metadata(&state.path)
        .and_then(|m| m.modified())
        .ok();
    if modified != state.modified {
        if let Ok((scenario, modified)) = read_scenario(&state.path) {
            state.scenario = scenario;
            state.modified = modified;
        }
    }
}

fn error_code(name: &str) -> nvmlReturn_t {
    match name {
        "uninitialized" => nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
        "invalid_argument" => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        "not_supported" => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        "no_permission" => nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        "not_found" => nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
        "insufficient_size" => nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
        "driver_not_loaded" => nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        "timeout" => nvmlReturn_enum_NVML_ERROR_TIMEOUT,
        "gpu_lost" => nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
        _ => nvmlReturn_enum_NVML_ERROR_UNKNOWN,
    }
}

const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;

/// Runs a device call: checks initialisation and the handle, applies the device's injected
/// delay (outside the lock, so other GPUs keep answering) and error, then `answer`.
unsafe fn device_call(
    device: nvmlDevice_t,
    function: &str,
    answer: impl FnOnce(&Device) -> nvmlReturn_t,
) -> nvmlReturn_t {
    let found = {
        let mut guard = state();
        let Some(state) = guard.as_mut().filter(|s| s.initialised > 0) else {
            return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
        };
        refresh(state);
        resolve(&state.scenario, device)
    };
    let Some(found) = found else {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    };
    if let Some(ms) = found.delays_ms.get(function) {
        std::thread::sleep(Duration::from_millis(*ms));
    }
    if found.lost {
        return nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
    }
    if let Some(error) = found.errors.get(function) {
        return error_code(error);
    }
    answer(&found)
}

/// MIG device handles start here: `MIG_HANDLE_BASE + 256 × GPU index + MIG index`; full GPUs
/// are `index + 1`. Both are opaque to the caller, as NVML's are.
const MIG_HANDLE_BASE: usize = 0x10000;

/// The device a handle names. A MIG device is presented as a device of its own with the
/// instance's UUID, memory and GPM figures, lost whenever its parent is.
fn resolve(scenario: &Scenario, handle: nvmlDevice_t) -> Option<Device> {
    let Some((gpu, position)) = mig_position(handle as usize) else {
        return scenario
            .devices
            .get((handle as usize).wrapping_sub(1))
            .cloned();
    };
    let parent = scenario.devices.get(gpu)?;
    let mig = parent.mig.get(position)?;
    Some(Device {
        uuid: mig.uuid.clone(),
        memory_total: mig.memory_total,
        memory_used: mig.memory_used,
        memory_reserved: 0,
        gpm: mig.sm_util.map(|sm_util| Gpm {
            sm_util,
            sm_occupancy: 0.0,
            tensor_util: 0.0,
            dram_bw_util: 0.0,
        }),
        lost: parent.lost,
        mig_mode: None,
        ..Device::default()
    })
}

unsafe fn write_c_string(text: &str, out: *mut c_char, length: c_uint) -> nvmlReturn_t {
    if out.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len());
    *out.add(bytes.len()) = 0;
    SUCCESS
}

unsafe fn set<T>(out: *mut T, value: T) -> nvmlReturn_t {
    if out.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = value;
    SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Library and system
// ---------------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    loaded_at();
    let Some(path) = std::env::var_os("FAKE_NVML_SCENARIO").map(PathBuf::from) else {
        return nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
    };
    let Ok((scenario, modified)) = read_scenario(&path) else {
        return nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
    };
    if let Some(error) = &scenario.init_error {
        return error_code(error);
    }
    let mut guard = state();
    let initialised = guard.as_ref().map_or(0, |s| s.initialised) + 1;
    let (event_sets, next_handle) = guard
        .take()
        .map_or((HashMap::new(), 1), |s| (s.event_sets, s.next_handle));
    *guard = Some(State {
        path,
        modified,
        scenario,
        initialised,
        event_sets,
        next_handle,
    });
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    nvmlInit_v2()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    let mut guard = state();
    match guard.as_mut() {
        Some(state) if state.initialised > 0 => {
            state.initialised -= 1;
            SUCCESS
        }
        _ => nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let text: &'static [u8] = match result {
        0 => b"Success\0",
        3 => b"Not Supported\0",
        6 => b"Not Found\0",
        7 => b"Insufficient Size\0",
        9 => b"Driver Not Loaded\0",
        15 => b"GPU is lost\0",
        _ => b"Unknown Error\0",
    };
    text.as_ptr() as *const c_char
}

/// Runs a system call on the current scenario, `UNINITIALIZED` before nvmlInit.
fn with_scenario(answer: impl FnOnce(&Scenario) -> nvmlReturn_t) -> nvmlReturn_t {
    let mut guard = state();
    match guard.as_mut().filter(|s| s.initialised > 0) {
        Some(state) => {
            refresh(state);
            answer(&state.scenario)
        }
        None => nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    with_scenario(|s| write_c_string(&s.driver_version, version, length))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    with_scenario(|s| write_c_string(&s.nvml_version, version, length))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> nvmlReturn_t {
    with_scenario(|s| set(version, s.cuda_driver_version))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    // A lost GPU still counts, as with the real driver.
    with_scenario(|s| set(count, s.devices.len() as c_uint))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    with_scenario(|s| match s.devices.get(index as usize) {
        None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        Some(d) if d.lost => nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
        Some(_) => set(device, (index as usize + 1) as nvmlDevice_t),
    })
}

// ---------------------------------------------------------------------------------------------
// Identity
// ---------------------------------------------------------------------------------------------

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetIndex", |_| {
        set(index, (device as usize - 1) as c_uint)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetUUID", |d| {
        write_c_string(&d.uuid, uuid, length)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetName", |d| {
        write_c_string(&d.name, name, length)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetPciInfo_v3", |d| {
        if pci.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let mut info: nvmlPciInfo_t = std::mem::zeroed();
        let parts: Vec<u32> = d
            .pci_bus_id
            .split([':', '.'])
            .map(|p| u32::from_str_radix(p, 16).unwrap_or(0))
            .collect();
        info.domain = parts.first().copied().unwrap_or(0);
        info.bus = parts.get(1).copied().unwrap_or(0);
        info.device = parts.get(2).copied().unwrap_or(0);
        info.pciDeviceId = 0x2330_10de;
        info.pciSubSystemId = 0x16c1_10de;
        let legacy = format!("{:04x}:{:02x}:{:02x}.0", info.domain, info.bus, info.device);
        write_c_string(
            &d.pci_bus_id,
            info.busId.as_mut_ptr(),
            info.busId.len() as c_uint,
        );
        write_c_string(
            &legacy,
            info.busIdLegacy.as_mut_ptr(),
            info.busIdLegacy.len() as c_uint,
        );
        *pci = info;
        SUCCESS
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(
    device: nvmlDevice_t,
    node: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetNumaNodeId", |d| match d.numa_node {
        Some(n) => set(node, n),
        None => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCpuAffinity(
    device: nvmlDevice_t,
    size: c_uint,
    cpus: *mut c_ulong,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetCpuAffinity", |d| {
        if cpus.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        for i in 0..size as usize {
            *cpus.add(i) = d.cpu_affinity.get(i).copied().unwrap_or(0) as c_ulong;
        }
        SUCCESS
    })
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
        set(
            rates,
            nvmlUtilization_t {
                gpu: d.utilization_gpu,
                memory: d.utilization_memory,
            },
        )
    })
}

/// The samples the driver's ring buffer holds now, newer than `last_seen`: one every
/// `sample_period_ms` on the driver clock, at most the last 120 (about 20 s).
fn buffered_samples(d: &Device, kind: nvmlSamplingType_t, last_seen: u64) -> Vec<(u64, u32)> {
    let period = d.sample_period_ms.max(1) * 1000;
    let now = driver_clock_us();
    let newest = (now - CLOCK_BASE_US) / period;
    let oldest = newest.saturating_sub(119);
    (oldest..=newest)
        .map(|k| {
            let value = match kind {
                nvmlSamplingType_enum_NVML_MEMORY_UTILIZATION_SAMPLES => d.utilization_memory,
                _ if d.samples.is_empty() => d.utilization_gpu,
                _ => d.samples[(k % d.samples.len() as u64) as usize],
            };
            (CLOCK_BASE_US + k * period, value)
        })
        .filter(|(timestamp, _)| *timestamp > last_seen)
        .collect()
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
        if kind != nvmlSamplingType_enum_NVML_GPU_UTILIZATION_SAMPLES
            && kind != nvmlSamplingType_enum_NVML_MEMORY_UTILIZATION_SAMPLES
        {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        if count.is_null() || value_type.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let buffered = buffered_samples(d, kind, last_seen);
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
        if count.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        // Each active process has one sample at the newest tick of the sample grid.
        let newest = buffered_samples(
            d,
            nvmlSamplingType_enum_NVML_GPU_UTILIZATION_SAMPLES,
            last_seen,
        )
        .last()
        .map(|(timestamp, _)| *timestamp);
        let active: Vec<nvmlProcessUtilizationSample_t> = match newest {
            None => Vec::new(),
            Some(timestamp) => d
                .processes
                .iter()
                .filter_map(|p| {
                    Some(nvmlProcessUtilizationSample_t {
                        pid: p.pid,
                        timeStamp: timestamp,
                        smUtil: p.sm?,
                        memUtil: p.mem,
                        encUtil: 0,
                        decUtil: 0,
                    })
                })
                .collect(),
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
        (*memory).total = d.memory_total;
        (*memory).reserved = d.memory_reserved;
        (*memory).used = d.memory_used;
        (*memory).free = d
            .memory_total
            .saturating_sub(d.memory_used + d.memory_reserved);
        SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: nvmlTemperatureSensors_t,
    temperature: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetTemperature", |d| {
        if sensor != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        set(temperature, d.temperature)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: nvmlDevice_t,
    threshold: nvmlTemperatureThresholds_t,
    temperature: *mut c_uint,
) -> nvmlReturn_t {
    device_call(
        device,
        "nvmlDeviceGetTemperatureThreshold",
        |d| match threshold {
            nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_SHUTDOWN => {
                set(temperature, d.shutdown_temperature)
            }
            nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_SLOWDOWN => {
                set(temperature, d.slowdown_temperature)
            }
            _ => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetPowerUsage", |d| {
        set(power, d.power_mw)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetEnforcedPowerLimit", |d| {
        set(limit, d.power_limit_mw)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementDefaultLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetPowerManagementDefaultLimit", |d| {
        set(limit, d.power_default_limit_mw)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(
    device: nvmlDevice_t,
    state: *mut nvmlPstates_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetPerformanceState", |d| {
        set(state, d.performance_state as nvmlPstates_t)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetNumFans", |d| {
        if d.fans.is_empty() {
            nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
        } else {
            set(count, d.fans.len() as c_uint)
        }
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: nvmlDevice_t,
    fan: c_uint,
    speed: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetFanSpeed_v2", |d| {
        match d.fans.get(fan as usize) {
            Some(percent) => set(speed, *percent),
            None if d.fans.is_empty() => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
            None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        }
    })
}

/// The codec utilization calls: a percentage and the sampling period it covers (in µs).
unsafe fn codec_utilization(
    device: nvmlDevice_t,
    name: &str,
    percent: fn(&Device) -> u32,
    utilization: *mut c_uint,
    period_us: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, name, |d| {
        set(period_us, 167_000);
        set(utilization, percent(d))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    period_us: *mut c_uint,
) -> nvmlReturn_t {
    codec_utilization(
        device,
        "nvmlDeviceGetEncoderUtilization",
        |d| d.encoder_utilization,
        utilization,
        period_us,
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    period_us: *mut c_uint,
) -> nvmlReturn_t {
    codec_utilization(
        device,
        "nvmlDeviceGetDecoderUtilization",
        |d| d.decoder_utilization,
        utilization,
        period_us,
    )
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVbiosVersion(
    device: nvmlDevice_t,
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetVbiosVersion", |d| {
        write_c_string(&d.vbios_version, version, length)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    device: nvmlDevice_t,
    architecture: *mut nvmlDeviceArchitecture_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetArchitecture", |d| {
        set(architecture, d.architecture)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBrand(
    device: nvmlDevice_t,
    brand: *mut nvmlBrandType_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetBrand", |d| {
        set(brand, d.brand as nvmlBrandType_t)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetTotalEnergyConsumption", |d| {
        let since_load_ms = loaded_at().elapsed().as_millis() as u64;
        set(
            energy,
            d.energy_mj + d.power_mw as u64 * since_load_ms / 1000,
        )
    })
}

fn clock_of(d: &Device, clock: nvmlClockType_t, max: bool) -> Option<u32> {
    match (clock, max) {
        (nvmlClockType_enum_NVML_CLOCK_SM, false) => Some(d.clock_sm_mhz),
        (nvmlClockType_enum_NVML_CLOCK_MEM, false) => Some(d.clock_memory_mhz),
        (nvmlClockType_enum_NVML_CLOCK_GRAPHICS, false) => Some(d.clock_graphics_mhz),
        (nvmlClockType_enum_NVML_CLOCK_SM, true) => Some(d.max_clock_sm_mhz),
        (nvmlClockType_enum_NVML_CLOCK_MEM, true) => Some(d.max_clock_memory_mhz),
        (nvmlClockType_enum_NVML_CLOCK_GRAPHICS, true) => Some(d.max_clock_graphics_mhz),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock: nvmlClockType_t,
    mhz: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetClockInfo", |d| {
        match clock_of(d, clock, false) {
            Some(value) => set(mhz, value),
            None => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    clock: nvmlClockType_t,
    mhz: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMaxClockInfo", |d| {
        match clock_of(d, clock, true) {
            Some(value) => set(mhz, value),
            None => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        }
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetCurrentClocksThrottleReasons", |d| {
        set(reasons, d.throttle_reasons)
    })
}

// ---------------------------------------------------------------------------------------------
// PCIe and ECC
// ---------------------------------------------------------------------------------------------

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkGeneration(
    device: nvmlDevice_t,
    generation: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetCurrPcieLinkGeneration", |d| {
        set(generation, d.pcie_generation)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrPcieLinkWidth(
    device: nvmlDevice_t,
    width: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetCurrPcieLinkWidth", |d| {
        set(width, d.pcie_width)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkGeneration(
    device: nvmlDevice_t,
    generation: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMaxPcieLinkGeneration", |d| {
        set(generation, d.pcie_max_generation)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxPcieLinkWidth(
    device: nvmlDevice_t,
    width: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMaxPcieLinkWidth", |d| {
        set(width, d.pcie_max_width)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    kbps: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetPcieThroughput", |d| match counter {
        nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES => set(kbps, d.pcie_tx_kbps),
        nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES => set(kbps, d.pcie_rx_kbps),
        _ => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(
    device: nvmlDevice_t,
    replays: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetPcieReplayCounter", |d| {
        set(replays, d.pcie_replays)
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    _counter_type: nvmlEccCounterType_t,
    count: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(
        device,
        "nvmlDeviceGetTotalEccErrors",
        |d| match error_type {
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED => {
                set(count, d.ecc_corrected)
            }
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED => {
                set(count, d.ecc_uncorrected)
            }
            _ => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

unsafe fn running_processes(
    d: &Device,
    kind: &str,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    if count.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let matching: Vec<&Process> = d.processes.iter().filter(|p| p.kind == kind).collect();
    if matching.len() > *count as usize || (infos.is_null() && !matching.is_empty()) {
        *count = matching.len() as c_uint;
        return nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i, p) in matching.iter().enumerate() {
        *infos.add(i) = nvmlProcessInfo_t {
            pid: p.pid,
            usedGpuMemory: p.used_memory,
            gpuInstanceId: u32::MAX,
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
// Throttling time, field values (NVLink throughput, row remapping), NVLink state
// ---------------------------------------------------------------------------------------------

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetViolationStatus(
    device: nvmlDevice_t,
    policy: nvmlPerfPolicyType_t,
    time: *mut nvmlViolationTime_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetViolationStatus", |d| {
        let nanoseconds = match policy {
            nvmlPerfPolicyType_enum_NVML_PERF_POLICY_POWER => d.violation_power_ns,
            nvmlPerfPolicyType_enum_NVML_PERF_POLICY_THERMAL => d.violation_thermal_ns,
            _ => return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        };
        set(
            time,
            nvmlViolationTime_t {
                referenceTime: driver_clock_us(),
                violationTime: nanoseconds,
            },
        )
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetFieldValues", |d| {
        if values.is_null() || count < 0 {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        for i in 0..count as usize {
            let value = &mut *values.add(i);
            let link = d.nvlinks.get(value.scopeId as usize);
            let answer = match value.fieldId {
                138 => link.map(|l| l.tx_kib),
                139 => link.map(|l| l.rx_kib),
                142 => Some(d.remapped_correctable),
                143 => Some(d.remapped_uncorrectable),
                144 => Some(u64::from(d.remap_pending)),
                145 => Some(u64::from(d.remap_failed)),
                _ => None,
            };
            value.timestamp = driver_clock_us() as i64;
            match answer {
                Some(v) => {
                    value.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
                    value.value = nvmlValue_t { ullVal: v };
                    value.nvmlReturn = SUCCESS;
                }
                None => value.nvmlReturn = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
            }
        }
        SUCCESS
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: nvmlDevice_t,
    link: c_uint,
    active: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetNvLinkState", |d| {
        match d.nvlinks.get(link as usize) {
            _ if d.nvlinks.is_empty() => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
            None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
            Some(l) => set(
                active,
                if l.active {
                    nvmlEnableState_enum_NVML_FEATURE_ENABLED
                } else {
                    nvmlEnableState_enum_NVML_FEATURE_DISABLED
                },
            ),
        }
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
        (*support).isSupportedDevice = u32::from(d.gpm.is_some());
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
        if d.gpm.is_none() {
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
        let Some(gpm) = d.gpm else {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        };
        let request = &mut *request;
        for metric in request.metrics.iter_mut().take(request.numMetrics as usize) {
            let (value, name): (Option<f64>, &'static std::ffi::CStr) = match metric.metricId {
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

// ---------------------------------------------------------------------------------------------
// Events: XID errors listed in the scenario are delivered once each
// ---------------------------------------------------------------------------------------------

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set_out: *mut nvmlEventSet_t) -> nvmlReturn_t {
    let mut guard = state();
    let Some(state) = guard.as_mut().filter(|s| s.initialised > 0) else {
        return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
    };
    let handle = state.next_handle;
    state.next_handle += 1;
    state.event_sets.insert(handle, HashMap::new());
    set(set_out, handle as nvmlEventSet_t)
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set_handle: nvmlEventSet_t) -> nvmlReturn_t {
    match state()
        .as_mut()
        .and_then(|s| s.event_sets.remove(&(set_handle as usize)))
    {
        Some(_) => SUCCESS,
        None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    }
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    types: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetSupportedEventTypes", |_| {
        set(types, u64::from(nvmlEventTypeXidCriticalError))
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    types: c_ulonglong,
    set_handle: nvmlEventSet_t,
) -> nvmlReturn_t {
    let answer = device_call(device, "nvmlDeviceRegisterEvents", |_| {
        if types & !u64::from(nvmlEventTypeXidCriticalError) != 0 {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        SUCCESS
    });
    if answer != SUCCESS {
        return answer;
    }
    let mut guard = state();
    let Some(state) = guard.as_mut() else {
        return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
    };
    // XIDs raised before registering are not delivered, as with the driver.
    let index = device as usize - 1;
    let raised = state
        .scenario
        .devices
        .get(index)
        .map_or(0, |d| d.xids.len());
    match state.event_sets.get_mut(&(set_handle as usize)) {
        Some(registered) => {
            registered.insert(index, raised);
            SUCCESS
        }
        None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    }
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set_handle: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    if data.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    loop {
        {
            let mut guard = state();
            let Some(state) = guard.as_mut().filter(|s| s.initialised > 0) else {
                return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
            };
            refresh(state);
            let devices = &state.scenario.devices;
            let Some(registered) = state.event_sets.get_mut(&(set_handle as usize)) else {
                return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
            };
            for (index, delivered) in registered.iter_mut() {
                if let Some(xid) = devices.get(*index).and_then(|d| d.xids.get(*delivered)) {
                    *delivered += 1;
                    *data = nvmlEventData_t {
                        device: (*index + 1) as nvmlDevice_t,
                        eventType: u64::from(nvmlEventTypeXidCriticalError),
                        eventData: *xid,
                        gpuInstanceId: u32::MAX,
                        computeInstanceId: u32::MAX,
                    };
                    return SUCCESS;
                }
            }
        }
        if Instant::now() >= deadline {
            return nvmlReturn_enum_NVML_ERROR_TIMEOUT;
        }
        // The driver blocks in the kernel; polling the scenario ten times a second keeps the
        // fake's own cost out of the exporter's benchmarks.
        std::thread::sleep(
            Duration::from_millis(100).min(deadline.saturating_duration_since(Instant::now())),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// MIG
// ---------------------------------------------------------------------------------------------

/// MIG devices per GPU NVML reports as the maximum (A100, H100: 7).
const MAX_MIG_DEVICES: c_uint = 7;

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMigMode", |d| match d.mig_mode {
        None => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        Some(on) => {
            let answer = set(current, c_uint::from(on));
            if answer == SUCCESS {
                set(pending, c_uint::from(on))
            } else {
                answer
            }
        }
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMaxMigDeviceCount", |d| {
        match d.mig_mode {
            None => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
            Some(_) => set(count, MAX_MIG_DEVICES),
        }
    })
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMigDeviceHandleByIndex", |d| {
        if d.mig_mode != Some(true) || (device as usize) >= MIG_HANDLE_BASE {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        if index as usize >= d.mig.len() {
            // An empty slot.
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        let handle = MIG_HANDLE_BASE + (device as usize - 1) * 256 + index as usize;
        set(mig, handle as nvmlDevice_t)
    })
}

/// The parent GPU index and MIG position a MIG handle names, if the scenario has it.
fn mig_position(handle: usize) -> Option<(usize, usize)> {
    let position = (
        (handle.checked_sub(MIG_HANDLE_BASE)?) / 256,
        (handle - MIG_HANDLE_BASE) % 256,
    );
    Some(position)
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    let Some((gpu, position)) = mig_position(device as usize) else {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    };
    with_scenario(
        |s| match s.devices.get(gpu).and_then(|p| p.mig.get(position)) {
            Some(mig) => set(id, mig.gpu_instance_id),
            None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        },
    )
}

#[cfg(not(old_driver))]
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpu_instance: c_uint,
    sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    // The sample is taken on the MIG device of that GPU instance.
    let index = (device as usize).wrapping_sub(1);
    let mut handle = None;
    let answer = with_scenario(|s| {
        let position = s
            .devices
            .get(index)
            .and_then(|d| d.mig.iter().position(|m| m.gpu_instance_id == gpu_instance));
        handle = position.map(|p| MIG_HANDLE_BASE + index * 256 + p);
        SUCCESS
    });
    match handle {
        Some(handle) => nvmlGpmSampleGet(handle as nvmlDevice_t, sample),
        None if answer != SUCCESS => answer,
        None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    }
}
