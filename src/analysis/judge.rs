//! Each kind judged against the attribution: where the stacks decide a pipeline kind, its
//! observed cost is its score and what the stacks contradict cannot stand; a device fact keeps
//! its counter score, with its cost where it is measured.

use super::kinds::{Phase, Premise};
use super::score::{high, IDLE_BUSY};
use super::{Basis, Cause, Evidence, KindScore, LostTime, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::{Role, Signal};

/// One kind judged against the attribution, by its `phase`: its score (from its observed
/// cost where the stacks decide a pipeline kind, else the counter rule's), the basis and the
/// cost.
pub fn judge(
    mut scored: KindScore,
    phase: Phase,
    lost: Option<&LostTime>,
    w: &WindowFigures,
    t: &Thresholds,
) -> (KindScore, Basis, Option<f64>) {
    let share = lost.map(|l| l.share(Cause::Kind(scored.kind)));
    let premise = match phase {
        Phase::Idle { premise } => premise(w, t),
        // Facts the device reports. Their cost is measured where an input gives it.
        Phase::Busy { measured, yields } => {
            let cost = share.filter(|_| measured(w));
            if let (Some(yields), Some(own), Some(lost)) = (yields, cost, lost) {
                scored.score = scored.score.map(|s| yields(s, own, lost));
            }
            return (scored, Basis::Observed, cost);
        }
        Phase::Device => return (scored, Basis::Observed, None),
    };
    let Some(lost) = lost.filter(|l| l.basis == Basis::Observed) else {
        return (scored, Basis::Inferred, share);
    };
    let share = share.unwrap_or(0.0);
    // What the stacks contradict cannot stand: the cost decides where the premise was seen,
    // and only facts stand beside it. A GPU that runs nothing waits for nobody.
    let Premise {
        signal,
        activity,
        share: seen,
    } = premise;
    let runs_nothing = w.busy.is_some_and(|b| b < IDLE_BUSY);
    let strength = if runs_nothing || seen < t.premise_share_min {
        0.0
    } else {
        high(share, t.lost_share_high)
    };
    let mut evidence: Vec<Evidence> = scored
        .evidence
        .drain(..)
        .filter(|e| {
            matches!(
                e.signal.role(),
                Role::Gate | Role::Standing | Role::Supporting
            )
        })
        .collect();
    let facts = evidence
        .iter()
        .filter(|e| e.signal.role() == Role::Standing)
        .fold(0.0, |a: f64, e| a.max(e.strength));
    evidence.push(Evidence {
        signal,
        value: seen,
        threshold: t.premise_share_min,
        strength,
        detail: w.top_frame(activity),
    });
    evidence.push(Evidence {
        signal: Signal::LostTimeShare,
        value: share,
        threshold: t.lost_share_high,
        strength,
        detail: String::new(),
    });
    scored.evidence = evidence;
    scored.score = Some(strength.max(facts));
    // A premise the counters infer (a pipeline's bubble) is no observation.
    let basis = if signal.role() == Role::Condition {
        Basis::Inferred
    } else {
        lost.basis
    };
    (scored, basis, Some(share))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::attribute::lost_time;
    use crate::analysis::Kind;
    use crate::snapshot::{PerActivity, ProcessStacks, Reason};

    #[test]
    fn a_cost_the_counters_infer_stays_inferred_beside_observed_stacks() {
        // A balanced pipeline stage on an A100 (no SM activity): its main thread runs the
        // loop's Python ahead of the GPU, which is busy all along, a fifth of it in the
        // schedule's bubble (four microbatches, eight transfers a step).
        let shares = PerActivity([0.0, 0.0, 0.0, 1.0, 0.0]);
        let w = WindowFigures {
            up: true,
            busy: Some(1.0),
            point_to_point: Some(true),
            transfers_per_step: Some(8.0),
            pipeline_bubble: Some(0.2),
            stacks: Some(ProcessStacks::sampled(100, shares)),
            ..WindowFigures::default()
        };
        let t = Thresholds::default();
        let lost = lost_time(&w, &[], &t).unwrap();
        assert_eq!(lost.basis, Basis::Observed);
        assert!((lost.share(Cause::Kind(Kind::Communication)) - 0.2).abs() < 1e-9);
        assert!(lost.reasons.iter().any(
            |r| matches!(r, Reason::PipelineBubble { microbatches, .. } if *microbatches == 4.0)
        ));
        let spec = Kind::Communication.spec();
        let (scored, basis, cost) = judge((spec.score)(&w, &t), spec.phase, Some(&lost), &w, &t);
        assert_eq!(basis, Basis::Inferred);
        assert!((cost.unwrap() - 0.2).abs() < 1e-9);
        assert!(scored.score.unwrap() >= 0.5, "{scored:?}");
        assert_eq!(scored.evidence[0].signal, Signal::PipelineBubble);
    }
}
