//! Verdicts with the network in view: input fetched over the wire named by its mount or its
//! link, and collectives crossing a saturated or slow link; each with the near miss that
//! must not read that way.

use crate::common::scenario::{active, healthy, remote_loader, run, stacks};
use gpu_bottleneck_exporter::analysis::GpuObservation;
use gpu_bottleneck_exporter::analysis::{explanation, next_steps, text};
use gpu_bottleneck_exporter::analysis::{
    Basis, GpuVerdict, InputSource, Kind, LinkLoad, MountLoad, Primary,
};
use gpu_bottleneck_exporter::snapshot::{Activity, Reason};

/// A loop whose two workers read small files from an NFS mount (25 ms a READ round trip),
/// the local disks quiet, the GPU 25 % busy.
fn nfs_loader(o: &mut GpuObservation) {
    remote_loader(o);
    o.job_ingress = Some(8e6);
    o.mount = Some(MountLoad {
        mount_point: "/mnt/datasets".into(),
        device: "10.20.0.5:/datasets".into(),
        fstype: "nfs4".into(),
        requests_per_second: 320.0,
        read_rtt_seconds: 0.025,
        read_bytes_per_second: 8e6,
    });
    o.network_mounts = vec!["nfs4 at /mnt/datasets".into()];
}

fn evidence<'a>(verdict: &'a GpuVerdict, kind: Kind, name: &str) -> Option<&'a str> {
    let k = verdict.kind(kind)?;
    let e = k.scored.evidence.iter().find(|e| e.signal.name() == name)?;
    Some(e.detail.as_str())
}

#[test]
fn a_loop_reading_a_slow_nfs_mount_names_the_mount() {
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        nfs_loader(&mut o);
        o.stacks = stacks(Activity::DataLoader, 0.92);
        o
    });
    assert_eq!(
        verdict.primary,
        Primary::Bottleneck(Kind::DataIo),
        "{:?}",
        active(&verdict)
    );
    assert_eq!(verdict.basis(), Basis::Observed);
    let lost = verdict.lost.as_ref().unwrap();
    assert_eq!(lost.input, Some(InputSource::Remote));
    let mount = evidence(&verdict, Kind::DataIo, "busiest_mount").unwrap();
    assert!(
        mount.contains("/mnt/datasets (10.20.0.5:/datasets, nfs4)"),
        "{mount}"
    );
    assert!(mount.contains("READ round trip 25.0 ms"), "{mount}");
    // The split names the mount with its round trip, and the report says so.
    let named = lost.reasons.iter().find_map(|r| match r {
        Reason::Input { remote, .. } => remote.nfs.clone(),
        _ => None,
    });
    let (mount_point, _, rtt) = named.expect("the NFS mount named in the reasons");
    assert_eq!(mount_point, "/mnt/datasets");
    assert!((rtt - 0.025).abs() < 0.002, "{rtt}");
    let said: Vec<String> = lost.reasons.iter().map(text::reason).collect();
    assert!(
        said.iter()
            .any(|r| r.contains("NFS /mnt/datasets (10.20.0.5:/datasets) answers READs in 25.0 ms")),
        "{said:?}"
    );
    assert!(explanation(&verdict).contains("remote source"));
    assert!(next_steps(&verdict)[0].contains("local NVMe"));
}

/// Without stacks the counters alone cannot tell a loop waiting for remote input from one
/// that synchronizes ("bursty GPU, quiet CPU"); a slow network filesystem being read is the
/// side that is busy, so it tips the inference towards data_io.
#[test]
fn without_stacks_a_slow_mount_being_read_is_inferred_data_io() {
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        nfs_loader(&mut o);
        o
    });
    assert_eq!(
        verdict.primary,
        Primary::Bottleneck(Kind::DataIo),
        "{:?}",
        active(&verdict)
    );
    assert_eq!(verdict.basis(), Basis::Inferred);
    assert!(!active(&verdict).contains(&Kind::SyncStall));
    // Near miss: the mount answers in half a millisecond: nothing network-bound to see, and
    // the counters read as they did before.
    let quick = run(40, |_| {
        let mut o = healthy("GPU-a");
        nfs_loader(&mut o);
        if let Some(m) = o.mount.as_mut() {
            m.read_rtt_seconds = 0.0005;
        }
        o
    });
    assert_eq!(quick.primary, Primary::Bottleneck(Kind::SyncStall));
}

/// A rank seen in its all-reduce 70 % of the time, on a node whose only NIC is 10 GbE and
/// runs at 90 % in both directions.
fn all_reduce_over(o: &mut GpuObservation, receive: f64, transmit: f64, gbits: f64) {
    o.busy = Some(0.4);
    o.idle_share = Some(0.5);
    o.busiest_thread = Some(0.3);
    o.stacks = stacks(Activity::Collective, 0.7);
    o.link = Some(LinkLoad {
        name: "eth0".into(),
        speed_bytes_per_second: gbits * 125e6,
        receive_utilization: receive,
        transmit_utilization: transmit,
        transmit_wait_per_second: None,
    });
}

#[test]
fn collectives_over_a_saturated_slow_link_are_inter_node_communication() {
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        all_reduce_over(&mut o, 0.9, 0.9, 10.0);
        o
    });
    assert_eq!(verdict.primary, Primary::Bottleneck(Kind::Communication));
    let slow = evidence(&verdict, Kind::Communication, "slow_link").unwrap();
    assert!(
        slow.contains("eth0 runs at 10 Gb/s, below the 25 Gb/s"),
        "{slow}"
    );
    let link = evidence(&verdict, Kind::Communication, "busiest_link").unwrap();
    assert!(link.contains("at 90 % in, 90 % out"), "{link}");
    assert!(explanation(&verdict).contains("network link"));
    assert!(next_steps(&verdict)
        .iter()
        .any(|s| s.contains("NCCL_SOCKET_IFNAME")));
    // Near miss: the same wait on a 100 Gb/s link that only receives (input arriving, not an
    // all-reduce): communication still, but not the network's fault.
    let verdict = run(40, |_| {
        let mut o = healthy("GPU-a");
        all_reduce_over(&mut o, 0.9, 0.05, 100.0);
        o
    });
    assert_eq!(verdict.primary, Primary::Bottleneck(Kind::Communication));
    assert!(evidence(&verdict, Kind::Communication, "slow_link").is_none());
    assert!(!explanation(&verdict).contains("network link"));
}

/// Real DDP over a saturated link: NCCL returns at once, the host waits at the step's sync
/// (a sync in the stacks, timed in the driver by the probes while all-reduces are issued),
/// and the GPU reads busy — NCCL's kernels spin, SMs empty — while the gradients cross the
/// wire. No GPU starves, no frame names a collective, and every rank spins alike: the link
/// names itself anyway.
#[test]
fn a_saturated_link_names_itself_while_the_gpus_spin_in_nccl() {
    let spinning = |utilization: f64| {
        run(40, move |_| {
            let mut o = healthy("GPU-a");
            o.busy = Some(0.97);
            o.sm_activity = Some(0.4);
            o.idle_share = Some(0.02);
            o.stacks = stacks(Activity::GpuSync, 0.6);
            o.collective_wait = Some(0.6);
            o.link = Some(LinkLoad {
                name: "ib0".into(),
                speed_bytes_per_second: 25.0 * 125e6,
                receive_utilization: utilization,
                transmit_utilization: utilization,
                transmit_wait_per_second: None,
            });
            o
        })
    };
    let saturated = spinning(0.95);
    assert_eq!(saturated.primary, Primary::Bottleneck(Kind::Communication));
    let communication =
        saturated
            .lost
            .as_ref()
            .unwrap()
            .share(gpu_bottleneck_exporter::snapshot::Cause::Kind(
                Kind::Communication,
            ));
    // At most the time its SMs sat empty (0.57), at most the host's wait (0.6).
    assert!((0.5..=0.58).contains(&communication), "{communication}");
    let link = evidence(&saturated, Kind::Communication, "busiest_link").unwrap();
    assert!(
        link.contains("ib0 (25 Gb/s) at 95 % in, 95 % out"),
        "{link}"
    );
    assert!(explanation(&saturated).contains("network link"));
    // Near miss: the same loop with the link quiet waits for its own small kernels.
    let quiet = spinning(0.05);
    assert_eq!(quiet.primary, Primary::Bottleneck(Kind::KernelEfficiency));
}

/// A rank whose job's other ranks run on other nodes (its launcher's WORLD_SIZE past its
/// LOCAL_WORLD_SIZE): no rank here to compare its spin with, so the time its host waited in
/// the driver after issuing collectives, with the SMs empty, is taken for waiting on them (a
/// straggler elsewhere keeps every rank here spinning alike). A job on this node alone keeps
/// the near miss: its empty SMs are its own kernels'.
#[test]
fn a_rank_whose_peers_are_on_other_nodes_spins_for_them() {
    let rank = |spans: Option<bool>| {
        run(40, move |_| {
            let mut o = healthy("GPU-a");
            o.busy = Some(0.98);
            o.sm_activity = Some(0.38);
            o.idle_share = Some(0.02);
            o.stacks = stacks(Activity::GpuSync, 0.5);
            o.collective_wait = Some(0.45);
            o.job_spans_nodes = spans;
            o
        })
    };
    let remote = rank(Some(true));
    assert_eq!(remote.primary, Primary::Bottleneck(Kind::Communication));
    let communication =
        remote
            .lost
            .as_ref()
            .unwrap()
            .share(gpu_bottleneck_exporter::snapshot::Cause::Kind(
                Kind::Communication,
            ));
    // The host's wait (0.45), within the empty-SM time (0.60).
    assert!((0.4..=0.46).contains(&communication), "{communication}");
    let report = gpu_bottleneck_exporter::report::text_report(std::slice::from_ref(&remote), false);
    assert!(report.contains("ranks on other nodes"), "{report}");
    for alone in [Some(false), None] {
        assert_eq!(
            rank(alone).primary,
            Primary::Bottleneck(Kind::KernelEfficiency),
            "{alone:?}"
        );
    }
}
