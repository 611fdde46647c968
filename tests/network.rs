//! The network source's view of the GPU processes: each one's network namespace traffic from
//! a fixture /proc sampled twice (golden files and hand-computed figures), told apart from the
//! node's own namespace.

mod common;

use std::time::Duration;

use common::exposition::value;
use common::TempDir;
use gpu_bottleneck_exporter::config::NetworkSource as NetworkConfig;
use gpu_bottleneck_exporter::snapshot::{GpuDevice, GpuProcess, GpuSnapshot, Snapshot};
use gpu_bottleneck_exporter::source::network::NetworkSource;
use gpu_bottleneck_exporter::source::{HostRoots, Source};

/// GPU 0 runs pid 4242 (in a pod's namespace), GPU 1 runs 4343 (host networking) and 5555,
/// which exited before its namespace could be read.
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
            devices: vec![device(0, &[4242]), device(1, &[4343, 5555])],
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
    let mut source = NetworkSource::new(roots.clone(), NetworkConfig::default());
    let mut snapshot = Snapshot::default();
    for (second, tree) in ["t0", "t1"].iter().enumerate() {
        for (link, dir) in [(&roots.procfs, "proc"), (&roots.sysfs, "sys")] {
            let _ = std::fs::remove_file(link);
            std::os::unix::fs::symlink(fixtures.join(tree).join(dir), link).unwrap();
        }
        snapshot = node();
        source
            .sample(&mut snapshot, Duration::from_secs(second as u64))
            .unwrap();
    }
    snapshot
}

#[test]
fn each_gpu_process_gets_its_namespace_traffic() {
    let snapshot = sampled();
    let by_pid = |pid| snapshot.network.namespaces.iter().find(|n| n.pid == pid);
    // The pod's eth0: 50 MB in and 2 MB out in 1 s; loopback (1 MB each way) left out.
    let pod = by_pid(4242).unwrap();
    assert!(!pod.host_network, "told by the namespace links");
    let rates = pod.rates.unwrap();
    assert_eq!(rates.receive_bytes_per_second, 50e6);
    assert_eq!(rates.transmit_bytes_per_second, 2e6);
    // Host networking, without readable namespace links: the node's own interfaces.
    assert!(by_pid(4343).unwrap().host_network, "told by the counters");
    assert!(by_pid(5555).is_none(), "an exited process has no namespace");
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
