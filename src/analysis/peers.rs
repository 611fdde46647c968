//! The GPUs of one job compared: each GPU's busy gap to the busiest GPU of its job, and the
//! most busy time collectives can have cost each rank (one window's figures per GPU in, the
//! same figures with the comparisons filled in out); once decided, what each rank costs its
//! group's step (the verdicts in, their straggler scores filled in). Pure.

use std::collections::BTreeMap;

use super::attribute::{lost_time, main_work_share};
use super::{Basis, Cause, GpuVerdict, Kind, WindowFigures};
use crate::config::Thresholds;

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

/// Each rank of a group whose busy times are known gets how much longer its GPU was busy
/// with its SMs empty than the least busy rank's: identical ranks step together, so a rank
/// busier than a peer with nothing on its SMs spun that long in a collective waiting for it
/// (stacks not needed: what says the rank waited for a collective is its own driver waits).
fn spin_excess(members: &[usize], windows: &mut [WindowFigures]) {
    let known: Option<Vec<(f64, f64)>> = members
        .iter()
        .map(|&i| {
            let w = &windows[i];
            let own = main_work_share(w).unwrap_or(1.0);
            let busy = w.busy?.clamp(0.0, 1.0);
            let empty = (busy - w.sm_activity?).max(0.0);
            Some((busy * own, empty * own))
        })
        .collect();
    let Some(known) = known else { return };
    let least_busy = known.iter().map(|k| k.0).fold(f64::MAX, f64::min);
    for (&i, (busy, empty)) in members.iter().zip(known) {
        windows[i].spin_excess = Some((busy - least_busy).min(empty).max(0.0));
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
