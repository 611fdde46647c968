//! One small function per bottleneck kind: window averages in, a score and its evidence out.
//!
//! Every measured condition scores 0.5 exactly at its threshold and 0.3 at 60 % of the way
//! from "nothing", so one enter/leave pair of scores gives every rule the same hysteresis.
//! Past the threshold it rises to 1.0 at the decisive end: twice the threshold for an
//! unbounded quantity ([`high`]), saturation for a ratio that cannot exceed 1 ([`high_ratio`]:
//! host CPU, disk utilization, a pegged thread), so a saturated resource decides the case
//! instead of hovering at the entry score. Categorical facts (two independent jobs on one GPU,
//! a PCIe link trained far below its maximum) score by how certain they make the cause, not as
//! "at threshold". A condition whose input is missing makes its rule unknown (`None`), never 0.

use super::{Evidence, Kind, KindScore, WindowFigures};
use crate::config::Analysis as Thresholds;
use crate::snapshot::{Activity, Culprits, NodeProcess};

/// How strongly `value` exceeds `threshold` ("high is bad").
pub fn high(value: f64, threshold: f64) -> f64 {
    if threshold <= 0.0 {
        return if value > 0.0 { 1.0 } else { 0.0 };
    }
    (0.5 * value / threshold).clamp(0.0, 1.0)
}

/// How strongly a ratio bounded by 1 exceeds `threshold`: as [`high`] up to the threshold,
/// then rising at least linearly to 1.0 at saturation (a ratio of 1), which [`high`] alone
/// could never reach for a threshold above 0.5.
pub fn high_ratio(value: f64, threshold: f64) -> f64 {
    if value < threshold || threshold >= 1.0 {
        return high(value, threshold);
    }
    let to_saturation = 0.5 + 0.5 * (value - threshold) / (1.0 - threshold);
    to_saturation.max(high(value, threshold)).clamp(0.0, 1.0)
}

/// Score of a categorical fact that makes its cause certain.
pub const CERTAIN: f64 = 0.9;

/// How strongly a ratio in 0..1 falls below `threshold` ("low is bad").
pub fn low(value: f64, threshold: f64) -> f64 {
    if threshold >= 1.0 {
        return 1.0;
    }
    (0.5 * (1.0 - value) / (1.0 - threshold)).clamp(0.0, 1.0)
}

/// Builds a score from conditions: all of `required` must hold (minimum), each of them
/// unknown makes the kind unknown.
struct Rule {
    evidence: Vec<Evidence>,
    unknown: bool,
}

impl Rule {
    fn new() -> Self {
        Rule {
            evidence: Vec::new(),
            unknown: false,
        }
    }

    /// Records a condition and returns its strength (0 when the input is missing).
    fn condition(
        &mut self,
        name: &'static str,
        value: Option<f64>,
        threshold: f64,
        strength: fn(f64, f64) -> f64,
    ) -> f64 {
        match value {
            Some(v) => {
                let s = strength(v, threshold);
                self.evidence.push(Evidence {
                    name,
                    value: v,
                    threshold,
                    strength: s,
                    detail: String::new(),
                });
                s
            }
            None => {
                self.unknown = true;
                0.0
            }
        }
    }

    /// Like `condition` with a "high is bad" strength, but a missing input only weakens an
    /// alternative, it does not make the kind unknown (one of several signals of the same
    /// cause).
    fn alternative(
        &mut self,
        name: &'static str,
        value: Option<f64>,
        threshold: f64,
        strength: fn(f64, f64) -> f64,
    ) -> Option<f64> {
        let v = value?;
        let s = strength(v, threshold);
        self.evidence.push(Evidence {
            name,
            value: v,
            threshold,
            strength: s,
            detail: String::new(),
        });
        Some(s)
    }

    /// An alternative read from the main thread's stacks: the share of its samples in
    /// `activity` ("high is bad", against the stack-share threshold), quoting the frame seen
    /// most there. `None` where stacks are not read.
    fn observed(
        &mut self,
        name: &'static str,
        w: &WindowFigures,
        activity: Activity,
        t: &Thresholds,
    ) -> Option<f64> {
        let share = w.stack_share(activity)?;
        let s = high_ratio(share, t.stack_share_high);
        self.evidence.push(Evidence {
            name,
            value: share,
            threshold: t.stack_share_high,
            strength: s,
            detail: w.top_frame(activity),
        });
        Some(s)
    }

    /// Records evidence another module scored; returns the strongest.
    fn scored(&mut self, evidence: Vec<Evidence>) -> f64 {
        let strength = super::network::strongest(&evidence);
        self.evidence.extend(evidence);
        strength
    }

    /// Records a categorical fact with its score and what it names.
    fn fact(&mut self, name: &'static str, value: f64, strength: f64, detail: String) {
        self.evidence.push(Evidence {
            name,
            value,
            threshold: 1.0,
            strength,
            detail,
        });
    }

    fn done(self, kind: Kind, score: f64) -> KindScore {
        KindScore {
            kind,
            score: if self.unknown { None } else { Some(score) },
            evidence: self.evidence,
        }
    }

    /// At least one alternative had an input; otherwise the kind is unknown.
    fn any(self, kind: Kind, gate: f64, alternatives: &[Option<f64>]) -> KindScore {
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
fn starved(rule: &mut Rule, w: &WindowFigures, t: &Thresholds) -> f64 {
    rule.condition("gpu_busy", w.busy, t.gpu_starved_below, low)
}

/// Storage cannot feed the input pipeline.
pub fn data_io(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gate = starved(&mut rule, w, t);
    let alternatives = [
        rule.alternative("disk_util", w.disk_util, t.disk_util_high, high_ratio),
        rule.alternative("iowait", w.iowait, t.iowait_high, high_ratio),
        rule.alternative("psi_io", w.psi_io, t.psi_io_high, high_ratio),
        rule.alternative("workers_blkio", w.workers_blkio, t.workers_blkio_high, high),
        // A worker in D state on average, against one worker: a plain count.
        rule.alternative("workers_in_io_wait", w.workers_disk_wait, 1.0, high),
        // Seen in its stacks, a loop waiting for workers that are not computing waits for
        // their data, even when no disk figure shows it (network storage, one slow file).
        loader_wait(&mut rule, w, t, false),
        // Input over the network: a slow NFS mount, the receive side of a link saturated.
        remote_input(&mut rule, w, t),
    ];
    // Who else reads or writes: named with the strength of the storage figures it explains.
    let storage = alternatives[..3]
        .iter()
        .flatten()
        .fold(0.0, |a: f64, b| a.max(*b));
    name_culprits(
        &mut rule,
        "busiest_disk_processes",
        w,
        storage,
        |c| &c.by_disk,
        |p| {
            format!(
                "read {}, wrote {}",
                per_second(p.read_bytes_per_second.unwrap_or(0.0)),
                per_second(p.write_bytes_per_second.unwrap_or(0.0))
            )
        },
    );
    rule.any(Kind::DataIo, gate, &alternatives)
}

/// The network evidence of input fetched over the wire, as an alternative of data_io
/// (`None` where the node's network is not read).
fn remote_input(rule: &mut Rule, w: &WindowFigures, t: &Thresholds) -> Option<f64> {
    let evidence = super::network::remote_input(w, t);
    (!evidence.is_empty()).then(|| rule.scored(evidence))
}

/// Preprocessing on the CPU is too slow.
pub fn data_cpu(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gate = starved(&mut rule, w, t);
    let alternatives = [
        rule.alternative(
            "workers_max_cpu",
            w.workers_max_cpu,
            t.worker_cpu_high,
            high_ratio,
        ),
        // The job's CPUs saturated by the job itself; node-wide CPU where the job's share of
        // its CPUs is unknown. CPUs saturated by others are contention, not this.
        match w.own_cpu {
            Some(own) => rule.alternative("own_cpu", Some(own), t.host_cpu_high, high_ratio),
            None => rule.alternative("host_cpu", w.host_cpu, t.host_cpu_high, high_ratio),
        },
        // Seen in its stacks, a loop waiting for workers that compute waits for their
        // preprocessing, even when no worker is pegged.
        loader_wait(&mut rule, w, t, true),
    ];
    rule.any(Kind::DataCpu, gate, &alternatives)
}

/// Bytes per second as people read them (`310 MB/s`).
pub(super) fn per_second(bytes: f64) -> String {
    match bytes {
        b if b >= 1e9 => format!("{:.1} GB/s", b / 1e9),
        b if b >= 1e6 => format!("{:.0} MB/s", b / 1e6),
        b if b >= 1e3 => format!("{:.0} kB/s", b / 1e3),
        b => format!("{b:.0} B/s"),
    }
}

/// Names the node's busiest processes outside the GPU process trees (at most three of
/// `list`) as one fact, scored `strength`: the figures they explain.
fn name_culprits(
    rule: &mut Rule,
    name: &'static str,
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
    rule.fact(name, processes.len() as f64, strength, named.join("; "));
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
fn loader_wait(rule: &mut Rule, w: &WindowFigures, t: &Thresholds, computing: bool) -> Option<f64> {
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
        .observed("main_thread_waits_for_loader", w, Activity::DataLoader, t)?
        .min(LOADER_WAIT_CAP);
    if let Some(evidence) = rule.evidence.last_mut() {
        evidence.strength = strength;
    }
    Some(strength)
}

/// The main training thread is the bottleneck.
pub fn host_bound(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gate = starved(&mut rule, w, t);
    let thread = rule.condition(
        "busiest_thread",
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
            rule.evidence.push(Evidence {
                name: "main_thread_in_gpu_sync",
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

/// Below this busy fraction over the window a GPU runs no work at all: whatever holds it is
/// idle, not waiting on a pipeline.
pub const IDLE_BUSY: f64 = 0.02;

/// CPU and GPU wait on each other: the GPU starves while nothing on the host is busy. Steps
/// shorter than NVML's 1/6 s sample leave no idle sample, so bursts (`idle_share`) are
/// evidence, not a requirement.
pub fn sync_stall(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let mut gate = starved(&mut rule, w, t);
    // A GPU that runs nothing is not stalled between bursts: its job is idle.
    if w.busy.is_some_and(|busy| busy < IDLE_BUSY) {
        rule.fact("gpu_runs_no_work", 1.0, 0.0, String::new());
        gate = 0.0;
    }
    rule.alternative("idle_share", w.idle_share, t.bursty_idle_share, high);
    // Seen in its stacks, a main thread mostly synchronizing waits for the GPU however busy
    // it looks: with CUDA's spin wait it holds its core (and a share of the host's CPU).
    let observed = rule
        .observed("main_thread_in_gpu_sync", w, Activity::GpuSync, t)
        .unwrap_or(0.0);
    let quiet = [
        rule.condition("disk_util", w.disk_util, t.quiet_below, low),
        rule.condition("busiest_thread", w.busiest_thread, t.quiet_below, low)
            .max(observed),
        rule.condition("workers_max_cpu", w.workers_max_cpu, t.quiet_below, low),
        rule.condition("host_cpu", w.host_cpu, t.quiet_below, low)
            .max(observed),
    ];
    // Input arriving slowly over the network is a side that is busy waiting: not "neither".
    let remote = super::network::strongest(&super::network::remote_input(w, t));
    let score = quiet.iter().fold(gate.min(1.0 - remote), |s, q| s.min(*q));
    rule.done(Kind::SyncStall, score)
}

/// "Utilization" high while the SMs are mostly empty.
pub fn kernel_efficiency(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let util = rule.condition("gpu_busy", w.busy, t.kernel_util_high, high_ratio);
    let sm = rule.condition("sm_activity", w.sm_activity, t.sm_activity_low, low);
    rule.done(Kind::KernelEfficiency, util.min(sm))
}

/// Device memory near full.
pub fn memory_pressure(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    // The peak of the window: memory churning between 60 % and 96 % runs out at its peaks
    // (the caching allocator frees and retries there), whatever its mean.
    let used = rule.condition(
        "memory_used_peak",
        w.memory_used_peak,
        t.memory_used_high,
        high_ratio,
    );
    rule.done(Kind::MemoryPressure, used)
}

/// Waiting on the other GPUs of the job, or on a degraded link.
pub fn communication(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gap = rule
        .alternative("job_busy_gap", w.job_gap, t.job_imbalance, high)
        .unwrap_or(0.0);
    // A rank seen mostly in a collective waits for its peers, whichever GPU looks busier
    // (NCCL's kernels spin on the waiting GPU), and whether or not the busy gap can be taken
    // (only within a pod, a Slurm job or a process on several GPUs): the frame itself says
    // the wait is communication.
    let collective = rule
        .observed("main_thread_in_collective", w, Activity::Collective, t)
        .unwrap_or(0.0);
    let degraded_while_busy = match (w.pcie_bandwidth_share, w.busy) {
        // A link trained below its maximum while the GPU works (idle links drop on purpose):
        // the less bandwidth it has left, the surer the cause. Half the bandwidth scores
        // 0.75, a gen 2 x4 link of a gen 5 x16 slot (3 % left) 0.98.
        (Some(share), Some(busy)) if share < 1.0 && busy > 0.5 => {
            let score = 0.5 + 0.5 * (1.0 - share);
            rule.fact(
                "pcie_bandwidth_share",
                share,
                score,
                "PCIe link trained below its maximum generation or width".into(),
            );
            score
        }
        _ => 0.0,
    };
    // Collectives crossing a saturated link while the GPU waits.
    let starving = w.busy.map_or(0.0, |b| low(b, t.gpu_starved_below));
    let link = rule.scored(super::network::inter_node(w, t)).min(starving);
    rule.done(
        Kind::Communication,
        gap.max(degraded_while_busy).max(collective).max(link),
    )
}

/// Something else takes the resources.
pub fn contention(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let gate = starved(&mut rule, w, t);
    // Other jobs on the same GPU compete whether or not it waits. Processes of one job (one
    // pod, container, Slurm job or process tree) are one user of the GPU, not contention.
    let sharing = w.sharing.as_ref().map(|sharing| {
        let (score, name, value, detail) = match sharing.working {
            // Per-process work is known: two or more processes each doing a real share of
            // the GPU's work time-share it, whatever their parentage (one job's own processes
            // too: one rank per GPU is the advice then). A helper holding a context is not a
            // sharer.
            Some(working) => {
                let name = if sharing.working_jobs == Some(1) {
                    "own_processes_share_gpu"
                } else {
                    "other_jobs_on_gpu"
                };
                // Certain that it is shared; as decisive as the GPU time the others take
                // (0.5 at `lost_share_high`, 1.0 at twice that).
                let taken = w.busy.unwrap_or(0.0) * (1.0 - sharing.main_work_share.unwrap_or(1.0));
                let score = if working >= 2 {
                    high(taken, t.lost_share_high)
                } else {
                    0.0
                };
                let value = f64::from(working.saturating_sub(1));
                (score, name, value, sharing.working_others.join("; "))
            }
            None => {
                let (score, name) = match sharing.independent_jobs {
                    // Every process's owner is known: another job on the GPU is a fact.
                    Some(jobs) if jobs >= 2 => {
                        (CERTAIN + 0.05 * f64::from(jobs - 2), "other_jobs_on_gpu")
                    }
                    Some(_) => (0.0, "other_jobs_on_gpu"),
                    // Owners unknown: several processes are only a hint, scored at the
                    // threshold.
                    None if sharing.processes >= 2.0 => {
                        ((0.25 * sharing.processes).min(1.0), "processes_on_gpu")
                    }
                    None => (0.0, "processes_on_gpu"),
                };
                let value = sharing
                    .independent_jobs
                    .map_or(sharing.processes, |jobs| f64::from(jobs.saturating_sub(1)));
                (score, name, value, sharing.others.join("; "))
            }
        };
        rule.fact(name, value, score.min(1.0), detail);
        score.min(1.0)
    });
    let host_side = [
        rule.alternative(
            "cgroup_throttled",
            w.cgroup_throttled,
            t.cgroup_throttled_high,
            high_ratio,
        ),
        rule.alternative("other_cpu", w.other_cpu, t.other_cpu_high, high_ratio),
        rule.alternative("steal", w.steal, t.steal_high, high_ratio),
        // Placement across NUMA nodes slows host-device copies but rarely decides a case
        // alone: a whole window of it scores just past the entry score.
        w.numa_mismatch_share.map(|share| {
            let score = 0.6 * share;
            rule.fact("numa_mismatch", share, score, String::new());
            score
        }),
    ];
    // Host-side competition only matters while the GPU waits, and, where the job's run-queue
    // delay is known, while its threads wait for a CPU: a loader blocked on storage on a
    // steal-heavy VM is data_io, not contention.
    let wants_cpu = rule
        .alternative("cpu_wait", w.cpu_wait, t.cpu_wait_high, high)
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
        "busiest_cpu_processes",
        w,
        host,
        |c| &c.by_cpu,
        |p| format!("{:.2} cores", p.cpu_cores),
    );
    let known = sharing.is_some() || host_side.iter().any(Option::is_some);
    let unknown = rule.unknown || !known;
    KindScore {
        kind: Kind::Contention,
        score: (!unknown).then(|| sharing.unwrap_or(0.0).max(host)),
        evidence: rule.evidence,
    }
}

/// Clocks held down.
pub fn throttling(w: &WindowFigures, t: &Thresholds) -> KindScore {
    let mut rule = Rule::new();
    let reasons = rule.alternative(
        "throttled_share",
        w.throttled_share,
        t.throttled_share_high,
        high_ratio,
    );
    let heat = w.thermal_margin.map(|margin| {
        // Closer than the margin to the slowdown temperature scores past 0.5.
        let s = if margin <= 0.0 {
            1.0
        } else {
            (0.5 * t.thermal_margin_celsius / margin).clamp(0.0, 1.0)
        };
        rule.evidence.push(Evidence {
            name: "thermal_margin_celsius",
            value: margin,
            threshold: t.thermal_margin_celsius,
            strength: s,
            detail: String::new(),
        });
        s
    });
    rule.any(Kind::Throttling, 1.0, &[reasons, heat])
}

/// The device itself is failing.
pub fn hardware(w: &WindowFigures) -> KindScore {
    let mut rule = Rule::new();
    let lost = if w.up { 0.0 } else { 1.0 };
    rule.fact("gpu_not_answering", lost, lost, String::new());
    let errors = w
        .new_hardware_errors
        .map_or(0.0, |n| if n > 0 { 1.0 } else { 0.0 });
    if let Some(n) = w.new_hardware_errors {
        rule.fact(
            "new_xid_or_uncorrected_ecc",
            n as f64,
            errors,
            String::new(),
        );
    }
    let remap = if w.remap_trouble { 1.0 } else { 0.0 };
    rule.fact("row_remap_pending_or_failed", remap, remap, String::new());
    rule.done(Kind::Hardware, lost.max(errors).max(remap))
}

/// Every kind's score for one GPU's window.
pub fn score_all(w: &WindowFigures, t: &Thresholds) -> Vec<KindScore> {
    vec![
        data_io(w, t),
        data_cpu(w, t),
        host_bound(w, t),
        sync_stall(w, t),
        kernel_efficiency(w, t),
        memory_pressure(w, t),
        communication(w, t),
        contention(w, t),
        throttling(w, t),
        hardware(w),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strengths_are_half_at_the_threshold_and_point_three_at_sixty_percent() {
        assert_eq!(high(0.8, 0.8), 0.5);
        assert_eq!(high(1.6, 0.8), 1.0);
        assert!((high(0.48, 0.8) - 0.3).abs() < 1e-12);
        assert_eq!(low(0.7, 0.7), 0.5);
        assert_eq!(low(0.0, 0.7), 1.0);
        assert!((low(0.82, 0.7) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn bounded_ratios_reach_a_decisive_score_at_saturation() {
        // Below the threshold: exactly as `high` (same hysteresis).
        assert_eq!(high_ratio(0.45, 0.9), high(0.45, 0.9));
        assert_eq!(high_ratio(0.9, 0.9), 0.5);
        assert!((high_ratio(0.95, 0.9) - 0.75).abs() < 1e-12);
        assert_eq!(high_ratio(1.0, 0.9), 1.0);
        // `high` alone could never pass 0.56 for a ratio with a 0.9 threshold.
        assert!(high(1.0, 0.9) < 0.56);
        // Small thresholds keep `high`'s doubling where it comes first.
        assert_eq!(high_ratio(0.2, 0.1), 1.0);
    }
}
