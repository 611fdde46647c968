//! **contention**: something else takes the resources the job needs: other processes on the
//! GPU, CPUs others hold, CPU-quota throttling, a remote NUMA node, hypervisor steal.
//!
//! Evidence: two or more processes each doing a real share of the GPU's work (per-process SM
//! samples), scored by the GPU time the others take; without per-process utilization, other
//! jobs on the GPU (a fact when every owner is known, a hint when not); while the GPU waits
//! and the job's threads wait for a CPU: cgroup throttling, CPU used by others on the job's
//! CPUs, steal, placement across NUMA nodes. The busiest processes outside the job are named
//! beside it. Its cost is the busy time other processes' work took, plus the idle time the
//! job's CPU side (the loop's Python, the loader's workers) spent waiting for a CPU beyond
//! what its own threads would have made it wait on its CPUs alone. What the job would want
//! alone is the cores it ran plus the waits of threads with work of their own: every
//! worker's (a worker behind its loop always has a batch to make), the loop threads' only in
//! the share of samples the main thread runs its own Python (a thread woken from its wait for
//! the loader or the GPU waits only because the CPUs are taken). Threads runnable because
//! they are behind make that demand look larger than it is, and hogs are what put them
//! behind: where even the job's CPU work at the pace its GPU could keep (its share of its
//! CPUs over the GPU's busy share) fits its CPUs, its waits are split by who holds the CPUs
//! (others' share of the busy ones). `contention_ddp_straggler`'s rank 1 (two workers behind
//! hogs on one CPU) read data_cpu 0.21 against contention 0.16 before (the truth: contention
//! 0.30, data_cpu 0.12); now contention 0.42 against data_cpu 0.17 (the truth that run: 0.42
//! and 0.20).
//!
//! Near misses: the job's own processes time-sharing one GPU are contention with their own
//! advice (one rank per GPU); a helper holding a context (a worker that touched CUDA, a
//! monitoring agent) is not a sharer; a loader blocked on storage on a steal-heavy VM is
//! data_io.

use super::rule::{name_culprits, starved, Rule};
use super::{Advice, KindSpec, Phase, Premise};
use crate::analysis::score::{high, high_ratio, CERTAIN};
use crate::analysis::{GpuVerdict, Kind, KindScore, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::{Activity, Signal};

pub(super) const SPEC: KindSpec = KindSpec {
    phase: Phase::Idle { premise },
    on_idle_gpu: false,
    wants_culprits: true,
    first: false,
    score,
    advice,
};

/// The CPU side the job waits on: the loop's Python, or its loader, whichever it was seen in
/// more; the premise holds in both together.
fn premise(w: &WindowFigures, _: &Thresholds) -> Premise {
    let share = |a| w.stack_share(a).unwrap_or(0.0);
    let (loader, python) = (share(Activity::DataLoader), share(Activity::Python));
    let (signal, activity) = if python > loader {
        (Signal::MainThreadInPython, Activity::Python)
    } else {
        (Signal::MainThreadWaitsForLoader, Activity::DataLoader)
    };
    Premise {
        signal,
        activity,
        share: loader + python,
    }
}

/// Other jobs on the same GPU compete whether or not it waits: the sharing fact and its score.
fn sharing(rule: &mut Rule, w: &WindowFigures, t: &Thresholds) -> Option<f64> {
    let sharing = w.sharing.as_ref()?;
    // Processes of one job (one pod, container, Slurm job or process tree) are one user of
    // the GPU, not contention.
    let (score, signal, value, detail) = match sharing.working {
        // Per-process work is known: two or more processes each doing a real share of the
        // GPU's work time-share it, whatever their parentage (one job's own processes too:
        // one rank per GPU is the advice then). A helper holding a context is not a sharer.
        Some(working) => {
            let signal = if sharing.working_jobs == Some(1) {
                Signal::OwnProcessesShareGpu
            } else {
                Signal::OtherJobsOnGpu
            };
            // Certain that it is shared; as decisive as the GPU time the others take (0.5 at
            // `lost_share_high`, 1.0 at twice that).
            let taken = w.busy.unwrap_or(0.0) * (1.0 - sharing.main_work_share.unwrap_or(1.0));
            let score = if working >= 2 {
                high(taken, t.lost_share_high)
            } else {
                0.0
            };
            let value = f64::from(working.saturating_sub(1));
            (score, signal, value, sharing.working_others.join("; "))
        }
        None => {
            let (score, signal) = match sharing.independent_jobs {
                // Every process's owner is known: another job on the GPU is a fact.
                Some(jobs) if jobs >= 2 => {
                    (CERTAIN + 0.05 * f64::from(jobs - 2), Signal::OtherJobsOnGpu)
                }
                Some(_) => (0.0, Signal::OtherJobsOnGpu),
                // Owners unknown: several processes are only a hint, scored at the threshold.
                None if sharing.processes >= 2.0 => {
                    ((0.25 * sharing.processes).min(1.0), Signal::ProcessesOnGpu)
                }
                None => (0.0, Signal::ProcessesOnGpu),
            };
            let value = sharing
                .independent_jobs
                .map_or(sharing.processes, |jobs| f64::from(jobs.saturating_sub(1)));
            (score, signal, value, sharing.others.join("; "))
        }
    };
    rule.fact(signal, value, score.min(1.0), detail);
    Some(score.min(1.0))
}

fn score(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gate = starved(&mut rule, w, t);
    let sharing = sharing(&mut rule, w, t);
    let host_side = [
        rule.alternative(
            Signal::CgroupThrottled,
            w.cgroup_throttled,
            t.cgroup_throttled_high,
            high_ratio,
        ),
        rule.alternative(Signal::OtherCpu, w.other_cpu, t.other_cpu_high, high_ratio),
        rule.alternative(Signal::Steal, w.steal, t.steal_high, high_ratio),
        // Placement across NUMA nodes slows host-device copies but rarely decides a case
        // alone: a whole window of it scores just past the entry score.
        w.numa_mismatch.map(|share| {
            let score = 0.6 * share;
            rule.fact(Signal::NumaMismatch, share, score, String::new());
            score
        }),
    ];
    // Host-side competition only matters while the GPU waits, and, where the job's run-queue
    // delay is known, while its threads wait for a CPU: a loader blocked on storage on a
    // steal-heavy VM is data_io, not contention.
    let wants_cpu = rule
        .alternative(Signal::CpuWait, w.cpu_wait, t.cpu_wait_high, high)
        .unwrap_or(1.0);
    let host = host_side
        .iter()
        .flatten()
        .fold(0.0, |a: f64, b| a.max(*b))
        .min(gate)
        .min(wants_cpu);
    // Who else takes the CPUs: named with the strength of the host-side case.
    name_culprits(
        &mut rule,
        Signal::BusiestCpuProcesses,
        w,
        host,
        |c| &c.by_cpu,
        |p| format!("{:.2} cores", p.cpu_cores),
    );
    let known = sharing.is_some() || host_side.iter().any(Option::is_some);
    let unknown = rule.unknown() || !known;
    KindScore {
        kind: Kind::Contention,
        score: (!unknown).then(|| sharing.unwrap_or(0.0).max(host)),
        evidence: rule.evidence,
    }
}

fn advice(verdict: &GpuVerdict) -> Advice {
    let own_sharers = verdict.kind(Kind::Contention).is_some_and(|k| {
        k.scored
            .evidence
            .iter()
            .any(|e| e.signal == Signal::OwnProcessesShareGpu && e.strength >= 0.5)
    });
    if own_sharers {
        return Advice {
            explanation: "Several processes of this job each run real work on this GPU and time-share it: each waits while the other's kernels run.",
            next_steps: &[
                "Run one rank per GPU: give each process its own device (CUDA_VISIBLE_DEVICES, LOCAL_RANK).",
                "If the processes must share, use MPS so their kernels run side by side instead of time-slicing.",
            ],
        };
    }
    Advice {
        explanation: "Something else competes for the GPU or for the CPU the job needs (other processes, CPU quota throttling, remote NUMA node, steal).",
        next_steps: &[
            "Give the job's processes the GPU to themselves (one process per GPU).",
            "Raise or remove the container's CPU limit if it is throttled.",
            "Pin the loader to the CPUs of the GPU's NUMA node (numactl, taskset, topology-aware scheduling).",
        ],
    }
}
