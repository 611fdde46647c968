//! **host_bound**: the main training thread is the bottleneck: its Python (model code,
//! optimizer, kernel launches) cannot keep the GPU fed.
//!
//! Evidence: the GPU below `gpu_starved_below` while the main process's busiest thread holds
//! a core (`main_thread_high`), unless its stacks show it mostly synchronizing (CUDA's spin
//! wait burns the core waiting for the GPU: a veto, not a weight). Observed, its cost is the
//! idle time the main thread spent running the loop's own Python that no sync drained, less
//! the part of its wait for a CPU that others caused (contention); a loop without loader
//! workers that computes its own samples counts here too.
//!
//! Near misses: a pegged thread that is synchronizing is sync_stall; Python waiting for a
//! CPU others took is contention (for the wait the job's own threads would not have caused).

use super::rule::{starved, Rule};
use super::{Advice, KindSpec, Phase, Premise};
use crate::analysis::score::{high_ratio, low};
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
    Premise::seen(w, Signal::MainThreadInPython, Activity::Python)
}

fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gate = starved(&mut rule, w, t);
    let thread = rule.condition(
        Signal::BusiestThread,
        w.busiest_thread,
        t.main_thread_high,
        high_ratio,
    );
    // A main thread seen mostly synchronizing burns its core waiting for the GPU (CUDA's
    // spin wait), not in Python: not host-bound, whatever its CPU.
    let not_syncing = w
        .stack_share(Activity::GpuSync)
        .map(|sync| {
            // A veto, not a weight: below the threshold the stacks do not weaken the case.
            let s = if sync < t.stack_share_high {
                1.0
            } else {
                low(sync, t.stack_share_high)
            };
            rule.evidence.push(crate::analysis::Evidence {
                signal: Signal::MainThreadInGpuSync,
                value: sync,
                threshold: t.stack_share_high,
                strength: s,
                detail: w.top_frame(Activity::GpuSync),
            });
            s
        })
        .unwrap_or(1.0);
    rule.done(Kind::HostBound, gate.min(thread).min(not_syncing))
}

fn advice(_: &GpuVerdict) -> Advice {
    Advice {
        explanation: "The GPU waits on the training loop itself: its main thread's Python (model code, optimizer, kernel launches) cannot keep the GPU fed.",
        next_steps: &[
            "Capture the step with CUDA graphs or torch.compile to cut per-kernel launch overhead.",
            "Increase the batch size so each launch does more work.",
            "Profile the Python loop (py-spy) for work that belongs on the GPU or in the loader.",
        ],
    }
}
