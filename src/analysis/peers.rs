//! The GPUs of one job compared: on each tick, whether a rank's peer on this node works (the
//! observations in, each one's working peer filled in); each GPU's busy gap to the busiest GPU
//! of its job, and the most busy time collectives can have cost each rank (one window's
//! figures per GPU in, the same figures with the comparisons filled in out); once decided,
//! what each rank costs its group's step (the verdicts in, their straggler scores filled in).
//! Pure.

use std::collections::BTreeMap;

use super::attribute::{lost_time, main_work_share};
use super::pipeline;
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

/// Each rank of a group whose busy times are known gets how long its GPU spun in collectives
/// waiting for its peers: identical ranks step together, so a rank busier than a peer with
/// nothing on its SMs spun that much longer in a collective waiting for it (stacks not
/// needed: what says the rank waited for a collective is its own driver waits). A peer that
/// is slow because it computes longer (a throttled GPU) is as busy as the rank waiting for
/// it: then the rank's SMs sit empty longer than the peer's, by as long as it spins, and that
/// excess counts too — between ranks that run the same kernels only: pipeline stages (ranks that issue point-to-point transfers) hold
/// different layers, and a stage of gathers leaves more SMs empty than a stage of matrix
/// multiplies without waiting at all, which no counter tells from a spin. Where the device
/// reports no SM activity (no GPM: A100, A10, L4), empty is busy and the excess busy time
/// alone bounds it.
/// The least busy rank itself spins while a peer's GPU idles for that peer's input (ranks
/// starved in turn wait for each other alike, and the excess alone loses that): as long as its
/// host waited in the driver after issuing collectives, at most as long as its SMs sat empty
/// and as the most any peer's main thread waited for its loader with its GPU idle (its
/// stacks). Idle time the ranks share (the hosts' Python between steps, in step) and a
/// balanced job's are no wait: its empty SMs stay its kernels'.
fn spin_excess(members: &[usize], windows: &mut [WindowFigures]) {
    let known: Option<Vec<(f64, f64)>> = members
        .iter()
        .map(|&i| {
            let w = &windows[i];
            let own = main_work_share(w).unwrap_or(1.0);
            let busy = w.busy?.clamp(0.0, 1.0);
            let empty = w.sm_activity.map_or(busy, |sm| (busy - sm).max(0.0));
            Some((busy * own, empty * own))
        })
        .collect();
    let Some(known) = known else { return };
    let Some(least) = (0..known.len()).min_by(|&a, &b| known[a].0.total_cmp(&known[b].0)) else {
        return;
    };
    let least_busy = known[least].0;
    let least_empty = known.iter().map(|k| k.1).fold(f64::MAX, f64::min);
    let same_kernels = !members
        .iter()
        .any(|&i| windows[i].point_to_point == Some(true));
    // A peer's GPU idles for its own input apart from the others (loaders are late in turn);
    // the idle time the ranks share (each host's Python between steps, in step) is no wait.
    let peers_starved = (0..known.len())
        .filter(|&k| k != least)
        .map(|k| {
            let waited = windows[members[k]]
                .stacks
                .as_ref()
                .map_or(0.0, |s| s.shares[Activity::DataLoader]);
            waited.min(1.0 - known[k].0)
        })
        .fold(0.0, f64::max);
    let least_spun = windows[members[least]]
        .collective_wait
        .map_or(0.0, |wait| wait.min(known[least].1).min(peers_starved));
    // Pipeline stages wait for each other by their schedule, balanced or not: the least busy
    // stage spins in the bubble too, unless its GPU idled for its own host meanwhile (its idle
    // time beyond the busiest stage's: the peer's tensors arrived while it idled).
    let busiest = known.iter().map(|k| k.0).fold(0.0, f64::max);
    let least_bubble = (!same_kernels)
        .then(|| pipeline::bubble_share(members, windows))
        .flatten()
        .map(|b| (least_busy * b - (busiest - least_busy) - least_spun).max(0.0));
    for (&i, (busy, empty)) in members.iter().zip(known) {
        let busy_excess = busy - least_busy + least_spun;
        let empty_excess = if same_kernels {
            empty - least_empty
        } else {
            0.0
        };
        let spun = busy_excess.max(empty_excess).min(empty).max(0.0);
        windows[i].spin_excess = Some(spun);
        windows[i].pipeline_bubble = least_bubble.map(|b| b.min(empty - spun).max(0.0));
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

/// Each GPU of a group of ranks gets the first other rank of its group that works now:
/// its GPU computing (SMs past a spin's), or its busiest thread on a CPU while it waits in
/// no collective (its thread in no driver wait begun after a collective, its recent stack
/// samples not all in one). A rank that waits for such a peer waits for its work; one whose
/// peers all wait or sleep (a rank that never comes) may be hung.
pub fn mark_working_peers(observations: &mut [GpuObservation]) {
    let working: Vec<Option<String>> = observations
        .iter()
        .map(|o| {
            let computing = o.busy.is_some_and(|b| b > 0.0)
                && o.sm_activity.is_some_and(|s| s >= SPIN_SM_ACTIVITY_MAX);
            let waiting = o.driver_wait.is_some_and(|w| w.after.is_some())
                || o.stacks.as_ref().is_some_and(|s| {
                    s.recent_samples > 0 && s.recent_shares[Activity::Collective] >= 1.0 - 1e-9
                });
            let on_cpu = !waiting && o.busiest_thread.is_some_and(|b| b >= WORKING_THREAD_MIN);
            let what = if computing {
                "its GPU computing"
            } else {
                "busy on the host"
            };
            (computing || on_cpu).then(|| {
                let process = o.main_process.as_deref().unwrap_or("its process");
                format!("GPU {}'s rank ({process}), {what}", o.index)
            })
        })
        .collect();
    for i in 0..observations.len() {
        let Some(group) = observations[i].ranks.clone() else {
            continue;
        };
        observations[i].working_peer = (0..observations.len())
            .filter(|&j| j != i && observations[j].ranks.as_ref() == Some(&group))
            .find_map(|j| working[j].clone());
    }
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
            driver_wait: waits.then_some(DriverWait {
                seconds: 30.0,
                after: Some(crate::snapshot::Collective::AllReduce),
            }),
            ..GpuObservation::default()
        }
    }

    /// One rank's window: busy and SM activity.
    fn window(busy: f64, sm: f64) -> WindowFigures {
        WindowFigures {
            busy: Some(busy),
            sm_activity: Some(sm),
            ..WindowFigures::default()
        }
    }

    fn spun(windows: &[WindowFigures]) -> Vec<f64> {
        let mut windows = windows.to_vec();
        spin_excess(&[0, 1], &mut windows);
        let rounded = |w: &WindowFigures| (w.spin_excess.unwrap() * 100.0).round() / 100.0;
        windows.iter().map(rounded).collect()
    }

    #[test]
    fn a_rank_spins_by_its_excess_busy_time_or_its_excess_empty_sms() {
        // A starved peer idles: rank 0 is busier by as long as it spins.
        assert_eq!(spun(&[window(1.0, 0.4), window(0.4, 0.34)]), [0.6, 0.0]);
        // A peer that computes longer (its GPU throttled, the same kernels) is as busy as the
        // rank waiting for it, whose SMs sit empty longer by as long as it spins.
        let slower_peer = [window(0.97, 0.40), window(0.98, 0.74)];
        assert_eq!(spun(&slower_peer), [0.33, 0.01]);
        // Pipeline stages run different layers: one whose SMs sit emptier may only have
        // emptier kernels (gathers against matrix multiplies), so only busy time counts.
        let stages = slower_peer.map(|w| WindowFigures {
            point_to_point: Some(true),
            ..w
        });
        assert_eq!(spun(&stages), [0.0, 0.01]);
        // Balanced ranks spin alike: their empty SMs are their own kernels'.
        assert_eq!(spun(&[window(0.96, 0.29), window(0.96, 0.29)]), [0.0, 0.0]);
    }

    /// Two pipeline stages of four microbatches (eight transfers a step): busy, SM activity.
    fn stages(figures: [(f64, Option<f64>); 2]) -> Vec<(f64, f64)> {
        let mut windows: Vec<WindowFigures> = figures
            .iter()
            .map(|&(busy, sm)| WindowFigures {
                busy: Some(busy),
                sm_activity: sm,
                point_to_point: Some(true),
                transfers_per_step: Some(8.0),
                ..WindowFigures::default()
            })
            .collect();
        spin_excess(&[0, 1], &mut windows);
        let rounded = |x: Option<f64>| (x.unwrap() * 100.0).round() / 100.0;
        windows
            .iter()
            .map(|w| (rounded(w.spin_excess), rounded(w.pipeline_bubble)))
            .collect()
    }

    #[test]
    fn pipeline_stages_spin_in_their_schedules_bubble_unless_they_idled_for_their_host() {
        // Balanced stages without SM activity (an A100): each spins a fifth of its busy time
        // (four microbatches, two stages), however busy its GPU reads.
        assert_eq!(stages([(1.0, None), (1.0, None)]), [(0.0, 0.2), (0.0, 0.2)]);
        // Stage 1's host is slower: its GPU idles 15 % longer than stage 0's, in which the
        // activations it waits for arrive; stage 0 spins that much longer.
        assert_eq!(
            stages([(0.95, None), (0.8, None)]),
            [(0.15, 0.01), (0.0, 0.01)]
        );
        // With SM activity (an H100) the bubble is at most the SMs left empty beside the
        // spin seen: stage 1's kernels fill its SMs but for 5 %.
        assert_eq!(
            stages([(0.9, Some(0.5)), (0.9, Some(0.85))]),
            [(0.0, 0.18), (0.0, 0.05)]
        );
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
        // Another job's GPU is nobody's peer.
        let mut apart = vec![rank(0, 0.95, false), rank(1, 0.02, true)];
        apart[0].ranks = Some("launcher:2".into());
        mark_working_peers(&mut apart);
        assert_eq!(apart[1].working_peer, None);
    }
}
