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
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper_sys::bindings::*;
use serde::Deserialize;

mod activity;
mod board;
mod events;
mod links;
mod scenario;

use activity::*;
use events::*;
use scenario::*;

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

struct State {
    path: PathBuf,
    modified: Option<SystemTime>,
    /// When the file's time was last looked at.
    checked: Option<Instant>,
    scenario: Scenario,
    initialised: u32,
    /// Per event set: registered device indexes and, per device, XIDs already delivered.
    event_sets: HashMap<usize, HashMap<usize, usize>>,
    next_handle: usize,
}

/// Microseconds of the fake driver clock at library load; deliberately not wall time.
const CLOCK_BASE_US: u64 = 1_700_000_000_000_000;

/// CLOCK_MONOTONIC in nanoseconds: the driver clock runs on it, and emulated timelines are
/// written on it by the workload processes.
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The monotonic time at which the driver clock read `CLOCK_BASE_US` (library load).
fn loaded_ns() -> u64 {
    static LOADED: OnceLock<u64> = OnceLock::new();
    *LOADED.get_or_init(monotonic_ns)
}

/// Microseconds since the library was loaded, or the value `FAKE_NVML_FROZEN_CLOCK_US` holds
/// at the moment of the call, so that golden tests step the clock themselves and see the
/// same samples, energy and GPM intervals on every run.
fn elapsed_us() -> u64 {
    std::env::var("FAKE_NVML_FROZEN_CLOCK_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| (monotonic_ns() - loaded_ns()) / 1000)
}

fn driver_clock_us() -> u64 {
    CLOCK_BASE_US + elapsed_us()
}

/// The monotonic time of a driver-clock timestamp, to look it up in an emulated timeline.
fn monotonic_of(driver_us: u64) -> u64 {
    loaded_ns() + driver_us.saturating_sub(CLOCK_BASE_US) * 1000
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

/// How long a scenario is trusted before its file's time is looked at again. The exporter
/// makes a few dozen calls per GPU in each tick, all within a millisecond or two; a real
/// driver answers them from memory, so the fake's cost in the benchmarks (which count the
/// library's work as the exporter's) stays a driver's, not one file lookup a call.
const TRUST_SCENARIO: Duration = Duration::from_millis(25);

/// Re-reads the scenario when its file changed. A file caught half-written keeps the old one.
fn refresh(state: &mut State) {
    if state
        .checked
        .is_some_and(|at| at.elapsed() < TRUST_SCENARIO)
    {
        return;
    }
    state.checked = Some(Instant::now());
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
/// instance's UUID, memory and GPM figures, lost whenever its parent is. An emulated Hopper's
/// only instance does all of the GPU's work: its GPM figures come from the parent's timeline.
fn resolve(scenario: &Scenario, handle: nvmlDevice_t) -> Option<Device> {
    let Some((gpu, position)) = mig_position(handle as usize) else {
        return scenario
            .devices
            .get((handle as usize).wrapping_sub(1))
            .cloned();
    };
    let parent = scenario.devices.get(gpu)?;
    let mig = parent.mig.get(position)?;
    let emulated = parent.timeline.is_some() && parent.architecture >= 9 && parent.mig.len() == 1;
    Some(Device {
        uuid: mig.uuid.clone(),
        memory_total: mig.memory_total,
        memory_used: mig.memory_used,
        memory_reserved: 0,
        architecture: parent.architecture,
        timeline: parent.timeline.clone().filter(|_| emulated),
        gpm: mig.sm_util.filter(|_| !emulated).map(|sm_util| Gpm {
            graphics_util: mig.graphics_util,
            sm_util,
            sm_occupancy: 0.0,
            tensor_util: 0.0,
            dram_bw_util: 0.0,
        }),
        lost: parent.lost,
        mig_mode: None,
        gpu_instance: true,
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
    loaded_ns();
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
        checked: None,
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
