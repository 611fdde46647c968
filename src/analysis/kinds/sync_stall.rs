//! **sync_stall**: CPU and GPU wait on each other. Synchronisation points (`.item()`,
//! `.cpu()`, blocking copies, `torch.cuda.synchronize()`) drain the GPU's queue, and the GPU
//! then idles while the host prepares the next step.
//!
//! Evidence: the GPU below `gpu_starved_below` while disk, the main thread, the workers and
//! the host CPU are all far from busy (`quiet_below`: "neither side is busy"); bursts of idle
//! samples (`idle_share`) support it; seen in the stacks, a main thread mostly synchronizing
//! decides it however busy its core looks (CUDA's spin wait holds the core). With the CUDA
//! probes a sample counts as synchronizing when the thread was inside a driver wait, whatever
//! its line reads (`bool(t)`, a NaN check, `.to("cuda")` from pageable memory name no sync),
//! and not when it was outside (`.tolist()` of a host array reads like one), and the thread's
//! share in syncs is the time the probes timed it in driver waits. Observed, its
//! cost is the time the thread waited for a GPU that ran none of the job's work plus the
//! idle time in the Python that followed a sync on an empty queue, up to the time the thread
//! was held in syncs while the GPU worked (without them it would have been that far ahead).
//!
//! Near misses: a GPU that runs no work at all is idle, not stalled; input arriving slowly
//! over the network is a side that is busy waiting (data_io); Python with no sync before it
//! is host_bound.

use super::rule::{starved, Rule};
use super::{Advice, KindSpec, Phase, Premise};
use crate::analysis::network;
use crate::analysis::score::{high, low, strongest, IDLE_BUSY};
use crate::analysis::{GpuVerdict, Kind, KindScore, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::{Activity, Signal};

pub(super) const SPEC: KindSpec = KindSpec {
    phase: Phase::Idle { premise },
    on_idle_gpu: false,
    wants_culprits: false,
    first: false,
    score,
    advice,
};

fn premise(w: &WindowFigures, _: &Thresholds) -> Premise {
    Premise::seen(w, Signal::MainThreadInGpuSync, Activity::GpuSync)
}

/// Steps shorter than NVML's 1/6 s sample leave no idle sample, so bursts (`idle_share`) are
/// evidence, not a requirement.
fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let mut gate = starved(&mut rule, w, t);
    // A GPU that runs nothing is not stalled between bursts: its job is idle.
    if w.busy.is_some_and(|busy| busy < IDLE_BUSY) {
        rule.fact(Signal::GpuRunsNoWork, 1.0, 0.0, String::new());
        gate = 0.0;
    }
    rule.alternative(Signal::IdleShare, w.idle_share, t.bursty_idle_share, high);
    // Seen in its stacks, a main thread mostly synchronizing waits for the GPU however busy
    // it looks: with CUDA's spin wait it holds its core (and a share of the host's CPU).
    let observed = rule
        .observed(Signal::MainThreadInGpuSync, w, Activity::GpuSync, t)
        .unwrap_or(0.0);
    let quiet = [
        rule.condition(Signal::DiskUtil, w.disk_util, t.quiet_below, low),
        rule.condition(Signal::BusiestThread, w.busiest_thread, t.quiet_below, low)
            .max(observed),
        rule.condition(Signal::WorkersMaxCpu, w.workers_max_cpu, t.quiet_below, low),
        rule.condition(Signal::HostCpu, w.host_cpu, t.quiet_below, low)
            .max(observed),
    ];
    // Input arriving slowly over the network is a side that is busy waiting: not "neither".
    let remote = strongest(&network::remote_input(w, t));
    let score = quiet.iter().fold(gate.min(1.0 - remote), |s, q| s.min(*q));
    rule.done(Kind::SyncStall, score)
}

fn advice(_: &GpuVerdict) -> Advice {
    Advice {
        explanation: "The training loop waits for the GPU to drain (.item(), .cpu(), synchronize) and the GPU then idles while the host prepares the next step: synchronisation points serialise the pipeline.",
        next_steps: &[
            "Remove host synchronisations in the step: .item(), .cpu(), printing tensors, torch.cuda.synchronize().",
            "Use pin_memory=True and non_blocking=True copies.",
            "Log metrics every N steps instead of every step.",
        ],
    }
}
