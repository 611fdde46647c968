//! Why each GPU waits. Pure: observations in, verdicts out; no IO, no clock reads, no metric
//! names. The sampler keeps an [`Analyzer`] (the window and the hysteresis state) and feeds it
//! each snapshot with the tick's monotonic time.

pub mod advice;
pub mod attribution;
pub mod network;
pub mod observation;
pub mod ranks;
pub mod rules;
pub mod window;

use std::collections::{BTreeMap, VecDeque};

use self::observation::{observe, GpuObservation};
use self::rules::score_all;
use self::window::window_figures;
use crate::config::Analysis as Thresholds;
use crate::snapshot::{Activity, Snapshot};
pub use crate::snapshot::{
    Basis, Cause, Evidence, GpuVerdict, Hang, InputSource, Kind, KindScore, KindVerdict, LinkLoad,
    LostTime, MountLoad, Primary, Sharing, WindowFigures,
};

/// Recent stack samples from which a tick is attributed by them (else by the whole window's).
const RECENT_SAMPLES_MIN: u32 = 4;

/// PCIe traffic below which a GPU in a collective moves no data: a hung NCCL kernel spins
/// without traffic (a few MB/s of driver housekeeping), while even a 10 GbE all-reduce moves
/// about a GB/s through the GPU's link.
const HANG_PCIE_BYTES_MAX: f64 = 50e6;

/// Hysteresis state of one kind on one GPU.
#[derive(Debug, Clone, Copy, Default)]
struct Latch {
    active: bool,
    /// Since when the score has been past the threshold that would flip `active`.
    pending_since: Option<f64>,
}

impl Latch {
    /// Moves the latch with a new score at time `at`.
    fn update(&mut self, score: Option<f64>, at: f64, t: &Thresholds) -> bool {
        let flips = match (self.active, score) {
            (false, Some(s)) => s >= t.enter_score,
            (true, Some(s)) => s < t.leave_score,
            // Unknown input: hold the current state.
            (_, None) => false,
        };
        if !flips {
            self.pending_since = None;
            return self.active;
        }
        let since = *self.pending_since.get_or_insert(at);
        if at - since >= t.min_duration.0.as_secs_f64() {
            self.active = !self.active;
            self.pending_since = None;
        }
        self.active
    }
}

/// The window of observations and the latches, owned by the sampler.
#[derive(Debug, Default)]
pub struct Analyzer {
    thresholds: Thresholds,
    /// Ticks in the window: (time, observations), oldest first.
    window: VecDeque<(f64, Vec<GpuObservation>)>,
    /// Per GPU, each tick of the window's lost-time split: (time, split).
    splits: BTreeMap<String, VecDeque<(f64, LostTime)>>,
    latches: BTreeMap<(String, Kind), Latch>,
    /// Per GPU, since when its main thread has sat in one collective with the GPU busy, and
    /// the collective's frame.
    hangs: BTreeMap<String, (f64, String)>,
}

impl Analyzer {
    /// An analyzer with the given thresholds.
    pub fn new(thresholds: Thresholds) -> Self {
        Analyzer {
            thresholds,
            ..Analyzer::default()
        }
    }

    /// The thresholds it decides with.
    pub fn thresholds(&self) -> &Thresholds {
        &self.thresholds
    }

    /// Adds the snapshot taken at `at` seconds and returns every GPU's verdicts.
    pub fn update(&mut self, snapshot: &Snapshot, at: f64) -> Vec<GpuVerdict> {
        self.push(observe(snapshot, at), at)
    }

    /// Adds one tick of observations (the pure core, driven directly by scenario tests).
    pub fn push(&mut self, observations: Vec<GpuObservation>, at: f64) -> Vec<GpuVerdict> {
        let horizon = at - self.thresholds.window.0.as_secs_f64();
        while self
            .window
            .front()
            .is_some_and(|(tick, _)| *tick <= horizon)
        {
            self.window.pop_front();
        }
        self.window.push_back((at, observations.clone()));
        let mut windows: Vec<WindowFigures> = observations
            .iter()
            .map(|now| {
                let history: Vec<&GpuObservation> = self
                    .window
                    .iter()
                    .flat_map(|(_, tick)| tick)
                    .filter(|o| o.uuid == now.uuid)
                    .collect();
                window_figures(&history)
            })
            .collect();
        let thresholds = self.thresholds.clone();
        let key = |f: fn(&GpuObservation) -> &Option<String>| -> Vec<Option<&str>> {
            observations.iter().map(|o| f(o).as_deref()).collect()
        };
        ranks::job_gaps(&key(|o| &o.job), &mut windows);
        ranks::collective_caps(&key(|o| &o.ranks), &mut windows, &thresholds);
        let verdicts: Vec<GpuVerdict> = observations
            .iter()
            .zip(windows)
            .map(|(now, w)| self.decide(now, w, at, horizon, &thresholds))
            .collect();
        let live: Vec<&String> = verdicts.iter().map(|v| &v.uuid).collect();
        self.latches.retain(|(uuid, _), _| live.contains(&uuid));
        self.splits.retain(|uuid, _| live.contains(&uuid));
        self.hangs.retain(|uuid, _| live.contains(&uuid));
        verdicts
    }

    /// This tick's split of the GPU's time, added to its window, and the window's split:
    /// each tick attributed by its own state, described by the window's.
    fn lost_over_window(
        &mut self,
        now: &GpuObservation,
        window: &WindowFigures,
        inferred: &[KindScore],
        (at, horizon): (f64, f64),
        t: &Thresholds,
    ) -> Option<LostTime> {
        let mut tick = window_figures(&[now]);
        tick.job_gap = window.job_gap;
        tick.collective_busy_cap = window.collective_busy_cap;
        // The tick is attributed by where the main thread was lately, not over the whole
        // stacks window: a cause that starts mid-window shows in the ticks after it.
        if let Some(stacks) = tick
            .stacks
            .as_mut()
            .filter(|s| s.recent_samples >= RECENT_SAMPLES_MIN)
        {
            stacks.shares = stacks.recent_shares;
        }
        let splits = self.splits.entry(now.uuid.clone()).or_default();
        while splits.front().is_some_and(|(when, _)| *when <= horizon) {
            splits.pop_front();
        }
        // The counter rules' scores matter only where the stacks cannot decide the split.
        let scores = if attribution::observes(&tick, t) {
            Vec::new()
        } else {
            score_all(&tick, t)
        };
        if let Some(split) = attribution::lost_time(&tick, &scores, t) {
            splits.push_back((at, split));
        }
        let described = attribution::lost_time(window, inferred, t)?;
        let ticks: Vec<&LostTime> = splits.iter().map(|(_, split)| split).collect();
        Some(attribution::average(&ticks, described))
    }

    /// Whether the GPU's main thread still sits in the collective it sat in on the previous
    /// tick: every recent stack sample there (a rank that makes progress leaves it between
    /// steps), the same frame, the GPU busy (NCCL's kernels spin while they wait) and, where
    /// the driver reports it, no data crossing its PCIe link (a slow collective that moves
    /// gradients to the NIC is progress, however long it takes).
    fn hang(&mut self, now: &GpuObservation, at: f64, t: &Thresholds) -> Option<Hang> {
        let collective = Activity::ALL
            .iter()
            .position(|a| *a == Activity::Collective)?;
        let stuck = now.stacks.as_ref().filter(|s| {
            s.recent_samples >= RECENT_SAMPLES_MIN
                && s.recent_shares[collective] >= 1.0 - 1e-9
                && now.busy.is_some_and(|b| b >= t.gpu_busy_above)
                && now
                    .pcie_bytes_per_second
                    .is_none_or(|bytes| bytes < HANG_PCIE_BYTES_MAX)
        });
        let Some(stacks) = stuck else {
            self.hangs.remove(&now.uuid);
            return None;
        };
        let frame = stacks
            .top_frames
            .iter()
            .find(|f| f.activity == Activity::Collective)
            .map(|f| format!("{} at {}", f.function, f.location))
            .unwrap_or_default();
        let entry = self
            .hangs
            .entry(now.uuid.clone())
            .or_insert((at, frame.clone()));
        if entry.1 != frame {
            *entry = (at, frame.clone());
        }
        Some(Hang {
            seconds: at - entry.0,
            frame,
        })
    }

    fn decide(
        &mut self,
        now: &GpuObservation,
        figures: WindowFigures,
        at: f64,
        horizon: f64,
        t: &Thresholds,
    ) -> GpuVerdict {
        let idle = figures.up && figures.processes == Some(0.0);
        let inferred = score_all(&figures, t);
        let lost = self.lost_over_window(now, &figures, &inferred, (at, horizon), t);
        let kinds: Vec<KindVerdict> = inferred
            .into_iter()
            .map(|scored| {
                let (mut scored, basis, cost) =
                    attribution::judge(scored, lost.as_ref(), &figures, t);
                // An idle GPU waits for nobody: only its health can be a problem.
                if idle
                    && !matches!(
                        scored.kind,
                        Kind::Hardware | Kind::Throttling | Kind::MemoryPressure
                    )
                {
                    scored.score = Some(0.0);
                }
                let latch = self
                    .latches
                    .entry((now.uuid.clone(), scored.kind))
                    .or_default();
                let active = latch.update(scored.score, at, t);
                KindVerdict {
                    scored,
                    active,
                    basis,
                    cost,
                }
            })
            .collect();
        // A straggler (a GPU behind the busiest of its job) straggles for a reason of its own
        // when one is active: that reason is the verdict, the imbalance its consequence.
        let only_imbalance = |k: &KindVerdict| {
            let score = k.scored.score.unwrap_or(0.0);
            k.scored.kind == Kind::Communication
                && k.scored
                    .evidence
                    .iter()
                    .filter(|e| e.strength >= score)
                    .all(|e| e.name == "job_busy_gap")
        };
        // The largest cost above the floor decides: an active kind whose measured cost is
        // below `lost_share_high` is worth reporting, not worth naming as the cause. A
        // failing device comes first; a kind whose cost cannot be measured (memory pressure,
        // or throttling without clocks) ranks as if it cost the floor, scaled by its score.
        let weight = |k: &KindVerdict| match (k.scored.kind, k.cost) {
            (Kind::Hardware, _) => 2.0,
            (_, Some(cost)) => cost,
            (_, None) => t.lost_share_high * k.scored.score.unwrap_or(0.0),
        };
        let above_floor = |k: &&KindVerdict| {
            k.scored.kind == Kind::Hardware || k.cost.is_none_or(|c| c >= t.lost_share_high)
        };
        let strongest = kinds
            .iter()
            .filter(|k| k.active)
            .filter(above_floor)
            .max_by(|a, b| {
                only_imbalance(b)
                    .cmp(&only_imbalance(a))
                    .then(weight(a).total_cmp(&weight(b)))
                    .then(
                        a.scored
                            .score
                            .unwrap_or(0.0)
                            .total_cmp(&b.scored.score.unwrap_or(0.0)),
                    )
                    .then(b.scored.kind.cmp(&a.scored.kind))
            })
            .map(|k| k.scored.kind);
        let hang = self.hang(now, at, t);
        let hung = hang
            .as_ref()
            .is_some_and(|h| h.seconds >= t.hang_after.0.as_secs_f64());
        let primary = match strongest {
            // A job that makes no progress at all: whatever else holds it back waits behind.
            _ if hung => Primary::Hung,
            Some(kind) => Primary::Bottleneck(kind),
            // No process, or processes that run no work (a job holding the GPU idle).
            None if idle || (figures.up && figures.busy.is_some_and(|b| b < rules::IDLE_BUSY)) => {
                Primary::Idle
            }
            None if figures.busy.is_some_and(|b| b >= t.gpu_busy_above) => Primary::Busy,
            // Idle time that is explained, but by no cause that reaches the floor: nothing
            // worth naming holds the GPU back (empty SMs below the kind's line are how its
            // kernels run). Undetermined is for idle time nobody explains, or a cause that
            // costs the floor without its kind being active (yet).
            None if lost.as_ref().is_some_and(|l| {
                attribution::PIPELINE
                    .iter()
                    .map(|k| Cause::Kind(*k))
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
            hang,
        }
    }
}
