//! Families of the analysis: per GPU and kind active flag, score and unknown, and the primary
//! verdict.

use super::gpu::pod_labels;
use super::*;
use crate::analysis::GpuVerdict;
use crate::snapshot::GpuSnapshot;

pub(super) fn verdict_families(
    verdicts: &[GpuVerdict],
    gpus: Option<&GpuSnapshot>,
    out: &mut Vec<Family>,
) {
    let mut active = Family::new(&VERDICT);
    let mut score = Family::new(&VERDICT_SCORE);
    let mut unknown = Family::new(&VERDICT_UNKNOWN);
    let mut primary = Family::new(&PRIMARY);
    let mut lost_time = Family::new(&LOST_TIME);
    let mut hang = Family::new(&HANG);
    let mut hang_ranks = Family::new(&HANG_RANKS);
    let mut working = Family::new(&RANK_WORKING);
    let mut straggler = Family::new(&STRAGGLER);
    for verdict in verdicts {
        let index = verdict.index.to_string();
        let device = gpus.and_then(|g| g.devices.iter().find(|d| d.uuid == verdict.uuid));
        let [namespace, pod, container] = pod_labels(device);
        let base = [index.as_str(), &verdict.uuid, &namespace, &pod, &container];
        let with = |last: &'static str| [base[0], base[1], base[2], base[3], base[4], last];
        for kind in &verdict.kinds {
            let labels = with(kind.scored.kind.name());
            active.add(&labels, flag(kind.active));
            match kind.scored.score {
                Some(value) => score.add(&labels, value),
                None => unknown.add(&labels, 1.0),
            }
        }
        hang.add(&base, verdict.hang.as_ref().map_or(0.0, |h| h.seconds));
        working.add(&base, flag(verdict.working));
        if let Some(peers) = verdict.hang.as_ref().and_then(|h| h.peers.as_ref()) {
            if peers.answered {
                hang_ranks.add(&with("missing"), f64::from(peers.missing_ranks));
                hang_ranks.add(&with("behind"), f64::from(peers.ranks_behind));
            }
        }
        if let Some(step) = verdict.figures.step {
            straggler.add(&with("own_best"), step.behind_best());
        }
        if let Some(behind) = verdict.behind_ranks {
            straggler.add(&with("node_ranks"), behind);
        }
        let basis = verdict.basis().name();
        primary.add(
            &[
                base[0],
                base[1],
                base[2],
                base[3],
                base[4],
                verdict.primary.name(),
                basis,
            ],
            1.0,
        );
        if let Some(lost) = &verdict.lost {
            for (cause, share) in lost.shares.iter() {
                let labels = [
                    base[0],
                    base[1],
                    base[2],
                    base[3],
                    base[4],
                    cause.name(),
                    lost.basis.name(),
                ];
                lost_time.add(&labels, *share);
            }
        }
    }
    out.extend([
        active, score, unknown, primary, lost_time, hang, working, hang_ranks, straggler,
    ]);
}
