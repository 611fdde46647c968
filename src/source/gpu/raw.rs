//! NVML calls that nvml-wrapper does not expose the way the exporter needs them: field values
//! with a scope (per-link NVLink counters), the row-remapping fields as one call, and a MIG
//! device's GPU-instance id. Each is a thin, safe wrapper over the raw binding.

use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use crate::snapshot::RemappedRows;

/// Field ids of nvml.h: NVLink data counters (per link, in KiB) and row remapping.
const FI_NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
const FI_NVLINK_THROUGHPUT_DATA_RX: u32 = 139;
const FI_REMAPPED_ROWS: [u32; 4] = [142, 143, 144, 145];

/// Rows remapped after correctable and uncorrectable errors, and whether a remap is pending
/// or failed.
pub fn remapped_rows(device: &Device) -> Result<RemappedRows, NvmlError> {
    let ids = FI_REMAPPED_ROWS.map(FieldId);
    let mut values = [0u64; 4];
    for (slot, sample) in values.iter_mut().zip(device.field_values_for(&ids)?) {
        *slot = match sample?.value? {
            SampleValue::U64(v) => v,
            SampleValue::U32(v) => u64::from(v),
            _ => return Err(NvmlError::UnexpectedVariant(0)),
        };
    }
    Ok(RemappedRows {
        correctable: values[0],
        uncorrectable: values[1],
        pending: values[2] != 0,
        failed: values[3] != 0,
    })
}

/// Data bytes (sent, received) over `links`, summed. These fields are per link (scope id =
/// link index), which nvml-wrapper's field-value call cannot express, so this calls
/// nvmlDeviceGetFieldValues directly.
pub fn nvlink_bytes(nvml: &Nvml, device: &Device, links: &[u32]) -> Result<(u64, u64), NvmlError> {
    use nvml_wrapper_sys::bindings::nvmlFieldValue_t;
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetFieldValues.as_ref())?;
    let mut values: Vec<nvmlFieldValue_t> = links
        .iter()
        .flat_map(|&link| {
            [FI_NVLINK_THROUGHPUT_DATA_TX, FI_NVLINK_THROUGHPUT_DATA_RX].map(|field| {
                // SAFETY: a plain C struct for which all zeroes is a valid value.
                let mut value: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
                value.fieldId = field;
                value.scopeId = link;
                value
            })
        })
        .collect();
    // SAFETY: the handle is valid while `device` lives, and `values` holds exactly the
    // number of initialised entries we pass.
    nvml_try(unsafe { sym(device.handle(), values.len() as i32, values.as_mut_ptr()) })?;
    let (mut tx, mut rx) = (0u64, 0u64);
    for value in &values {
        nvml_try(value.nvmlReturn)?;
        // SAFETY: NVML reports these counters as unsigned long long.
        let kib = unsafe { value.value.ullVal };
        match value.fieldId {
            FI_NVLINK_THROUGHPUT_DATA_TX => tx = tx.saturating_add(kib),
            _ => rx = rx.saturating_add(kib),
        }
    }
    Ok((tx.saturating_mul(1024), rx.saturating_mul(1024)))
}

/// The GPU instance id of a MIG device (not wrapped by nvml-wrapper).
pub fn gpu_instance_id(nvml: &Nvml, mig: &Device) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref())?;
    let mut id = 0;
    // SAFETY: the handle is valid while `mig` lives and `id` is a valid out-pointer.
    nvml_try(unsafe { sym(mig.handle(), &mut id) })?;
    Ok(id)
}
