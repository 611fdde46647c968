//! What one GPU's NVML figures say beyond their raw values: clocks held down, errors, the PCIe
//! link's bandwidth against its maximum, and which MIG instance stands for a GPU in MIG mode
//! (pure).

use crate::snapshot::{GpuDevice, GpuProcess, MigDevice};

/// Throttle-reason bits that hold clocks down for a reason worth reporting: software power
/// cap, hardware slowdown, software and hardware thermal slowdown, power brake. (Idle, sync
/// boost, application clocks and display clock settings are not bottlenecks.)
pub const LIMITING_THROTTLE_REASONS: u64 = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

/// The MIG device the GPU's main process runs in, where the driver names its GPU instance,
/// else the GPU's only MIG device with GPM figures: NVML gives a GPU in MIG mode no busy time
/// or SM activity of its own, only each instance's (GPM, Hopper and newer).
pub(super) fn main_instance<'a>(
    device: &'a GpuDevice,
    main: Option<&GpuProcess>,
) -> Option<&'a MigDevice> {
    if let Some(id) = main.and_then(|p| p.gpu_instance_id) {
        return device
            .mig_devices
            .iter()
            .find(|m| m.gpu_instance_id == Some(id));
    }
    let mut reporting = device
        .mig_devices
        .iter()
        .filter(|m| m.busy_ratio.is_some() || m.sm_activity_ratio.is_some());
    match (reporting.next(), reporting.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// The SM clock against its maximum while a limiting throttle reason holds it down.
pub(super) fn throttled_clock_ratio(device: &GpuDevice) -> Option<f64> {
    if device.throttle_reasons? & LIMITING_THROTTLE_REASONS == 0 {
        return None;
    }
    let sm = device.clocks.iter().find(|c| c.domain == "sm")?;
    let (now, max) = (sm.hertz?, sm.max_hertz?);
    (max > 0.0).then(|| (now / max).clamp(0.0, 1.0))
}

/// The XID errors and uncorrected ECC errors the GPU has reported.
pub(super) fn hardware_errors(device: &GpuDevice) -> Option<u64> {
    let xids: u64 = device.xid_errors.iter().map(|(_, n)| n).sum();
    Some(xids + device.ecc_uncorrected.unwrap_or(0))
}

/// Usable bandwidth of one PCIe lane of a generation, in Gbit/s (after line encoding).
fn lane_gbits(generation: u32) -> f64 {
    match generation {
        0 | 1 => 2.0,
        2 => 4.0,
        3 => 7.877,
        4 => 15.754,
        5 => 31.508,
        // Generation 6 and later double per generation.
        g => 31.508 * f64::from(1u32 << (g - 5).min(8)),
    }
}

/// The PCIe link's usable Gbit/s as it trained and at its maximum generation and width.
fn link_gbits(device: &GpuDevice) -> Option<(f64, f64)> {
    let p = device.pcie;
    let now = lane_gbits(p.generation?) * f64::from(p.width?);
    let max = lane_gbits(p.max_generation?) * f64::from(p.max_width?);
    (max > 0.0).then_some((now, max))
}

pub(super) fn pcie_bandwidth_share(device: &GpuDevice) -> Option<f64> {
    link_gbits(device).map(|(now, max)| (now / max).min(1.0))
}

/// Share of its line rate a large DMA copy moves (packet headers, flow control: a gen 4 x16
/// link's 31.5 GB/s moves some 25 GB/s).
const PCIE_COPY_EFFICIENCY: f64 = 0.8;

/// Share of the interval a process's copies (`copied` bytes a second, to and from the device)
/// took beyond what its GPU's link at full speed would have taken: the bytes at the link's
/// copy rate as it trained, less at its maximum. `None` on a healthy link, or without the
/// probes.
pub(super) fn link_copy_excess(device: &GpuDevice, copied: Option<f64>) -> Option<f64> {
    let (now, max) = link_gbits(device).filter(|(now, max)| *now > 0.0 && now < max)?;
    let seconds_per_byte = |gbits: f64| 8.0 / (gbits * 1e9 * PCIE_COPY_EFFICIENCY);
    Some(copied? * (seconds_per_byte(now) - seconds_per_byte(max)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_bandwidth_share_counts_generation_and_width() {
        let link = |generation, width| GpuDevice {
            pcie: crate::snapshot::PcieLink {
                generation: Some(generation),
                width: Some(width),
                max_generation: Some(5),
                max_width: Some(16),
                ..Default::default()
            },
            ..GpuDevice::default()
        };
        assert_eq!(pcie_bandwidth_share(&link(5, 16)), Some(1.0));
        assert!((pcie_bandwidth_share(&link(4, 16)).unwrap() - 0.5).abs() < 0.001);
        assert!((pcie_bandwidth_share(&link(5, 8)).unwrap() - 0.5).abs() < 1e-9);
        assert!(pcie_bandwidth_share(&link(2, 4)).unwrap() < 0.04);
        // 20 MB a second copied across gen 2 x4 (1.6 GB/s) instead of gen 5 x16 (50 GB/s):
        // 12.1 ms of each second the link added; nothing on a healthy link or without the
        // probes.
        let excess = link_copy_excess(&link(2, 4), Some(20e6)).unwrap();
        assert!(
            (excess - (0.0125 - 20e6 / 50.4128e9)).abs() < 1e-9,
            "{excess}"
        );
        assert_eq!(link_copy_excess(&link(5, 16), Some(20e6)), None);
        assert_eq!(link_copy_excess(&link(2, 4), None), None);
    }

    #[test]
    fn a_mig_gpu_is_read_through_the_instance_its_main_process_runs_in() {
        let instance = |id, busy: Option<f64>| MigDevice {
            gpu_instance_id: Some(id),
            busy_ratio: busy,
            ..MigDevice::default()
        };
        let gpu = |instances: Vec<MigDevice>| GpuDevice {
            mig_devices: instances,
            ..GpuDevice::default()
        };
        let main_in = |id: Option<u32>| GpuProcess {
            gpu_instance_id: id,
            ..GpuProcess::default()
        };
        let busy = |device: &GpuDevice, main: GpuProcess| {
            main_instance(device, Some(&main)).and_then(|m| m.busy_ratio)
        };
        let two = gpu(vec![instance(1, Some(0.2)), instance(2, Some(0.8))]);
        // The driver names the main process's instance: that one, not its neighbour.
        assert_eq!(busy(&two, main_in(Some(2))), Some(0.8));
        // Unnamed: the only instance with GPM figures stands for the GPU; among several that
        // report, none does.
        let one = gpu(vec![instance(1, Some(0.6)), instance(2, None)]);
        assert_eq!(busy(&one, main_in(None)), Some(0.6));
        assert_eq!(busy(&two, main_in(None)), None);
        // An A100's slice: no GPM, nothing to read.
        assert_eq!(busy(&gpu(vec![instance(1, None)]), main_in(Some(1))), None);
    }
}
