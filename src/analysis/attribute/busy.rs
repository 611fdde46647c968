//! The busy time that did no useful work for the main job: other processes' work, a
//! collective's spinning kernels, empty SMs, held-down clocks.

use super::{add, NOTED};
use crate::analysis::network;
use crate::analysis::{Cause, Kind, LostTime, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Reason;

/// Busy time that did no useful work for the main job, each part capped by what is left.
pub(super) fn split_busy(
    lost: &mut LostTime,
    w: &WindowFigures,
    busy: f64,
    in_collective: f64,
    t: &Thresholds,
) {
    let mut left = busy;
    let mut take = |lost: &mut LostTime, cause: Kind, share: f64| {
        let taken = share.clamp(0.0, left);
        left -= taken;
        add(lost, Cause::Kind(cause), taken);
        taken
    };
    let shared = main_work_share(w);
    if let Some(main) = shared {
        take(lost, Kind::Contention, busy * (1.0 - main));
        lost.reasons.push(Reason::OthersWork { share: 1.0 - main });
    }
    // A GPU spinning in a collective's kernels leaves its SMs nearly empty (NCCL runs on a
    // few channels), so the busy time a collective explains is at most the time the SMs sat
    // empty: a rank held in a collective while its GPU still runs its queued compute (a full
    // launch queue, a host-side barrier) is not waiting on its GPU.
    let empty_sms = w.sm_activity.map(|sm| (busy - sm).max(0.0));
    let seen = empty_sms.map_or(in_collective, |empty| in_collective.min(empty));
    // Its peers' GPUs as busy as its own: the rank's wait was theirs, not its GPU's.
    let cap = w.collective_busy_cap.unwrap_or(f64::INFINITY);
    if seen - cap >= NOTED * busy {
        lost.reasons
            .push(Reason::PeersAsBusy { at_most: cap, seen });
    }
    // Real PyTorch's collectives return at once and spin on the GPU: the probes (collectives
    // issued, the host's waits) and the job's other ranks bound how long.
    let after_collectives = network::spun_in_collectives(w, t).unwrap_or(0.0);
    if after_collectives > seen.min(cap) {
        lost.reasons.push(Reason::SpunForPeers {
            share: after_collectives,
        });
    }
    // A pipeline stage waits for the others by its schedule besides (inferred).
    let bubble = w.pipeline_bubble.unwrap_or(0.0);
    if bubble > 0.0 && bubble >= NOTED * busy {
        lost.reasons.push(Reason::PipelineBubble {
            share: bubble,
            microbatches: w.transfers_per_step.unwrap_or(0.0) / 2.0,
        });
    }
    let collective = take(
        lost,
        Kind::Communication,
        seen.min(cap).max(after_collectives + bubble),
    );
    lost.collective_busy = collective;
    // The device's SM activity mixes every process's kernels: the main job's empty SMs are
    // its share of the empty time (its share of the work), not the other jobs' (theirs is
    // theirs, and their time is contention already). Those a collective left empty are its.
    let empty = empty_sms.map_or(0.0, |empty| {
        let own = (empty - collective) * shared.unwrap_or(1.0);
        take(lost, Kind::KernelEfficiency, own)
    });
    // Clocks held down slow the useful busy time that is left by the clock's shortfall.
    if let (Some(throttled), Some(clock)) = (w.throttled, w.throttled_clock_ratio) {
        let useful = busy - collective - empty - shared.map_or(0.0, |m| busy * (1.0 - m));
        take(lost, Kind::Throttling, throttled * useful * (1.0 - clock));
    }
}

/// The main job's share of the GPU's work where other processes do a real share of it.
pub fn main_work_share(w: &WindowFigures) -> Option<f64> {
    w.sharing
        .as_ref()
        .filter(|s| s.working.is_some_and(|n| n >= 2))
        .and_then(|s| s.main_work_share)
}
