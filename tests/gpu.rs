//! The real exporter binary against the fake NVML library, with the scenario rewritten while
//! it runs: many GPUs and processes, processes coming and going, a GPU falling off the bus and
//! coming back, an old driver, a missing library, a driver that appears later, a hanging call.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::exposition::{value, Family};
use common::Scenario;

fn gpu_value(page: &[Family], metric: &str, gpu: u32) -> Option<f64> {
    value(page, metric, &[("gpu", &gpu.to_string())])
}

fn process_pids(page: &[Family], gpu: u32) -> Vec<String> {
    let mut pids: Vec<String> = page
        .iter()
        .flat_map(|f| &f.samples)
        .filter(|s| s.name == "gpu_process_memory_used_bytes" && s.labels["gpu"] == gpu.to_string())
        .map(|s| s.labels["pid"].clone())
        .collect();
    pids.sort();
    pids
}

#[test]
fn eight_gpus_with_sixteen_processes_each_are_bounded_per_gpu() {
    let mut yaml = String::from("devices:\n");
    for gpu in 0..8 {
        yaml.push_str(&format!(
            "  - uuid: GPU-{gpu:08}\n    utilization_gpu: {}\n    processes:\n",
            10 * gpu
        ));
        for p in 0..16u64 {
            let pid = 3_000_000 + gpu * 100 + p;
            yaml.push_str(&format!(
                "      - {{pid: {pid}, used_memory: {}, sm: {}}}\n",
                (p + 1) * 1_000_000,
                p
            ));
        }
    }
    let scenario = Scenario::new(&yaml);
    let exporter = scenario.start(&common::fake_nvml(false), "    max_processes_per_gpu: 5\n");
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_devices", &[]) == Some(8.0) && gpu_value(p, "gpu_up", 7) == Some(1.0)
    });
    for gpu in 0..8u32 {
        assert_eq!(
            gpu_value(&page, "gpu_utilization_ratio", gpu),
            Some(f64::from(gpu) / 10.0)
        );
        // The five processes holding the most memory: the last five of each GPU's sixteen.
        let expected: Vec<String> = (11..16)
            .map(|p| (3_000_000 + u64::from(gpu) * 100 + p).to_string())
            .collect();
        assert_eq!(process_pids(&page, gpu), expected, "gpu {gpu}");
    }
    let process_series = page
        .iter()
        .find(|f| f.name == "gpu_process_memory_used_bytes")
        .unwrap()
        .samples
        .len();
    assert_eq!(process_series, 8 * 5);
}

fn spawn_sleeper() -> Child {
    Command::new("sleep").arg("60").spawn().unwrap()
}

#[test]
fn a_process_appearing_and_exiting_gets_and_loses_its_series() {
    let base =
        "devices:\n  - uuid: GPU-proc\n    processes:\n      - {pid: 3999999, used_memory: 1000}\n";
    let scenario = Scenario::new(base);
    let exporter = scenario.start(&common::fake_nvml(false), "");
    exporter.metrics_when(|p| process_pids(p, 0) == vec!["3999999"]);

    let mut sleeper = spawn_sleeper();
    let pid = sleeper.id();
    scenario.write(&format!(
        "{base}      - {{pid: {pid}, used_memory: 2000000, sm: 40, mem: 10}}\n"
    ));
    let page = exporter.metrics_when(|p| process_pids(p, 0).len() == 2);
    let labels = [("pid", pid.to_string()), ("command", "sleep".to_string())];
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        value(&page, "gpu_process_memory_used_bytes", &labels),
        Some(2_000_000.0)
    );
    assert_eq!(
        value(&page, "gpu_process_sm_utilization_ratio", &labels),
        Some(0.4)
    );

    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    scenario.write(base);
    let page = exporter.metrics_when(|p| process_pids(p, 0).len() == 1);
    assert_eq!(
        value(
            &page,
            "gpu_process_sm_utilization_ratio",
            &[("pid", &pid.to_string())]
        ),
        None
    );
}

#[test]
fn a_lost_gpu_is_reported_down_while_the_others_continue_and_comes_back() {
    let healthy =
        "devices:\n  - uuid: GPU-a\n    temperature: 40\n  - uuid: GPU-b\n    temperature: 50\n";
    let scenario = Scenario::new(healthy);
    let exporter = scenario.start(&common::fake_nvml(false), "");
    exporter.metrics_when(|p| gpu_value(p, "gpu_temperature_celsius", 1) == Some(50.0));

    scenario.write(&healthy.replace(
        "    temperature: 50\n",
        "    temperature: 50\n    lost: true\n",
    ));
    let page = exporter.metrics_when(|p| gpu_value(p, "gpu_up", 1) == Some(0.0));
    assert_eq!(
        value(&page, "gpu_up", &[("gpu", "1"), ("uuid", "GPU-b")]),
        Some(0.0),
        "named by its last UUID"
    );
    assert_eq!(
        gpu_value(&page, "gpu_temperature_celsius", 1),
        None,
        "no stale values"
    );
    assert_eq!(gpu_value(&page, "gpu_temperature_celsius", 0), Some(40.0));
    assert_eq!(
        value(&page, "gpu_exporter_source_up", &[("source", "gpu")]),
        Some(1.0)
    );

    scenario.write(healthy);
    let page = exporter.metrics_when(|p| gpu_value(p, "gpu_up", 1) == Some(1.0));
    assert_eq!(gpu_value(&page, "gpu_temperature_celsius", 1), Some(50.0));
}

#[test]
fn an_old_driver_library_without_half_the_symbols_reports_those_features_unsupported() {
    let scenario = Scenario::new("devices:\n  - uuid: GPU-old\n    utilization_gpu: 30\n    memory_used: 5\n    processes:\n      - {pid: 3999998, used_memory: 1}\n");
    let exporter = scenario.start(&common::fake_nvml(true), "");
    let page = exporter.metrics_when(|p| gpu_value(p, "gpu_up", 0) == Some(1.0));
    let feature = |name: &str| {
        value(
            &page,
            "gpu_feature_supported",
            &[("gpu", "0"), ("feature", name)],
        )
    };
    for missing in [
        "memory",
        "utilization_samples",
        "energy",
        "throttle_reasons",
        "processes",
        "ecc",
        "pcie_link",
    ] {
        assert_eq!(feature(missing), Some(0.0), "{missing}");
    }
    // Supported features have no series: only what is missing is listed.
    for present in ["utilization", "temperature", "power", "clocks"] {
        assert_eq!(feature(present), None, "{present}");
    }
    assert_eq!(gpu_value(&page, "gpu_utilization_ratio", 0), Some(0.3));
    assert_eq!(gpu_value(&page, "gpu_memory_used_bytes", 0), None);
    assert_eq!(
        value(
            &page,
            "gpu_exporter_source_errors_total",
            &[("source", "gpu")]
        ),
        Some(0.0)
    );
}

#[test]
fn busy_summary_tells_a_bursty_gpu_from_a_steady_one() {
    let scenario = Scenario::new(
        "devices:\n  - uuid: GPU-bursty\n    samples: [100, 0]\n    sample_period_ms: 20\n  - uuid: GPU-steady\n    samples: [50]\n    sample_period_ms: 20\n",
    );
    let exporter = scenario.start(&common::fake_nvml(false), "");
    // 200 ms ticks over 20 ms samples: about ten samples per tick.
    let page = exporter.metrics_when(|p| {
        gpu_value(p, "gpu_busy_samples", 0).is_some_and(|n| (8.0..=12.0).contains(&n))
    });
    let bursty_mean = gpu_value(&page, "gpu_busy_mean_ratio", 0).unwrap();
    assert!((0.4..=0.6).contains(&bursty_mean), "{bursty_mean}");
    let idle = gpu_value(&page, "gpu_busy_idle_share_ratio", 0).unwrap();
    assert!((0.4..=0.6).contains(&idle), "{idle}");
    assert_eq!(gpu_value(&page, "gpu_busy_mean_ratio", 1), Some(0.5));
    assert_eq!(gpu_value(&page, "gpu_busy_idle_share_ratio", 1), Some(0.0));
}

#[test]
fn a_missing_library_leaves_everything_else_serving() {
    let scenario = Scenario::new("devices: []\n");
    let exporter = scenario.start(Path::new("/nonexistent/libnvidia-ml.so.1"), "");
    let page = exporter.metrics_when(|p| value(p, "gpu_exporter_nvml_up", &[]) == Some(0.0));
    assert_eq!(
        value(
            &page,
            "gpu_exporter_nvml_error_info",
            &[("reason", "library_not_found")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&page, "gpu_exporter_source_up", &[("source", "gpu")]),
        Some(0.0)
    );
    assert_eq!(
        value(&page, "gpu_exporter_source_up", &[("source", "cpu")]),
        Some(1.0)
    );
    assert!(value(&page, "gpu_host_cpus", &[]).is_some());
}

#[test]
fn a_driver_that_loads_later_is_picked_up() {
    let scenario = Scenario::new("init_error: driver_not_loaded\ndevices:\n  - uuid: GPU-late\n");
    let exporter = scenario.start(&common::fake_nvml(false), "");
    exporter.metrics_when(|p| {
        value(
            p,
            "gpu_exporter_nvml_error_info",
            &[("reason", "driver_not_loaded")],
        ) == Some(1.0)
    });
    scenario.write("devices:\n  - uuid: GPU-late\n");
    // Retries back off to at most 1 s in this test's configuration.
    let page = exporter.metrics_when(|p| value(p, "gpu_exporter_nvml_up", &[]) == Some(1.0));
    assert_eq!(value(&page, "gpu_up", &[("uuid", "GPU-late")]), Some(1.0));
    assert_eq!(value(&page, "gpu_exporter_nvml_error_info", &[]), None);
}

#[test]
fn a_hanging_gpu_is_reported_down_on_time_while_the_rest_keeps_updating() {
    let healthy = "devices:\n  - uuid: GPU-hang\n  - uuid: GPU-fine\n    temperature: 55\n";
    let scenario = Scenario::new(healthy);
    let exporter = scenario.start(&common::fake_nvml(false), "    timeout: 300ms\n");
    exporter.metrics_when(|p| gpu_value(p, "gpu_up", 0) == Some(1.0));
    // Every temperature read of GPU 0 now hangs for 3 s, far past the 300 ms deadline.
    scenario.write(&healthy.replace(
        "GPU-hang\n",
        "GPU-hang\n    delays_ms: {nvmlDeviceGetTemperature: 3000}\n",
    ));
    let page = exporter.metrics_when(|p| gpu_value(p, "gpu_up", 0) == Some(0.0));
    assert_eq!(
        value(&page, "gpu_up", &[("gpu", "0"), ("uuid", "GPU-hang")]),
        Some(0.0)
    );
    assert_eq!(gpu_value(&page, "gpu_temperature_celsius", 0), None);
    assert_eq!(
        gpu_value(&page, "gpu_temperature_celsius", 1),
        Some(55.0),
        "the other GPU still answers"
    );
    // The sampler is not stuck: ticks keep coming and the page stays fresh.
    let samples = value(&page, "gpu_exporter_samples_total", &[]).unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let started = Instant::now();
    let later = exporter.metrics();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "a scrape must not wait for NVML"
    );
    assert!(value(&later, "gpu_exporter_samples_total", &[]).unwrap() >= samples + 2.0);
    assert!(value(&later, "gpu_exporter_sample_age_seconds", &[]).unwrap() < 0.6);
    // Once the call answers promptly again, the GPU is back.
    scenario.write(healthy);
    exporter.metrics_when(|p| gpu_value(p, "gpu_up", 0) == Some(1.0));
}

#[test]
fn injected_call_errors_drop_one_feature_for_the_tick_not_the_gpu() {
    let yaml = "devices:\n  - uuid: GPU-err\n    temperature: 61\n    processes:\n      - {pid: 3999997, used_memory: 7}\n    errors:\n      nvmlDeviceGetComputeRunningProcesses_v3: insufficient_size\n      nvmlDeviceGetPowerUsage: unknown\n";
    let scenario = Scenario::new(yaml);
    let exporter = scenario.start(&common::fake_nvml(false), "");
    let page = exporter.metrics_when(|p| gpu_value(p, "gpu_up", 0) == Some(1.0));
    assert_eq!(gpu_value(&page, "gpu_temperature_celsius", 0), Some(61.0));
    assert_eq!(gpu_value(&page, "gpu_power_watts", 0), None);
    assert!(process_pids(&page, 0).is_empty());
    // Failing is not "unsupported" (no series saying so): the calls are tried again and
    // recover.
    let feature = |name: &str| {
        value(
            &page,
            "gpu_feature_supported",
            &[("gpu", "0"), ("feature", name)],
        )
    };
    assert_eq!((feature("processes"), feature("power")), (None, None));
    scenario.write(&yaml.replace("    errors:\n      nvmlDeviceGetComputeRunningProcesses_v3: insufficient_size\n      nvmlDeviceGetPowerUsage: unknown\n", ""));
    let page = exporter.metrics_when(|p| process_pids(p, 0) == vec!["3999997"]);
    assert!(gpu_value(&page, "gpu_power_watts", 0).is_some());
}

#[test]
fn gpus_appearing_and_vanishing_are_rediscovered() {
    let one = "devices:\n  - uuid: GPU-first\n";
    let scenario = Scenario::new(one);
    let exporter = scenario.start(&common::fake_nvml(false), "");
    exporter.metrics_when(|p| value(p, "gpu_devices", &[]) == Some(1.0));
    scenario.write("devices:\n  - uuid: GPU-first\n  - uuid: GPU-second\n    temperature: 44\n");
    let page = exporter.metrics_when(|p| value(p, "gpu_devices", &[]) == Some(2.0));
    assert_eq!(
        value(&page, "gpu_temperature_celsius", &[("uuid", "GPU-second")]),
        Some(44.0)
    );
    // A different GPU at index 0 (after a reset or hot swap) is read afresh under its UUID.
    scenario.write("devices:\n  - uuid: GPU-replaced\n");
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_devices", &[]) == Some(1.0)
            && value(p, "gpu_up", &[("uuid", "GPU-replaced")]) == Some(1.0)
    });
    assert_eq!(
        value(&page, "gpu_up", &[("uuid", "GPU-second")]),
        None,
        "no stale series"
    );
    assert_eq!(value(&page, "gpu_up", &[("uuid", "GPU-first")]), None);
}
