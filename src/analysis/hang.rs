//! A hung collective: a rank whose main thread sits in one collective, tick after tick, while
//! its GPU spins in it and moves no data.

use super::{GpuObservation, Hang};
use crate::config::Thresholds;
use crate::snapshot::Activity;

/// Recent stack samples from which a tick is judged by them (else by the whole window's).
pub const RECENT_SAMPLES_MIN: u32 = 4;

/// PCIe traffic below which a GPU in a collective moves no data: a hung NCCL kernel spins
/// without traffic (a few MB/s of driver housekeeping), while even a 10 GbE all-reduce moves
/// about a GB/s through the GPU's link.
const HANG_PCIE_BYTES_MAX: f64 = 50e6;

/// Since when a GPU's main thread has sat in one collective with the GPU busy, and the
/// collective's frame.
pub type Stuck = Option<(f64, String)>;

/// Whether the GPU's main thread still sits in the collective it sat in on the previous
/// tick (`stuck`, updated): every recent stack sample there (a rank that makes progress
/// leaves it between steps), the same frame, the GPU busy (NCCL's kernels spin while they
/// wait) and, where the driver reports it, no data crossing its PCIe link (a slow collective
/// that moves gradients to the NIC is progress, however long it takes).
pub fn track(stuck: &mut Stuck, now: &GpuObservation, at: f64, t: &Thresholds) -> Option<Hang> {
    let held = now.stacks.as_ref().filter(|s| {
        s.recent_samples >= RECENT_SAMPLES_MIN
            && s.recent_shares[Activity::Collective] >= 1.0 - 1e-9
            && now.busy.is_some_and(|b| b >= t.gpu_busy_above)
            && now
                .pcie_bytes_per_second
                .is_none_or(|bytes| bytes < HANG_PCIE_BYTES_MAX)
    });
    let Some(stacks) = held else {
        *stuck = None;
        return None;
    };
    let frame = stacks
        .top_frames
        .iter()
        .find(|f| f.activity == Activity::Collective)
        .map(|f| format!("{} at {}", f.function, f.location))
        .unwrap_or_default();
    let entry = stuck.get_or_insert((at, frame.clone()));
    if entry.1 != frame {
        *entry = (at, frame.clone());
    }
    Some(Hang {
        seconds: at - entry.0,
        frame,
    })
}
