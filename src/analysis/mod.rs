//! Why each GPU waits. Pure: observations in, verdicts out; no IO, no clock reads, no metric
//! names. The sampler keeps an [`Analyzer`] (the window and each GPU's state) and feeds it
//! each snapshot with the tick's monotonic time.
//!
//! The stages, each a module, in the order a tick runs them (a module imports only those
//! before it, and the leaves `score` and `text` nothing of the analysis):
//!
//! | stage | module | what it does |
//! |---|---|---|
//! | observe | [`observe`], [`jobs`], [`device`] | a snapshot → one [`GpuObservation`] per GPU (a MIG GPU read through its main process's instance); each rank's working peer ([`peers::mark_working_peers`]) |
//! | window | [`WindowFigures::over`] | a GPU's observations → its window figures (each signal declared once, with its fold: `snapshot/figures.rs`) |
//! | peers | [`peers`], `spin` | the GPUs of one job compared: busy gaps, the collectives' cap, how long each rank's GPU spun for its peers |
//! | score | [`kinds`] | each kind's counter rule (one file per kind, [`Kind::spec`]) |
//! | attribute | [`attribute`] | the window's GPU time split by cause ([`LostTime`]) |
//! | judge | [`judge`] | each kind's score against the split: observed or inferred |
//! | latch, hang | [`latch`], [`hang`] | hysteresis; a collective that never ends |
//! | decide | [`decide`] | the primary verdict |
//! | stragglers | [`peers::behind_ranks`] | each rank's cost to its group, from the splits |
//!
//! Helpers: [`score`] (the 0..1 scales), [`text`] (figures as people read them),
//! [`network`] (the network's evidence), [`advice`] (what a verdict means, what to do).

pub mod advice;
pub mod attribute;
pub mod decide;
pub mod device;
pub mod hang;
pub mod jobs;
pub mod judge;
pub mod kinds;
pub mod latch;
pub mod network;
pub mod observe;
pub mod peers;
pub mod pipeline;
pub mod ras;
pub mod score;
mod spin;
pub mod text;

use std::collections::{BTreeMap, VecDeque};

pub use self::advice::{explanation, next_steps};
use self::decide::{decide, tick_figures, GpuState};
pub use self::observe::observe;
use crate::config::Thresholds;
use crate::snapshot::Snapshot;
pub use crate::snapshot::{
    Basis, Cause, Evidence, GpuObservation, GpuVerdict, Hang, InputSource, Kind, KindScore,
    KindVerdict, LinkLoad, LostTime, MountLoad, Primary, Sharing, WindowFigures,
};

/// Ticks over which the ranks' spins for their peers are compared for one tick's split: enough
/// to even out where in their steps the ranks stood at the tick (a balanced pair reads busier
/// in turn from one tick to the next), few enough to follow a straggler that changes within a
/// window (the window's own figure, carried into every tick, lagged by a window).
const SPIN_TICKS: usize = 5;

/// The window of observations and each GPU's state, owned by the sampler.
#[derive(Debug, Default)]
pub struct Analyzer {
    thresholds: Thresholds,
    /// Ticks in the window: (time, observations), oldest first.
    window: VecDeque<(f64, Vec<GpuObservation>)>,
    /// What each GPU's verdicts remember between ticks, by UUID.
    gpus: BTreeMap<String, GpuState>,
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
    pub fn push(&mut self, mut observations: Vec<GpuObservation>, at: f64) -> Vec<GpuVerdict> {
        peers::mark_working_peers(&mut observations);
        let horizon = at - self.thresholds.window.0.as_secs_f64();
        while self
            .window
            .front()
            .is_some_and(|(tick, _)| *tick <= horizon)
        {
            self.window.pop_front();
        }
        self.window.push_back((at, observations.clone()));
        let (mut windows, mut recent): (Vec<WindowFigures>, Vec<WindowFigures>) = observations
            .iter()
            .map(|now| {
                let history: Vec<&GpuObservation> = self
                    .window
                    .iter()
                    .flat_map(|(_, tick)| tick)
                    .filter(|o| o.uuid == now.uuid)
                    .collect();
                let mut window = WindowFigures::over(&history);
                window.time_stacks();
                let mut recent =
                    WindowFigures::over(&history[history.len().saturating_sub(SPIN_TICKS)..]);
                recent.time_stacks();
                (window, recent)
            })
            .unzip();
        let t = &self.thresholds;
        let key = |f: fn(&GpuObservation) -> &Option<String>| -> Vec<Option<&str>> {
            observations.iter().map(|o| f(o).as_deref()).collect()
        };
        peers::job_gaps(&key(|o| &o.job), &mut windows);
        peers::collective_caps(&key(|o| &o.ranks), &mut windows, t);
        peers::spins(&key(|o| &o.ranks), &mut recent);
        let ticks: Vec<WindowFigures> = observations
            .iter()
            .zip(&windows)
            .zip(&recent)
            .map(|((now, w), recent)| WindowFigures {
                spin_excess: recent.spin_excess,
                ..tick_figures(now, w)
            })
            .collect();
        let mut verdicts: Vec<GpuVerdict> = observations
            .iter()
            .zip(ticks.into_iter().zip(windows))
            .map(|(now, figures)| {
                let state = self.gpus.entry(now.uuid.clone()).or_default();
                decide(state, now, figures, (at, horizon), t)
            })
            .collect();
        peers::behind_ranks(&key(|o| &o.ranks), &mut verdicts);
        self.gpus
            .retain(|uuid, _| verdicts.iter().any(|v| &v.uuid == uuid));
        verdicts
    }
}
