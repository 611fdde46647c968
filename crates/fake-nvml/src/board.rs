//! What the board is and how it runs: identity, thermals, power, clocks.

use super::*;

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
// Thermals, power, clocks
// ---------------------------------------------------------------------------------------------

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
        let since_load_ms = (monotonic_ns() - loaded_ns()) / 1_000_000;
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
