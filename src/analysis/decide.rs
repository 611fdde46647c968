//! One GPU's verdicts on one tick: every kind scored and judged against the lost-time split,
//! latched, and the primary verdict chosen.

use std::collections::{BTreeMap, VecDeque};

use super::hang::{self, Stuck, RECENT_SAMPLES_MIN};
use super::kinds::{self, score_all};
use super::latch::Latch;
use super::score::IDLE_BUSY;
use super::{attribute, judge};
use super::{Cause, GpuObservation, GpuVerdict, Kind, KindScore, KindVerdict, LostTime};
use super::{Primary, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Role;

/// What the analysis remembers of one GPU between ticks.
#[derive(Debug, Default)]
pub struct GpuState {
    /// Each tick of the window's lost-time split: (time, split).
    splits: VecDeque<(f64, LostTime)>,
    /// Per kind, its hysteresis.
    latches: BTreeMap<Kind, Latch>,
    /// Whether its main thread sits in one collective, since when.
    stuck: Stuck,
}

/// The GPU's verdicts at `at`, from this tick's observation `now`, its figures for the tick's
/// own split (`tick_figures`) and the window's figures (ticks after `horizon`).
pub fn decide(
    state: &mut GpuState,
    now: &GpuObservation,
    (tick, figures): (WindowFigures, WindowFigures),
    (at, horizon): (f64, f64),
    t: &Thresholds,
) -> GpuVerdict {
    let idle = figures.up && figures.processes == Some(0.0);
    let inferred = score_all(&figures, t);
    let lost = lost_over_window(state, tick, &figures, &inferred, (at, horizon), t);
    let kinds: Vec<KindVerdict> = inferred
        .into_iter()
        .map(|scored| {
            let spec = scored.kind.spec();
            let (mut scored, basis, cost) =
                judge::judge(scored, spec.phase, lost.as_ref(), &figures, t);
            // An idle GPU waits for nobody: only its health can be a problem.
            if idle && !spec.on_idle_gpu {
                scored.score = Some(0.0);
            }
            let latch = state.latches.entry(scored.kind).or_default();
            let active = latch.update(scored.score, at, t);
            KindVerdict {
                scored,
                active,
                basis,
                cost,
            }
        })
        .collect();
    let hang = hang::track(&mut state.stuck, now, at, t);
    let hung = hang
        .as_ref()
        .is_some_and(|h| h.seconds >= t.hang_after.0.as_secs_f64() && h.waiting_for.is_none());
    let primary = match strongest(&kinds, t) {
        // A job that makes no progress at all: whatever else holds it back waits behind.
        _ if hung => Primary::Hung,
        Some(kind) => Primary::Bottleneck(kind),
        // No process, or processes that run no work (a job holding the GPU idle).
        None if idle || (figures.up && figures.busy.is_some_and(|b| b < IDLE_BUSY)) => {
            Primary::Idle
        }
        None if figures.busy.is_some_and(|b| b >= t.gpu_busy_above) => Primary::Busy,
        // Idle time that is explained, but by no cause that reaches the floor: nothing
        // worth naming holds the GPU back (empty SMs below the kind's line are how its
        // kernels run). Undetermined is for idle time nobody explains, or a cause that
        // costs the floor without its kind being active (yet). Where the busy fraction was
        // estimated from the loop's own waits (a MIG slice), a cause's share is an upper bound
        // (the GPU may have worked while the thread did it): only its kind being active
        // names it.
        None if lost.as_ref().is_some_and(|l| {
            kinds::pipeline()
                .map(Cause::Kind)
                .filter(|_| !l.busy_estimated())
                .chain([Cause::Unexplained])
                .all(|c| l.share(c) < t.lost_share_high)
        }) =>
        {
            Primary::Busy
        }
        None => Primary::Undetermined,
    };
    GpuVerdict {
        index: now.index,
        uuid: now.uuid.clone(),
        kinds,
        primary,
        figures,
        lost,
        working: now.working.is_some() && hang.is_none(),
        hang,
        behind_ranks: None,
    }
}

/// The active kind named the primary verdict: the largest cost above the floor. An active
/// kind whose measured cost is below `lost_share_high` is worth reporting, not worth naming
/// as the cause. A failing device comes first; a kind whose cost cannot be measured (memory
/// pressure, or throttling without clocks) ranks as if it cost the floor, scaled by its
/// score. A straggler (a GPU behind the busiest of its job) straggles for a reason of its
/// own when one is active: that reason is the verdict, the imbalance its consequence.
fn strongest(kinds: &[KindVerdict], t: &Thresholds) -> Option<Kind> {
    // A kind whose decisive evidence is only a consequence (the straggler's gap).
    let only_consequence = |k: &KindVerdict| {
        let score = k.scored.score.unwrap_or(0.0);
        let decisive: Vec<Role> = k
            .scored
            .evidence
            .iter()
            .filter(|e| e.strength >= score)
            .map(|e| e.signal.role())
            .collect();
        !decisive.is_empty() && decisive.iter().all(|r| *r == Role::Consequence)
    };
    let first = |k: &KindVerdict| k.scored.kind.spec().first;
    let weight = |k: &KindVerdict| match k.cost {
        _ if first(k) => 2.0,
        Some(cost) => cost,
        None => t.lost_share_high * k.scored.score.unwrap_or(0.0),
    };
    let above_floor = |k: &&KindVerdict| first(k) || k.cost.is_none_or(|c| c >= t.lost_share_high);
    kinds
        .iter()
        .filter(|k| k.active)
        .filter(above_floor)
        .max_by(|a, b| {
            only_consequence(b)
                .cmp(&only_consequence(a))
                .then(weight(a).total_cmp(&weight(b)))
                .then(
                    a.scored
                        .score
                        .unwrap_or(0.0)
                        .total_cmp(&b.scored.score.unwrap_or(0.0)),
                )
                .then(b.scored.kind.cmp(&a.scored.kind))
        })
        .map(|k| k.scored.kind)
}

/// The figures one tick is attributed by: its own state, where the main thread was lately
/// (not over the whole stacks window: a cause that starts mid-window shows in the ticks after
/// it), and from the window what one tick cannot tell (the busy gaps between ranks, the
/// collectives' cap, a pipeline's bubble, what sleeping workers wait on: a tick sees a few
/// at most; how the workers' switches split, read every few seconds). How long the GPU spun
/// for its peers is compared over the last few ticks instead (`SPIN_TICKS`, set by the
/// caller).
pub fn tick_figures(now: &GpuObservation, window: &WindowFigures) -> WindowFigures {
    let mut tick = WindowFigures::over(&[now]);
    tick.job_gap = window.job_gap;
    tick.collective_busy_cap = window.collective_busy_cap;
    tick.pipeline_bubble = window.pipeline_bubble;
    tick.workers_asleep = window.workers_asleep;
    tick.workers_voluntary_switches = window.workers_voluntary_switches;
    tick.workers_voluntary_rate = window.workers_voluntary_rate;
    if let Some(stacks) = tick
        .stacks
        .as_mut()
        .filter(|s| s.recent_samples >= RECENT_SAMPLES_MIN)
    {
        stacks.shares = stacks.recent_shares;
        stacks.loader_queued = stacks.recent_loader_queued;
    }
    tick.time_stacks();
    tick
}

/// This tick's split of the GPU's time, added to its window, and the window's split: each
/// tick attributed by its own figures (`tick_figures`), described by the window's.
fn lost_over_window(
    state: &mut GpuState,
    tick: WindowFigures,
    window: &WindowFigures,
    inferred: &[KindScore],
    (at, horizon): (f64, f64),
    t: &Thresholds,
) -> Option<LostTime> {
    let splits = &mut state.splits;
    while splits.front().is_some_and(|(when, _)| *when <= horizon) {
        splits.pop_front();
    }
    // The counter rules' scores matter only where the stacks cannot decide the split.
    let scores = if attribute::observes(&tick, t) {
        Vec::new()
    } else {
        score_all(&tick, t)
    };
    if let Some(split) = attribute::lost_time(&tick, &scores, t) {
        splits.push_back((at, split));
    }
    let described = attribute::lost_time(window, inferred, t)?;
    let ticks: Vec<&LostTime> = splits.iter().map(|(_, split)| split).collect();
    Some(attribute::average(&ticks, described))
}
