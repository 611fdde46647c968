//! Fault injection against the real binary, with the same checks in every phase: the page
//! parses strictly (no duplicate series), it is fresh (the sampler is not stuck behind the
//! fault), the faulty source says so in its self-metrics, its series are gone rather than
//! stale, everything else keeps updating — and all of it comes back when the fault clears.
//!
//! Faults covered elsewhere with the same checks: NVML library missing and appearing later,
//! a library without half the symbols, a GPU lost and back, injected call errors
//! (tests/gpu.rs); processes exiting between listing and reading (tests/process.rs, tests/gpu.rs);
//! the kubelet socket removed and restored (tests/kubernetes.rs); a blocked /proc read
//! (tests/binary.rs).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::exposition::{value, Family};
use common::{Exporter, Scenario, TempDir};

/// Checks every fault phase shares; returns the samples counter.
fn assert_fresh(page: &[Family]) -> f64 {
    let age = value(page, "gpu_exporter_sample_age_seconds", &[]).unwrap();
    // Ticks are 200 ms; a sampler waiting on the fault would let this grow without bound.
    assert!(age < 2.0, "sample age {age} s: the sampler is stuck");
    value(page, "gpu_exporter_samples_total", &[]).unwrap()
}

fn source_up(page: &[Family], source: &str) -> Option<f64> {
    value(page, "gpu_exporter_source_up", &[("source", source)])
}

fn has_series(page: &[Family], prefix: &str) -> bool {
    page.iter()
        .flat_map(|f| &f.samples)
        .any(|s| s.name.starts_with(prefix))
}

fn threads(exporter: &Exporter) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{}/status", exporter.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn gpu_value(page: &[Family], metric: &str, gpu: &str) -> Option<f64> {
    value(page, metric, &[("gpu", gpu)])
}

#[test]
fn a_gpu_call_hanging_ten_seconds_takes_down_that_gpu_only_and_it_comes_back() {
    let healthy = "devices:\n  - uuid: GPU-hang\n    temperature: 50\n  - uuid: GPU-fine\n    temperature: 55\n";
    let scenario = Scenario::new(healthy);
    let exporter = scenario.start(&common::fake_nvml(false), "    timeout: 300ms\n");
    exporter.metrics_when(|p| gpu_value(p, "gpu_temperature_celsius", "0") == Some(50.0));
    let threads_before = threads(&exporter);

    scenario.write(&healthy.replace(
        "GPU-hang\n",
        "GPU-hang\n    delays_ms: {nvmlDeviceGetTemperature: 10000}\n",
    ));
    let hang_started = Instant::now();
    exporter.metrics_when(|p| gpu_value(p, "gpu_up", "0") == Some(0.0));
    // Watch five seconds of the hang.
    let mut samples = 0.0;
    for _ in 0..5 {
        let page = exporter.metrics();
        let now = assert_fresh(&page);
        assert!(now > samples, "ticks keep coming");
        samples = now;
        assert_eq!(gpu_value(&page, "gpu_up", "0"), Some(0.0));
        // Identity stays, readings go: nothing stale is served for the hung GPU.
        assert_eq!(
            value(&page, "gpu_info", &[("gpu", "0")]).map(|_| ()),
            Some(())
        );
        assert_eq!(gpu_value(&page, "gpu_temperature_celsius", "0"), None);
        assert_eq!(gpu_value(&page, "gpu_temperature_celsius", "1"), Some(55.0));
        assert_eq!(source_up(&page, "gpu"), Some(1.0));
        assert_eq!(source_up(&page, "cpu"), Some(1.0));
        // One thread stays blocked in the call and no new one is started per tick; the XID
        // watcher is replaced when the set of answering GPUs changes, and the old one may
        // still be finishing its current wait.
        assert!(threads(&exporter) <= threads_before + 1);
        std::thread::sleep(Duration::from_secs(1));
    }

    scenario.write(healthy);
    // The hung call returns after its 10 s; the next tick reads the GPU again.
    let page = exporter.metrics_when(|p| gpu_value(p, "gpu_up", "0") == Some(1.0));
    eprintln!(
        "GPU 0 back {:.1} s after its call started hanging for 10 s",
        hang_started.elapsed().as_secs_f64()
    );
    assert_fresh(&page);
    assert_eq!(gpu_value(&page, "gpu_temperature_celsius", "0"), Some(50.0));
    exporter.wait_for(|| threads(&exporter) == threads_before);
}

/// Copies the node-wide files the host sources read from the real /proc.
fn host_proc_copy(root: &Path) {
    std::fs::create_dir_all(root.join("pressure")).unwrap();
    for file in [
        "stat",
        "diskstats",
        "meminfo",
        "vmstat",
        "pressure/cpu",
        "pressure/io",
        "pressure/memory",
    ] {
        if let Ok(text) = std::fs::read_to_string(Path::new("/proc").join(file)) {
            std::fs::write(root.join(file), text).unwrap();
        }
    }
}

/// Makes `file` unreadable the way a broken mount does: it is now a directory (EISDIR).
fn break_file(root: &Path, file: &str) {
    let path = root.join(file);
    std::fs::rename(&path, root.join(format!("{file}.good").replace('/', "_"))).unwrap();
    std::fs::create_dir(&path).unwrap();
}

fn repair_file(root: &Path, file: &str) {
    let path = root.join(file);
    std::fs::remove_dir(&path).unwrap();
    std::fs::rename(root.join(format!("{file}.good").replace('/', "_")), &path).unwrap();
}

#[test]
fn unreadable_proc_files_take_down_their_source_only_until_they_are_back() {
    let dir = TempDir::new("faults-proc");
    let root = dir.path().join("proc");
    host_proc_copy(&root);
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "sample_interval: 200ms\nsources:\n  gpu: {enabled: false}\n  process: {enabled: false}\n  kubernetes: {enabled: false}\n  disk: {include_partitions: true, exclude: ''}\n",
    )
    .unwrap();
    let exporter = Exporter::start(&[
        "--config",
        config.to_str().unwrap(),
        "--path.procfs",
        root.to_str().unwrap(),
    ]);
    let healthy = |p: &[Family]| {
        ["cpu", "disk", "memory"]
            .iter()
            .all(|s| source_up(p, s) == Some(1.0))
    };
    let page = exporter.metrics_when(healthy);
    let pressure = source_up(&page, "pressure");
    assert!(
        has_series(&page, "gpu_host_disk_"),
        "this host has block devices"
    );
    assert!(has_series(&page, "gpu_host_memory_"));
    let errors = |p: &[Family], s: &str| {
        value(p, "gpu_exporter_source_errors_total", &[("source", s)]).unwrap()
    };

    for file in ["diskstats", "meminfo"] {
        break_file(&root, file);
    }
    let page = exporter
        .metrics_when(|p| source_up(p, "disk") == Some(0.0) && source_up(p, "memory") == Some(0.0));
    std::thread::sleep(Duration::from_millis(600));
    let later = exporter.metrics();
    assert_fresh(&later);
    assert!(
        errors(&later, "disk") > errors(&page, "disk"),
        "each failed tick counts"
    );
    assert!(
        !has_series(&later, "gpu_host_disk_"),
        "no stale disk series"
    );
    assert!(
        !has_series(&later, "gpu_host_memory_"),
        "no stale memory series"
    );
    assert_eq!(source_up(&later, "cpu"), Some(1.0));
    assert_eq!(source_up(&later, "pressure"), pressure);
    assert_eq!(source_up(&later, "disk"), Some(0.0));
    assert_eq!(
        value(
            &later,
            "gpu_exporter_source_supported",
            &[("source", "disk")]
        ),
        Some(1.0),
        "a broken file is a failure, not an unsupported source"
    );

    for file in ["diskstats", "meminfo"] {
        repair_file(&root, file);
    }
    let page = exporter.metrics_when(healthy);
    assert_fresh(&page);
    assert!(has_series(&page, "gpu_host_disk_"));
    assert!(has_series(&page, "gpu_host_memory_"));
}
