//! What one GPU's NVML figures say beyond their raw values: clocks held down, errors, the PCIe
//! link's bandwidth against its maximum, and which MIG instance stands for a GPU in MIG mode
//! (pure).

use crate::snapshot::{GpuDevice, GpuProcess, MigDevice};

/// Throttle-reason bits that hold clocks down for a reason worth reporting: software power
/// cap, hardware slowdown, software and hardware thermal slowdown, power brake. (Idle, sync
/// boost, application clocks and display clock settings are not bottlenecks.)
const LIMITING_THROTTLE_REASONS: u64 = SW_POWER_CAP | 0x8 | 0x20 | 0x40 | 0x80;

/// The software power cap: the board lowers its clocks to stay within its power limit.
const SW_POWER_CAP: u64 = 0x4;

/// The throttle reasons holding this GPU's clocks down for a reason worth reporting, `None`
/// where the driver does not say. The software power cap counts only where the enforced
/// limit is below the board's default: at its default limit a GPU running heavy kernels
/// draws its rated power at the clocks that power allows (GPU Boost's operating point, no
/// setting of the node's raises it; a real H200 in a bf16 matmul loop draws 695 of its 700 W
/// at 1,500 of 1,980 MHz with this reason set the whole time). A limit lowered by an operator
/// or a power manager is what the throttling verdict's advice can act on.
fn limiting_reasons(device: &GpuDevice) -> Option<u64> {
    let reasons = device.throttle_reasons? & LIMITING_THROTTLE_REASONS;
    let capped = matches!(
        (device.power_limit_watts, device.power_limit_default_watts),
        (Some(limit), Some(default)) if limit + 1.0 < default
    );
    Some(if capped {
        reasons
    } else {
        reasons & !SW_POWER_CAP
    })
}

/// Whether a limiting throttle reason holds the GPU's clocks down (`limiting_reasons`).
pub(super) fn throttled(device: &GpuDevice) -> Option<bool> {
    limiting_reasons(device).map(|r| r != 0)
}

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
    if !throttled(device)? {
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
    fn a_power_cap_throttles_only_below_the_boards_default_limit() {
        // A real H200 in a bf16 matmul loop: the software power cap set, 695 of 700 W drawn,
        // the SM clock at 1,500 of 1,980 MHz, the limit at the board's default.
        let board = |reasons, limit, default| GpuDevice {
            throttle_reasons: Some(reasons),
            power_limit_watts: limit,
            power_limit_default_watts: default,
            clocks: vec![crate::snapshot::GpuClock {
                domain: "sm",
                hertz: Some(1.5e9),
                max_hertz: Some(1.98e9),
            }],
            ..GpuDevice::default()
        };
        let at_default = board(SW_POWER_CAP, Some(700.0), Some(700.0));
        assert_eq!(throttled(&at_default), Some(false));
        assert_eq!(throttled_clock_ratio(&at_default), None);
        // Unknown limits: nothing says the cap was lowered.
        assert_eq!(
            throttled(&board(SW_POWER_CAP, None, Some(700.0))),
            Some(false)
        );
        // Capped by an operator or a power manager: 500 W of 700.
        let capped = board(SW_POWER_CAP, Some(500.0), Some(700.0));
        assert_eq!(throttled(&capped), Some(true));
        let ratio = throttled_clock_ratio(&capped).unwrap();
        assert!((ratio - 1.5 / 1.98).abs() < 1e-9, "{ratio}");
        // Thermal and hardware slowdowns count at any power limit; idle and sync boost never.
        for bit in [0x8, 0x20, 0x40, 0x80] {
            assert_eq!(
                throttled(&board(bit | SW_POWER_CAP, Some(700.0), Some(700.0))),
                Some(true)
            );
        }
        assert_eq!(
            throttled(&board(0x1 | 0x10, Some(500.0), Some(700.0))),
            Some(false)
        );
        assert_eq!(throttled(&GpuDevice::default()), None);
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
