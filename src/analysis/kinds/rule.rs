//! The builder every kind's score uses, and the conditions several kinds share (the GPU
//! starving, the loop waiting for its loader, input over the network, the processes named as
//! culprits). A condition whose input is missing makes its rule unknown (`None`), never 0.

use crate::analysis::network;
use crate::analysis::score::{high_ratio, strongest};
use crate::analysis::{Evidence, Kind, KindScore, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::{Activity, Culprits, NodeProcess, Signal};

/// Builds a score from conditions: all of `required` must hold (minimum), each of them
/// unknown makes the kind unknown.
#[derive(Debug, Default)]
pub struct Rule {
    /// The evidence recorded so far.
    pub evidence: Vec<Evidence>,
    unknown: bool,
}

impl Rule {
    /// A rule with no condition yet.
    pub fn new() -> Self {
        Rule::default()
    }

    /// Records a piece of evidence and returns its strength.
    pub fn record(&mut self, signal: Signal, value: f64, threshold: f64, strength: f64) -> f64 {
        self.evidence.push(Evidence {
            signal,
            value,
            threshold,
            strength,
            detail: String::new(),
        });
        strength
    }

    /// Records a required condition and returns its strength (0, and the kind unknown, when
    /// the input is missing).
    pub fn condition(
        &mut self,
        signal: Signal,
        value: Option<f64>,
        threshold: f64,
        strength: fn(f64, f64) -> f64,
    ) -> f64 {
        match value {
            Some(v) => self.record(signal, v, threshold, strength(v, threshold)),
            None => {
                self.unknown = true;
                0.0
            }
        }
    }

    /// Like `condition`, but a missing input only weakens an alternative, it does not make
    /// the kind unknown (one of several signals of the same cause).
    pub fn alternative(
        &mut self,
        signal: Signal,
        value: Option<f64>,
        threshold: f64,
        strength: fn(f64, f64) -> f64,
    ) -> Option<f64> {
        let v = value?;
        Some(self.record(signal, v, threshold, strength(v, threshold)))
    }

    /// An alternative read from the main thread's stacks: the share of its samples in
    /// `activity` ("high is bad", against the stack-share threshold), quoting the frame seen
    /// most there. `None` where stacks are not read.
    pub fn observed(
        &mut self,
        signal: Signal,
        w: &WindowFigures,
        activity: Activity,
        t: &Thresholds,
    ) -> Option<f64> {
        let share = w.stack_share(activity)?;
        let s = high_ratio(share, t.stack_share_high);
        self.evidence.push(Evidence {
            signal,
            value: share,
            threshold: t.stack_share_high,
            strength: s,
            detail: w.top_frame(activity),
        });
        Some(s)
    }

    /// Records evidence another module scored; returns the strongest.
    pub fn scored(&mut self, evidence: Vec<Evidence>) -> f64 {
        let strength = strongest(&evidence);
        self.evidence.extend(evidence);
        strength
    }

    /// Records a categorical fact with its score and what it names.
    pub fn fact(&mut self, signal: Signal, value: f64, strength: f64, detail: String) {
        self.evidence.push(Evidence {
            signal,
            value,
            threshold: 1.0,
            strength,
            detail,
        });
    }

    /// Whether a required condition missed its input.
    pub fn unknown(&self) -> bool {
        self.unknown
    }

    /// The kind's score: `score`, or unknown where a required input is missing.
    pub fn done(self, kind: Kind, score: f64) -> KindScore {
        KindScore {
            kind,
            score: if self.unknown { None } else { Some(score) },
            evidence: self.evidence,
        }
    }

    /// At least one alternative had an input; otherwise the kind is unknown.
    pub fn any(self, kind: Kind, gate: f64, alternatives: &[Option<f64>]) -> KindScore {
        let known: Vec<f64> = alternatives.iter().flatten().copied().collect();
        let unknown = self.unknown || known.is_empty();
        let best = known.into_iter().fold(0.0, f64::max);
        KindScore {
            kind,
            score: if unknown { None } else { Some(gate.min(best)) },
            evidence: self.evidence,
        }
    }
}

/// The starvation condition every pipeline kind shares: the GPU waits.
pub fn starved(rule: &mut Rule, w: &WindowFigures, t: &Thresholds) -> f64 {
    rule.condition(
        Signal::GpuBusy,
        w.busy,
        t.gpu_starved_below,
        crate::analysis::score::low,
    )
}

/// The network evidence of input fetched over the wire, as an alternative of data_io
/// (`None` where the node's network is not read).
pub fn remote_input(rule: &mut Rule, w: &WindowFigures, t: &Thresholds) -> Option<f64> {
    let evidence = network::remote_input(w, t);
    (!evidence.is_empty()).then(|| rule.scored(evidence))
}

/// Names the node's busiest processes outside the GPU process trees (at most three of
/// `list`) as one fact, scored `strength`: the figures they explain.
pub fn name_culprits(
    rule: &mut Rule,
    signal: Signal,
    w: &WindowFigures,
    strength: f64,
    list: fn(&Culprits) -> &Vec<NodeProcess>,
    figure: impl Fn(&NodeProcess) -> String,
) {
    let Some(processes) = w.culprits.as_ref().map(list).filter(|l| !l.is_empty()) else {
        return;
    };
    let named: Vec<String> = processes
        .iter()
        .take(3)
        .map(|p| format!("{} {}", p.describe(), figure(p)))
        .collect();
    rule.fact(signal, processes.len() as f64, strength, named.join("; "));
}

/// The most a loader wait seen in the stacks scores: just past the entry score. It shows the
/// loop starves for data but not which side of the loader is slow, so it decides the case
/// where the counters are silent and yields where they speak.
const LOADER_WAIT_CAP: f64 = 0.6;

/// The main thread seen waiting for its data-loader workers (`main_thread_waits_for_loader`),
/// counted for data_cpu when the workers compute (`computing`) and for data_io when they do
/// not. Workers compute when, per worker, their CPU and their threads' wait for a CPU reach
/// the quiet threshold (half a core): busy workers, or too many of them for the cores. Where
/// others use more of the job's CPUs than the job does, the wait is contention's case and
/// counts for neither. Without workers the loop loads its own data: host_bound's business.
pub fn loader_wait(
    rule: &mut Rule,
    w: &WindowFigures,
    t: &Thresholds,
    computing: bool,
) -> Option<f64> {
    let workers = w.workers.filter(|n| *n >= 0.5)?;
    if w.other_cpu
        .zip(w.own_cpu)
        .is_some_and(|(other, own)| other > own)
    {
        return None;
    }
    let cpu = w.workers_cpu? + w.cpu_wait.unwrap_or(0.0);
    if (cpu / workers >= t.quiet_below) != computing {
        return None;
    }
    let strength = rule
        .observed(Signal::MainThreadWaitsForLoader, w, Activity::DataLoader, t)?
        .min(LOADER_WAIT_CAP);
    if let Some(evidence) = rule.evidence.last_mut() {
        evidence.strength = strength;
    }
    Some(strength)
}
