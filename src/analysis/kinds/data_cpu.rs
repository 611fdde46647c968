//! **data_cpu**: CPU preprocessing (decode, augmentation) is too slow for the GPU, with too
//! few loader workers or too many for the cores.
//!
//! Evidence: the GPU below `gpu_starved_below`, with the busiest loader worker near a full
//! core, or the job's CPUs saturated by the job itself (node-wide CPU where the job's share
//! of its CPUs is unknown); or, seen in the stacks, the main thread waiting for workers that
//! compute (per worker, their CPU and their wait for a CPU reach half a core). Observed, its
//! cost is the idle time the loop spent waiting for its loader in the share of the workers'
//! time that went to computing in user space and to the waits after preemption.
//!
//! Near misses: CPUs saturated by others are contention; workers in system calls, blocked or
//! asleep are reading (data_io); a loop without workers computing its own samples is
//! host_bound.

use super::rule::{loader_wait, starved, Rule};
use super::{waits_for_loader, Advice, KindSpec, Phase};
use crate::analysis::score::high_ratio;
use crate::analysis::{GpuVerdict, Kind, KindScore, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Signal;

pub(super) const SPEC: KindSpec = KindSpec {
    phase: Phase::Idle {
        premise: waits_for_loader,
    },
    on_idle_gpu: false,
    wants_culprits: true,
    first: false,
    score,
    advice,
};

fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gate = starved(&mut rule, w, t);
    let alternatives = [
        rule.alternative(
            Signal::WorkersMaxCpu,
            w.workers_max_cpu,
            t.worker_cpu_high,
            high_ratio,
        ),
        // The job's CPUs saturated by the job itself; node-wide CPU where the job's share of
        // its CPUs is unknown. CPUs saturated by others are contention, not this.
        match w.own_cpu {
            Some(own) => rule.alternative(Signal::OwnCpu, Some(own), t.host_cpu_high, high_ratio),
            None => rule.alternative(Signal::HostCpu, w.host_cpu, t.host_cpu_high, high_ratio),
        },
        // Seen in its stacks, a loop waiting for workers that compute waits for their
        // preprocessing, even when no worker is pegged.
        loader_wait(&mut rule, w, t, true),
    ];
    rule.any(Kind::DataCpu, gate, &alternatives)
}

fn advice(_: &GpuVerdict) -> Advice {
    Advice {
        explanation: "The GPU waits for input data: the CPU-side preprocessing (decode, augmentation) is too slow.",
        next_steps: &[
            "Increase DataLoader num_workers (up to the CPUs near the GPU) and enable persistent_workers.",
            "Move decoding and augmentation to the GPU (NVIDIA DALI, torchvision.io on CUDA).",
            "Pre-process the data set once offline instead of on every epoch.",
        ],
    }
}
