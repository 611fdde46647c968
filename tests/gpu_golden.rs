//! The GPU source through the fake NVML library, in process, with the library's clock frozen
//! so the exposition is the same on every run: compared with golden files and parsed strictly.
//! This is the only test binary that loads the fake library into its own process (the library
//! keeps global state, like the real one); the others run the exporter binary against it.

mod common;

use std::time::{Duration, Instant};

use common::exposition::{self as strict, value};
use gpu_bottleneck_exporter::config::Config;
use gpu_bottleneck_exporter::exposition::{render, Format};
use gpu_bottleneck_exporter::sampler::Sampler;
use gpu_bottleneck_exporter::source;

fn gpu_only_config(library: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.sources.cpu.enabled = false;
    config.sources.disk.enabled = false;
    config.sources.pressure.enabled = false;
    config.sources.memory.enabled = false;
    config.sources.gpu.nvml_library = library.to_path_buf();
    config.sources.gpu.max_processes_per_gpu = 3;
    config
}

fn render_one_tick(config: &Config) -> (String, String) {
    let mut sampler = Sampler::new(source::from_config(config));
    let mut snapshot = sampler.tick(Duration::ZERO);
    for status in &mut snapshot.sources {
        status.duration_seconds = 0.001;
    }
    let exposition = render(&snapshot, 0.002, Instant::now());
    let body = |format| {
        let text = String::from_utf8(exposition.body(format, exposition.sampled_at)).unwrap();
        let commit = text.find("commit=\"").unwrap() + 8;
        let end = commit + text[commit..].find('"').unwrap();
        format!("{}test{}", &text[..commit], &text[end..])
    };
    (body(Format::Text), body(Format::OpenMetrics))
}

fn check(name: &str, (text, openmetrics): &(String, String)) -> Vec<strict::Family> {
    let golden = common::repo_root().join("tests/golden");
    common::check_golden(&golden.join(format!("{name}.prom")), text);
    common::check_golden(&golden.join(format!("{name}.om.txt")), openmetrics);
    strict::parse(openmetrics, true).unwrap_or_else(|e| panic!("{name}: {e}"));
    strict::parse(text, false).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn gpu_node_and_missing_library_goldens() {
    // The only environment this process's fake library reads; set before it is loaded.
    std::env::set_var(
        "FAKE_NVML_SCENARIO",
        common::repo_root().join("tests/fixtures/gpu-node.yaml"),
    );
    std::env::set_var("FAKE_NVML_FROZEN_CLOCK_US", "2000000");

    let f = check(
        "gpu-node",
        &render_one_tick(&gpu_only_config(&common::fake_nvml(false))),
    );
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
    // 2 s of samples every 167 ms: k = 0..=11 of the pattern [100, 0, 0, 0].
    assert_eq!(gpu("gpu_busy_samples", "1"), Some(12.0));
    assert_eq!(gpu("gpu_busy_mean_ratio", "1"), Some(0.25));
    assert_eq!(gpu("gpu_busy_idle_share_ratio", "1"), Some(0.75));
    assert_eq!(gpu("gpu_pcie_link_degraded", "1"), Some(1.0));
    assert_eq!(gpu("gpu_pcie_link_degraded", "0"), Some(0.0));
    let reason = |r: &str| value(&f, "gpu_throttle_reason", &[("gpu", "0"), ("reason", r)]);
    assert_eq!(reason("sw_power_cap"), Some(1.0));
    assert_eq!(reason("hw_slowdown"), Some(0.0));
    let feature = |index: &str, name: &str| {
        value(
            &f,
            "gpu_feature_supported",
            &[("gpu", index), ("feature", name)],
        )
    };
    assert_eq!(feature("3", "energy"), Some(0.0));
    assert_eq!(feature("3", "pcie_throughput"), Some(0.0));
    assert_eq!(feature("0", "energy"), Some(1.0));
    assert_eq!(gpu("gpu_energy_joules_total", "3"), None);
    // Five processes on GPU 0, the top three by memory exported; a process without a sample
    // in the interval ran no kernel.
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
    let f = check("no-nvml", &render_one_tick(&missing));
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
