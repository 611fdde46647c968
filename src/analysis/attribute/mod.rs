//! Where the lost GPU time went: the window's idle time split by cause, and the busy time that
//! was wasted or went to other processes. Pure: window figures in, shares of the window out.
//!
//! **Observed** (the main thread's stacks hold at least `stack_samples_min` samples; with the
//! CUDA probes, the share of its time in a sync is the time they timed the thread in driver
//! waits, the other activities sharing the rest as sampled: `WindowFigures::time_stacks`):
//!
//! 1. Idle time is charged to what the main thread was doing while the GPU idled. The GPU
//!    works while the thread waits for it (synchronizing, or held in a launch by a full
//!    launch queue: the samples read that as the launching line's Python, the CUDA probes'
//!    launch windows time it, and that share moves from Python to waiting), and through the
//!    loader waits after which the batch's upload waited for kernels queued before them
//!    (nothing was handed over in between, and work was still queued at the end); the rest of its
//!    busy time overlaps first what keeps it fed (Python, which launches; collectives, which
//!    run kernels of their own), then what launches nothing (a loader wait, a sleep elsewhere,
//!    the Python right after a sync up to the time the sync held the thread while the GPU
//!    worked), each group evenly: a GPU that keeps up drains its queue in those, so its idle
//!    time falls there first.
//! 2. Waiting for the loader → the loader side (3); in a collective → communication; running
//!    Python → sync_stall for the part that follows a sync (the sync drained the queue), up to
//!    the time the thread was held in syncs while the GPU worked (without them it would have
//!    been that far ahead), host_bound for the rest (its time waiting for a CPU → contention,
//!    for the part of the wait others caused); anything else (sleeping elsewhere) →
//!    unexplained.
//!    Others cause the wait beyond what the job's own threads would make on its CPUs alone
//!    (a job that wants no more CPUs than it has would not wait at all): the counterfactual.
//! 3. The loader side, by what the workers' time went to. Of their wait for a CPU, the part
//!    others caused (as above) is contention. The rest: computing in user space
//!    (decoding) and the waits after preemption → data_cpu; computing in the kernel (reads,
//!    receives), the waits after blocking (voluntary switches), blocked (D state) or sleeping →
//!    data_io, from local storage when the node's storage shows the load, else from a remote
//!    source (sockets, network or FUSE filesystems). Without workers the main thread loads its
//!    own data: host_bound when it computes, data_io when it waits.
//!
//! **A device that reports no busy time** (a MIG slice: no utilization, no samples): observed
//! stacks still split the window, from the busy time the loop itself shows, the share of the
//! samples in which the thread waited for the GPU, in a sync or (timed by the CUDA probes) in a
//! launch held for room in the launch queue, or waited for its loader while the GPU worked
//! through queued kernels, as above (a lower bound: the GPU works at least while the
//! loop waits for it, so the idle time and its split are upper bounds), said in a reason;
//! or, where the CUDA probes timed the syncs and one found the GPU more than a step of the
//! loop behind (it never ran dry since that span's work began), those spans whole
//! (`backlog_busy`), or where the launch windows in which the loop launched found the launch
//! queue full, each such window up to its last held launch (`queue_busy`: a sample of the
//! queue's state every few seconds, taken as the window's). Without stacks nothing is split.
//!
//! **Inferred** (no stacks, or too few samples): the idle time is split over the pipeline
//! kinds in proportion to their counter rules' scores at or above the leave score, and is
//! unexplained where none reaches it.
//!
//! **Busy time**, either way, each part capped by the busy time left: the share of the GPU's
//! work other processes did (time-sharing) → contention; a rank waiting in a collective while
//! its GPU spins in the collective's kernels → communication (at most the busy time its SMs
//! sat empty: a spinning collective leaves them so; beside peers whose stacks are seen, at
//! most its excess over the least busy of them: [`crate::analysis::peers`]); other SMs empty while the
//! GPU is busy (GPM) → kernel_efficiency; clocks held below their maximum by a limiting
//! reason → throttling.

mod busy;
mod idle;
mod loader;

pub use busy::main_work_share;

use super::{Basis, Cause, KindScore, LostTime, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::ProcessStacks;
use crate::snapshot::{Activity, PerCause, Reason};

/// The split of one GPU's window; `None` while its busy fraction is unknown (and no stacks
/// show it). `inferred` are the counter rules' scores, used where the stacks cannot decide.
pub fn lost_time(w: &WindowFigures, inferred: &[KindScore], t: &Thresholds) -> Option<LostTime> {
    let observed = observed_stacks(w, t);
    let (busy, estimated) = match (w.busy, observed) {
        (Some(busy), _) => (busy, None),
        // The samples in which the loop waited give a lower bound; where a sync found the GPU
        // more than a step behind, or a launch window the launch queue full, the span it
        // worked through counts whole.
        (None, Some(stacks)) if w.up => {
            let waited = idle::waited_for_gpu(w, stacks);
            let behind = [w.backlog_busy, w.queue_busy]
                .into_iter()
                .flatten()
                .fold(0.0, f64::max);
            if behind > waited {
                (behind, Some(true))
            } else {
                (waited, Some(false))
            }
        }
        (None, _) => return None,
    };
    let busy = busy.clamp(0.0, 1.0);
    let mut lost = LostTime {
        idle: 1.0 - busy,
        ..LostTime::default()
    };
    if let Some(backlog) = estimated {
        lost.reasons.push(Reason::BusyFromSyncs { busy, backlog });
    }
    let in_collective_while_busy = match observed {
        Some(stacks) => {
            lost.basis = Basis::Observed;
            if let Some(tid) = stacks.followed_thread {
                lost.reasons.push(Reason::FollowedThread { tid });
            }
            idle::split_observed(&mut lost, w, stacks, t)
        }
        None => {
            idle::split_inferred(&mut lost, w, inferred, t);
            0.0
        }
    };
    idle::charge_slow_copies(&mut lost, w);
    busy::split_busy(&mut lost, w, busy, in_collective_while_busy, t);
    Some(lost)
}

/// The window's split from one split per tick (each tick's time attributed by that tick's
/// state: a cause that starts mid-window is not diluted by the figures from before it).
/// `window` supplies what describes the window as a whole: the reasons and the input source.
pub fn average(ticks: &[&LostTime], window: LostTime) -> LostTime {
    if ticks.is_empty() {
        return window;
    }
    let n = ticks.len() as f64;
    let mut shares = PerCause::<f64>::default();
    for tick in ticks {
        for (cause, share) in tick.shares.iter() {
            shares[cause] += share / n;
        }
    }
    let observed = ticks.iter().filter(|t| t.basis == Basis::Observed).count();
    LostTime {
        basis: if 2 * observed > ticks.len() {
            Basis::Observed
        } else {
            Basis::Inferred
        },
        idle: ticks.iter().map(|t| t.idle).sum::<f64>() / n,
        shares,
        collective_busy: ticks.iter().map(|t| t.collective_busy).sum::<f64>() / n,
        input: window.input.or(ticks.iter().rev().find_map(|t| t.input)),
        reasons: window.reasons,
    }
}

/// Whether the main thread's stacks hold enough samples to decide the split.
pub fn observes(w: &WindowFigures, t: &Thresholds) -> bool {
    observed_stacks(w, t).is_some()
}

/// The main thread's stacks where they hold enough samples to decide.
fn observed_stacks<'a>(w: &'a WindowFigures, t: &Thresholds) -> Option<&'a ProcessStacks> {
    w.stacks
        .as_ref()
        .filter(|s| f64::from(s.samples) >= t.stack_samples_min)
}

/// Share of the samples from which an activity's part is described in the reasons.
const NOTED: f64 = 0.1;

/// Adds a reason about an activity seen in `seen` of the samples, if that is worth saying.
fn note(lost: &mut LostTime, seen: f64, reason: Reason) {
    if seen >= NOTED {
        lost.reasons.push(reason);
    }
}

/// Charges `share` of the window to `cause`.
fn add(lost: &mut LostTime, cause: Cause, share: f64) {
    lost.shares[cause] += share.max(0.0);
}

/// The share of the job's wait for a CPU that others cause: the wait beyond what the job's
/// own demand would make on its CPUs alone. Its threads want the cores they ran (`own_cpu`)
/// and those they waited for while they had work of their own: the workers' every wait (a
/// worker behind its loop always has a batch to make), the loop threads' only in the share
/// of the main thread's samples in its own Python, where the stacks tell (a loop thread woken
/// from its wait for the loader or the GPU waits for a CPU only because others hold them: it
/// has no work of its own to queue). On its `job_cpus` alone the job would wait only for what
/// that demand exceeds, and the rest of its wanted wait is what others' processes added, at
/// most the cores they hold. A job that wants no more CPUs than it has would not have waited
/// at all: every wait is others'. That demand counts threads runnable because they are
/// behind, which others' processes made them: where even the job's CPU work at the pace its
/// GPU could keep (its CPU share over the GPU's busy share: the most it would want alone)
/// fits its CPUs, its waits are split by who holds the CPUs, others' share of the busy ones
/// (a starved loader's workers behind hogs, each runnable all the time). None while the
/// job's threads get a CPU when they want one (fewer than `cpu_wait_high` waiting on average:
/// a job that is itself idle never loses its observation to the node's background); all of it
/// under CPU-quota throttling.
fn cpu_wait_caused_by_others(w: &WindowFigures, t: &Thresholds) -> f64 {
    if w.cgroup_throttled
        .is_some_and(|c| c >= t.cgroup_throttled_high)
    {
        return 1.0;
    }
    let Some(waiting) = w.cpu_wait.filter(|q| *q >= t.cpu_wait_high) else {
        return 0.0;
    };
    let loop_wait = w.loop_cpu_wait.unwrap_or(0.0).clamp(0.0, waiting);
    let loop_working = observed_stacks(w, t).map_or(1.0, |s| s.share(Activity::Python));
    let wanted = waiting - loop_wait * (1.0 - loop_working);
    match (w.own_cpu, w.other_cpu, w.job_cpus) {
        (Some(own), Some(other), Some(cpus)) if cpus > 0.0 && wanted > 0.0 => {
            let alone = (own * cpus + wanted - cpus).max(0.0);
            let beyond_alone = (wanted - alone).min(other * cpus) / wanted;
            let fits_alone = w.busy.is_some_and(|busy| own < busy) && own + other > 0.0;
            let held_by_others = if fits_alone {
                other / (own + other)
            } else {
                0.0
            };
            beyond_alone.max(held_by_others).clamp(0.0, 1.0)
        }
        // Without the job's CPUs, others' share of the busy ones.
        (Some(own), Some(other), _) if own + other > 0.0 => other / (own + other),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests;
