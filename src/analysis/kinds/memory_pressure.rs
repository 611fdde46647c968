//! **memory_pressure**: device memory is nearly full; allocations are at the limit and the
//! caching allocator may thrash (free and retry).
//!
//! Evidence: the window's peak of device memory used at or above `memory_used_high`: memory
//! churning between 60 % and 96 % runs out at its peaks, whatever its mean. A fact the device
//! reports; its cost in GPU time is not measured, so it ranks for the primary verdict as if
//! it cost the floor, scaled by its score. It counts on an idle GPU too.
//!
//! Near misses: a job that holds a large, steady allocation below the threshold is nothing.

use super::rule::Rule;
use super::{Advice, KindSpec, Phase};
use crate::analysis::score::high_ratio;
use crate::analysis::{GpuVerdict, Kind, KindScore, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Signal;

pub(super) const SPEC: KindSpec = KindSpec {
    phase: Phase::Device,
    on_idle_gpu: true,
    wants_culprits: false,
    first: false,
    score,
    advice,
};

fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    // The peak of the window: memory churning between 60 % and 96 % runs out at its peaks
    // (the caching allocator frees and retries there), whatever its mean.
    let used = rule.condition(
        Signal::MemoryUsedPeak,
        w.memory_used_peak,
        t.memory_used_high,
        high_ratio,
    );
    rule.done(Kind::MemoryPressure, used)
}

fn advice(_: &GpuVerdict) -> Advice {
    Advice {
        explanation: "Device memory is nearly full: allocations are at the limit and the allocator may thrash.",
        next_steps: &[
            "Reduce the batch size or use activation checkpointing.",
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to limit fragmentation.",
            "Shard optimizer state (ZeRO/FSDP) or offload it.",
        ],
    }
}
