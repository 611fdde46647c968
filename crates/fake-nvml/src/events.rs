//! XID events and MIG.

use super::*;

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
        // The driver blocks in the kernel; polling the scenario four times a second keeps the
        // fake's own cost out of the exporter's benchmarks.
        std::thread::sleep(
            Duration::from_millis(250).min(deadline.saturating_duration_since(Instant::now())),
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
pub(crate) fn mig_position(handle: usize) -> Option<(usize, usize)> {
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
