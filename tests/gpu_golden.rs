//! The GPU source through the fake NVML library, in process, with the library's clock stepped
//! by the test so the exposition is the same on every run: compared with golden files and
//! parsed strictly. This is the only test binary that loads the fake library into its own
//! process (the library keeps global state, like the real one); the others run the exporter
//! binary against it.

mod common;

use std::time::{Duration, Instant};

use common::exposition::value;
use gpu_bottleneck_exporter::config::Config;
use gpu_bottleneck_exporter::sampler::Sampler;
use gpu_bottleneck_exporter::snapshot::Snapshot;
use gpu_bottleneck_exporter::source;

fn gpu_only_config(library: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.sources.cpu.enabled = false;
    config.sources.disk.enabled = false;
    config.sources.pressure.enabled = false;
    config.sources.memory.enabled = false;
    config.sources.network.enabled = false; // tests/golden.rs and tests/network.rs cover these
    config.sources.infiniband.enabled = false;
    config.sources.network_filesystems.enabled = false;
    config.sources.process.enabled = false; // tests/process.rs covers it
    config.sources.kubernetes.enabled = false; // tests/kubernetes.rs covers it
                                               // The culprits read the live /proc (what is readable depends on the host); tests/culprits.rs
                                               // covers them.
    config.sources.culprits.enabled = false;
    // What the probes may do depends on the host's privileges; tests/cuda_probes.rs covers them.
    config.sources.cuda.enabled = false;
    config.sources.gpu.nvml_library = library.to_path_buf();
    config.sources.gpu.max_processes_per_gpu = 3;
    // Generous: a loaded test machine must not turn a slow read into a "timeout" golden.
    config.sources.gpu.timeout.0 = Duration::from_secs(10);
    config
}

/// The fake library's driver clock, stepped by the test.
fn set_driver_clock(seconds: u64) {
    std::env::set_var(
        "FAKE_NVML_FROZEN_CLOCK_US",
        (seconds * 1_000_000).to_string(),
    );
}

/// Ticks the fixture node at driver clock 2 s and 4 s, with XID errors raised in between (the
/// event thread must have counted them before the last tick).
fn gpu_node_snapshot() -> Snapshot {
    let dir = common::TempDir::new("gpu-golden");
    let scenario = dir.path().join("scenario.yaml");
    let fixture =
        std::fs::read_to_string(common::repo_root().join("tests/fixtures/gpu-node.yaml")).unwrap();
    std::fs::write(&scenario, &fixture).unwrap();
    // The only environment the fake library reads; set before it is loaded.
    std::env::set_var("FAKE_NVML_SCENARIO", &scenario);
    set_driver_clock(2);
    let mut sampler = Sampler::new(source::from_config(&gpu_only_config(&common::fake_nvml(
        false,
    ))));
    sampler.tick(Duration::ZERO);
    // The first tick started the XID thread; like the driver, the library only delivers
    // errors raised after registration, so give the thread a moment to register.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&scenario, fixture.replace("xids: []", "xids: [79, 79, 48]")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snapshot = sampler.tick(Duration::from_secs(1));
        let xids = &snapshot.gpu.as_ref().unwrap().devices[0].xid_errors;
        if xids.iter().map(|(_, n)| n).sum::<u64>() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "XID events not counted: {xids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    set_driver_clock(4);
    let mut snapshot = sampler.tick(Duration::from_secs(2));
    snapshot.samples_total = 2; // the polling ticks above vary in number
    snapshot.verdicts.clear(); // their window varies with the polling too; tests/analysis/ covers verdicts
    snapshot
}

#[test]
fn gpu_node_and_missing_library_goldens() {
    let f = common::check_goldens("gpu-node", &common::render_pinned(&gpu_node_snapshot()));
    let gpu = |metric: &str, index: &str| value(&f, metric, &[("gpu", index)]);
    assert_eq!(value(&f, "gpu_devices", &[]), Some(4.0));
    assert_eq!(gpu("gpu_up", "0"), Some(1.0));
    assert_eq!(
        gpu("gpu_up", "2"),
        Some(0.0),
        "the lost GPU is reported down"
    );
    assert_eq!(
        gpu("gpu_temperature_celsius", "2"),
        None,
        "and nothing else of it is exported"
    );
    assert_eq!(gpu("gpu_up", "3"), Some(1.0), "the others keep answering");
    // Samples every 167 ms after driver clock 2 s up to 4 s: k = 12..=23 of [98, 99, 97].
    assert_eq!(gpu("gpu_busy_samples", "0"), Some(12.0));
    common::assert_close(gpu("gpu_busy_mean_ratio", "0"), 0.98);
    assert_eq!(gpu("gpu_busy_idle_share_ratio", "0"), Some(0.0));
    // In MIG mode NVML answers no utilization, rates or samples: absent, said so, not 0.
    let feature = |index: &str, name: &str| {
        value(
            &f,
            "gpu_feature_supported",
            &[("gpu", index), ("feature", name)],
        )
    };
    for index in ["1", "3"] {
        assert_eq!(gpu("gpu_busy_samples", index), None, "GPU {index}");
        assert_eq!(gpu("gpu_utilization_ratio", index), None, "GPU {index}");
        assert_eq!(feature(index, "utilization"), Some(0.0), "GPU {index}");
        assert_eq!(
            feature(index, "utilization_samples"),
            Some(0.0),
            "GPU {index}"
        );
    }
    assert_eq!(gpu("gpu_pcie_link_generation", "1"), Some(3.0));
    assert_eq!(gpu("gpu_pcie_link_max_generation", "1"), Some(5.0));
    // What the peers export too: P-state, default power limit, fans, codecs, identity.
    assert_eq!(gpu("gpu_performance_state", "1"), Some(2.0));
    assert_eq!(gpu("gpu_power_limit_watts", "0"), Some(500.0));
    assert_eq!(gpu("gpu_power_limit_default_watts", "0"), Some(700.0));
    assert_eq!(gpu("gpu_decoder_utilization_ratio", "1"), Some(0.35));
    assert_eq!(gpu("gpu_encoder_utilization_ratio", "1"), Some(0.0));
    assert_eq!(gpu("gpu_fan_speed_ratio", "1"), Some(0.45));
    assert_eq!(
        gpu("gpu_fan_speed_ratio", "0"),
        None,
        "no fans: absent, not 0"
    );
    let info = |index: &str, label: &str| {
        f.iter()
            .find(|family| family.name == "gpu_info")
            .and_then(|family| family.samples.iter().find(|s| s.labels["gpu"] == index))
            .map(|s| s.labels[label].clone())
    };
    assert_eq!(info("0", "architecture").as_deref(), Some("Hopper"));
    assert_eq!(info("3", "architecture").as_deref(), Some("Ampere"));
    assert_eq!(
        info("3", "vbios_version").as_deref(),
        Some("92.00.45.00.05")
    );
    assert_eq!(info("0", "brand").as_deref(), Some("Tesla"));
    let reason = |r: &str| value(&f, "gpu_throttle_reason", &[("gpu", "0"), ("reason", r)]);
    assert_eq!(reason("sw_power_cap"), Some(1.0));
    assert_eq!(
        reason("hw_slowdown"),
        None,
        "only active reasons are listed"
    );
    let feature = |index: &str, name: &str| {
        value(
            &f,
            "gpu_feature_supported",
            &[("gpu", index), ("feature", name)],
        )
    };
    assert_eq!(feature("3", "energy"), Some(0.0));
    assert_eq!(feature("3", "pcie_throughput"), Some(0.0));
    assert_eq!(
        feature("0", "energy"),
        None,
        "only unsupported features are listed"
    );
    assert_eq!(gpu("gpu_energy_joules_total", "3"), None);
    assert_eq!(
        feature("0", "fans"),
        Some(0.0),
        "a board without fans says so"
    );
    // GPM rates from two samples; on the older board absent, with the flag saying why.
    assert_eq!(gpu("gpu_sm_activity_ratio", "0"), Some(0.915));
    assert_eq!(gpu("gpu_sm_occupancy_ratio", "0"), Some(0.3725));
    assert_eq!(gpu("gpu_sm_activity_ratio", "3"), None);
    assert_eq!(feature("3", "gpm"), Some(0.0));
    assert_eq!(feature("3", "nvlink"), Some(0.0));
    // MIG: devices with their UUIDs and memory; SM activity per GPU instance where GPM exists.
    assert_eq!(gpu("gpu_mig_enabled", "3"), Some(1.0));
    assert_eq!(gpu("gpu_mig_enabled", "0"), Some(0.0));
    let mig =
        |metric: &str, suffix: &str| value(&f, metric, &[("mig_uuid", &format!("MIG-{suffix}"))]);
    assert_eq!(
        mig(
            "gpu_mig_memory_used_bytes",
            "3a1b2c3d-0000-4000-8000-00000000000a"
        ),
        Some(4294967296.0)
    );
    assert_eq!(
        mig(
            "gpu_mig_sm_activity_ratio",
            "1a1b2c3d-0000-4000-8000-00000000000a"
        ),
        Some(0.4)
    );
    // GPM's graphics activity: the instance's busy time; an instance without GPM has none.
    assert_eq!(
        mig("gpu_mig_busy_ratio", "1a1b2c3d-0000-4000-8000-00000000000a"),
        Some(0.7)
    );
    assert_eq!(
        mig(
            "gpu_mig_sm_activity_ratio",
            "3a1b2c3d-0000-4000-8000-00000000000a"
        ),
        None
    );
    assert_eq!(
        mig("gpu_mig_busy_ratio", "3a1b2c3d-0000-4000-8000-00000000000a"),
        None
    );
    // NVLink: three of four links active, traffic summed over the active ones.
    assert_eq!(gpu("gpu_nvlink_links_active", "0"), Some(3.0));
    let inactive = f
        .iter()
        .find(|family| family.name == "gpu_nvlink_link_inactive")
        .unwrap();
    assert_eq!(
        inactive.samples.len(),
        1,
        "only the inactive link is listed"
    );
    assert_eq!(
        value(
            &f,
            "gpu_nvlink_link_inactive",
            &[("gpu", "0"), ("link", "2")]
        ),
        Some(1.0)
    );
    assert_eq!(gpu("gpu_nvlink_tx_bytes_total", "0"), Some(5000.0 * 1024.0));
    assert_eq!(gpu("gpu_nvlink_rx_bytes_total", "0"), Some(4000.0 * 1024.0));
    // Health: XIDs counted by code, clock-limit time, row remapping.
    let xid = |code: &str| value(&f, "gpu_xid_errors_total", &[("gpu", "0"), ("xid", code)]);
    assert_eq!((xid("79"), xid("48")), (Some(2.0), Some(1.0)));
    assert_eq!(
        value(
            &f,
            "gpu_clock_limited_seconds_total",
            &[("gpu", "0"), ("limit", "power")]
        ),
        Some(4.5)
    );
    assert_eq!(
        value(
            &f,
            "gpu_memory_remapped_rows",
            &[("gpu", "0"), ("cause", "correctable")]
        ),
        Some(2.0)
    );
    assert_eq!(gpu("gpu_memory_remap_pending", "0"), Some(1.0));
    // Five processes on GPU 0, the top three by memory exported; a listed process without a
    // sample in the interval ran no kernel.
    let processes: Vec<_> = f
        .iter()
        .flat_map(|family| &family.samples)
        .filter(|s| s.name == "gpu_process_memory_used_bytes" && s.labels["gpu"] == "0")
        .map(|s| s.labels["pid"].clone())
        .collect();
    assert_eq!(processes, vec!["4000001", "4000002", "4000003"]);
    assert_eq!(
        value(
            &f,
            "gpu_process_sm_utilization_ratio",
            &[("pid", "4000001")]
        ),
        Some(0.95)
    );
    assert_eq!(
        value(
            &f,
            "gpu_process_sm_utilization_ratio",
            &[("pid", "4000003")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &f,
            "gpu_process_memory_used_bytes",
            &[("pid", "4000001"), ("command", "unknown")]
        ),
        Some(6e10)
    );

    let missing = gpu_only_config(std::path::Path::new("/nonexistent/libnvidia-ml.so.1"));
    let mut sampler = Sampler::from_config(&missing);
    let f = common::check_goldens(
        "no-nvml",
        &common::render_pinned(&sampler.tick(Duration::ZERO)),
    );
    assert_eq!(value(&f, "gpu_exporter_nvml_up", &[]), Some(0.0));
    assert_eq!(
        value(
            &f,
            "gpu_exporter_nvml_error_info",
            &[("reason", "library_not_found")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&f, "gpu_exporter_source_up", &[("source", "gpu")]),
        Some(0.0)
    );
    assert_eq!(value(&f, "gpu_up", &[]), None);
}
