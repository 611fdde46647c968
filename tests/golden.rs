//! Fixture /proc trees → exposition, compared with golden files, checked by the strict parser,
//! and the metrics reference kept in step with what is really exported.
//!
//! Each scenario under tests/fixtures has a t0 and a t1 procfs tree one second apart; the
//! sampler reads t0, then t1 (through a `proc` symlink that is swapped between ticks). A
//! scenario whose sysfs counters move too (InfiniBand) has a sysfs tree per tick, swapped the
//! same way; the others share one `sys`.
//! `UPDATE_GOLDEN=1 cargo test --test golden` rewrites tests/golden/ after a deliberate change.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::exposition::{self as strict, value, Family};
use gpu_bottleneck_exporter::config::Config;
use gpu_bottleneck_exporter::sampler::Sampler;

const SCENARIOS: [&str; 4] = ["busy-node", "old-kernel", "broken-files", "network-node"];

/// Both formats of the second tick of a scenario, with run-dependent values pinned.
fn scenario_output(name: &str) -> (String, String) {
    let fixtures = common::repo_root().join("tests/fixtures").join(name);
    let work = common::TempDir::new(name);
    let link = work.path().join("proc");
    let sys_per_tick = fixtures.join("t0/sys").exists();
    let sys_link = work.path().join("sys");
    let mut config = Config::default();
    config.sources.gpu.enabled = false; // tests/gpu_golden.rs covers the GPU source
    config.paths.procfs = link.clone();
    config.paths.sysfs = if sys_per_tick {
        sys_link.clone()
    } else {
        fixtures.join("sys")
    };
    let mut sampler = Sampler::from_config(&config);
    let mut snapshot = None;
    for (tick, tree) in ["t0", "t1"].iter().enumerate() {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(fixtures.join(tree).join("proc"), &link).unwrap();
        if sys_per_tick {
            let _ = std::fs::remove_file(&sys_link);
            std::os::unix::fs::symlink(fixtures.join(tree).join("sys"), &sys_link).unwrap();
        }
        snapshot = Some(sampler.tick(Duration::from_secs(tick as u64)));
    }
    common::render_pinned(&snapshot.unwrap())
}

#[test]
fn golden_expositions_match_and_parse_strictly() {
    for name in SCENARIOS {
        common::check_goldens(name, &scenario_output(name));
    }
}

fn parsed(name: &str) -> Vec<Family> {
    strict::parse(&scenario_output(name).0, false).unwrap()
}

#[test]
fn busy_node_figures_match_hand_computation() {
    let f = parsed("busy-node");
    let disk = |metric: &str, device: &str| value(&f, metric, &[("device", device)]);
    // nvme0n1: 950 ms busy, 2000 reads taking 12000 ms, 50 writes taking 100 ms, in 1 s.
    common::assert_close(disk("gpu_host_disk_utilization_ratio", "nvme0n1"), 0.95);
    common::assert_close(disk("gpu_host_disk_read_await_seconds", "nvme0n1"), 0.006);
    common::assert_close(disk("gpu_host_disk_write_await_seconds", "nvme0n1"), 0.002);
    common::assert_close(disk("gpu_host_disk_queue_size", "nvme0n1"), 12.1);
    common::assert_close(
        disk("gpu_host_disk_read_bytes_per_second", "nvme0n1"),
        1024000.0 * 512.0,
    );
    common::assert_close(disk("gpu_host_disk_in_flight_requests", "nvme0n1"), 7.0);
    // dm-0's counters went back (re-attached): counters shown, no rates.
    common::assert_close(disk("gpu_host_disk_reads_completed_total", "dm-0"), 12.0);
    assert_eq!(disk("gpu_host_disk_utilization_ratio", "dm-0"), None);
    // sdb appeared at t1: counters but no rates yet; sdc vanished; partition and loop excluded.
    common::assert_close(disk("gpu_host_disk_reads_completed_total", "sdb"), 20.0);
    assert_eq!(disk("gpu_host_disk_utilization_ratio", "sdb"), None);
    for absent in ["sdc", "nvme0n1p1", "loop0"] {
        assert_eq!(
            disk("gpu_host_disk_reads_completed_total", absent),
            None,
            "{absent}"
        );
    }
    // iowait went from 49.90 s to 49.90 - 0.10 s: a zero share, never negative.
    common::assert_close(value(&f, "gpu_host_cpu_iowait_ratio", &[]), 0.0);
    common::assert_close(
        value(&f, "gpu_host_cpu_seconds_total", &[("mode", "iowait")]),
        49.9,
    );
    common::assert_close(value(&f, "gpu_host_tasks_blocked", &[]), 4.0);
    common::assert_close(value(&f, "gpu_host_cpus", &[]), 4.0);
    // PSI io: 0.6 s some and 0.4 s full stalled in 1 s.
    let psi = |resource: &str, kind: &str| {
        value(
            &f,
            "gpu_host_pressure_stalled_ratio",
            &[("resource", resource), ("kind", kind)],
        )
    };
    common::assert_close(psi("io", "some"), 0.6);
    common::assert_close(psi("io", "full"), 0.4);
    common::assert_close(psi("memory", "some"), 0.0);
    // 250 pages swapped out in 1 s.
    common::assert_close(
        value(&f, "gpu_host_swap_out_bytes_per_second", &[]),
        250.0 * 4096.0,
    );
}

#[test]
fn network_node_figures_match_hand_computation() {
    let f = parsed("network-node");
    let nic = |metric: &str, labels: &[(&str, &str)]| value(&f, metric, labels);
    let eth0 = |direction| [("interface", "eth0"), ("direction", direction)];
    // eth0: 2.5 GB received and 100 MB sent in 1 s on a 25 Gb/s (3.125 GB/s) link.
    common::assert_close(
        nic("gpu_host_network_bytes_per_second", &eth0("receive")),
        2.5e9,
    );
    common::assert_close(
        nic("gpu_host_network_bytes_per_second", &eth0("transmit")),
        1e8,
    );
    common::assert_close(
        nic("gpu_host_network_utilization_ratio", &eth0("receive")),
        0.8,
    );
    common::assert_close(
        nic("gpu_host_network_utilization_ratio", &eth0("transmit")),
        0.032,
    );
    common::assert_close(
        nic(
            "gpu_host_network_link_speed_bytes_per_second",
            &[("interface", "eth0")],
        ),
        3.125e9,
    );
    common::assert_close(nic("gpu_host_network_errors_total", &eth0("receive")), 3.0);
    common::assert_close(nic("gpu_host_network_up", &[("interface", "eth0")]), 1.0);
    // eth1: re-created (counters went back), no speed (-1), down: counters and state only.
    let eth1 = [("interface", "eth1")];
    assert_eq!(
        nic(
            "gpu_host_network_bytes_per_second",
            &[eth1[0], ("direction", "receive")]
        ),
        None
    );
    assert_eq!(
        nic("gpu_host_network_link_speed_bytes_per_second", &eth1),
        None
    );
    common::assert_close(nic("gpu_host_network_up", &eth1), 0.0);
    // The node's namespace (pid 1), not the exporter's own; virtual interfaces left out.
    for absent in ["lo", "veth1234", "docker0"] {
        assert_eq!(
            nic("gpu_host_network_up", &[("interface", absent)]),
            None,
            "{absent}"
        );
    }
    common::assert_close(nic("gpu_host_network_bytes_total", &eth0("receive")), 3.5e9);
    // mlx5_0 port 1, 200 Gb/s (25 GB/s): 5e9 words sent (20 GB), 1.25e9 received (5 GB) in 1 s.
    let port = |direction| {
        [
            ("device", "mlx5_0"),
            ("port", "1"),
            ("direction", direction),
        ]
    };
    common::assert_close(
        nic("gpu_host_infiniband_bytes_per_second", &port("transmit")),
        2e10,
    );
    common::assert_close(
        nic("gpu_host_infiniband_utilization_ratio", &port("transmit")),
        0.8,
    );
    common::assert_close(
        nic("gpu_host_infiniband_utilization_ratio", &port("receive")),
        0.2,
    );
    common::assert_close(
        nic("gpu_host_infiniband_bytes_total", &port("transmit")),
        2.4e10,
    );
    let key = [("device", "mlx5_0"), ("port", "1")];
    common::assert_close(
        nic("gpu_host_infiniband_transmit_wait_ticks_per_second", &key),
        150000.0,
    );
    common::assert_close(nic("gpu_host_infiniband_port_active", &key), 1.0);
    common::assert_close(nic("gpu_host_infiniband_symbol_errors_total", &key), 3.0);
    common::assert_close(
        nic(
            "gpu_host_infiniband_rate_bytes_per_second",
            &[key[0], key[1], ("link_layer", "InfiniBand")],
        ),
        2.5e10,
    );
    // mlx5_1: a RoCE port that is down, data counters in counters_ext, no transmit wait.
    let roce = [("device", "mlx5_1"), ("port", "1")];
    common::assert_close(nic("gpu_host_infiniband_port_active", &roce), 0.0);
    common::assert_close(
        nic(
            "gpu_host_infiniband_bytes_total",
            &[roce[0], roce[1], ("direction", "receive")],
        ),
        40.0,
    );
    assert_eq!(
        nic("gpu_host_infiniband_transmit_wait_ticks_total", &roce),
        None
    );
    // NFS: 400 READs in 1 s taking 10 s of round trips (25 ms each), 50 MiB read; the CSI
    // bind mount of the same export repeats its statistics and is not counted twice.
    let read = [("mountpoint", "/mnt/datasets"), ("operation", "READ")];
    common::assert_close(nic("gpu_host_nfs_operations_per_second", &read), 400.0);
    common::assert_close(nic("gpu_host_nfs_rtt_seconds", &read), 0.025);
    common::assert_close(nic("gpu_host_nfs_execute_seconds", &read), 0.027);
    common::assert_close(
        nic(
            "gpu_host_nfs_read_bytes_per_second",
            &[("mountpoint", "/mnt/datasets")],
        ),
        52_428_800.0,
    );
    let getattr = [("mountpoint", "/mnt/datasets"), ("operation", "GETATTR")];
    common::assert_close(nic("gpu_host_nfs_rtt_seconds", &getattr), 0.002);
    let mounts: Vec<&str> = f
        .iter()
        .filter(|family| family.name.starts_with("gpu_host_network_filesystem"))
        .flat_map(|family| &family.samples)
        .map(|s| s.labels["mountpoint"].as_str())
        .collect();
    assert_eq!(mounts, ["/lustre", "/mnt/bucket", "/mnt/datasets"]);
}

#[test]
fn old_kernel_reports_pressure_unsupported_not_failed() {
    let f = parsed("old-kernel");
    let source = |metric: &str, name: &str| value(&f, metric, &[("source", name)]);
    common::assert_close(source("gpu_exporter_source_supported", "pressure"), 0.0);
    common::assert_close(source("gpu_exporter_source_up", "pressure"), 0.0);
    common::assert_close(source("gpu_exporter_source_errors_total", "pressure"), 0.0);
    assert_eq!(value(&f, "gpu_host_pressure_stalled_ratio", &[]), None);
    common::assert_close(
        value(&f, "gpu_host_cpu_seconds_total", &[("mode", "steal")]),
        0.0,
    );
    common::assert_close(
        value(
            &f,
            "gpu_host_disk_write_await_seconds",
            &[("device", "sda")],
        ),
        0.002,
    );
}

#[test]
fn broken_files_degrade_only_their_own_source() {
    let f = parsed("broken-files");
    let source = |metric: &str, name: &str| value(&f, metric, &[("source", name)]);
    common::assert_close(source("gpu_exporter_source_up", "cpu"), 1.0);
    common::assert_close(source("gpu_exporter_source_up", "disk"), 0.0);
    common::assert_close(source("gpu_exporter_source_supported", "disk"), 1.0);
    common::assert_close(source("gpu_exporter_source_errors_total", "disk"), 1.0);
    common::assert_close(source("gpu_exporter_source_errors_total", "memory"), 2.0);
    assert_eq!(value(&f, "gpu_host_disk_reads_completed_total", &[]), None);
    assert_eq!(value(&f, "gpu_host_memory_total_bytes", &[]), None);
    // A cpu pressure file without a `full` line (kernels before 5.13).
    let psi = |kind: &str| {
        value(
            &f,
            "gpu_host_pressure_stalled_ratio",
            &[("resource", "cpu"), ("kind", kind)],
        )
    };
    common::assert_close(psi("some"), 0.2);
    assert_eq!(psi("full"), None);
    common::assert_close(value(&f, "gpu_host_cpu_busy_ratio", &[]), 0.5);
}

/// (type, label names) per sample name, over every golden OpenMetrics file (each of which
/// its own test keeps equal to the real output).
fn exported_metrics() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut metrics = BTreeMap::new();
    let mut goldens: Vec<_> = std::fs::read_dir(common::repo_root().join("tests/golden"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".om.txt"))
        .collect();
    goldens.sort();
    assert!(goldens.len() >= 5, "golden files missing: {goldens:?}");
    for path in goldens {
        let text = std::fs::read_to_string(&path).unwrap();
        for family in strict::parse(&text, true).unwrap() {
            for sample in family.samples {
                let entry = metrics
                    .entry(sample.name)
                    .or_insert_with(|| (family.kind.clone(), BTreeSet::new()));
                entry.1.extend(sample.labels.into_keys());
            }
        }
    }
    metrics
}

#[test]
fn metrics_reference_matches_the_real_output_both_ways() {
    let reference = std::fs::read_to_string(common::repo_root().join("docs/metrics.md")).unwrap();
    let mut documented = BTreeMap::new();
    for row in reference.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert!(cells.len() >= 5, "malformed reference row {row}");
        let name = cells[0].trim_matches('`').to_string();
        let labels: BTreeSet<String> = cells[3]
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_string())
            .filter(|l| !l.is_empty() && l != "—")
            .collect();
        assert!(
            documented
                .insert(name.clone(), (cells[1].to_string(), labels))
                .is_none(),
            "{name} documented twice"
        );
    }
    let exported = exported_metrics();
    let missing: Vec<_> = exported
        .keys()
        .filter(|k| !documented.contains_key(*k))
        .collect();
    let stale: Vec<_> = documented
        .keys()
        .filter(|k| !exported.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "exported but not in docs/metrics.md: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "in docs/metrics.md but never exported: {stale:?}"
    );
    for (name, actual) in &exported {
        assert_eq!(
            &documented[name], actual,
            "type or labels of {name} differ from docs/metrics.md"
        );
    }
}
