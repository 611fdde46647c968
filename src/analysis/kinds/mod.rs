//! The bottleneck kinds, one file each: what the kind means, its evidence and its near misses
//! (the file's doc comment, which docs/verdicts.md quotes), its score, how the attribution
//! judges it, and what to tell the person reading the verdict. [`Kind::spec`] reaches them by
//! an exhaustive `match`, so a new kind's missing pieces are compile errors.

mod communication;
mod contention;
mod data_cpu;
mod data_io;
mod hardware;
mod host_bound;
mod kernel_efficiency;
mod memory_pressure;
pub mod rule;
mod sync_stall;
mod throttling;

use super::{GpuVerdict, Kind, KindScore, LostTime, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::{Activity, Signal};

/// What the main thread must be seen doing for a pipeline kind's observed cost to stand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Premise {
    /// How the evidence names it.
    pub signal: Signal,
    /// The activity whose top frame the evidence quotes.
    pub activity: Activity,
    /// Share of the main thread's samples the premise holds in.
    pub share: f64,
}

impl Premise {
    /// The main thread in `activity`, as much as the window's stacks saw it there.
    fn seen(w: &WindowFigures, signal: Signal, activity: Activity) -> Premise {
        Premise {
            signal,
            activity,
            share: w.stack_share(activity).unwrap_or(0.0),
        }
    }
}

/// Where a kind's cost lies in the GPU's time, and how the attribution judges it.
#[derive(Debug, Clone, Copy)]
pub enum Phase {
    /// The pipeline around the GPU: it explains idle time (communication and contention some
    /// busy time too). Where the stacks decide, its observed cost is its score, provided the
    /// main thread was seen in its premise; elsewhere the counter rule's score stands.
    Idle {
        /// The premise, from the window's stacks.
        premise: fn(&WindowFigures, &Thresholds) -> Premise,
    },
    /// Busy time wasted (empty SMs, held-down clocks): a fact the device reports, its cost the
    /// split's share where `measured` holds.
    Busy {
        /// Whether the window has the input that measures the cost.
        measured: fn(&WindowFigures) -> bool,
        /// Where the split observes another cause for the same busy time, the counter
        /// score's share that stands: (score, own cost, split) → score.
        yields: Option<fn(f64, f64, &LostTime) -> f64>,
    },
    /// The device's own state (memory, errors): no share of the time is measured.
    Device,
}

/// What a verdict tells the person reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advice {
    /// One sentence saying what the verdict means for the GPU.
    pub explanation: &'static str,
    /// Concrete next steps, most likely first.
    pub next_steps: &'static [&'static str],
}

/// Everything the analysis knows about one kind.
#[derive(Debug, Clone, Copy)]
pub struct KindSpec {
    /// Where its cost lies and how it is judged.
    pub phase: Phase,
    /// Whether it can be active on an idle GPU (no process: only its health can be a
    /// problem).
    pub on_idle_gpu: bool,
    /// Whether a case of it wants the node's busiest processes looked for (the culprit pass,
    /// too costly to run always).
    pub wants_culprits: bool,
    /// Ranks as the primary verdict before any cost, whatever it costs (a failing device).
    pub first: bool,
    /// Its counter rule: window figures in, a score and its evidence out.
    pub score: fn(&WindowFigures, &Thresholds) -> KindScore,
    /// What to tell the reader when it is the primary verdict.
    pub advice: fn(&GpuVerdict) -> Advice,
}

impl Kind {
    /// The kind's spec.
    pub fn spec(self) -> &'static KindSpec {
        match self {
            Kind::DataIo => &data_io::SPEC,
            Kind::DataCpu => &data_cpu::SPEC,
            Kind::HostBound => &host_bound::SPEC,
            Kind::SyncStall => &sync_stall::SPEC,
            Kind::KernelEfficiency => &kernel_efficiency::SPEC,
            Kind::MemoryPressure => &memory_pressure::SPEC,
            Kind::Communication => &communication::SPEC,
            Kind::Contention => &contention::SPEC,
            Kind::Throttling => &throttling::SPEC,
            Kind::Hardware => &hardware::SPEC,
        }
    }

    /// Whether it explains idle time (the pipeline around the GPU).
    pub fn explains_idle_time(self) -> bool {
        matches!(self.spec().phase, Phase::Idle { .. })
    }
}

/// Every kind's score for one GPU's window, in [`Kind::ALL`] order.
pub fn score_all(w: &WindowFigures, t: &Thresholds) -> Vec<KindScore> {
    Kind::ALL.iter().map(|k| (k.spec().score)(w, t)).collect()
}

/// The kinds that explain idle time, in [`Kind::ALL`] order.
pub fn pipeline() -> impl Iterator<Item = Kind> {
    Kind::ALL.into_iter().filter(|k| k.explains_idle_time())
}

/// The premise shared by the loader-side kinds: the main thread waiting for its loader.
fn waits_for_loader(w: &WindowFigures, _: &Thresholds) -> Premise {
    Premise::seen(w, Signal::MainThreadWaitsForLoader, Activity::DataLoader)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Cause;

    #[test]
    fn the_causes_are_the_kinds_whose_time_is_measured_idle_ones_first() {
        let idle = Kind::ALL.into_iter().filter(|k| k.explains_idle_time());
        let busy = Kind::ALL
            .into_iter()
            .filter(|k| matches!(k.spec().phase, Phase::Busy { .. }));
        let expected: Vec<Cause> = idle
            .chain(busy)
            .map(Cause::Kind)
            .chain([Cause::Unexplained])
            .collect();
        assert_eq!(Cause::ALL.to_vec(), expected);
    }

    #[test]
    fn each_score_is_its_own_kinds() {
        let scores = score_all(&WindowFigures::default(), &Thresholds::default());
        let kinds: Vec<Kind> = scores.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, Kind::ALL.to_vec());
    }
}
