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
    (scored, lost.basis, Some(share))
}
