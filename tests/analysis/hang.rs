//! A hung job told from a busy one: a rank that sits in one collective in every stack sample
//! while its GPU reads busy (NCCL's kernels spin while they wait) is hung once it has done so
//! for `analysis.hang_after`; a communication-bound rank that leaves the collective between
//! steps, or one whose GPU does not spin, is not. With the CUDA probes the same holds for a
//! rank whose host waits in the driver ever since it issued a collective (real PyTorch: NCCL
//! returns at once).

use crate::common::exposition::value;
use crate::common::scenario::{healthy, run, stacks};
use gpu_bottleneck_exporter::analysis::GpuObservation;
use gpu_bottleneck_exporter::analysis::{explanation, next_steps};
use gpu_bottleneck_exporter::analysis::{Kind, Primary};
use gpu_bottleneck_exporter::report::{any_bottleneck, text_report};
use gpu_bottleneck_exporter::snapshot::{Activity, Collective, DriverWait};

/// A rank whose main thread is seen in its all-reduce in `share` of the samples, the GPU
/// `busy`.
fn in_collective(share: f64, busy: f64) -> GpuObservation {
    let mut o = healthy("GPU-a");
    o.busy = Some(busy);
    o.idle_share = Some(0.0);
    o.busiest_thread = Some(0.02);
    o.stacks = stacks(Activity::Collective, share);
    if let Some(s) = o.stacks.as_mut() {
        s.top_frames[0].function = "all_reduce".into();
        s.top_frames[0].location = "/job/train.py:97".into();
    }
    o
}

#[test]
fn a_rank_stuck_in_one_collective_with_its_gpu_spinning_is_hung() {
    // Before hang_after (2 minutes): a communication wait, said so with its duration.
    let waiting = run(100, |_| in_collective(1.0, 1.0));
    assert_eq!(waiting.primary, Primary::Bottleneck(Kind::Communication));
    let hang = waiting.hang.as_ref().unwrap();
    assert!((98.0..=100.0).contains(&hang.seconds), "{hang:?}");
    // Past it: hung, whatever else is active, and `diagnose` exits as for a bottleneck.
    let hung = run(150, |_| in_collective(1.0, 1.0));
    assert_eq!(hung.primary, Primary::Hung);
    assert_eq!(
        hung.hang.as_ref().unwrap().frame,
        "all_reduce at /job/train.py:97"
    );
    assert!(explanation(&hung).contains("peer never arrived"));
    assert!(next_steps(&hung)[0].contains("rank that did not arrive"));
    let report = text_report(std::slice::from_ref(&hung), false);
    assert!(
        report.contains("hung (in all_reduce at /job/train.py:97 for 2 min 2"),
        "{report}"
    );
    assert!(any_bottleneck(std::slice::from_ref(&hung)));
    // On /metrics: the verdict and the time stuck.
    let mut snapshot = gpu_bottleneck_exporter::snapshot::Snapshot {
        verdicts: vec![hung],
        ..Default::default()
    };
    snapshot.node = "test-node".into();
    let (text, _) = crate::common::render_pinned(&snapshot);
    let f = crate::common::exposition::parse(&text, false).unwrap();
    assert_eq!(
        value(
            &f,
            "gpu_verdict",
            &[("verdict", "hung"), ("basis", "observed")]
        ),
        Some(1.0)
    );
    assert!(value(&f, "gpu_collective_hang_seconds", &[("gpu", "0")]).unwrap() >= 120.0);
}

#[test]
fn a_rank_that_leaves_the_collective_between_steps_is_not_hung() {
    // Communication-bound: 95 % of the samples in the all-reduce, the GPU spinning, but the
    // loop comes back to Python every step.
    let bound = run(300, |_| in_collective(0.95, 1.0));
    assert_eq!(bound.primary, Primary::Bottleneck(Kind::Communication));
    assert!(bound.hang.is_none());
    // In the collective in every sample but the GPU does not spin (a host-side barrier, or
    // the wait is elsewhere): no spinning kernel says the peer is awaited on the GPU.
    let host_side = run(300, |_| in_collective(1.0, 0.1));
    assert_ne!(host_side.primary, Primary::Hung);
    // A different collective every now and then is progress: the clock starts again.
    let moving = run(300, |s| {
        let mut o = in_collective(1.0, 1.0);
        if let Some(st) = o.stacks.as_mut() {
            st.top_frames[0].location = format!("/job/train.py:{}", 90 + s / 60);
        }
        o
    });
    assert_ne!(moving.primary, Primary::Hung);
    assert!(moving.hang.unwrap().seconds < 60.0);
    // A long collective that moves gradients over the GPU's PCIe link (to the NIC) is slow,
    // not hung; the same wait with the link quiet is.
    let moving_data = run(300, |_| GpuObservation {
        pcie_bytes_per_second: Some(2e9),
        ..in_collective(1.0, 1.0)
    });
    assert_ne!(moving_data.primary, Primary::Hung);
    assert!(moving_data.hang.is_none());
    let quiet_link = run(300, |_| GpuObservation {
        pcie_bytes_per_second: Some(3e6),
        ..in_collective(1.0, 1.0)
    });
    assert_eq!(quiet_link.primary, Primary::Hung);
}

/// A DDP rank as real PyTorch shows a hang: NCCL returned at once, the host waits in its next
/// sync (`loss.item()`, a "sync" in the stacks) inside the CUDA driver, for `seconds` of the
/// run at tick `s` since the wait began at `began`, after an all-reduce issued before it.
fn in_driver(s: u32, began: u32, busy: f64, sm: Option<f64>) -> GpuObservation {
    let mut o = healthy("GPU-a");
    o.busy = Some(busy);
    o.idle_share = Some(0.0);
    o.sm_activity = sm;
    o.stacks = stacks(Activity::GpuSync, 1.0);
    o.driver_wait = (s >= began).then(|| DriverWait {
        seconds: f64::from(s - began),
        after: Some(Collective::AllReduce),
    });
    o
}

#[test]
fn a_rank_waiting_in_the_driver_since_its_collective_with_the_gpu_spinning_is_hung() {
    let hung = run(200, |s| in_driver(s, 20, 1.0, Some(0.06)));
    assert_eq!(hung.primary, Primary::Hung);
    let hang = hung.hang.as_ref().unwrap();
    assert!((175.0..=180.0).contains(&hang.seconds), "{hang:?}");
    assert!(hang.frame.starts_with("all_reduce (NCCL"), "{hang:?}");
    // Not hung: the SMs busy (a long compute kernel queued after the collective), the wait
    // not tied to a collective issued before it, the GPU idle, or waits that end each step.
    let computing = run(200, |s| in_driver(s, 20, 1.0, Some(0.8)));
    assert_ne!(computing.primary, Primary::Hung);
    assert!(computing.hang.is_none());
    let untied = run(200, |s| GpuObservation {
        driver_wait: Some(DriverWait {
            seconds: f64::from(s),
            after: None,
        }),
        ..in_driver(s, 0, 1.0, Some(0.06))
    });
    assert!(untied.hang.is_none());
    let idle = run(200, |s| in_driver(s, 20, 0.05, None));
    assert!(idle.hang.is_none());
    let stepping = run(200, |s| in_driver(s, s - s % 2, 1.0, None));
    assert_ne!(stepping.primary, Primary::Hung);
    assert!(stepping.hang.unwrap().seconds < 2.0);
}

/// communication_barrier_checkpoint: rank 1 waits in dist.barrier() for minutes while rank 0,
/// on this node, writes a checkpoint: every sign of a hang on rank 1's GPU, but its peer
/// works. It waits for rank 0, named in the hang's record, and is not hung; once rank 0 stops
/// working too (asleep, a rank that never comes), it is.
#[test]
fn a_rank_waiting_for_a_peer_that_works_on_this_node_is_not_hung() {
    let peer = "GPU 0's rank (pid 4242 (python3)), busy on the host".to_string();
    let waiting = run(200, |s| GpuObservation {
        working_peer: Some(peer.clone()),
        ..in_driver(s, 20, 1.0, Some(0.06))
    });
    assert_ne!(waiting.primary, Primary::Hung);
    let hang = waiting.hang.as_ref().unwrap();
    assert_eq!(hang.waiting_for.as_deref(), Some(peer.as_str()));
    assert!(hang.seconds > 170.0, "{hang:?}");
    let text = gpu_bottleneck_exporter::report::text_report(std::slice::from_ref(&waiting), false);
    assert!(
        text.contains("not hung: it waits for GPU 0's rank"),
        "{text}"
    );
    let alone = run(200, |s| GpuObservation {
        working_peer: (s < 100).then(|| peer.clone()),
        ..in_driver(s, 20, 1.0, Some(0.06))
    });
    assert_eq!(alone.primary, Primary::Hung);
}

/// What another node's rank waits for: `gpu_rank_working` is 1 for a rank that works (here
/// on the host: rank 0 preprocessing its dataset) and 0 for one tracked in a collective, even
/// one whose thread spins on a CPU, so the fleet's rules hold a hang alert only while a rank
/// of the job truly works.
#[test]
fn a_working_rank_is_served_as_such_and_a_tracked_hang_never_is() {
    let working = "GPU 0's rank (pid 4242 (python3)), busy on the host".to_string();
    let preprocessing = run(60, |_| GpuObservation {
        working: Some(working.clone()),
        ..healthy("GPU-a")
    });
    let stuck = run(60, |_| GpuObservation {
        working: Some(working.clone()),
        ..in_collective(1.0, 1.0)
    });
    assert!(preprocessing.working && preprocessing.hang.is_none());
    assert!(stuck.hang.is_some() && !stuck.working);
    for (verdict, served) in [(preprocessing, 1.0), (stuck, 0.0)] {
        let snapshot = gpu_bottleneck_exporter::snapshot::Snapshot {
            verdicts: vec![verdict],
            ..Default::default()
        };
        let (text, _) = crate::common::render_pinned(&snapshot);
        let f = crate::common::exposition::parse(&text, false).unwrap();
        assert_eq!(value(&f, "gpu_rank_working", &[("gpu", "0")]), Some(served));
    }
}

/// With NCCL's RAS service answered for the hung process: the rank that never reached the
/// collective is named in the report, and the ranks by state are on /metrics.
#[test]
fn a_hang_names_the_rank_ras_says_never_arrived() {
    use gpu_bottleneck_exporter::snapshot::{
        ProcessRas, RasCommunicator, RasFormat, RasMissingRank, RasRank, RasReport,
    };
    let rank = |rank: u32, all_reduces: u64| RasRank {
        rank,
        host: "10.0.0.7".into(),
        pid: Some(300 + rank),
        nvml_dev: Some(rank as i32),
        collective_counts: vec![("AllReduce".into(), all_reduces)],
        ..RasRank::default()
    };
    let answer = ProcessRas {
        pid: 4242,
        answer: Ok(RasReport {
            nccl_version: "2.28.9".into(),
            format: RasFormat::Json,
            communicators: vec![RasCommunicator {
                hash: "0xfeed".into(),
                size: 4,
                ranks: vec![rank(0, 49), rank(1, 48), rank(2, 49)],
                missing: vec![RasMissingRank {
                    rank: 3,
                    host: "10.0.0.8".into(),
                    unresponsive: true,
                    ..RasMissingRank::default()
                }],
            }],
            collection_seconds: 5.0,
            timeouts: 1,
        }),
    };
    let hung = run(200, |s| {
        let mut o = in_driver(s, 20, 1.0, Some(0.06));
        o.main_pid = Some(4242);
        o.ras = (s > 100).then(|| answer.clone());
        o
    });
    assert_eq!(hung.primary, Primary::Hung);
    let hang = hung.hang.as_ref().unwrap();
    assert_eq!(hang.pid, Some(4242));
    let peers = hang.peers.as_ref().unwrap();
    assert_eq!((peers.missing_ranks, peers.ranks_behind), (1, 1));
    let report = text_report(std::slice::from_ref(&hung), false);
    assert!(
        report.contains("rank 3 (on 10.0.0.8) does not answer"),
        "{report}"
    );
    assert!(
        report.contains(
            "rank 1 (pid 301 on 10.0.0.7 GPU 1) launched AllReduce up to 48, others up to 49"
        ),
        "{report}"
    );
    let snapshot = gpu_bottleneck_exporter::snapshot::Snapshot {
        verdicts: vec![hung],
        node: "test-node".into(),
        ..Default::default()
    };
    let (text, _) = crate::common::render_pinned(&snapshot);
    let f = crate::common::exposition::parse(&text, false).unwrap();
    let ranks = |state| {
        value(
            &f,
            "gpu_collective_hang_ranks",
            &[("gpu", "0"), ("state", state)],
        )
    };
    assert_eq!((ranks("missing"), ranks("behind")), (Some(1.0), Some(1.0)));
    // Without an answer: no such series (a 0 would claim every rank arrived).
    let plain = run(200, |s| in_driver(s, 20, 1.0, Some(0.06)));
    let snapshot = gpu_bottleneck_exporter::snapshot::Snapshot {
        verdicts: vec![plain],
        node: "test-node".into(),
        ..Default::default()
    };
    let (text, _) = crate::common::render_pinned(&snapshot);
    assert!(!text.contains("gpu_collective_hang_ranks{"));
}
