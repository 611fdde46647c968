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
//! SMs on a shared GPU are contention.

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

fn advice(_: &GpuVerdict) -> Advice {
    Advice {
        explanation: "The GPU reports high utilization but its SMs are mostly empty: many small kernels or low occupancy.",
        next_steps: &[
            "Fuse small operations: torch.compile, or CUDA graphs for launch-bound steps.",
            "Increase the batch size or sequence length to fill the SMs.",
            "Use mixed precision (bf16/fp16) so tensor cores do the work.",
        ],
    }
}
