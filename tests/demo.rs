//! The simulated node (`--demo`) and `diagnose`: the demo's verdicts are what each simulated
//! GPU is meant to show, the reports render a fixed scenario as the golden files say, and the
//! real binary's `diagnose` and `serve --demo` work end to end.

mod common;

use std::process::Command;
use std::time::Duration;

use common::exposition::value;
use gpu_bottleneck_exporter::analysis::{Kind, Primary};
use gpu_bottleneck_exporter::config::Config;
use gpu_bottleneck_exporter::report;
use gpu_bottleneck_exporter::sampler::Sampler;
use gpu_bottleneck_exporter::source::demo::{role_of, DemoSource, Role, ROTATION};

fn expected(role: Role) -> Primary {
    match role {
        Role::DataIo => Primary::Bottleneck(Kind::DataIo),
        Role::DataCpu => Primary::Bottleneck(Kind::DataCpu),
        Role::HostBound => Primary::Bottleneck(Kind::HostBound),
        Role::SyncStall => Primary::Bottleneck(Kind::SyncStall),
        Role::KernelEfficiency => Primary::Bottleneck(Kind::KernelEfficiency),
        Role::MemoryPressure => Primary::Bottleneck(Kind::MemoryPressure),
        Role::JobFastRank => Primary::Bottleneck(Kind::Communication),
        // A straggler is named by its own cause: its loop is seen in Python while its GPU idles.
        Role::JobSlowRank => Primary::Bottleneck(Kind::HostBound),
        Role::Contention => Primary::Bottleneck(Kind::Contention),
        Role::Throttling => Primary::Bottleneck(Kind::Throttling),
        Role::Hardware => Primary::Bottleneck(Kind::Hardware),
        Role::Idle => Primary::Idle,
    }
}

#[test]
fn every_simulated_gpu_shows_its_case_before_and_after_the_cases_rotate() {
    let mut sampler = Sampler::demo(&Config::default(), DemoSource::default());
    for (start, checks) in [(0u64, 45u64), (ROTATION.as_secs(), ROTATION.as_secs() + 45)] {
        let mut snapshot = None;
        for second in start..=checks {
            snapshot = Some(sampler.tick(Duration::from_secs(second)));
        }
        let snapshot = snapshot.unwrap();
        assert!(snapshot.simulated);
        assert_eq!(snapshot.verdicts.len(), 12);
        for verdict in &snapshot.verdicts {
            let role = role_of(verdict.index as usize, Duration::from_secs(checks));
            assert_eq!(
                verdict.primary,
                expected(role),
                "GPU {} at {checks} s should show {role:?}",
                verdict.index
            );
        }
    }
}

#[test]
fn reports_of_a_fixed_scenario_match_the_golden_files() {
    let mut sampler = Sampler::demo(&Config::default(), DemoSource::default());
    let mut snapshot = sampler.tick(Duration::ZERO);
    for second in 1..=40 {
        snapshot = sampler.tick(Duration::from_secs(second));
    }
    let text = report::text_report(&snapshot.verdicts, true);
    let json = serde_json::to_string_pretty(&report::diagnosis_json(&snapshot.verdicts, true))
        .unwrap()
        + "\n";
    let golden = common::repo_root().join("tests/golden");
    common::check_golden(&golden.join("diagnose-demo.txt"), &text);
    common::check_golden(&golden.join("diagnose-demo.json"), &json);
    assert!(text.starts_with("SIMULATED NODE"));
    // Most urgent first: the strongest bottlenecks lead, busy and idle GPUs close the report.
    let first = text.lines().nth(2).unwrap();
    assert!(
        first.starts_with("GPU 0 ") && first.contains("data_io"),
        "{first}"
    );
    assert!(text.contains("Next steps:\n    1. "));
    assert!(report::any_bottleneck(&snapshot.verdicts));
}

#[test]
fn diagnose_runs_for_its_duration_and_exits_three_on_a_bottleneck() {
    let output = Command::new(common::binary())
        .args(["diagnose", "--demo", "--duration", "3s", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(document["simulated"], true);
    let gpus = document["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 12);
    let gpu0 = gpus.iter().find(|g| g["gpu"] == 0).unwrap();
    assert_eq!(gpu0["primary"], "data_io");
    assert!(gpu0["next_steps"].as_array().unwrap().len() >= 2);
    assert_eq!(gpu0["kinds"].as_array().unwrap().len(), 10);

    let text = Command::new(common::binary())
        .args(["diagnose", "--demo", "--duration", "2s"])
        .output()
        .unwrap();
    assert_eq!(text.status.code(), Some(3));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("GPU 11 GPU-de300000-0000-4000-8000-000000000011: idle"),
        "{text}"
    );

    let bad = Command::new(common::binary())
        .args(["diagnose", "--duration", "0s"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "a zero duration is refused");
}

#[test]
fn serve_demo_exposes_verdicts_and_the_diagnosis_api() {
    let exporter = common::Exporter::start(&["--demo"]);
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_verdict", &[("gpu", "11"), ("verdict", "idle")]) == Some(1.0)
    });
    assert_eq!(
        value(&page, "gpu_exporter_build_info", &[("mode", "demo")]),
        Some(1.0)
    );
    assert_eq!(value(&page, "gpu_devices", &[]), Some(12.0));
    let series = page
        .iter()
        .find(|f| f.name == "gpu_bottleneck")
        .unwrap()
        .samples
        .len();
    assert_eq!(series, 12 * 10, "every kind for every GPU, always");
    let api = exporter.get("/api/v1/diagnosis", &[]);
    assert_eq!(api.header("content-type"), Some("application/json"));
    let document: serde_json::Value = serde_json::from_slice(&api.body).unwrap();
    assert_eq!(document["gpus"].as_array().unwrap().len(), 12);
}

/// A simulated fleet: each demo node has GPUs, pods and a node name of its own, and shows its
/// cases in another order (node 3's GPU 0 has node 0's GPU 3 case), so that dashboards and
/// alert routing over many demo exporters see distinct GPUs with distinct stories.
#[test]
fn demo_nodes_of_a_fleet_have_their_own_gpus_pods_and_phase() {
    let tick = |node: u32| {
        let demo = DemoSource {
            node,
            ..DemoSource::default()
        };
        let mut sampler = Sampler::demo(&Config::default(), demo);
        let mut snapshot = sampler.tick(Duration::ZERO);
        for second in 1..=40 {
            snapshot = sampler.tick(Duration::from_secs(second));
        }
        snapshot
    };
    let (first, fourth) = (tick(0), tick(3));
    if std::env::var("NODE_NAME").is_err() {
        assert_eq!(first.node, "gpu-demo-0");
        assert_eq!(fourth.node, "gpu-demo-3");
    }
    let gpus =
        |s: &gpu_bottleneck_exporter::snapshot::Snapshot| s.gpu.as_ref().unwrap().devices.clone();
    let (a, b) = (gpus(&first), gpus(&fourth));
    assert_eq!(a[0].uuid, "GPU-de300000-0000-4000-8000-000000000000");
    assert_eq!(b[0].uuid, "GPU-de300000-0003-4000-8000-000000000000");
    assert!(a.iter().all(|g| b.iter().all(|h| g.uuid != h.uuid)));
    let pods = |d: &[gpu_bottleneck_exporter::snapshot::GpuDevice]| -> Vec<String> {
        d.iter()
            .flat_map(|g| g.pods.iter().map(|p| p.pod.clone()))
            .collect()
    };
    assert!(
        pods(&a).iter().all(|p| !pods(&b).contains(p)),
        "{:?} {:?}",
        pods(&a),
        pods(&b)
    );
    for (index, verdict) in fourth.verdicts.iter().enumerate() {
        let role = role_of(index + 3, Duration::from_secs(40));
        assert_eq!(verdict.primary, expected(role), "node 3 GPU {index}");
    }
    assert_ne!(first.verdicts[0].primary, fourth.verdicts[0].primary);
}

#[test]
fn a_demo_node_without_demo_is_refused() {
    let output = Command::new(common::binary())
        .args(["diagnose", "--demo-node", "2", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--demo"));
}
