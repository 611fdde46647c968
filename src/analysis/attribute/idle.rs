//! The idle time split: by what the main thread was seen doing (observed), or by the counter
//! rules' scores (inferred).

use super::loader::{split_loader, storage_busy};
use super::{add, cpu_wait_caused_by_others, note};
use crate::analysis::network;
use crate::analysis::score::IDLE_BUSY;
use crate::analysis::{Cause, InputSource, Kind, KindScore, LostTime, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::{Activity, ProcessStacks, Reason};

/// Splits the idle time by the main thread's activities; returns the collective time it did
/// not explain (the rank waited for its peers while its GPU was busy).
pub(super) fn split_observed(
    lost: &mut LostTime,
    w: &WindowFigures,
    stacks: &ProcessStacks,
    t: &Thresholds,
) -> f64 {
    let busy = 1.0 - lost.idle;
    let sync = stacks.share(Activity::GpuSync);
    let collective = stacks.share(Activity::Collective);
    let other = stacks.share(Activity::Other);
    // A loop without workers that computes its own samples runs Python when it "waits for its
    // loader" (DataLoader with num_workers=0): the loop's own work, drained syncs and all.
    let (loader, python) = {
        let (loader, python) = (
            stacks.share(Activity::DataLoader),
            stacks.share(Activity::Python),
        );
        let loads_itself =
            w.workers.unwrap_or(0.0) < 0.5 && w.busiest_thread.is_some_and(|b| b >= t.quiet_below);
        if loads_itself {
            (0.0, python + loader)
        } else {
            (loader, python)
        }
    };
    // A launch held by a full launch queue reads as the launching line's Python: that much of
    // the Python is a wait for the GPU, which works meanwhile, and drains nothing.
    let queued = queue_full(w, python);
    let python = python - queued;
    note(lost, queued, Reason::LaunchQueueFull { share: queued });
    // The loader waits the GPU worked through (the batch's upload after them waited for the
    // kernels queued before): busy time where it was, as the syncs' is.
    let loader_busy = loader_worked_through(stacks, loader).min(busy);
    let loader = loader - loader_busy;
    note(
        lost,
        loader_busy,
        Reason::LoaderWorkedThrough { share: loader_busy },
    );
    // The GPU works while the thread waits for it. Python right after a sync starts on an
    // empty queue (the sync drained it): without the sync the thread would have been as far
    // ahead as it was held there while the GPU worked, so that much Python (the
    // counterfactual) launches nothing the GPU waits for. The rest of the busy time overlaps
    // first what keeps the GPU fed (the other Python, launching kernels; a collective running
    // its own), evenly, then what does not (the drained Python, a loader wait, a sleep
    // elsewhere): a GPU that keeps up with the loop drains its queue in the waits that launch
    // nothing, so its idle time falls there first. Where the probes timed each sync's hold and
    // the host's time until its next wait, the drained Python is at most what lay within the
    // holds: a checkpoint written after a sync idles the GPU as long whether or not the sync
    // drained its queue first.
    let sync_busy = (busy - loader_busy).min(sync + queued);
    let drained = python
        .min(busy.min(sync))
        .min(w.after_sync_within_hold.unwrap_or(1.0));
    let left = busy - loader_busy - sync_busy;
    let fed = python - drained + collective;
    let idle_in_fed = idle_in(fed, left);
    let idle_in_starved = idle_in(loader + other + drained, left - fed.min(left));
    // Waiting for a GPU that runs none of the job's work (a queue behind others' kernels), and
    // the drained Python's idle time: the sync's. The rest of the Python's is the host's.
    let drained_idle = drained * idle_in_starved;
    add(
        lost,
        Cause::Kind(Kind::SyncStall),
        sync + queued - sync_busy + drained_idle,
    );
    let host_idle = (python - drained) * idle_in_fed;
    note(
        lost,
        sync,
        Reason::Synchronizing {
            seen: sync,
            drained: (drained_idle > 0.0).then(|| drained_idle / (drained_idle + host_idle)),
        },
    );
    split_python(lost, w, t, host_idle, python);
    split_loader(lost, w, t, loader * idle_in_starved, loader);
    let communication = collective * idle_in_fed;
    add(lost, Cause::Kind(Kind::Communication), communication);
    note(lost, collective, Reason::InCollectives { seen: collective });
    // Idle time nothing the thread did explains, on a GPU whose own link trained below its
    // maximum while it works: the link (copies crawl across it while the GPU waits).
    let unexplained = other * idle_in_starved;
    match network::link_degraded_under_load(w) {
        Some(bandwidth) if unexplained > 0.0 => {
            add(lost, Cause::Kind(Kind::Communication), unexplained);
            lost.reasons.push(Reason::DegradedLink {
                bandwidth,
                share: unexplained,
            });
        }
        _ => add(lost, Cause::Unexplained, unexplained),
    }
    (collective - communication).max(0.0)
}

/// The share of the time the loop waited for the GPU: its samples in a sync, its launches held
/// by a full launch queue (timed apart; the samples read those as Python), and its loader
/// waits the GPU worked through (queued work outlasted them).
pub(super) fn waited_for_gpu(w: &WindowFigures, stacks: &ProcessStacks) -> f64 {
    let python = stacks.share(Activity::Python);
    let loader = stacks.share(Activity::DataLoader);
    let worked_through = loader_worked_through(stacks, loader);
    (stacks.share(Activity::GpuSync) + queue_full(w, python) + worked_through).min(1.0)
}

/// The part of the loop's `loader` share (its wait for its loader, 0 where it loads its own
/// samples) in which its GPU still worked through kernels queued before.
fn loader_worked_through(stacks: &ProcessStacks, loader: f64) -> f64 {
    stacks.loader_queued.clamp(0.0, loader)
}

/// The part of the loop's `python` share that was a launch held by a full launch queue.
fn queue_full(w: &WindowFigures, python: f64) -> f64 {
    w.launch_queue_full.unwrap_or(0.0).clamp(0.0, python)
}

/// Moves the idle time a degraded PCIe link cost to communication: the time the main
/// process's copies took beyond what the link at full speed would take, at most the idle time
/// split so far (every share charged before the busy split is idle time), less what the link
/// was charged of the unexplained idle time already. The GPU waits for those copies while its
/// host waits in a sync (a copy from pageable memory returns when it is done; the step's sync
/// waits behind a non-blocking upload), so the time comes out of sync_stall first, then out of
/// what nothing explained, then out of the other causes alike.
pub(super) fn charge_slow_copies(lost: &mut LostTime, w: &WindowFigures) {
    let (Some(bandwidth), Some(excess)) =
        (network::link_degraded_under_load(w), w.link_copy_excess)
    else {
        return;
    };
    let communication = Cause::Kind(Kind::Communication);
    // The idle time nothing explained may be the link's already.
    let charged_before = lost
        .reasons
        .iter()
        .find_map(|r| match r {
            Reason::DegradedLink { share, .. } => Some(*share),
            _ => None,
        })
        .unwrap_or(0.0);
    let owed = (excess.min(lost.idle) - charged_before).max(0.0);
    let mut left = owed;
    for first in [Cause::Kind(Kind::SyncStall), Cause::Unexplained] {
        let taken = lost.shares[first].min(left);
        lost.shares[first] -= taken;
        left -= taken;
    }
    let others = || Cause::ALL.into_iter().filter(|&c| c != communication);
    let rest: f64 = others().map(|c| lost.shares[c]).sum();
    let cut = if rest > 0.0 {
        (left / rest).min(1.0)
    } else {
        0.0
    };
    for cause in others() {
        lost.shares[cause] *= 1.0 - cut;
    }
    let charged = owed - left + cut * rest;
    add(lost, communication, charged);
    // One reason for the link's whole part.
    lost.reasons
        .retain(|r| !matches!(r, Reason::DegradedLink { .. }));
    let share = charged_before + charged;
    if share >= 0.005 {
        lost.reasons.push(Reason::SlowCopies { bandwidth, share });
    }
}

/// The idle share of activities seen in `seen` of the samples while the GPU worked `busy`
/// of the window in them.
fn idle_in(seen: f64, busy: f64) -> f64 {
    if seen > 0.0 {
        ((seen - busy) / seen).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// The idle time the main thread spent in Python: host_bound, except the part of its wait
/// for a CPU that others caused.
fn split_python(lost: &mut LostTime, w: &WindowFigures, t: &Thresholds, share: f64, seen: f64) {
    if seen <= 0.0 {
        return;
    }
    let waiting = waiting_for_a_cpu(w, seen);
    let contended = share * waiting * cpu_wait_caused_by_others(w, t);
    add(lost, Cause::Kind(Kind::Contention), contended);
    add(lost, Cause::Kind(Kind::HostBound), share - contended);
    let waiting_for_others = (contended > 0.0).then(|| contended / share);
    note(
        lost,
        seen,
        Reason::Python {
            seen,
            waiting_for_others,
        },
    );
}

/// The share of the loop's host work spent waiting for a CPU: measured (the loop's threads'
/// run-queue wait against it plus their CPU: spinning syncs included, which are runnable too),
/// else estimated from the main thread's samples (seen active in `seen` of them, running less).
fn waiting_for_a_cpu(w: &WindowFigures, seen: f64) -> f64 {
    match (w.loop_cpu_wait, w.busiest_thread) {
        (Some(wait), Some(cpu)) if wait + cpu > 0.0 => wait / (wait + cpu),
        (_, cpu) => cpu.map_or(0.0, |cpu| ((seen - cpu) / seen).clamp(0.0, 1.0)),
    }
}

/// Without stacks: the idle time in proportion to the counter rules' scores.
pub(super) fn split_inferred(
    lost: &mut LostTime,
    w: &WindowFigures,
    inferred: &[KindScore],
    t: &Thresholds,
) {
    let weights: Vec<(Kind, f64)> = inferred
        .iter()
        .filter(|k| k.kind.explains_idle_time())
        .filter_map(|k| Some((k.kind, k.score.filter(|s| *s >= t.leave_score)?)))
        .collect();
    let total: f64 = weights.iter().map(|(_, s)| s).sum();
    let idle = lost.idle;
    if total <= 0.0 || w.busy.is_some_and(|b| b < IDLE_BUSY) {
        add(lost, Cause::Unexplained, idle);
        return;
    }
    for (kind, score) in &weights {
        add(lost, Cause::Kind(*kind), idle * score / total);
    }
    if weights.iter().any(|(k, _)| *k == Kind::DataIo) {
        lost.input = Some(match storage_busy(w, t) {
            Some(false) => InputSource::Remote,
            _ => InputSource::LocalStorage,
        });
    }
    lost.reasons.push(Reason::NoStacks);
}
