//! PCIe, ECC, throttling time, field values and NVLink.

use super::*;

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
