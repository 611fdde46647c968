//! The GPUs of one job compared: on each tick, whether a rank's peer on this node works (the
//! observations in, each one's working peer filled in); each GPU's busy gap to the busiest GPU
//! of its job, and the most busy time collectives can have cost each rank (one window's
//! figures per GPU in, the same figures with the comparisons filled in out); once decided,
//! what each rank costs its group's step (the verdicts in, their straggler scores filled in).
//! Pure.

use std::collections::BTreeMap;

use super::attribute::{lost_time, main_work_share};
use super::spin::spin_excess;
use super::{Basis, Cause, GpuObservation, GpuVerdict, Kind, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Activity;

/// The positions of the GPUs that share a key, for every key at least two GPUs share.
fn groups<'a>(keys: &[Option<&'a str>]) -> impl Iterator<Item = Vec<usize>> + 'a {
    let mut members: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        if let Some(key) = key {
            members.entry(key).or_default().push(i);
        }
    }
    members.into_values().filter(|m| m.len() > 1)
}

/// Each GPU of a multi-GPU job (`jobs`, one per window) gets its gap to the busiest GPU of
/// the job.
pub fn job_gaps(jobs: &[Option<&str>], windows: &mut [WindowFigures]) {
    for members in groups(jobs) {
        let known: Vec<(usize, f64)> = members
            .iter()
            .filter_map(|&i| Some((i, windows[i].busy?)))
            .collect();
        if known.len() < 2 {
            continue;
        }
        let busiest = known.iter().map(|(_, b)| *b).fold(f64::MIN, f64::max);
        for (i, busy) in known {
            windows[i].job_gap = Some(busiest - busy);
        }
    }
}

/// Each rank of a group (`ranks`, one set of figures per GPU, over the last few ticks) gets
/// how long its GPU spun for its peers over them (`spin_excess`).
pub fn spins(ranks: &[Option<&str>], figures: &mut [WindowFigures]) {
    for members in groups(ranks) {
        spin_excess(&members, figures);
    }
}

/// Each rank of a group (`ranks`, one per window) whose ranks all have their stacks observed
/// gets the most busy time collectives can have cost it.
///
/// Ranks that exchange gradients step together: a rank's GPU spins in a collective, busy and
/// with its SMs nearly empty, while a slower peer finishes its step, so it is busy longer
/// (and its SMs empty longer) than that peer by as long as it spins. A rank whose main thread
/// waits in a collective on the host (a barrier, gloo) while its GPU still runs the step's
/// queued kernels is not waiting on its GPU, however long it sits there: its peers' GPUs are
/// as busy. So the cap is the rank's excess over the job's least busy rank (its own work's
/// busy time or empty SMs, whichever says more; identical ranks spin by the same amount on
/// both), plus what collectives cost every rank alike (the least any rank's stacks explain:
/// the transfer itself, or a wait for ranks on other nodes).
pub fn collective_caps(ranks: &[Option<&str>], windows: &mut [WindowFigures], t: &Thresholds) {
    for members in groups(ranks) {
        spin_excess(&members, windows);
        let figures: Option<Vec<RankFigures>> = members
            .iter()
            .map(|&i| rank_figures(&windows[i], t))
            .collect();
        let Some(figures) = figures else {
            continue;
        };
        let least = |f: fn(&RankFigures) -> f64| figures.iter().map(f).fold(f64::MAX, f64::min);
        let least_busy = least(|r| r.busy);
        let least_empty = least(|r| r.empty);
        let least_in_collectives = least(|r| r.in_collectives);
        for (&i, rank) in members.iter().zip(&figures) {
            let excess = (rank.busy - least_busy).max(rank.empty - least_empty);
            windows[i].collective_busy_cap = Some(excess + least_in_collectives);
        }
    }
}

/// Each rank of a group (`ranks`, one per verdict) whose lost time is split gets the share of
/// the group's step it costs: ranks step together, so each waits for the slowest in its
/// collectives, and what a rank does not spend waiting is its own work. Against the rank
/// whose own work is least (the one that waits the most), a rank's score is
/// `1 - least_own / own`: 0 for ranks at the group's pace, the share of the step the others
/// spend waiting for it for a straggler (NVIDIA's resiliency extension scores ranks the same
/// way against the fastest, from section timings inside the job). Ranks on other nodes are
/// compared by the fleet rules from the same splits.
pub fn behind_ranks(ranks: &[Option<&str>], verdicts: &mut [GpuVerdict]) {
    for members in groups(ranks) {
        let own: Option<Vec<f64>> = members
            .iter()
            .map(|&i| {
                let lost = verdicts[i].lost.as_ref()?;
                Some(1.0 - lost.share(Cause::Kind(Kind::Communication)))
            })
            .collect();
        let Some(own) = own else { continue };
        let least = own.iter().copied().fold(f64::MAX, f64::min);
        for (&i, own) in members.iter().zip(own) {
            let behind = if own > 0.0 { 1.0 - least / own } else { 0.0 };
            verdicts[i].behind_ranks = Some(behind.clamp(0.0, 1.0));
        }
    }
}

/// SM activity below which a busy GPU runs nothing but a collective's spin (an NCCL kernel
/// keeps one block per channel: a few SMs of a hundred and more).
pub const SPIN_SM_ACTIVITY_MAX: f64 = 0.25;

/// Share of a core the main process's busiest thread uses at or above which its rank works on
/// the host (serializing a checkpoint, evaluating), rather than sleeping in a wait.
const WORKING_THREAD_MIN: f64 = 0.5;

/// Each GPU whose main process works now is marked so ([`works`]), and each GPU of a group of
/// ranks gets the first other rank of its group that works. A rank that waits for such a peer
/// waits for its work; one whose peers all wait or sleep (a rank that never comes) may be
/// hung. Ranks on other nodes are compared by the fleet's rules, from each GPU's
/// `gpu_rank_working`.
pub fn mark_working_peers(observations: &mut [GpuObservation]) {
    for o in observations.iter_mut() {
        o.working = works(o);
    }
    for i in 0..observations.len() {
        let Some(group) = observations[i].ranks.clone() else {
            continue;
        };
        observations[i].working_peer = (0..observations.len())
            .filter(|&j| j != i && observations[j].ranks.as_ref() == Some(&group))
            .find_map(|j| observations[j].working.clone());
    }
}

/// What the GPU's main process does, described, where it works now: its GPU computing (SMs
/// past a spin's), or its busiest thread on a CPU while it waits in no collective (its thread
/// in no driver wait begun after a collective, its recent stack samples not all in one), where
/// the stacks or the probes watch it: unwatched, a thread spinning in a CUDA wait (the default
/// wait mode) holds a core just as one that works. Probes that have seen none of the process's
/// calls do not watch it: it may spin in a call begun before they were attached.
fn works(o: &GpuObservation) -> Option<String> {
    if o.processes == Some(0) {
        return None;
    }
    let computing =
        o.busy.is_some_and(|b| b > 0.0) && o.sm_activity.is_some_and(|s| s >= SPIN_SM_ACTIVITY_MAX);
    let waiting = o.driver_wait.is_some_and(|w| w.after.is_some())
        || o.stacks.as_ref().is_some_and(|s| {
            s.recent_samples > 0 && s.recent_shares[Activity::Collective] >= 1.0 - 1e-9
        });
    let watched = o.stacks.is_some() || (o.probed && o.probes_silent.is_none());
    let on_cpu = watched && !waiting && o.busiest_thread.is_some_and(|b| b >= WORKING_THREAD_MIN);
    let what = if computing {
        "its GPU computing"
    } else {
        "busy on the host"
    };
    (computing || on_cpu).then(|| {
        let process = o.main_process.as_deref().unwrap_or("its process");
        format!("GPU {}'s rank ({process}), {what}", o.index)
    })
}

/// What one rank's window says of its own work, for comparing it with its peers.
struct RankFigures {
    /// Busy share of the window, its own work's.
    busy: f64,
    /// Busy share with the SMs empty, its own work's.
    empty: f64,
    /// Busy share its stacks put in collectives.
    in_collectives: f64,
}

/// A rank's figures, where its stacks are observed and its busy time known.
fn rank_figures(w: &WindowFigures, t: &Thresholds) -> Option<RankFigures> {
    let spent = lost_time(w, &[], t).filter(|l| l.basis == Basis::Observed)?;
    // The rank's own work: another job's kernels on its GPU are contention.
    let own = main_work_share(w).unwrap_or(1.0);
    let busy = w.busy?.clamp(0.0, 1.0);
    let empty = w.sm_activity.map_or(0.0, |sm| (busy - sm).max(0.0));
    Some(RankFigures {
        busy: busy * own,
        empty: empty * own,
        in_collectives: spent.collective_busy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::DriverWait;

    /// Rank `index` of one group: its busiest thread's share of a core, and whether its thread
    /// waits in the driver since a collective.
    fn rank(index: u32, thread: f64, waits: bool) -> GpuObservation {
        GpuObservation {
            index,
            ranks: Some("launcher:1".into()),
            busy: Some(1.0),
            sm_activity: Some(0.06),
            busiest_thread: Some(thread),
            main_process: Some(format!("pid {} (python3)", 100 + index)),
            probed: true,
            driver_wait: waits.then_some(DriverWait {
                seconds: 30.0,
                after: Some(crate::snapshot::Collective::AllReduce),
            }),
            ..GpuObservation::default()
        }
    }

    #[test]
    fn a_rank_working_on_the_host_or_its_gpu_is_its_waiting_peers_working_peer() {
        // Rank 0 writes a checkpoint (its thread on a CPU), rank 1 waits in the barrier.
        let mut ranks = vec![rank(0, 0.95, false), rank(1, 0.02, true)];
        mark_working_peers(&mut ranks);
        assert_eq!(
            ranks[1].working_peer.as_deref(),
            Some("GPU 0's rank (pid 100 (python3)), busy on the host")
        );
        assert_eq!(ranks[0].working_peer, None, "its peer waits");
        assert!(ranks[0].working.is_some() && ranks[1].working.is_none());
        // Both wait (a rank elsewhere never came), or the peer sleeps (never comes): nobody
        // works; a peer computing on its GPU does.
        let mut waiting = vec![rank(0, 0.95, true), rank(1, 0.02, true)];
        mark_working_peers(&mut waiting);
        assert!(waiting.iter().all(|o| o.working_peer.is_none()));
        let mut asleep = vec![rank(0, 0.01, false), rank(1, 0.02, true)];
        mark_working_peers(&mut asleep);
        assert_eq!(asleep[1].working_peer, None);
        let mut computing = vec![rank(0, 0.1, false), rank(1, 0.02, true)];
        computing[0].sm_activity = Some(0.7);
        mark_working_peers(&mut computing);
        assert!(computing[1]
            .working_peer
            .as_deref()
            .unwrap()
            .ends_with("its GPU computing"));
        // Unwatched (no stacks, no probes), a thread on a CPU may be spinning in a CUDA wait.
        let mut unwatched = vec![rank(0, 0.95, false), rank(1, 0.02, true)];
        unwatched[0].probed = false;
        mark_working_peers(&mut unwatched);
        assert_eq!(unwatched[1].working_peer, None);
        // Probed but silent since attached: both ranks spin in collectives begun before the
        // probes came, each thread on a core; neither is the other's working peer.
        let mut silent = vec![rank(0, 0.97, false), rank(1, 0.98, false)];
        for o in &mut silent {
            o.probes_silent = Some(130.0);
        }
        mark_working_peers(&mut silent);
        assert!(silent
            .iter()
            .all(|o| o.working_peer.is_none() && o.working.is_none()));
        // Another job's GPU is nobody's peer.
        let mut apart = vec![rank(0, 0.95, false), rank(1, 0.02, true)];
        apart[0].ranks = Some("launcher:2".into());
        mark_working_peers(&mut apart);
        assert_eq!(apart[1].working_peer, None);
    }
}
