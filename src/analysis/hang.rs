//! A hung collective: a rank whose main thread sits in one collective, tick after tick, while
//! its GPU spins in it and moves no data — or, as real PyTorch shows it (NCCL enqueues and
//! returns at once), whose thread has sat in one CUDA driver wait ever since it issued a
//! collective, the GPU spinning the same way. A rank whose peer on this node works meanwhile
//! (a barrier while rank 0 writes a checkpoint) waits for it: that is no hang, and the hang's
//! record says whom it waits for. Where NCCL's RAS service answered for the process (asked
//! while a hang is tracked), the record carries what it says of the job's ranks (`ras.rs`).

use super::peers::SPIN_SM_ACTIVITY_MAX;
use super::ras;
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
    let hang = match in_driver(now, t) {
        Some(hang) => {
            *stuck = None;
            hang
        }
        None => in_frame(stuck, now, at, t)?,
    };
    Some(Hang {
        waiting_for: now.working_peer.clone(),
        pid: now.main_pid,
        peers: now.ras.as_ref().map(|answer| {
            let point_to_point = now
                .driver_wait
                .and_then(|w| w.after)
                .is_some_and(|op| op.is_point_to_point());
            ras::evidence(answer, point_to_point)
        }),
        ..hang
    })
}

/// The main thread in one collective's frame, tick after tick.
fn in_frame(stuck: &mut Stuck, now: &GpuObservation, at: f64, t: &Thresholds) -> Option<Hang> {
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
        ..Hang::default()
    })
}

/// A thread of the main GPU process inside one CUDA driver wait since after it issued an NCCL
/// collective (the probes time the wait from its entry), while the GPU is busy with its SMs
/// nearly empty where GPM reads them, and no data crosses its PCIe link: the wait is for the
/// collective's kernel, spinning for a peer. Observed without the stacks.
fn in_driver(now: &GpuObservation, t: &Thresholds) -> Option<Hang> {
    let wait = now.driver_wait?;
    let op = wait.after?;
    let spinning = now.busy.is_some_and(|b| b >= t.gpu_busy_above)
        && now.sm_activity.is_none_or(|s| s < SPIN_SM_ACTIVITY_MAX)
        && now
            .pcie_bytes_per_second
            .is_none_or(|bytes| bytes < HANG_PCIE_BYTES_MAX);
    let what = if op.is_point_to_point() {
        "NCCL point-to-point: a send waits for its peer's receive, a receive for its send"
    } else {
        "NCCL"
    };
    spinning.then(|| Hang {
        seconds: wait.seconds,
        frame: format!(
            "{} ({what}; the host waits inside the CUDA driver)",
            op.name()
        ),
        ..Hang::default()
    })
}
