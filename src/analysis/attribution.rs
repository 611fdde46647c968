//! Where the lost GPU time went: the window's idle time split by cause, and the busy time that
//! was wasted or went to other processes. Pure: window figures in, shares of the window out.
//!
//! **Observed** (the main thread's stacks hold at least `stack_samples_min` samples):
//!
//! 1. Idle time is charged to what the main thread was doing while the GPU idled. The GPU
//!    works while the thread waits for it (synchronizing); the rest of its busy time overlaps
//!    the thread's other activities evenly, so the idle time falls in those in proportion.
//! 2. Waiting for the loader → the loader side (3); in a collective → communication; running
//!    Python → sync_stall for the part that follows a sync (the sync drained the queue: all of
//!    it where the thread waits for the GPU at least as long as it runs Python, else in that
//!    proportion), host_bound for the rest (its time waiting for a CPU that others hold →
//!    contention); anything else (sleeping elsewhere) → unexplained.
//! 3. The loader side, by what the workers' time went to. Their CPU side (computing, and
//!    waiting runnable for a CPU) is limited by the share of their CPUs they get: where they
//!    wait for CPUs, the share others hold is contention. The rest: computing in user space
//!    (decoding) and the waits after preemption → data_cpu; computing in the kernel (reads,
//!    receives), the waits after blocking (voluntary switches), blocked (D state) or sleeping →
//!    data_io, from local storage when the node's storage shows the load, else from a remote
//!    source (sockets, network or FUSE filesystems). Without workers the main thread loads its
//!    own data: host_bound when it computes, data_io when it waits.
//!
//! **Inferred** (no stacks, or too few samples): the idle time is split over the pipeline
//! kinds in proportion to their counter rules' scores at or above the leave score, and is
//! unexplained where none reaches it.
//!
//! **Busy time**, either way, each part capped by the busy time left: the share of the GPU's
//! work other processes did (time-sharing) → contention; a rank waiting in a collective while
//! its GPU spins in the collective's kernels → communication (at most the busy time its SMs
//! sat empty: a spinning collective leaves them so; beside peers whose stacks are seen, at
//! most its excess over the least busy of them: [`super::ranks`]); other SMs empty while the
//! GPU is busy (GPM) → kernel_efficiency; clocks held below their maximum by a limiting
//! reason → throttling.

use super::rules::IDLE_BUSY;
use super::{Basis, Cause, InputSource, Kind, KindScore, LostTime, WindowFigures};
use crate::config::Analysis as Thresholds;
use crate::snapshot::{Activity, ProcessStacks};

/// The kinds that explain idle time (the pipeline around the GPU).
pub const PIPELINE: [Kind; 6] = [
    Kind::DataIo,
    Kind::DataCpu,
    Kind::HostBound,
    Kind::SyncStall,
    Kind::Communication,
    Kind::Contention,
];

/// The split of one GPU's window; `None` while its busy fraction is unknown. `inferred` are
/// the counter rules' scores, used where the stacks cannot decide.
pub fn lost_time(w: &WindowFigures, inferred: &[KindScore], t: &Thresholds) -> Option<LostTime> {
    let busy = w.busy?.clamp(0.0, 1.0);
    let mut lost = LostTime {
        idle: 1.0 - busy,
        ..LostTime::default()
    };
    let in_collective_while_busy = match observed_stacks(w, t) {
        Some(stacks) => {
            lost.basis = Basis::Observed;
            split_observed(&mut lost, w, stacks, t)
        }
        None => {
            split_inferred(&mut lost, w, inferred, t);
            0.0
        }
    };
    split_busy(&mut lost, w, busy, in_collective_while_busy);
    Some(lost)
}

/// The window's split from one split per tick (each tick's time attributed by that tick's
/// state: a cause that starts mid-window is not diluted by the figures from before it).
/// `window` supplies what describes the window as a whole: the reasons and the input source.
pub fn average(ticks: &[&LostTime], window: LostTime) -> LostTime {
    if ticks.is_empty() {
        return window;
    }
    let n = ticks.len() as f64;
    let mut shares = [0.0; 9];
    for tick in ticks {
        for (sum, share) in shares.iter_mut().zip(tick.shares) {
            *sum += share / n;
        }
    }
    let observed = ticks.iter().filter(|t| t.basis == Basis::Observed).count();
    LostTime {
        basis: if 2 * observed > ticks.len() {
            Basis::Observed
        } else {
            Basis::Inferred
        },
        idle: ticks.iter().map(|t| t.idle).sum::<f64>() / n,
        shares,
        collective_busy: ticks.iter().map(|t| t.collective_busy).sum::<f64>() / n,
        input: window.input.or(ticks.iter().rev().find_map(|t| t.input)),
        reasons: window.reasons,
    }
}

/// Whether the main thread's stacks hold enough samples to decide the split.
pub fn observes(w: &WindowFigures, t: &Thresholds) -> bool {
    observed_stacks(w, t).is_some()
}

/// The main thread's stacks where they hold enough samples to decide.
fn observed_stacks<'a>(w: &'a WindowFigures, t: &Thresholds) -> Option<&'a ProcessStacks> {
    w.stacks
        .as_ref()
        .filter(|s| f64::from(s.samples) >= t.stack_samples_min)
}

/// Share of the samples from which an activity's part is described in the reasons.
const NOTED: f64 = 0.1;

/// Adds a reason about an activity seen in `seen` of the samples, if that is worth saying.
fn note(lost: &mut LostTime, seen: f64, reason: String) {
    if seen >= NOTED {
        lost.reasons.push(reason);
    }
}

fn add(lost: &mut LostTime, cause: Cause, share: f64) {
    if let Some(i) = Cause::ALL.iter().position(|c| *c == cause) {
        lost.shares[i] += share.max(0.0);
    }
}

fn percent(share: f64) -> String {
    format!("{:.0} %", 100.0 * share)
}

/// Splits the idle time by the main thread's activities; returns the collective time it did
/// not explain (the rank waited for its peers while its GPU was busy).
fn split_observed(
    lost: &mut LostTime,
    w: &WindowFigures,
    stacks: &ProcessStacks,
    t: &Thresholds,
) -> f64 {
    let busy = 1.0 - lost.idle;
    let sync = stacks.share(Activity::GpuSync);
    let collective = stacks.share(Activity::Collective);
    let other = stacks.share(Activity::Other);
    // A loop without workers that computes its own samples runs Python when it "waits for its
    // loader" (DataLoader with num_workers=0): the loop's own work, drained syncs and all.
    let (loader, python) = {
        let (loader, python) = (
            stacks.share(Activity::DataLoader),
            stacks.share(Activity::Python),
        );
        let loads_itself =
            w.workers.unwrap_or(0.0) < 0.5 && w.busiest_thread.is_some_and(|b| b >= t.quiet_below);
        if loads_itself {
            (0.0, python + loader)
        } else {
            (loader, python)
        }
    };
    // The GPU works while the thread waits for it; the rest of its busy time overlaps the
    // thread's other activities evenly, and the idle time falls in them in that proportion.
    let sync_busy = busy.min(sync);
    let host = 1.0 - sync;
    let idle_in_host = if host > 0.0 {
        ((host - (busy - sync_busy)) / host).clamp(0.0, 1.0)
    } else {
        0.0
    };
    // Waiting for a GPU that runs none of the job's work (a queue behind others' kernels).
    add(lost, Cause::Kind(Kind::SyncStall), sync - sync_busy);
    // Python right after a sync starts on an empty queue: the sync drained it. Where the
    // thread waits for the GPU at least as long as it runs Python, the GPU is ahead at every
    // sync and every drain happens there; where Python dominates, in that proportion.
    let drained_by_sync = if python > 0.0 {
        (sync / python).min(1.0)
    } else {
        0.0
    };
    let python_idle = python * idle_in_host;
    add(
        lost,
        Cause::Kind(Kind::SyncStall),
        python_idle * drained_by_sync,
    );
    note(
        lost,
        sync,
        format!(
            "the main thread waited for the GPU (synchronizing) in {} of the samples{}",
            percent(sync),
            if drained_by_sync > 0.0 && python_idle > 0.0 {
                format!(
                    "; the GPU then idles while the loop's Python runs on an empty queue ({} of that Python)",
                    percent(drained_by_sync)
                )
            } else {
                String::new()
            }
        ),
    );
    split_python(lost, w, t, python_idle * (1.0 - drained_by_sync), python);
    split_loader(lost, w, t, loader * idle_in_host, loader);
    let communication = collective * idle_in_host;
    add(lost, Cause::Kind(Kind::Communication), communication);
    note(
        lost,
        collective,
        format!(
            "the main thread waited for its peers in collectives in {} of the samples",
            percent(collective)
        ),
    );
    add(lost, Cause::Unexplained, other * idle_in_host);
    (collective - communication).max(0.0)
}

/// The share of the job's CPU-side time that others take: none while the job's threads get a
/// CPU when they want one (fewer than `cpu_wait_high` waiting on average: a job that is itself
/// idle never loses its observation to the node's background); else the share of the job's
/// CPUs' busy time that others hold; all of it under CPU-quota throttling.
fn cpu_taken_by_others(w: &WindowFigures, t: &Thresholds) -> f64 {
    if w.cgroup_throttled
        .is_some_and(|c| c >= t.cgroup_throttled_high)
    {
        return 1.0;
    }
    if !w.cpu_wait.is_some_and(|q| q >= t.cpu_wait_high) {
        return 0.0;
    }
    match (w.own_cpu, w.other_cpu) {
        (Some(own), Some(other)) if own + other > 0.0 => other / (own + other),
        _ => 0.0,
    }
}

/// Whether the node's storage shows load: half of any storage threshold.
fn storage_busy(w: &WindowFigures, t: &Thresholds) -> Option<bool> {
    let figures = [
        w.disk_util.map(|u| u >= 0.5 * t.disk_util_high),
        w.iowait.map(|u| u >= 0.5 * t.iowait_high),
        w.psi_io.map(|u| u >= 0.5 * t.psi_io_high),
    ];
    figures.iter().flatten().copied().reduce(|a, b| a || b)
}

/// The idle time the loop spent waiting for its loader (`share` of the window, `seen` of the
/// main thread's samples), by what the workers did.
fn split_loader(lost: &mut LostTime, w: &WindowFigures, t: &Thresholds, share: f64, seen: f64) {
    if seen <= 0.0 {
        return;
    }
    let workers = w.workers.unwrap_or(0.0);
    if workers < 0.5 {
        // The main thread fetches its own samples (num_workers=0): it computes or it waits.
        if w.busiest_thread.is_some_and(|b| b >= t.quiet_below) {
            add(lost, Cause::Kind(Kind::HostBound), share);
            let reason = format!(
                "the main thread loads its own data (no loader workers) in {} of the samples, computing",
                percent(seen)
            );
            note(lost, seen, reason);
        } else {
            let who = "the main thread (no loader workers)";
            add_input(lost, w, t, (share, seen), (1.0, 0.0), who);
        }
        return;
    }
    let per_worker = |v: Option<f64>| v.unwrap_or(0.0) / workers;
    let computing = per_worker(w.workers_cpu).clamp(0.0, 1.0);
    // CPU in the kernel is the I/O side of the work (reads, receives), not decoding.
    let in_kernel = per_worker(w.workers_system_cpu).clamp(0.0, computing);
    let wait_cpu = per_worker(w.cpu_wait).clamp(0.0, 1.0 - computing);
    let blocked_workers = match (w.workers_blkio, w.workers_disk_wait) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let blocked = per_worker(blocked_workers).clamp(0.0, 1.0 - computing - wait_cpu);
    let sleeping = 1.0 - computing - wait_cpu - blocked;
    // The workers' CPU side (computing and waiting for a CPU) is limited by the share of
    // their CPUs they get: others' share of it is contention. The job's own part splits into
    // reading (CPU in the kernel, and the waits after blocking: voluntary switches) and
    // decoding (CPU in user space, and the waits after preemption).
    let others = cpu_taken_by_others(w, t);
    let own = 1.0 - others;
    let after_blocking = w.workers_voluntary_switches.unwrap_or(if computing > 0.0 {
        in_kernel / computing
    } else {
        0.5
    });
    let decoding = own * (computing - in_kernel + wait_cpu * (1.0 - after_blocking));
    let reading = own * (in_kernel + wait_cpu * after_blocking) + blocked + sleeping;
    let contended = (computing + wait_cpu) * others;
    add(lost, Cause::Kind(Kind::DataCpu), share * decoding);
    add(lost, Cause::Kind(Kind::Contention), share * contended);
    note(lost, seen, format!(
        "the main thread waited for its loader in {} of the samples; its {:.0} workers computed {} ({} in system calls), waited for a CPU {}{}, were blocked {} and slept {} of the time",
        percent(seen),
        workers,
        percent(computing),
        percent(in_kernel),
        percent(wait_cpu),
        if others > 0.0 {
            format!(" (others hold {} of their CPUs)", percent(others))
        } else {
            String::new()
        },
        percent(blocked),
        percent(sleeping)
    ));
    let waiting = (share * reading, seen);
    add_input(lost, w, t, waiting, (blocked, sleeping), "the workers");
}

/// Idle time spent waiting for input (`share`, the loader wait `seen` in that share of the
/// samples): data_io, from local storage when the readers are `blocked` (uninterruptible, as
/// a read from a disk blocks) at least as long as they sleep and the node's storage shows the
/// load (or has no figures). Readers that mostly sleep wait on sockets or pipes: the node's
/// disk load, if any, is someone else's. Readers blocked while the disks are quiet wait in a
/// network or FUSE filesystem (their requests block uninterruptibly too).
fn add_input(
    lost: &mut LostTime,
    w: &WindowFigures,
    t: &Thresholds,
    (share, seen): (f64, f64),
    (blocked, sleeping): (f64, f64),
    who: &str,
) {
    if share <= 0.0 {
        return;
    }
    add(lost, Cause::Kind(Kind::DataIo), share);
    let local = blocked >= sleeping && storage_busy(w, t).unwrap_or(true);
    lost.input = Some(if local {
        InputSource::LocalStorage
    } else {
        InputSource::Remote
    });
    note(
        lost,
        seen,
        format!(
            "input read by {who} comes {}",
            if local {
                "from local storage (the node's disks are loaded)".to_string()
            } else {
                format!(
                    "from a remote source: the node's disks are quiet (a socket, a network or FUSE filesystem, an object store){}",
                    remote_detail(w)
                )
            }
        ),
    );
}

/// Where remote input comes from, as the network figures name it: the NFS mount read most
/// (with its round trip), else the network or FUSE filesystems the job has mounted, and the
/// job's ingress.
fn remote_detail(w: &WindowFigures) -> String {
    if let Some(m) = w.mount.as_ref().filter(|m| m.requests_per_second >= 1.0) {
        return format!(
            "; NFS {} ({}) answers READs in {:.1} ms",
            m.mount_point,
            m.device,
            1000.0 * m.read_rtt_seconds
        );
    }
    let mut detail = String::new();
    if !w.network_mounts.is_empty() {
        detail += &format!(
            "; the job has network or FUSE filesystems mounted: {}",
            w.network_mounts.join(", ")
        );
    }
    if let Some(ingress) = w.job_ingress.filter(|i| *i > 0.0) {
        detail += &format!(
            "; {} received {}",
            super::network::job_namespace(w),
            super::rules::per_second(ingress)
        );
    }
    detail
}

/// The idle time the main thread spent in Python: host_bound, except the part it spent
/// waiting for a CPU held by others (seen running less than it was seen active).
fn split_python(lost: &mut LostTime, w: &WindowFigures, t: &Thresholds, share: f64, seen: f64) {
    if seen <= 0.0 {
        return;
    }
    let waiting = w
        .busiest_thread
        .map_or(0.0, |cpu| ((seen - cpu) / seen).clamp(0.0, 1.0));
    let contended = share * waiting * cpu_taken_by_others(w, t);
    add(lost, Cause::Kind(Kind::Contention), contended);
    add(lost, Cause::Kind(Kind::HostBound), share - contended);
    note(
        lost,
        seen,
        format!(
            "the main thread ran the loop's own Python in {} of the samples{}",
            percent(seen),
            if contended > 0.0 {
                format!(
                    ", waiting for CPUs others hold {} of that time",
                    percent(contended / share)
                )
            } else {
                String::new()
            }
        ),
    );
}

/// Without stacks: the idle time in proportion to the counter rules' scores.
fn split_inferred(lost: &mut LostTime, w: &WindowFigures, inferred: &[KindScore], t: &Thresholds) {
    let weights: Vec<(Kind, f64)> = inferred
        .iter()
        .filter(|k| PIPELINE.contains(&k.kind))
        .filter_map(|k| Some((k.kind, k.score.filter(|s| *s >= t.leave_score)?)))
        .collect();
    let total: f64 = weights.iter().map(|(_, s)| s).sum();
    let idle = lost.idle;
    if total <= 0.0 || w.busy.is_some_and(|b| b < IDLE_BUSY) {
        add(lost, Cause::Unexplained, idle);
        return;
    }
    for (kind, score) in &weights {
        add(lost, Cause::Kind(*kind), idle * score / total);
    }
    if weights.iter().any(|(k, _)| *k == Kind::DataIo) {
        lost.input = Some(match storage_busy(w, t) {
            Some(false) => InputSource::Remote,
            _ => InputSource::LocalStorage,
        });
    }
    lost.reasons.push(
        "no Python stacks to observe: the idle time is split by the counter rules' scores".into(),
    );
}

/// Busy time that did no useful work for the main job, each part capped by what is left.
fn split_busy(lost: &mut LostTime, w: &WindowFigures, busy: f64, in_collective: f64) {
    let mut left = busy;
    let mut take = |lost: &mut LostTime, cause: Kind, share: f64| {
        let taken = share.clamp(0.0, left);
        left -= taken;
        add(lost, Cause::Kind(cause), taken);
        taken
    };
    let shared = main_work_share(w);
    if let Some(main) = shared {
        take(lost, Kind::Contention, busy * (1.0 - main));
        lost.reasons.push(format!(
            "other processes did {} of the GPU's work",
            percent(1.0 - main)
        ));
    }
    // A GPU spinning in a collective's kernels leaves its SMs nearly empty (NCCL runs on a
    // few channels), so the busy time a collective explains is at most the time the SMs sat
    // empty: a rank held in a collective while its GPU still runs its queued compute (a full
    // launch queue, a host-side barrier) is not waiting on its GPU.
    let empty_sms = w.sm_activity.map(|sm| (busy - sm).max(0.0));
    let seen = empty_sms.map_or(in_collective, |empty| in_collective.min(empty));
    // Its peers' GPUs as busy as its own: the rank's wait was theirs, not its GPU's.
    let cap = w.collective_busy_cap.unwrap_or(f64::INFINITY);
    if seen - cap >= NOTED * busy {
        lost.reasons.push(format!(
            "the main thread waited in collectives while its GPU ran its queued work: its peers' GPUs were as busy, so collectives cost it at most {} of the time, not {}",
            percent(cap),
            percent(seen)
        ));
    }
    let collective = take(lost, Kind::Communication, seen.min(cap));
    lost.collective_busy = collective;
    // The device's SM activity mixes every process's kernels: the main job's empty SMs are
    // its share of the empty time (its share of the work), not the other jobs' (theirs is
    // theirs, and their time is contention already). Those a collective left empty are its.
    let empty = empty_sms.map_or(0.0, |empty| {
        let own = (empty - collective) * shared.unwrap_or(1.0);
        take(lost, Kind::KernelEfficiency, own)
    });
    // Clocks held down slow the useful busy time that is left by the clock's shortfall.
    if let (Some(throttled), Some(clock)) = (w.throttled_share, w.throttled_clock_ratio) {
        let useful = busy - collective - empty - shared.map_or(0.0, |m| busy * (1.0 - m));
        take(lost, Kind::Throttling, throttled * useful * (1.0 - clock));
    }
}

/// The main job's share of the GPU's work where other processes do a real share of it.
pub fn main_work_share(w: &WindowFigures) -> Option<f64> {
    w.sharing
        .as_ref()
        .filter(|s| s.working.is_some_and(|n| n >= 2))
        .and_then(|s| s.main_work_share)
}

/// Evidence that stands whatever the stacks show: facts about the device, its link, who runs
/// work on it and where the job is placed.
const STANDING: [&str; 5] = [
    "pcie_bandwidth_share",
    "other_jobs_on_gpu",
    "own_processes_share_gpu",
    "processes_on_gpu",
    "numa_mismatch",
];

/// Evidence that names where the cost went (who else takes the disk or the CPUs, the mount
/// or link the input or the collectives cross) without deciding whether the kind is active.
const SUPPORTING: [&str; 7] = [
    "busiest_cpu_processes",
    "busiest_disk_processes",
    "busiest_mount",
    "job_ingress",
    "network_mounts",
    "busiest_link",
    "slow_link",
];

/// What the main thread was seen doing that a kind's cost rests on, as its evidence names
/// it, and the share of the samples that premise holds in.
fn premise(kind: Kind, w: &WindowFigures) -> (&'static str, Activity, f64) {
    let share = |a| w.stack_share(a).unwrap_or(0.0);
    let (loader, python) = (share(Activity::DataLoader), share(Activity::Python));
    match kind {
        Kind::SyncStall => (
            "main_thread_in_gpu_sync",
            Activity::GpuSync,
            share(Activity::GpuSync),
        ),
        Kind::Communication => (
            "main_thread_in_collective",
            Activity::Collective,
            share(Activity::Collective),
        ),
        Kind::HostBound => ("main_thread_in_python", Activity::Python, python),
        Kind::Contention if python > loader => {
            ("main_thread_in_python", Activity::Python, loader + python)
        }
        Kind::Contention => (
            "main_thread_waits_for_loader",
            Activity::DataLoader,
            loader + python,
        ),
        _ => ("main_thread_waits_for_loader", Activity::DataLoader, loader),
    }
}

/// One kind judged against the attribution: its score (from its observed cost where the
/// stacks decide a pipeline kind, else the counter rule's), the basis and the cost.
pub fn judge(
    mut scored: KindScore,
    lost: Option<&LostTime>,
    w: &WindowFigures,
    t: &Thresholds,
) -> (KindScore, Basis, Option<f64>) {
    let kind = scored.kind;
    let share = lost.map(|l| l.share(Cause::Kind(kind)));
    if !PIPELINE.contains(&kind) {
        // Facts the device reports. Their cost is measured where an input gives it.
        let cost = match kind {
            Kind::KernelEfficiency => share.filter(|_| w.sm_activity.is_some()),
            Kind::Throttling => share.filter(|_| w.throttled_clock_ratio.is_some()),
            _ => None,
        };
        // Empty SMs are the rule's fact, small kernels its inference: where the stacks put
        // the GPU in collectives' kernels for longer than the job's kernels left SMs empty,
        // the inference yields, in that proportion (the cost already leaves them out).
        if let (Kind::KernelEfficiency, Some(own), Some(l)) = (kind, cost, lost) {
            if l.basis == Basis::Observed && l.collective_busy > own {
                let kernels = 2.0 * own / (own + l.collective_busy);
                scored.score = scored.score.map(|s| s * kernels);
            }
        }
        return (scored, Basis::Observed, cost);
    }
    let Some(lost) = lost.filter(|l| l.basis == Basis::Observed) else {
        return (scored, Basis::Inferred, share);
    };
    let share = share.unwrap_or(0.0);
    // What the stacks contradict cannot stand: the cost decides where the premise was seen,
    // and only facts stand beside it. A GPU that runs nothing waits for nobody.
    let (name, activity, seen) = premise(kind, w);
    let runs_nothing = w.busy.is_some_and(|b| b < IDLE_BUSY);
    let strength = if runs_nothing || seen < t.premise_share_min {
        0.0
    } else {
        super::rules::high(share, t.lost_share_high)
    };
    let mut evidence: Vec<_> = scored
        .evidence
        .drain(..)
        .filter(|e| {
            e.name == "gpu_busy" || STANDING.contains(&e.name) || SUPPORTING.contains(&e.name)
        })
        .collect();
    let facts = evidence
        .iter()
        .filter(|e| STANDING.contains(&e.name))
        .fold(0.0, |a: f64, e| a.max(e.strength));
    evidence.push(super::Evidence {
        name,
        value: seen,
        threshold: t.premise_share_min,
        strength,
        detail: w.top_frame(activity),
    });
    evidence.push(super::Evidence {
        name: "lost_time_share",
        value: share,
        threshold: t.lost_share_high,
        strength,
        detail: String::new(),
    });
    scored.evidence = evidence;
    scored.score = Some(strength.max(facts));
    (scored, lost.basis, Some(share))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::FrameShare;

    fn stacks(shares: [f64; 5]) -> Option<ProcessStacks> {
        Some(ProcessStacks {
            pid: 1,
            samples: 100,
            shares,
            top_frames: Vec::<FrameShare>::new(),
            recent_samples: 10,
            recent_shares: shares,
        })
    }

    fn split(w: WindowFigures) -> LostTime {
        lost_time(&w, &[], &Thresholds::default()).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn idle_time_falls_in_what_the_thread_did_while_the_gpu_waited() {
        // .item() every step: 60 % waiting for the GPU (which works meanwhile), 35 % Python on
        // the queue the sync drained, 5 % loader.
        let lost = split(WindowFigures {
            busy: Some(0.62),
            stacks: stacks([0.05, 0.6, 0.0, 0.35, 0.0]),
            ..WindowFigures::default()
        });
        assert_eq!(lost.basis, Basis::Observed);
        assert!(close(lost.share(Cause::Kind(Kind::SyncStall)), 0.35 * 0.95));
        assert!(close(lost.total(), 0.38));
        // The same Python without syncs: the loop itself.
        let lost = split(WindowFigures {
            busy: Some(0.62),
            stacks: stacks([0.05, 0.0, 0.0, 0.95, 0.0]),
            busiest_thread: Some(0.95),
            ..WindowFigures::default()
        });
        assert!(lost.share(Cause::Kind(Kind::HostBound)) > 0.35);
        assert!(close(lost.share(Cause::Kind(Kind::SyncStall)), 0.0));
    }

    #[test]
    fn a_loader_wait_goes_to_what_the_workers_did() {
        let waiting = WindowFigures {
            busy: Some(0.25),
            stacks: stacks([0.94, 0.05, 0.0, 0.01, 0.0]),
            workers: Some(2.0),
            workers_cpu: Some(0.1),
            cpu_wait: Some(0.0),
            workers_disk_wait: Some(0.0),
            disk_util: Some(0.01),
            iowait: Some(0.0),
            ..WindowFigures::default()
        };
        // Workers asleep while the disks are quiet: remote input.
        let lost = split(waiting.clone());
        assert!(lost.share(Cause::Kind(Kind::SyncStall)) < 0.02);
        let io = lost.share(Cause::Kind(Kind::DataIo));
        assert!(io > 0.6, "{lost:?}");
        assert_eq!(lost.input, Some(InputSource::Remote));
        assert!(close(lost.total(), 0.75));
        // Workers computing: data_cpu.
        let lost = split(WindowFigures {
            workers_cpu: Some(1.9),
            ..waiting.clone()
        });
        assert!(lost.share(Cause::Kind(Kind::DataCpu)) > 0.6);
        // Workers waiting for CPUs others hold (2 CPUs, others use most of them).
        let lost = split(WindowFigures {
            workers_cpu: Some(0.5),
            cpu_wait: Some(1.3),
            job_cpus: Some(2.0),
            own_cpu: Some(0.4),
            other_cpu: Some(0.6),
            ..waiting.clone()
        });
        assert!(
            lost.share(Cause::Kind(Kind::Contention)) > lost.share(Cause::Kind(Kind::DataCpu)),
            "{lost:?}"
        );
        // The same wait with the job's own threads filling its CPUs: data_cpu.
        let lost = split(WindowFigures {
            workers_cpu: Some(0.5),
            cpu_wait: Some(1.3),
            job_cpus: Some(2.0),
            own_cpu: Some(0.98),
            other_cpu: Some(0.02),
            ..waiting
        });
        assert!(lost.share(Cause::Kind(Kind::Contention)) < 0.05, "{lost:?}");
    }

    #[test]
    fn busy_time_taken_or_wasted_is_capped_by_the_busy_time() {
        let lost = split(WindowFigures {
            busy: Some(0.9),
            sm_activity: Some(0.1),
            sharing: Some(crate::snapshot::Sharing {
                working: Some(2),
                main_work_share: Some(0.5),
                ..Default::default()
            }),
            ..WindowFigures::default()
        });
        assert_eq!(lost.basis, Basis::Inferred);
        assert!(close(lost.share(Cause::Kind(Kind::Contention)), 0.45));
        // The main job's half of the busy time, with its SMs empty 1 - 0.1/0.9 of it.
        assert!(close(lost.share(Cause::Kind(Kind::KernelEfficiency)), 0.4));
        assert!(close(lost.share(Cause::Unexplained), 0.1));
        assert!(close(lost.total(), 0.95));
    }
}
