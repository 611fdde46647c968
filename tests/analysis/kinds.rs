//! Scenario tables for the analysis: a timeline of observations per GPU in, verdicts out.
//! Every kind has a timeline that must fire and a near miss that must not; plus mixtures,
//! flapping input that must not flap the verdict, and missing inputs reported as unknown.

use crate::common::exposition::value;
use crate::common::scenario::{
    active, does_not_fire, fires, healthy, run, run_many, score, stacks,
};
use gpu_bottleneck_exporter::analysis::GpuObservation;
use gpu_bottleneck_exporter::analysis::{Analyzer, Kind, Primary};
use gpu_bottleneck_exporter::config::Thresholds;
use gpu_bottleneck_exporter::snapshot::{Activity, Culprits, NodeProcess, Snapshot, Step};

#[test]
fn a_healthy_saturated_gpu_is_busy() {
    let verdict = run(40, |_| healthy("GPU-a"));
    assert_eq!(verdict.primary, Primary::Busy);
    assert!(active(&verdict).is_empty());
}

#[test]
fn a_job_that_holds_a_gpu_and_runs_nothing_is_idle_not_stalled() {
    // Its process holds memory and a context; the host is quiet; the GPU runs no kernel.
    let verdict = run(40, |_| GpuObservation {
        busy: Some(0.0),
        idle_share: Some(1.0),
        busiest_thread: Some(0.0),
        workers_max_cpu: Some(0.0),
        host_cpu: Some(0.02),
        ..healthy("GPU-a")
    });
    assert_eq!(verdict.primary, Primary::Idle);
    assert_eq!(score(&verdict, Kind::SyncStall), Some(0.0));
    // One burst of work in the window is a stall again, not idleness.
    let verdict = run(40, |_| GpuObservation {
        busy: Some(0.3),
        idle_share: Some(0.6),
        busiest_thread: Some(0.0),
        workers_max_cpu: Some(0.0),
        host_cpu: Some(0.02),
        ..healthy("GPU-a")
    });
    assert_eq!(verdict.primary, Primary::Bottleneck(Kind::SyncStall));
}

#[test]
fn a_gpu_without_processes_is_idle_and_nothing_else() {
    let verdict = run(40, |_| GpuObservation {
        processes: Some(0),
        busy: Some(0.0),
        idle_share: Some(1.0),
        host_cpu: Some(0.95),
        ..healthy("GPU-a")
    });
    assert_eq!(verdict.primary, Primary::Idle);
    assert!(active(&verdict).is_empty());
}

#[test]
fn data_io() {
    let starving = |o: &mut GpuObservation| {
        o.busy = Some(0.35);
        o.idle_share = Some(0.6);
    };
    fires(Kind::DataIo, |o| {
        starving(o);
        o.disk_util = Some(0.97);
        o.workers_disk_wait = Some(5);
    });
    fires(Kind::DataIo, |o| {
        starving(o);
        o.psi_io = Some(0.45);
    });
    // Near miss: the disk is saturated but the GPU is busy: not a data bottleneck.
    does_not_fire(Kind::DataIo, |o| {
        o.disk_util = Some(0.95);
        o.psi_io = Some(0.4);
    });
    // Near miss: the GPU waits but storage is calm.
    does_not_fire(Kind::DataIo, starving);
}

#[test]
fn data_cpu() {
    fires(Kind::DataCpu, |o| {
        o.busy = Some(0.4);
        o.workers_max_cpu = Some(1.0);
        o.host_cpu = Some(0.97);
    });
    does_not_fire(Kind::DataCpu, |o| {
        o.workers_max_cpu = Some(1.0);
        o.host_cpu = Some(0.97);
    });
}

/// A host saturated by the job's own loader workers, none of them pegged (four workers at
/// half a core each on two cores) while the GPU starves: the saturated host CPU decides it.
#[test]
fn data_cpu_from_a_host_saturated_by_the_jobs_own_workers() {
    let saturated = |o: &mut GpuObservation| {
        o.busy = Some(0.2);
        o.idle_share = Some(0.5);
        o.workers = Some(4);
        o.workers_max_cpu = Some(0.5);
        o.busiest_thread = Some(0.3);
        o.host_cpu = Some(0.99);
        o.other_cpu = Some(0.02);
    };
    fires(Kind::DataCpu, saturated);
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        saturated(&mut o);
        o
    });
    assert!(score(&verdict, Kind::DataCpu).unwrap() >= 0.9);
    // A ratio capped at 1 reaches a decisive score at saturation.
    let verdict = run(40, |_| GpuObservation {
        busy: Some(0.2),
        host_cpu: Some(1.0),
        ..healthy("GPU-a")
    });
    assert_eq!(score(&verdict, Kind::DataCpu), Some(1.0));
    // Near miss: a busy but unsaturated host (85 %) with no pegged worker.
    does_not_fire(Kind::DataCpu, |o| {
        saturated(o);
        o.host_cpu = Some(0.85);
    });
}

#[test]
fn host_bound() {
    fires(Kind::HostBound, |o| {
        o.busy = Some(0.45);
        o.busiest_thread = Some(0.99);
    });
    // Near miss: a busy main thread in front of a busy GPU is normal.
    does_not_fire(Kind::HostBound, |o| o.busiest_thread = Some(0.99));
}

#[test]
fn sync_stall() {
    fires(Kind::SyncStall, |o| {
        o.busy = Some(0.3);
        o.idle_share = Some(0.6);
        o.busiest_thread = Some(0.2);
        o.workers_max_cpu = Some(0.1);
        o.host_cpu = Some(0.1);
        o.disk_util = Some(0.05);
    });
    // Near miss: bursty and starved but the workers are busy: that is data_cpu's case.
    does_not_fire(Kind::SyncStall, |o| {
        o.busy = Some(0.3);
        o.idle_share = Some(0.6);
        o.workers_max_cpu = Some(0.95);
    });
}

#[test]
fn kernel_efficiency() {
    fires(Kind::KernelEfficiency, |o| {
        o.busy = Some(0.95);
        o.sm_activity = Some(0.15);
    });
    does_not_fire(Kind::KernelEfficiency, |o| o.sm_activity = Some(0.7));
}

#[test]
fn memory_pressure() {
    fires(Kind::MemoryPressure, |o| o.memory_used_ratio = Some(0.985));
    does_not_fire(Kind::MemoryPressure, |o| o.memory_used_ratio = Some(0.8));
}

#[test]
fn communication_from_imbalance_within_a_job() {
    let verdicts = run_many(40, |_| {
        let mut fast = healthy("GPU-fast");
        let mut slow = healthy("GPU-slow");
        let mut other = healthy("GPU-other-job");
        fast.job = Some("pod:a".into());
        slow.job = Some("pod:a".into());
        slow.busy = Some(0.45);
        other.busy = Some(0.4);
        other.job = Some("pod:b".into());
        vec![fast, slow, other]
    });
    assert_eq!(
        verdicts[1].primary,
        Primary::Bottleneck(Kind::Communication),
        "{:?}",
        active(&verdicts[1])
    );
    assert!(!active(&verdicts[0]).contains(&Kind::Communication));
    // Near miss: a slow GPU alone in its job is not waiting for peers.
    assert!(!active(&verdicts[2]).contains(&Kind::Communication));
}

/// The checklist's "GPU 3 at 40 % while the others run at 95 %": a rank whose pinned CPUs an
/// unrelated process takes. Its verdict is the local cause (contention); the imbalance stays
/// active beside it, and the same rank with nothing local to blame is communication.
/// (Its own loader saturating its CPUs would be data_cpu: `data_cpu_from_the_jobs_own_share`.)
#[test]
fn a_straggler_is_named_by_its_own_cause_not_only_the_imbalance() {
    let ranks = |own: f64, others_on_its_cpus: f64| {
        run_many(40, move |_| {
            let mut fast = healthy("GPU-fast");
            let mut slow = healthy("GPU-slow");
            fast.job = Some("pod:a".into());
            slow.job = Some("pod:a".into());
            slow.busy = Some(0.4);
            slow.workers_max_cpu = Some(0.3);
            slow.own_cpu = Some(own);
            slow.other_cpu = Some(others_on_its_cpus);
            vec![fast, slow]
        })
    };
    let verdicts = ranks(0.4, 0.6);
    assert_eq!(verdicts[1].primary, Primary::Bottleneck(Kind::Contention));
    assert!(active(&verdicts[1]).contains(&Kind::Communication));
    // Its CPUs are saturated, but by others: not the job's own preprocessing.
    assert!(!active(&verdicts[1]).contains(&Kind::DataCpu));
    let verdicts = ranks(0.3, 0.05);
    assert_eq!(
        verdicts[1].primary,
        Primary::Bottleneck(Kind::Communication)
    );
}

/// CPUs saturated by the job's own loader (its share of its CPUs) are data_cpu.
#[test]
fn data_cpu_from_the_jobs_own_share_of_its_cpus() {
    fires(Kind::DataCpu, |o| {
        o.busy = Some(0.3);
        o.workers_max_cpu = Some(0.25);
        o.host_cpu = Some(0.5);
        o.own_cpu = Some(0.98);
        o.other_cpu = Some(0.02);
    });
}

/// `.item()` every step with CUDA's spin wait: the main thread holds its core, which the
/// counters alone read as host-bound; its stacks, mostly in the synchronize, say sync_stall.
#[test]
fn a_main_thread_seen_synchronizing_is_a_sync_stall_however_busy() {
    let spinning = |o: &mut GpuObservation| {
        o.busy = Some(0.57);
        o.busiest_thread = Some(0.95);
        o.workers_max_cpu = Some(0.06);
        o.host_cpu = Some(0.55);
        o.disk_util = Some(0.01);
    };
    // Without stacks: what every counter says.
    fires(Kind::HostBound, spinning);
    fires(Kind::SyncStall, |o| {
        spinning(o);
        o.stacks = stacks(Activity::GpuSync, 0.8);
    });
    does_not_fire(Kind::HostBound, |o| {
        spinning(o);
        o.stacks = stacks(Activity::GpuSync, 0.8);
    });
    // Near miss: a Python loop seen mostly in model code stays host-bound.
    fires(Kind::HostBound, |o| {
        spinning(o);
        o.stacks = stacks(Activity::GpuSync, 0.1);
    });
}

/// A loop seen waiting for its loader, with no worker pegged and no disk figure past its
/// threshold: data_cpu when the workers compute (or wait for a CPU), data_io when they do not
/// (reading from network storage, say); the frame it waits at is quoted. Without workers the
/// loop loads its own data: not a loader wait.
#[test]
fn a_main_thread_seen_waiting_for_its_loader_is_data_by_the_workers_state() {
    let waiting = |o: &mut GpuObservation| {
        o.busy = Some(0.35);
        o.workers = Some(4);
        o.workers_max_cpu = Some(0.7);
        o.host_cpu = Some(0.45);
        o.own_cpu = Some(0.45);
        o.stacks = stacks(Activity::DataLoader, 0.7);
    };
    let computing = |o: &mut GpuObservation| {
        waiting(o);
        o.workers_cpu = Some(2.6);
    };
    fires(Kind::DataCpu, computing);
    fires(Kind::DataIo, |o| {
        waiting(o);
        o.workers_max_cpu = Some(0.1);
        o.workers_cpu = Some(0.3);
    });
    // Four workers at 0.1 of a core each, but their threads wait for CPUs (too many workers
    // for the cores): computing.
    fires(Kind::DataCpu, |o| {
        waiting(o);
        o.workers_max_cpu = Some(0.1);
        o.workers_cpu = Some(0.4);
        o.cpu_wait = Some(3.0);
    });
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        computing(&mut o);
        o
    });
    let data_cpu = verdict
        .kinds
        .iter()
        .find(|k| k.scored.kind == Kind::DataCpu)
        .unwrap();
    let quoted = data_cpu
        .scored
        .evidence
        .iter()
        .find(|e| e.signal.name() == "main_thread_waits_for_loader")
        .unwrap();
    assert_eq!(quoted.value, 0.7);
    assert_eq!(
        quoted.detail,
        "train at /job/train.py:57, 70 % of the samples"
    );
    // Near misses: without the stacks the same counters decide nothing; a loop mostly in
    // Python; no workers.
    does_not_fire(Kind::DataCpu, |o| {
        computing(o);
        o.stacks = None;
    });
    does_not_fire(Kind::DataCpu, |o| {
        computing(o);
        o.stacks = stacks(Activity::DataLoader, 0.05);
    });
    does_not_fire(Kind::DataCpu, |o| {
        computing(o);
        o.workers = Some(0);
    });
    // Workers waiting for the CPUs others hold: contention's case; their own computing is
    // the smaller part of the loader wait.
    let starved_of_cpu = |o: &mut GpuObservation| {
        computing(o);
        o.workers_cpu = Some(0.8);
        o.cpu_wait = Some(2.5);
        o.job_cpus = Some(4.0);
        o.own_cpu = Some(0.25);
        o.other_cpu = Some(0.7);
    };
    fires(Kind::Contention, starved_of_cpu);
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        starved_of_cpu(&mut o);
        o
    });
    assert_eq!(verdict.primary, Primary::Bottleneck(Kind::Contention));
    // Others busier than an idle-looking job on its CPUs, while the workers compute and wait
    // for no CPU: the observation stands (data_cpu), the background is noise.
    fires(Kind::DataCpu, |o| {
        computing(o);
        o.own_cpu = Some(0.35);
        o.other_cpu = Some(0.6);
        o.cpu_wait = Some(0.0);
    });
    // Workers blocked on saturated storage half the time and computing less: data_io, from
    // local storage. A saturated disk the workers are not seen waiting on does not outweigh
    // what they are seen doing.
    fires(Kind::DataIo, |o| {
        computing(o);
        o.workers_cpu = Some(1.2);
        o.workers_disk_wait = Some(2);
        o.disk_util = Some(0.99);
        o.iowait = Some(0.3);
    });
    fires(Kind::DataCpu, |o| {
        computing(o);
        o.disk_util = Some(0.99);
        o.iowait = Some(0.3);
    });
}

/// Ranks of one job, one seen mostly in a collective: it waits for its peers
/// (communication), even where its GPU looks as busy as theirs, and even where the exporter
/// cannot tell the ranks are one job; a rank seen in a collective a fifth of the time is not.
#[test]
fn a_rank_seen_mostly_in_a_collective_waits_for_its_peers() {
    let ranks = |job_b: &'static str| {
        run_many(40, move |_| {
            let mut waiting = healthy("GPU-waiting");
            let mut peer = healthy("GPU-peer");
            waiting.job = Some("pod:a".into());
            peer.job = Some(job_b.into());
            waiting.stacks = stacks(Activity::Collective, 0.75);
            vec![waiting, peer]
        })
    };
    let verdicts = ranks("pod:a");
    assert_eq!(
        verdicts[0].primary,
        Primary::Bottleneck(Kind::Communication),
        "{:?}",
        active(&verdicts[0])
    );
    let communication = &verdicts[0]
        .kinds
        .iter()
        .find(|k| k.scored.kind == Kind::Communication)
        .unwrap()
        .scored;
    assert!(communication
        .evidence
        .iter()
        .any(|e| e.signal.name() == "main_thread_in_collective"
            && e.detail.contains("/job/train.py:57")));
    assert!(!active(&verdicts[1]).contains(&Kind::Communication));
    let verdicts = ranks("pod:b");
    assert_eq!(
        verdicts[0].primary,
        Primary::Bottleneck(Kind::Communication)
    );
    does_not_fire(Kind::Communication, |o| {
        o.stacks = stacks(Activity::Collective, 0.1);
    });
}

/// The node's busiest processes are named in the evidence of the case they explain: disk
/// readers for data_io decided by storage figures, CPU users for host-side contention.
#[test]
fn the_evidence_names_who_else_takes_the_disk_or_the_cpus() {
    let updatedb = NodeProcess {
        pid: 812,
        command: "updatedb".into(),
        cpu_cores: 0.3,
        read_bytes_per_second: Some(310e6),
        write_bytes_per_second: Some(0.0),
        ..NodeProcess::default()
    };
    let stress = NodeProcess {
        pid: 901,
        command: "stress-ng".into(),
        pod_uid: "3f2a".into(),
        cpu_cores: 1.9,
        ..NodeProcess::default()
    };
    let culprits = Culprits {
        by_cpu: vec![stress.clone(), updatedb.clone()],
        by_disk: vec![updatedb],
    };
    let evidence = |kind: Kind, modify: &dyn Fn(&mut GpuObservation)| {
        let verdict = run(40, |_| {
            let mut o = healthy("GPU-a");
            modify(&mut o);
            o.culprits = Some(culprits.clone());
            o
        });
        let scored = &verdict
            .kinds
            .iter()
            .find(|k| k.scored.kind == kind)
            .unwrap()
            .scored;
        assert_eq!(verdict.primary, Primary::Bottleneck(kind), "{scored:?}");
        scored.evidence.clone()
    };
    let storage = evidence(Kind::DataIo, &|o| {
        o.busy = Some(0.3);
        o.disk_util = Some(0.98);
        o.iowait = Some(0.2);
    });
    let named = storage
        .iter()
        .find(|e| e.signal.name() == "busiest_disk_processes")
        .unwrap();
    assert_eq!(
        named.detail,
        "updatedb (pid 812) read 310 MB/s, wrote 0 B/s"
    );
    assert!(named.strength >= 0.5);
    let cpus = evidence(Kind::Contention, &|o| {
        o.busy = Some(0.3);
        o.other_cpu = Some(0.95);
        o.cpu_wait = Some(1.5);
    });
    let named = cpus
        .iter()
        .find(|e| e.signal.name() == "busiest_cpu_processes")
        .unwrap();
    assert!(
        named
            .detail
            .starts_with("stress-ng (pid 901, pod 3f2a) 1.90 cores; updatedb"),
        "{}",
        named.detail
    );
    assert!(named.strength >= 0.5);
}

/// A loader blocked on storage on a VM whose hypervisor steals a fifth of the CPU: its threads
/// do not wait for a CPU, so the steal is not what holds it back.
#[test]
fn cpu_taken_by_others_is_contention_only_while_the_job_waits_for_cpu() {
    let storage_bound = |o: &mut GpuObservation| {
        o.busy = Some(0.3);
        o.workers_disk_wait = Some(3);
        o.iowait = Some(0.2);
        o.steal = Some(0.22);
        o.cpu_wait = Some(0.02);
    };
    fires(Kind::DataIo, storage_bound);
    does_not_fire(Kind::Contention, storage_bound);
    // The same steal while the job's threads queue for a CPU is contention.
    fires(Kind::Contention, |o| {
        o.busy = Some(0.3);
        o.steal = Some(0.22);
        o.cpu_wait = Some(1.5);
    });
}

#[test]
fn contention() {
    // Owners unknown (no host context): three processes on a GPU that idles half the time
    // are enough of a hint. (On a GPU busy all the time the hint costs nothing measurable:
    // below the floor, it is not the primary.)
    fires(Kind::Contention, |o| {
        o.busy = Some(0.5);
        o.processes = Some(3);
        o.independent_jobs = None;
    });
    fires(Kind::Contention, |o| {
        o.busy = Some(0.5);
        o.cgroup_throttled = Some(0.4);
    });
    // Near miss: quota throttling while the GPU is saturated does not hurt it.
    does_not_fire(Kind::Contention, |o| o.cgroup_throttled = Some(0.4));
}

/// Two independent jobs on one GPU are a fact, not "at threshold": contention wins over the
/// softer sync_stall the same starving, quiet picture also scores, and names the other job.
#[test]
fn contention_from_an_independent_job_beats_softer_kinds() {
    let shared = |o: &mut GpuObservation| {
        o.busy = Some(0.3);
        o.idle_share = Some(0.6);
        o.busiest_thread = Some(0.2);
        o.workers_max_cpu = Some(0.1);
        o.host_cpu = Some(0.1);
        o.disk_util = Some(0.05);
        o.processes = Some(2);
        o.independent_jobs = Some(2);
        o.other_jobs = vec!["pid 812 (python3, pod 6f1c)".into()];
    };
    fires(Kind::Contention, shared);
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        shared(&mut o);
        o
    });
    assert!(active(&verdict).contains(&Kind::SyncStall));
    let contention = &verdict.kinds[Kind::ALL
        .iter()
        .position(|k| *k == Kind::Contention)
        .unwrap()];
    assert!(contention.scored.score.unwrap() >= 0.9);
    let named = contention
        .scored
        .evidence
        .iter()
        .find(|e| e.signal.name() == "other_jobs_on_gpu")
        .unwrap();
    assert_eq!(named.detail, "pid 812 (python3, pod 6f1c)");
    // Near miss: two processes of one job (a rank and its child) share the GPU.
    does_not_fire(Kind::Contention, |o| {
        shared(o);
        o.independent_jobs = Some(1);
        o.other_jobs.clear();
    });
}

/// A PCIe link at gen 2 x4 of gen 5 x16 under load keeps 3 % of its bandwidth: a decisive
/// communication score, not a tie at the threshold.
#[test]
fn a_degraded_pcie_link_under_load_is_communication() {
    let degraded = |o: &mut GpuObservation| {
        o.busy = Some(0.8);
        o.pcie_bandwidth_share = Some((4.0 * 4.0) / (31.508 * 16.0));
    };
    fires(Kind::Communication, degraded);
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        degraded(&mut o);
        o
    });
    assert!(score(&verdict, Kind::Communication).unwrap() > 0.95);
    // Near misses: the same link on a GPU that idles (links drop on purpose), a full link.
    does_not_fire(Kind::Communication, |o| {
        degraded(o);
        o.busy = Some(0.1);
    });
    does_not_fire(Kind::Communication, |o| o.busy = Some(0.8));
}

#[test]
fn throttling_and_mixture_with_data_io() {
    fires(Kind::Throttling, |o| o.throttled = Some(true));
    does_not_fire(Kind::Throttling, |o| o.thermal_margin = Some(12.0));
    let verdict = run(40, |_| GpuObservation {
        busy: Some(0.3),
        idle_share: Some(0.6),
        disk_util: Some(0.99),
        throttled: Some(true),
        ..healthy("GPU-a")
    });
    let kinds = active(&verdict);
    assert!(
        kinds.contains(&Kind::DataIo) && kinds.contains(&Kind::Throttling),
        "{kinds:?}"
    );
}

#[test]
fn hardware() {
    fires(Kind::Hardware, |o| o.up = false);
    let verdict = run(40, |s| GpuObservation {
        hardware_errors: Some(if s > 20 { 1 } else { 0 }),
        ..healthy("GPU-a")
    });
    assert!(active(&verdict).contains(&Kind::Hardware));
    does_not_fire(Kind::Hardware, |o| o.hardware_errors = Some(7)); // old errors, none new
}

#[test]
fn flapping_input_does_not_flap_the_verdict() {
    // The disk alternates between saturated and 70 % every two seconds while the GPU starves:
    // a single-threshold rule would flip every two seconds (0.7 scores 0.44, under the 0.5
    // enter score); averaged over the window the verdict enters once and holds.
    let mut analyzer = Analyzer::new(Thresholds::default());
    let mut states = Vec::new();
    for s in 0..90u32 {
        let disk = if (s / 2) % 2 == 0 { 1.0 } else { 0.7 };
        let o = GpuObservation {
            at: f64::from(s),
            busy: Some(0.3),
            idle_share: Some(0.6),
            disk_util: Some(disk),
            ..healthy("GPU-a")
        };
        let verdict = analyzer.push(vec![o], f64::from(s)).remove(0);
        states.push(active(&verdict).contains(&Kind::DataIo));
    }
    let changes = states.windows(2).filter(|w| w[0] != w[1]).count();
    assert_eq!(changes, 1, "entered once and stayed: {states:?}");
    assert!(!states[5], "not before the minimum duration");
}

#[test]
fn a_short_spike_does_not_fire() {
    let verdict = run(40, |s| GpuObservation {
        memory_used_ratio: Some(if (30..35).contains(&s) { 0.99 } else { 0.5 }),
        ..healthy("GPU-a")
    });
    assert!(!active(&verdict).contains(&Kind::MemoryPressure));
}

#[test]
fn missing_inputs_are_unknown_not_zero() {
    // No GPM: kernel efficiency cannot be judged. No process context: host-bound unknown.
    let verdict = run(40, |_| GpuObservation {
        sm_activity: None,
        busiest_thread: None,
        ..healthy("GPU-a")
    });
    assert_eq!(score(&verdict, Kind::KernelEfficiency), None);
    assert_eq!(score(&verdict, Kind::HostBound), None);
    assert_eq!(score(&verdict, Kind::SyncStall), None);
    assert!(score(&verdict, Kind::MemoryPressure).is_some());
    // data_io needs at least one storage signal.
    let verdict = run(40, |_| GpuObservation {
        disk_util: None,
        iowait: None,
        psi_io: None,
        workers_blkio: None,
        workers_disk_wait: None,
        ..healthy("GPU-a")
    });
    assert_eq!(score(&verdict, Kind::DataIo), None);
}

fn ranks_of_gpu(f: &[crate::common::exposition::Family], gpu: &str) -> Option<f64> {
    value(
        f,
        "gpu_collective_hang_ranks",
        &[("gpu", gpu), ("state", "missing")],
    )
}

/// NCCL's RAS answer for `pid`: a two-rank communicator whose rank 1 does not answer.
fn peer_missing(pid: u32) -> gpu_bottleneck_exporter::snapshot::ProcessRas {
    use gpu_bottleneck_exporter::snapshot::*;
    ProcessRas {
        pid,
        answer: Ok(RasReport {
            nccl_version: "2.28.9".into(),
            format: RasFormat::Json,
            communicators: vec![RasCommunicator {
                hash: "0xabc".into(),
                size: 2,
                ranks: vec![RasRank::default()],
                missing: vec![RasMissingRank {
                    rank: 1,
                    unresponsive: true,
                    ..RasMissingRank::default()
                }],
            }],
            collection_seconds: 0.0,
            timeouts: 0,
        }),
    }
}

#[test]
fn verdict_series_are_always_present_and_match_the_golden_file() {
    let verdicts = run_many(40, |_| {
        vec![
            GpuObservation {
                index: 0,
                busy: Some(0.3),
                idle_share: Some(0.6),
                disk_util: Some(0.98),
                ranks: Some("job".into()),
                step: Some(Step {
                    seconds: 0.6,
                    best_seconds: 0.3,
                }),
                ..healthy("GPU-starving")
            },
            // Two ranks of one job, their steps timed: the busy one at its best pace, the
            // starving one at half its best pace.
            GpuObservation {
                index: 1,
                ranks: Some("job".into()),
                step: Some(Step {
                    seconds: 0.3,
                    best_seconds: 0.3,
                }),
                ..healthy("GPU-busy")
            },
            GpuObservation {
                index: 2,
                processes: Some(0),
                busy: Some(0.0),
                ..healthy("GPU-idle")
            },
            GpuObservation {
                index: 3,
                sm_activity: None,
                busiest_thread: None,
                ..healthy("GPU-no-gpm")
            },
            // A rank waiting in the driver since its all-reduce, its GPU spinning; NCCL's RAS
            // service says its peer does not answer.
            GpuObservation {
                index: 4,
                busy: Some(1.0),
                idle_share: Some(0.0),
                sm_activity: Some(0.06),
                driver_wait: Some(gpu_bottleneck_exporter::snapshot::DriverWait {
                    seconds: 30.0,
                    after: Some(gpu_bottleneck_exporter::snapshot::Collective::AllReduce),
                }),
                main_pid: Some(4242),
                ras: Some(peer_missing(4242)),
                ..healthy("GPU-waiting")
            },
        ]
    });
    let snapshot = Snapshot {
        verdicts,
        ..Snapshot::default()
    };
    let f = crate::common::check_goldens("verdicts", &crate::common::render_pinned(&snapshot));
    let primary =
        |gpu: &str, verdict: &str| value(&f, "gpu_verdict", &[("gpu", gpu), ("verdict", verdict)]);
    assert_eq!(primary("0", "data_io"), Some(1.0));
    // One series per GPU, labelled with its verdict.
    assert_eq!(primary("0", "busy"), None);
    let verdict_series = f
        .iter()
        .find(|family| family.name == "gpu_verdict")
        .unwrap();
    assert_eq!(verdict_series.samples.len(), 5);
    assert_eq!(primary("1", "busy"), Some(1.0));
    // The waiting rank's hang, tracked (not yet hung), with RAS's count of its missing peer.
    let ranks = |state: &str| {
        value(
            &f,
            "gpu_collective_hang_ranks",
            &[("gpu", "4"), ("state", state)],
        )
    };
    assert_eq!((ranks("missing"), ranks("behind")), (Some(1.0), Some(0.0)));
    assert_eq!(ranks_of_gpu(&f, "0"), None);
    assert_eq!(primary("2", "idle"), Some(1.0));
    let series = f
        .iter()
        .find(|family| family.name == "gpu_bottleneck")
        .unwrap()
        .samples
        .len();
    assert_eq!(series, 5 * Kind::ALL.len(), "every kind for every GPU");
    let straggler = |gpu: &str, against: &str| {
        value(
            &f,
            "gpu_straggler_score_ratio",
            &[("gpu", gpu), ("against", against)],
        )
    };
    assert_eq!(straggler("0", "own_best"), Some(0.5));
    assert_eq!(straggler("1", "own_best"), Some(0.0));
    assert!(straggler("0", "node_ranks").is_some());
    assert_eq!(straggler("2", "own_best"), None);
    let unknown = |kind: &str| {
        value(
            &f,
            "gpu_bottleneck_unknown",
            &[("gpu", "3"), ("kind", kind)],
        )
    };
    assert_eq!(unknown("kernel_efficiency"), Some(1.0));
    // Only unknown kinds are listed; a judged kind has a score instead.
    assert_eq!(unknown("memory_pressure"), None);
    assert_eq!(
        value(
            &f,
            "gpu_bottleneck_score",
            &[("gpu", "3"), ("kind", "kernel_efficiency")]
        ),
        None
    );
}
