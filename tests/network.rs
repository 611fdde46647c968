//! The network source's view of the GPU processes: each one's network namespace traffic from
//! a fixture /proc sampled twice (golden files and hand-computed figures), told apart from the
//! node's own namespace.

mod common;

use std::time::Duration;

use common::exposition::value;
use common::TempDir;
use gpu_bottleneck_exporter::analysis::observe;
use gpu_bottleneck_exporter::config::{MountsConfig, NetworkConfig};
use gpu_bottleneck_exporter::snapshot::{GpuDevice, GpuProcess, GpuSnapshot, Snapshot};
use gpu_bottleneck_exporter::source::network::{
    InfinibandSource, NetworkFilesystemsSource, NetworkSource,
};
use gpu_bottleneck_exporter::source::{HostRoots, Source};

/// GPU 0 runs pid 4242 (in a pod's namespace) and 4244 (the same pod's second rank, whose
/// namespace link alone the fixture has), GPU 1 runs 4343 (host networking), 5555, which
/// exited before its namespace could be read, and 4545 (host networking, its namespace link
/// pid 1's, no `net/dev` of its own in the fixture).
fn node() -> Snapshot {
    let device = |index: u32, pids: &[u32]| GpuDevice {
        index,
        uuid: format!("GPU-net{index}"),
        up: true,
        process_count: Some(pids.len() as u32),
        processes: pids
            .iter()
            .map(|&pid| GpuProcess {
                pid,
                command: "python3".into(),
                kind: "compute",
                ..GpuProcess::default()
            })
            .collect(),
        ..GpuDevice::default()
    };
    Snapshot {
        gpu: Some(GpuSnapshot {
            nvml_up: true,
            devices: vec![device(0, &[4242, 4244]), device(1, &[4343, 5555, 4545])],
            ..GpuSnapshot::default()
        }),
        ..Snapshot::default()
    }
}

/// The network-node fixture's t0 and t1 sampled one second apart; the second snapshot.
fn sampled() -> Snapshot {
    let work = TempDir::new("network");
    let fixtures = common::repo_root().join("tests/fixtures/network-node");
    let roots = HostRoots {
        procfs: work.path().join("proc"),
        sysfs: work.path().join("sys"),
    };
    let mut sources: Vec<Box<dyn Source>> = vec![
        Box::new(NetworkSource::new(roots.clone(), NetworkConfig::default())),
        Box::new(InfinibandSource::new(&roots.sysfs)),
        Box::new(NetworkFilesystemsSource::new(
            roots.clone(),
            MountsConfig::default(),
        )),
    ];
    let mut snapshot = Snapshot::default();
    for (second, tree) in ["t0", "t1"].iter().enumerate() {
        for (link, dir) in [(&roots.procfs, "proc"), (&roots.sysfs, "sys")] {
            let _ = std::fs::remove_file(link);
            std::os::unix::fs::symlink(fixtures.join(tree).join(dir), link).unwrap();
        }
        snapshot = node();
        for source in &mut sources {
            source
                .sample(&mut snapshot, Duration::from_secs(second as u64))
                .unwrap();
        }
    }
    snapshot
}

#[test]
fn each_gpu_process_gets_its_namespace_traffic() {
    let snapshot = sampled();
    let by_pid = |pid| snapshot.network.processes.iter().find(|n| n.pid == pid);
    // The pod's eth0: 50 MB in and 2 MB out in 1 s; loopback (1 MB each way) left out.
    let pod = by_pid(4242).unwrap();
    assert!(!pod.host_network, "told by the namespace links");
    let rates = pod.rates.unwrap();
    assert_eq!(rates.receive_bytes_per_second, 50e6);
    assert_eq!(rates.transmit_bytes_per_second, 2e6);
    // The pod's mounts: the node's NFS export, where the container sees it.
    let mounts = pod.mounts.as_ref().unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(
        (
            mounts[0].device.as_str(),
            mounts[0].fstype.as_str(),
            mounts[0].mount_point.as_str()
        ),
        ("10.20.0.5:/datasets", "nfs4", "/data")
    );
    // Host networking, without readable namespace links: the node's own interfaces.
    assert!(by_pid(4343).unwrap().host_network, "told by the counters");
    assert_eq!(by_pid(4343).unwrap().mounts, None, "no mountinfo to read");
    assert!(by_pid(5555).is_none(), "an exited process has no namespace");
    // A namespace is read once a tick: the pod's second rank gets the first one's reading,
    // a process in the node's namespace the node's physical interfaces.
    let second = by_pid(4244).expect("read through its pod's namespace");
    assert_eq!((second.host_network, second.rates), (false, pod.rates));
    let host = by_pid(4545).expect("read through the node's namespace");
    assert!(host.host_network);
    assert_eq!(host.rates, by_pid(4343).unwrap().rates);
    let f = common::check_goldens("network-processes", &common::render_pinned(&snapshot));
    let series = |metric: &str, pid: &str, direction: Option<&str>| {
        let mut labels = vec![("pid", pid)];
        labels.extend(direction.map(|d| ("direction", d)));
        value(&f, metric, &labels)
    };
    common::assert_close(
        series(
            "gpu_process_network_bytes_per_second",
            "4242",
            Some("receive"),
        ),
        50e6,
    );
    common::assert_close(series("gpu_process_host_network", "4242", None), 0.0);
    common::assert_close(series("gpu_process_host_network", "4343", None), 1.0);
}

#[test]
fn a_job_is_held_to_the_mounts_it_has_and_the_node_link_it_loads() {
    let observed = observe(&sampled(), 1.0);
    // GPU 0's pod has the NFS export mounted: its figures are the job's input.
    let mount = observed[0].mount.as_ref().unwrap();
    assert_eq!(mount.mount_point, "/mnt/datasets");
    common::assert_close(Some(mount.requests_per_second), 400.0 + 100.0 + 20.0 + 20.0);
    common::assert_close(Some(mount.read_rtt_seconds), 0.025);
    assert_eq!(
        observed[0].network_mounts,
        ["nfs4 at /data (10.20.0.5:/datasets)"]
    );
    common::assert_close(observed[0].job_ingress, 50e6);
    // GPU 1's process has no readable mountinfo: the node's mount is not pinned on it.
    assert_eq!(observed[1].mount, None);
    // The node's busiest link (eth0 receives and mlx5_0 port 1 sends at 80 % of their
    // speeds) is the node's: the same for every GPU.
    let link = observed[0].link.as_ref().unwrap();
    assert_eq!(link, observed[1].link.as_ref().unwrap());
    common::assert_close(Some(link.utilization()), 0.8);
}
