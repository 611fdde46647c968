//! How long each rank's GPU spun in collectives waiting for its peers, from the ranks' busy
//! times and empty SMs, or where a device reports no busy time (a MIG slice) from the hosts'
//! waits after their collectives (one window's figures per rank in, `spin_excess` and
//! `pipeline_bubble` filled in). Pure.

use super::attribute::main_work_share;
use super::pipeline;
use super::WindowFigures;
use crate::snapshot::Activity;

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
/// balanced job's are no wait: its empty SMs stay its kernels'. Where a rank's device reports
/// no busy time (a MIG slice), the hosts' waits say it instead ([`spin_from_waits`]).
pub(super) fn spin_excess(members: &[usize], windows: &mut [WindowFigures]) {
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
    let Some(known) = known else {
        return spin_from_waits(members, windows);
    };
    let Some(least) = (0..known.len()).min_by(|&a, &b| known[a].0.total_cmp(&known[b].0)) else {
        return;
    };
    let least_busy = known[least].0;
    let least_empty = known.iter().map(|k| k.1).fold(f64::MAX, f64::min);
    let same_kernels = !members
        .iter()
        .any(|&i| windows[i].point_to_point == Some(true));
    let peers_starved = peers_starved(members, least, windows, |k| 1.0 - known[k].0);
    let least_spun = windows[members[least]]
        .collective_wait
        .map_or(0.0, |wait| wait.min(known[least].1).min(peers_starved));
    // Pipeline stages wait for each other by their schedule, balanced or not: the least busy
    // stage spins in the bubble too, unless its GPU idled for its own host meanwhile (its idle
    // time beyond the busiest stage's: the peer's tensors arrived while it idled). Not while
    // its host paused between steps (a checkpoint written after its sync, as the probes timed
    // it): the peers spun for it then, and its steps' schedule kept its bubble.
    let busiest = known.iter().map(|k| k.0).fold(0.0, f64::max);
    let least_paused = windows[members[least]].host_paused.unwrap_or(0.0);
    let least_bubble = (!same_kernels)
        .then(|| pipeline::bubble_share(members, windows))
        .flatten()
        .map(|b| {
            let idled_in_steps = (busiest - least_busy - least_paused).max(0.0);
            (least_busy * b - idled_in_steps - least_spun).max(0.0)
        });
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

/// The most any rank but `least` (positions in `members`) waited for its loader, its main
/// thread's samples in the loader's wait, each at most its `idle` share where known: a peer's
/// GPU idles for its own input apart from the others (loaders are late in turn), while the
/// idle time the ranks share (each host's Python between steps, in step) is no wait.
fn peers_starved(
    members: &[usize],
    least: usize,
    windows: &[WindowFigures],
    idle: impl Fn(usize) -> f64,
) -> f64 {
    (0..members.len())
        .filter(|&k| k != least)
        .map(|k| {
            let waited = windows[members[k]]
                .stacks
                .as_ref()
                .map_or(0.0, |s| s.shares[Activity::DataLoader]);
            waited.min(idle(k))
        })
        .fold(0.0, f64::max)
}

/// Each rank of a group whose devices report no busy time (MIG slices) gets how long its GPU
/// spun in collectives waiting for its peers, from its host's waits: identical ranks drain the
/// same queued compute in the sync that follows their collectives, so a rank whose host waited
/// in the driver after issuing them longer than the group's least waiting rank waited that
/// much longer for a peer, its GPU spinning in NCCL's kernel meanwhile. The least waiting rank
/// spins at most as long as it waited and as the most any peer waited for its loader. Pipeline
/// stages hold different layers (their drains differ by their layers): nothing is said.
fn spin_from_waits(members: &[usize], windows: &mut [WindowFigures]) {
    if members
        .iter()
        .any(|&i| windows[i].point_to_point == Some(true))
    {
        return;
    }
    let waits: Option<Vec<f64>> = members
        .iter()
        .map(|&i| windows[i].collective_wait)
        .collect();
    let Some(waits) = waits else { return };
    let Some(least) = (0..waits.len()).min_by(|&a, &b| waits[a].total_cmp(&waits[b])) else {
        return;
    };
    let least_spun = waits[least].min(peers_starved(members, least, windows, |_| 1.0));
    for (&i, wait) in members.iter().zip(&waits) {
        windows[i].spin_excess = Some((wait - waits[least] + least_spun).clamp(0.0, *wait));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A rank on a MIG slice (no busy time): its host's wait in the driver after collectives,
    /// and its main thread's share of samples waiting for its loader.
    fn slice(wait: f64, loader: f64) -> WindowFigures {
        let mut shares = crate::snapshot::PerActivity::<f64>::default();
        shares[Activity::DataLoader] = loader;
        WindowFigures {
            collective_wait: Some(wait),
            stacks: Some(crate::snapshot::ProcessStacks::sampled(40, shares)),
            ..WindowFigures::default()
        }
    }

    #[test]
    fn ranks_without_busy_time_spin_by_their_longer_waits_after_collectives() {
        // Rank 1's loader is late (40 % of its samples): rank 0's host waits 0.45 after its
        // all-reduces, rank 1's 0.05 (the drain both have); rank 1 spins for nobody.
        assert_eq!(spun(&[slice(0.45, 0.0), slice(0.05, 0.4)]), [0.4, 0.0]);
        // Loaders late in turn: each waits for the other alike; the least waiting rank spins
        // at most as long as the other's loader held it.
        assert_eq!(spun(&[slice(0.3, 0.2), slice(0.25, 0.2)]), [0.25, 0.2]);
        // Balanced ranks: neither waits for the other beyond the drain they share.
        assert_eq!(spun(&[slice(0.1, 0.0), slice(0.1, 0.0)]), [0.0, 0.0]);
        // Stages drain different layers: nothing said; nor without a rank's waits.
        let mut stages = [slice(0.45, 0.0), slice(0.05, 0.4)];
        stages[0].point_to_point = Some(true);
        let mut windows = stages.to_vec();
        spin_excess(&[0, 1], &mut windows);
        assert!(windows.iter().all(|w| w.spin_excess.is_none()));
        let mut windows = vec![slice(0.45, 0.0), WindowFigures::default()];
        spin_excess(&[0, 1], &mut windows);
        assert!(windows.iter().all(|w| w.spin_excess.is_none()));
    }

    /// Two pipeline stages of four microbatches (eight transfers a step): busy, SM activity.
    fn stages(figures: [(f64, Option<f64>); 2]) -> Vec<(f64, f64)> {
        paused_stages(figures, [None, None])
    }

    /// The same, each stage's host pausing between steps as long as `paused` says.
    fn paused_stages(
        figures: [(f64, Option<f64>); 2],
        paused: [Option<f64>; 2],
    ) -> Vec<(f64, f64)> {
        let mut windows: Vec<WindowFigures> = figures
            .iter()
            .zip(paused)
            .map(|(&(busy, sm), paused)| WindowFigures {
                busy: Some(busy),
                sm_activity: sm,
                point_to_point: Some(true),
                transfers_per_step: Some(8.0),
                host_paused: paused,
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
        // Idle as long because its host paused between steps (a checkpoint written after its
        // sync): stage 0 spun for it then, and within its steps it still spins a fifth.
        assert_eq!(
            paused_stages([(0.95, None), (0.8, None)], [None, Some(0.15)]),
            [(0.15, 0.16), (0.0, 0.16)]
        );
        // With SM activity (an H100) the bubble is at most the SMs left empty beside the
        // spin seen: stage 1's kernels fill its SMs but for 5 %.
        assert_eq!(
            stages([(0.9, Some(0.5)), (0.9, Some(0.85))]),
            [(0.0, 0.18), (0.0, 0.05)]
        );
    }
}
