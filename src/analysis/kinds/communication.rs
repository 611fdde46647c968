//! **communication**: the GPU waits on the other GPUs of its job (load imbalance, collective
//! communication) or on a degraded link.
//!
//! Evidence: the busy gap to the busiest GPU of the same job (pod, Slurm job, one process on
//! several GPUs) past `job_imbalance`; seen in the stacks, the main thread mostly in a
//! collective, whichever GPU looks busier (NCCL's kernels spin on the waiting GPU); a PCIe
//! link trained below its maximum generation or width while the GPU works (and then the idle
//! time nothing the main thread did explains is the link's, and with the CUDA probes the
//! time its copies took beyond a full link's); collectives crossing a saturated
//! or slow link of the node while the GPU waits — starved, or busy spinning in NCCL's kernels
//! while its host waits in the driver after issuing them; with the CUDA probes, the process
//! issuing NCCL collectives (real PyTorch's return at once and spin on the GPU) while its
//! GPU is busy with empty SMs longer than its job's least busy rank, plus what that rank spun
//! while its peers' GPUs idled for their input (compared over each tick's last few ticks: a
//! straggler can change within a window), or its SMs sit empty longer than any peer's (a
//! peer slow because it computes longer, a throttled GPU, is as busy; only between ranks that
//! run the same kernels, not pipeline stages); on MIG slices (no busy time), its host's wait
//! in the driver after its collectives beyond the least waiting rank's (identical ranks drain
//! the same queued compute there) (`spun_for_peers`; every rank spins alike for a saturated link, and for a slow rank on another node where the
//! launcher says the job spans nodes: there the host's waits in the driver, at most the
//! empty-SM time); a pipeline stage's schedule besides (`pipeline_bubble`, inferred): GPipe and
//! 1F1B leave each of `S` stages waiting `(S - 1) / (M + S - 1)` of the step for `M`
//! microbatches (a stage's sends and receives a step tell `M`; `S` taken as two, the least
//! any pipeline has), spinning in its receives — the least busy stage too, less the idle time
//! its GPU had beyond the busiest stage's (its own host's lag, in which its peer's tensors
//! arrive; not its host's pauses between steps, a checkpoint written after its sync, in which
//! its peers spin for it), at most the SMs left empty. Observed, its cost is the idle time the
//! main thread spent in collectives, plus the busy time its GPU spun in them: at most the time
//! its SMs sat empty (a spinning collective leaves them so) and, beside peers whose stacks are
//! seen, at most its excess over the least busy of them.
//!
//! Near misses: a straggler's busy gap alone is the consequence of whatever slows it, so it
//! yields to any other active kind; a rank held in a collective on the host (a barrier, gloo)
//! while its GPU still runs queued kernels as long as its peers' is not waiting on its GPU.

use super::rule::Rule;
use super::{Advice, KindSpec, Phase, Premise};
use crate::analysis::network;
use crate::analysis::score::{high, low};
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

/// The main thread seen in a collective, or — real PyTorch's shape, NCCL returning at once —
/// the process issuing collectives while its GPU spins in them (busier with empty SMs than its
/// job's least busy rank, or its collectives crossing a saturated link): the host meets the
/// collective at a sync, in the stacks as a sync, or not at all.
/// A pipeline stage's schedule holds it in its receives besides (inferred: the premise is
/// then the bubble, where it is most of the spin).
fn premise(w: &WindowFigures, t: &Thresholds) -> Premise {
    let stacks = Premise::seen(w, Signal::MainThreadInCollective, Activity::Collective);
    let spun = network::spun_in_collectives(w, t).unwrap_or(0.0);
    let bubble = w.pipeline_bubble.unwrap_or(0.0);
    if spun + bubble <= stacks.share {
        return stacks;
    }
    Premise {
        signal: if bubble > spun {
            Signal::PipelineBubble
        } else {
            Signal::SpunForPeers
        },
        activity: Activity::GpuSync,
        share: spun + bubble,
    }
}

fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gap = rule
        .alternative(Signal::JobBusyGap, w.job_gap, t.job_imbalance, high)
        .unwrap_or(0.0);
    // A rank seen mostly in a collective waits for its peers, whichever GPU looks busier
    // (NCCL's kernels spin on the waiting GPU), and whether or not the busy gap can be taken
    // (only within a pod, a Slurm job or a process on several GPUs): the frame itself says
    // the wait is communication.
    let collective = rule
        .observed(Signal::MainThreadInCollective, w, Activity::Collective, t)
        .unwrap_or(0.0);
    // The same wait met at the next sync (NCCL returns at once), seen by the probes.
    let spun = rule
        .alternative(
            Signal::SpunForPeers,
            network::spun_in_collectives(w, t),
            t.lost_share_high,
            high,
        )
        .unwrap_or(0.0);
    // A pipeline stage's wait in its schedule's bubble (inferred from its microbatches).
    let bubble = rule
        .alternative(
            Signal::PipelineBubble,
            w.pipeline_bubble,
            t.lost_share_high,
            high,
        )
        .unwrap_or(0.0);
    let degraded_while_busy = match network::link_degraded_under_load(w) {
        // The less bandwidth the link has left, the surer the cause. Half the bandwidth
        // scores 0.75, a gen 2 x4 link of a gen 5 x16 slot (3 % left) 0.98.
        Some(share) => {
            let score = 0.5 + 0.5 * (1.0 - share);
            rule.fact(
                Signal::PcieBandwidthShare,
                share,
                score,
                "PCIe link trained below its maximum generation or width".into(),
            );
            score
        }
        _ => 0.0,
    };
    // Collectives crossing a saturated or slow link while the GPU waits for them: starved,
    // or busy spinning in NCCL's kernels while its host waits in the driver after issuing
    // them (real DDP's shape: the link names itself while the GPUs read busy).
    let starving = w.busy.map_or(0.0, |b| low(b, t.gpu_starved_below));
    let spinning = w
        .collective_wait
        .map_or(0.0, |wait| high(wait, t.lost_share_high));
    let link = rule
        .scored(network::inter_node(w, t))
        .min(starving.max(spinning));
    rule.done(
        Kind::Communication,
        gap.max(degraded_while_busy)
            .max(collective)
            .max(spun)
            .max(bubble)
            .max(link),
    )
}

fn advice(verdict: &GpuVerdict) -> Advice {
    // Collectives crossing a saturated or slow link of the node.
    let inter_node = verdict.kind(Kind::Communication).is_some_and(|k| {
        k.scored.evidence.iter().any(|e| {
            matches!(e.signal, Signal::BusiestLink | Signal::SlowLink) && e.strength >= 0.5
        })
    });
    if inter_node {
        return Advice {
            explanation: "This rank waits in collectives whose traffic crosses the node's network link, and that link is near saturation or too slow for multi-node training: the GPUs wait for gradients to cross the wire.",
            next_steps: &[
                "Communicate less often: gradient accumulation over several micro-batches per all-reduce.",
                "Overlap and batch the traffic: a larger DDP bucket_cap_mb, FSDP/ZeRO prefetch; compress gradients (PowerSGD, bf16 hooks).",
                "Check NCCL uses the fast fabric (NCCL_SOCKET_IFNAME, NCCL_IB_HCA; NCCL_DEBUG=INFO shows the transport): multi-node training wants InfiniBand/RoCE or at least 25 GbE.",
            ],
        };
    }
    // The GPU's own PCIe link trained below its maximum, and nothing says its job waits on
    // peers: the link is the cause.
    let own_link_only = verdict.kind(Kind::Communication).is_some_and(|k| {
        let evidence = &k.scored.evidence;
        evidence
            .iter()
            .any(|e| e.signal == Signal::PcieBandwidthShare && e.strength >= 0.5)
            && !evidence
                .iter()
                .any(|e| e.signal != Signal::PcieBandwidthShare && e.strength >= 0.5)
    });
    if own_link_only {
        return Advice {
            explanation: "This GPU's PCIe link trained below its maximum generation or width: every copy to and from the GPU (each batch's upload, each read back) crawls across it while the GPU waits.",
            next_steps: &[
                "Confirm the link: nvidia-smi -q -d PCIE (Link Gen / Width, current vs max) while the GPU is busy; an idle GPU lowers its link speed on purpose, a busy one should not.",
                "Drain the node and reseat the GPU, its riser or retimer, and check the slot's BIOS settings (bifurcation, forced generation); replay and error counters (nvidia-smi -q, lspci -vv AER) point at the faulty part.",
                "Until then, move less across the link: keep batches on the GPU (DALI, GPU-side decode), upload uint8 and normalize on the GPU.",
            ],
        };
    }
    Advice {
        explanation: "This GPU waits on the other GPUs of its job (imbalance or collective communication) or on a degraded link.",
        next_steps: &[
            "Balance work across ranks (uneven shards or sequence lengths make the fast GPUs wait).",
            "Overlap gradient communication with compute (DDP bucket size, FSDP prefetch).",
            "Check NVLink/PCIe link state: a link below its generation or width slows collectives.",
        ],
    }
}
