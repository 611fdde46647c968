//! Scenario helpers for the analysis tests: a healthy GPU's observation, timelines of ticks
//! through a real `Analyzer`, and assertions on the verdicts.

use gpu_bottleneck_exporter::analysis::GpuObservation;
use gpu_bottleneck_exporter::analysis::{Analyzer, GpuVerdict, Kind, Primary};
use gpu_bottleneck_exporter::config::Thresholds;
use gpu_bottleneck_exporter::snapshot::{Activity, FrameShare, PerActivity, ProcessStacks};

/// A main thread seen `share` of its samples in `activity` (the rest in Python), most often at
/// `train.py:57`.
pub fn stacks(activity: Activity, share: f64) -> Option<ProcessStacks> {
    let mut shares = PerActivity::<f64>::default();
    shares[activity] += share;
    shares[Activity::Python] += 1.0 - share;
    Some(ProcessStacks {
        pid: 4242,
        samples: 60,
        shares,
        recent_samples: 10,
        recent_shares: shares,
        loader_queued: 0.0,
        recent_loader_queued: 0.0,
        followed_thread: None,
        top_frames: vec![FrameShare {
            function: "train".into(),
            location: "/job/train.py:57".into(),
            activity,
            share,
        }],
    })
}

/// A healthy GPU running one training process flat out, every input known.
pub fn healthy(uuid: &str) -> GpuObservation {
    GpuObservation {
        uuid: uuid.into(),
        up: true,
        busy: Some(0.97),
        idle_share: Some(0.0),
        sm_activity: Some(0.85),
        memory_used_ratio: Some(0.6),
        throttled: Some(false),
        thermal_margin: Some(20.0),
        hardware_errors: Some(0),
        pcie_bandwidth_share: Some(1.0),
        processes: Some(1),
        independent_jobs: Some(1),
        busiest_thread: Some(0.6),
        workers: Some(8),
        workers_max_cpu: Some(0.4),
        workers_disk_wait: Some(0),
        workers_blkio: Some(0.0),
        cgroup_throttled: Some(0.0),
        numa_mismatch: Some(false),
        disk_util: Some(0.2),
        iowait: Some(0.01),
        psi_io: Some(0.01),
        host_cpu: Some(0.4),
        other_cpu: Some(0.05),
        steal: Some(0.0),
        ..GpuObservation::default()
    }
}

/// A loop whose two loader workers wait for input that is not on the local disk: the GPU 25 %
/// busy and bursty, the workers asleep, the disks, the host and the main thread quiet.
pub fn remote_loader(o: &mut GpuObservation) {
    o.busy = Some(0.25);
    o.idle_share = Some(0.6);
    o.busiest_thread = Some(0.04);
    o.workers = Some(2);
    o.workers_max_cpu = Some(0.04);
    o.workers_cpu = Some(0.06);
    o.workers_disk_wait = Some(0);
    o.disk_util = Some(0.01);
    o.iowait = Some(0.0);
    o.psi_io = Some(0.0);
    o.host_cpu = Some(0.05);
    o.cpu_wait = Some(0.0);
}

/// Runs `seconds` one-second ticks of one GPU whose observation at second `s` is `at(s)`,
/// with default thresholds; returns the last verdict.
pub fn run(seconds: u32, at: impl Fn(u32) -> GpuObservation) -> GpuVerdict {
    run_many(seconds, |s| vec![at(s)]).remove(0)
}

pub fn run_many(seconds: u32, at: impl Fn(u32) -> Vec<GpuObservation>) -> Vec<GpuVerdict> {
    let mut analyzer = Analyzer::new(Thresholds::default());
    let mut last = Vec::new();
    for s in 0..seconds {
        let tick: Vec<GpuObservation> = at(s)
            .into_iter()
            .map(|o| GpuObservation {
                at: f64::from(s),
                ..o
            })
            .collect();
        last = analyzer.push(tick, f64::from(s));
    }
    last
}

pub fn active(verdict: &GpuVerdict) -> Vec<Kind> {
    verdict
        .kinds
        .iter()
        .filter(|k| k.active)
        .map(|k| k.scored.kind)
        .collect()
}

pub fn score(verdict: &GpuVerdict, kind: Kind) -> Option<f64> {
    verdict
        .kinds
        .iter()
        .find(|k| k.scored.kind == kind)
        .unwrap()
        .scored
        .score
}

/// Asserts the timeline fires exactly `kind` as primary.
#[track_caller]
pub fn fires(kind: Kind, modify: impl Fn(&mut GpuObservation)) {
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        modify(&mut o);
        o
    });
    assert_eq!(
        verdict.primary,
        Primary::Bottleneck(kind),
        "active: {:?}, scores: {:?}",
        active(&verdict),
        verdict
            .kinds
            .iter()
            .map(|k| (k.scored.kind, k.scored.score))
            .collect::<Vec<_>>()
    );
}

/// Asserts the timeline does not fire `kind`.
#[track_caller]
pub fn does_not_fire(kind: Kind, modify: impl Fn(&mut GpuObservation)) {
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        modify(&mut o);
        o
    });
    assert!(
        !active(&verdict).contains(&kind),
        "{kind:?} fired: score {:?}",
        score(&verdict, kind)
    );
}
