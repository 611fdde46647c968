//! **kernel_efficiency**: "utilization" is high while the SMs are mostly empty: many tiny
//! kernels or low occupancy.
//!
//! Evidence: GPU-Util at or above `kernel_util_high` with GPM SM activity at or below
//! `sm_activity_low` (Hopper and newer; unknown elsewhere, and said so). Its cost is the busy
//! time the job's own SMs sat empty: the device's SM activity mixes every process's kernels,
//! so the main job's share of the empty time is its share of the work; the empty SMs a
//! spinning collective left are the collective's.
//!
//! Near misses: a rank spinning in an NCCL kernel for its peers leaves its SMs empty too
//! (communication): where the stacks put the GPU in collectives for longer than the job's
//! kernels left SMs empty, the counter score yields in that proportion; another job's empty
//! SMs on a shared GPU are contention. A pipeline stage (its process sends and receives
//! through NCCL) whose SMs sit emptier than another stage's may have emptier kernels, or spin
//! in its receives waiting for a slower stage: no counter tells these apart (a data-parallel
//! rank's peers run its kernels, a stage's do not), so the verdict stays kernel_efficiency
//! and its advice names both.

use super::rule::Rule;
use super::{Advice, KindSpec, Phase};
use crate::analysis::score::{high_ratio, low};
use crate::analysis::{Basis, GpuVerdict, Kind, KindScore, LostTime, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Signal;

pub(super) const SPEC: KindSpec = KindSpec {
    phase: Phase::Busy {
        measured: |w| w.sm_activity.is_some(),
        yields: Some(yields),
    },
    on_idle_gpu: false,
    wants_culprits: false,
    first: false,
    score,
    advice,
};

fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let util = rule.condition(Signal::GpuBusy, w.busy, t.kernel_util_high, high_ratio);
    let sm = rule.condition(Signal::SmActivity, w.sm_activity, t.sm_activity_low, low);
    rule.done(Kind::KernelEfficiency, util.min(sm))
}

/// Empty SMs are the rule's fact, small kernels its inference: where the stacks put the GPU
/// in collectives' kernels for longer than the job's kernels left SMs empty (`own`), the
/// inference yields, in that proportion (the cost already leaves them out).
fn yields(score: f64, own: f64, lost: &LostTime) -> f64 {
    if lost.basis == Basis::Observed && lost.collective_busy > own {
        score * 2.0 * own / (own + lost.collective_busy)
    } else {
        score
    }
}

fn advice(verdict: &GpuVerdict) -> Advice {
    if verdict.figures.point_to_point == Some(true) {
        return Advice {
            explanation: "The GPU reports high utilization but its SMs are mostly empty. Its process is a pipeline stage (it sends and receives through NCCL): the empty SMs are its own kernels', or a receive kernel spinning while this stage waits for a slower one, and no counter tells these apart.",
            next_steps: &[
                "Compare the stages' compute per microbatch (CUDA events around each stage's forward and backward, or the PyTorch profiler on one step): a stage that waits for a slower one needs the layers rebalanced, not faster kernels.",
                "Where the stages are balanced: fuse small operations (torch.compile, CUDA graphs) and use bf16/fp16 so tensor cores do the work.",
            ],
        };
    }
    Advice {
        explanation: "The GPU reports high utilization but its SMs are mostly empty: many small kernels or low occupancy.",
        next_steps: &[
            "Fuse small operations: torch.compile, or CUDA graphs for launch-bound steps.",
            "Increase the batch size or sequence length to fill the SMs.",
            "Use mixed precision (bf16/fp16) so tensor cores do the work.",
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Primary;

    fn verdict(point_to_point: Option<bool>) -> GpuVerdict {
        GpuVerdict {
            index: 0,
            uuid: "GPU-0".into(),
            kinds: Vec::new(),
            primary: Primary::Bottleneck(Kind::KernelEfficiency),
            figures: WindowFigures {
                point_to_point,
                ..WindowFigures::default()
            },
            lost: None,
            hang: None,
            behind_ranks: None,
            working: false,
        }
    }

    #[test]
    fn a_pipeline_stages_advice_names_a_wait_for_a_slower_stage_too() {
        let stage = advice(&verdict(Some(true)));
        assert!(stage.explanation.contains("waits for a slower one"));
        assert!(stage.next_steps[0].contains("rebalanced"));
        for rank in [None, Some(false)] {
            assert!(!advice(&verdict(rank)).explanation.contains("pipeline"));
        }
    }
}
