//! The node's busiest processes outside the GPU process trees, read from real processes (a CPU
//! hog, a disk writer, and a hog inside a GPU process's tree that must not be named), and
//! their series against a golden file. The unprivileged run is in tests/kubernetes.rs.

mod common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Reaped, TempDir};
use gpu_bottleneck_exporter::config::{ConfigDuration, CulpritsConfig};
use gpu_bottleneck_exporter::snapshot::{
    Culprits, GpuDevice, GpuProcess, GpuSnapshot, NodeProcess, Snapshot,
};
use gpu_bottleneck_exporter::source::culprits::CulpritsSource;
use gpu_bottleneck_exporter::source::Source;

fn node_with_gpu_process(pid: u32, wanted: bool) -> Snapshot {
    Snapshot {
        culprits_wanted: wanted,
        gpu: Some(GpuSnapshot {
            nvml_up: true,
            devices: vec![GpuDevice {
                uuid: "GPU-culprits".into(),
                up: true,
                processes: vec![GpuProcess {
                    pid,
                    ..GpuProcess::default()
                }],
                ..GpuDevice::default()
            }],
            ..GpuSnapshot::default()
        }),
        ..Snapshot::default()
    }
}

fn spawn(script: &str) -> Reaped {
    Reaped(
        Command::new("sh")
            .args(["-c", script])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn the_busiest_processes_outside_the_gpu_trees_are_named() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: reads other processes' io as root");
        return;
    }
    let scratch = TempDir::new("culprits");
    let hog = spawn("while :; do :; done");
    // Synchronous writes land on storage as they are made (write_bytes counts them).
    let writer = spawn(&format!(
        "while :; do dd if=/dev/zero of={} bs=64k count=16 oflag=dsync 2>/dev/null; done",
        scratch.path().join("out").display()
    ));
    // A "GPU process" whose own child hogs a CPU: inside the trees, never a culprit.
    let rank = spawn("sh -c 'while :; do :; done' & wait");
    let config = CulpritsConfig {
        interval: ConfigDuration(Duration::from_millis(500)),
        ..CulpritsConfig::default()
    };
    let mut source = CulpritsSource::new(PathBuf::from("/proc"), config);

    // Not wanted: no pass, nothing named.
    let mut snapshot = node_with_gpu_process(rank.0.id(), false);
    source.sample(&mut snapshot, Duration::ZERO).unwrap();
    assert_eq!(snapshot.culprits, None);

    let mut culprits = None;
    for tick in 1..=8u64 {
        std::thread::sleep(Duration::from_millis(500));
        let mut snapshot = node_with_gpu_process(rank.0.id(), true);
        source
            .sample(&mut snapshot, Duration::from_millis(500 * tick))
            .unwrap();
        culprits = snapshot.culprits;
    }
    let culprits = culprits.expect("named after two passes");
    let hog_pid = hog.0.id();
    let by_cpu: Vec<u32> = culprits.by_cpu.iter().map(|p| p.pid).collect();
    assert!(by_cpu.contains(&hog_pid), "{culprits:#?}");
    let hog = culprits.by_cpu.iter().find(|p| p.pid == hog_pid).unwrap();
    // In cores: a busy loop's share of one (0.18 on a loaded CI machine), never a percentage.
    assert!(hog.cpu_cores > 0.05 && hog.cpu_cores <= 1.05, "{hog:?}");
    assert_eq!(hog.command, "sh");
    assert!(culprits.by_cpu.len() <= 5 && culprits.by_disk.len() <= 5);
    // The rank's own hog is its tree's business.
    let rank_tree: Vec<u32> =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", rank.0.id()))
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
    assert!(!rank_tree.is_empty());
    assert!(
        culprits
            .by_cpu
            .iter()
            .all(|p| p.pid != rank.0.id() && !rank_tree.contains(&p.pid)),
        "{culprits:#?}"
    );
    // The writer's dd processes come and go; the loop's shell (whose io takes in each dd it
    // reaps) or a dd is named by disk. Other tests running beside this one write too, so the
    // writer is found by who it is, not by being the first that writes.
    let writer_pid = writer.0.id();
    assert!(
        culprits.by_disk.iter().any(|p| {
            p.write_bytes_per_second.unwrap_or(0.0) > 0.0
                && (p.pid == writer_pid || p.command == "dd")
        }),
        "{culprits:#?}"
    );
    drop(writer);
    // Back to not wanted: forgotten.
    let mut snapshot = node_with_gpu_process(rank.0.id(), false);
    source
        .sample(&mut snapshot, Duration::from_secs(10))
        .unwrap();
    assert_eq!(snapshot.culprits, None);
    // Unless asked for always.
    let config = CulpritsConfig {
        interval: ConfigDuration(Duration::from_millis(500)),
        always: true,
        ..CulpritsConfig::default()
    };
    let mut source = CulpritsSource::new(PathBuf::from("/proc"), config);
    let mut snapshot = node_with_gpu_process(rank.0.id(), false);
    for tick in 0..3u64 {
        std::thread::sleep(Duration::from_millis(500));
        snapshot = node_with_gpu_process(rank.0.id(), false);
        source
            .sample(&mut snapshot, Duration::from_millis(500 * tick))
            .unwrap();
    }
    assert!(snapshot
        .culprits
        .is_some_and(|c| c.by_cpu.iter().any(|p| p.pid == hog_pid)));
}

#[test]
fn culprits_are_served_as_a_bounded_set_of_series() {
    let mut snapshot = node_with_gpu_process(4242, true);
    snapshot.culprits = Some(Culprits {
        by_cpu: vec![NodeProcess {
            pid: 812,
            command: "stress-ng".into(),
            pod_uid: "3f2a0000-0000-4000-8000-000000000812".into(),
            cpu_cores: 1.9,
            ..NodeProcess::default()
        }],
        by_disk: vec![NodeProcess {
            pid: 913,
            command: "updatedb".into(),
            cpu_cores: 0.1,
            read_bytes_per_second: Some(310e6),
            write_bytes_per_second: Some(0.0),
            ..NodeProcess::default()
        }],
    });
    let page = common::check_goldens("culprits", &common::render_pinned(&snapshot));
    let value = |name, labels: &[(&str, &str)]| common::exposition::value(&page, name, labels);
    assert_eq!(
        value("gpu_host_top_process_cpu_cores", &[("pid", "812")]),
        Some(1.9)
    );
    assert_eq!(
        value(
            "gpu_host_top_process_disk_bytes_per_second",
            &[("pid", "913"), ("direction", "read")]
        ),
        Some(310e6)
    );
}
