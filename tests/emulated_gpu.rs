//! The emulated GPU end to end: a real Python process drives `workloads/emugpu.py`, the fake
//! NVML reads its timeline, and the exporter reports what the process actually did: busy
//! time, SM activity, memory, the process itself, and CUDA's two ways of waiting.

mod common;

use std::process::{Child, Command, Stdio};

use common::exposition::value;
use common::{Reaped, Scenario, TempDir};

/// A Python process using the emulated GPU of `timelines`, running `body` (emugpu imported,
/// the GPU opened as `gpu`).
fn python(timelines: &TempDir, sync: &str, body: &str) -> Child {
    let script = format!(
        "import sys, time\nsys.path.insert(0, {workloads:?})\nimport emugpu\ngpu = emugpu.open_gpu(0, sync={sync:?})\n{body}",
        workloads = common::repo_root().join("workloads").to_string_lossy(),
    );
    Command::new("python3")
        .args(["-c", &script])
        .env("EMUGPU_DIR", timelines.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("python3")
}

fn scenario(timelines: &TempDir) -> Scenario {
    Scenario::new(&format!(
        "devices:\n  - uuid: GPU-emulated\n    timeline: {}\n",
        timelines.path().join("gpu0.timeline").display()
    ))
}

const GIB: f64 = (1u64 << 30) as f64;

#[test]
fn the_exporter_sees_what_the_workload_did_on_the_emulated_gpu() {
    let timelines = TempDir::new("timelines");
    let scenario = scenario(&timelines);
    let exporter = scenario.start(&common::fake_nvml(false), "");
    let gpu = [("uuid", "GPU-emulated")];
    // Nothing has used the GPU yet: idle, empty, no process.
    let page = exporter.metrics_when(|m| value(m, "gpu_processes", &gpu).is_some());
    assert_eq!(value(&page, "gpu_processes", &gpu), Some(0.0));
    assert_eq!(value(&page, "gpu_memory_used_bytes", &gpu), Some(0.0));

    // 20 ms kernels on a quarter of the SMs, then 20 ms of host work: half busy, several
    // periods in every 1/6 s sample and every 200 ms tick.
    let workload = Reaped(python(
        &timelines,
        "blocking",
        "gpu.alloc(8 << 30)\nwhile True:\n    gpu.launch(0.02, sm=0.25)\n    gpu.synchronize()\n    time.sleep(0.02)\n",
    ));
    let pid = workload.0.id().to_string();
    // A second into the loop: past the readings that cover the process's start-up.
    let working = std::cell::Cell::new(None::<std::time::Instant>);
    let page = exporter.metrics_when(|m| {
        let sm = value(m, "gpu_process_sm_utilization_ratio", &[("pid", &pid)]);
        if sm.is_some_and(|s| s > 0.0) && working.get().is_none() {
            working.set(Some(std::time::Instant::now()));
        }
        working
            .get()
            .is_some_and(|since| since.elapsed().as_secs_f64() > 1.2)
            && sm.is_some_and(|s| s > 0.0)
    });
    // The context (512 MiB), the allocation and the 512-byte block of the scalar `item()`
    // reads back, exactly.
    let held = 8.5 * GIB + 512.0;
    assert_eq!(value(&page, "gpu_memory_used_bytes", &gpu), Some(held));
    assert_eq!(
        value(&page, "gpu_process_memory_used_bytes", &[("pid", &pid)]),
        Some(held)
    );
    // Busy half the time, a quarter of the SMs while busy: an eighth of SM activity (less the
    // wake-up latency of each synchronize and sleep).
    let busy = value(&page, "gpu_busy_mean_ratio", &gpu).unwrap();
    assert!((0.3..=0.7).contains(&busy), "busy {busy}");
    let sm = value(&page, "gpu_sm_activity_ratio", &gpu).unwrap();
    assert!((0.06..=0.19).contains(&sm), "SM activity {sm}");
    let process_sm = value(&page, "gpu_process_sm_utilization_ratio", &[("pid", &pid)]).unwrap();
    assert!((0.2..=0.8).contains(&process_sm), "process SM {process_sm}");
    let util = value(&page, "gpu_utilization_ratio", &gpu).unwrap();
    assert!((0.3..=0.7).contains(&util), "GPU-Util {util}");

    // The process exits: the driver forgets it and its memory. The memory and the process list
    // are two NVML calls, not one snapshot: a process that exits between them leaves one tick
    // with no process and its memory still held, so the test waits for both (and fails if the
    // memory is never given back).
    drop(workload);
    exporter.metrics_when(|m| {
        value(m, "gpu_processes", &gpu) == Some(0.0)
            && value(m, "gpu_memory_used_bytes", &gpu) == Some(0.0)
    });
}

/// A Hopper in MIG mode: NVML gives no utilization at all, but GPM per GPU instance, and the
/// analysis takes the instance its main process runs in as the GPU's busy time and SM
/// activity (an A100 slice has neither: its busy time stays unknown).
#[test]
fn a_hopper_mig_slice_shows_its_busy_time_through_gpm() {
    let timelines = TempDir::new("timelines");
    let scenario = Scenario::new(&format!(
        "devices:\n  - uuid: GPU-emulated\n    timeline: {}\n    mig_mode: true\n    mig:\n      - {{uuid: MIG-emulated, gpu_instance_id: 3, memory_total: 42949672960}}\n",
        timelines.path().join("gpu0.timeline").display()
    ));
    let config = "analysis:\n  window: 3s\n  min_duration: 1s\n";
    let exporter = scenario.start(&common::fake_nvml(false), config);
    // The same half-busy loop as above: 20 ms kernels on a quarter of the SMs, 20 ms asleep.
    let _workload = Reaped(python(
        &timelines,
        "blocking",
        "gpu.alloc(1 << 30)\nwhile True:\n    gpu.launch(0.02, sm=0.25)\n    gpu.synchronize()\n    time.sleep(0.02)\n",
    ));
    let slice = [("mig_uuid", "MIG-emulated")];
    let gpu = [("uuid", "GPU-emulated")];
    // The analysis window (3 s) must hold the loop alone, not its start-up: wait a window and a
    // half past the first busy reading.
    let working = std::cell::Cell::new(None::<std::time::Instant>);
    let page = exporter.metrics_within(std::time::Duration::from_secs(20), |m| {
        let busy = value(m, "gpu_mig_busy_ratio", &slice).is_some_and(|b| b > 0.0);
        if busy && working.get().is_none() {
            working.set(Some(std::time::Instant::now()));
        }
        busy && working
            .get()
            .is_some_and(|since| since.elapsed().as_secs_f64() > 4.5)
    });
    let busy = value(&page, "gpu_mig_busy_ratio", &slice).unwrap();
    assert!((0.3..=0.7).contains(&busy), "slice busy {busy}");
    let sm = value(&page, "gpu_mig_sm_activity_ratio", &slice).unwrap();
    assert!((0.06..=0.19).contains(&sm), "slice SM activity {sm}");
    assert_eq!(value(&page, "gpu_utilization_ratio", &gpu), None);
    // The analysis reads the slice's figures as the GPU's.
    let figures = || {
        let api = exporter.get("/api/v1/diagnosis", &[]);
        let document: serde_json::Value = serde_json::from_slice(&api.body).unwrap();
        document["gpus"][0]["figures"].clone()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = figures();
    while !seen["busy"].is_number() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        seen = figures();
    }
    let busy = seen["busy"].as_f64().expect("busy from the slice");
    assert!((0.3..=0.7).contains(&busy), "GPU busy {busy}: {seen}");
    let sm = seen["sm_activity"]
        .as_f64()
        .expect("SM activity from the slice");
    assert!((0.06..=0.19).contains(&sm), "GPU SM activity {sm}: {seen}");
}

/// CUDA's spin wait keeps the synchronizing thread on its core; blocking sync sleeps. Both
/// loops do the same GPU work; only the busiest thread tells them apart. On a shared VM the
/// spinning thread does not always get its core: the time it waited runnable for a CPU
/// (run-queue delay) and the hypervisor's steal count as wanted CPU, so the floor holds under
/// load while a sleeping thread still cannot reach it.
#[test]
fn a_spin_wait_burns_the_waiting_thread_and_a_blocking_one_sleeps() {
    let busiest = |sync: &str| {
        let timelines = TempDir::new("timelines");
        let scenario = scenario(&timelines);
        let exporter = scenario.start(&common::fake_nvml(false), "");
        let workload = Reaped(python(
            &timelines,
            sync,
            "while True:\n    gpu.launch(0.2)\n    gpu.synchronize()\n",
        ));
        let pid = workload.0.id().to_string();
        let thread = [("pid", pid.as_str())];
        // Past the first readings of the thread, which cover its start-up; then the mean of
        // two readings of what it used and what it wanted.
        // A reading is one tick's (the sample counter moves); equal values on two ticks are
        // two readings (a spinning thread on a quiet machine reads 1.0 every tick).
        let mut used = Vec::new();
        let mut wanted = Vec::new();
        let mut last_tick = None;
        exporter.metrics_when(|m| {
            let (Some(tick), Some(cpu), Some(wait), Some(steal)) = (
                value(m, "gpu_exporter_samples_total", &[]),
                value(m, "gpu_process_busiest_thread_cpu_ratio", &thread),
                value(m, "gpu_process_loop_cpu_wait_ratio", &thread),
                value(m, "gpu_host_cpu_steal_ratio", &[]),
            ) else {
                return false;
            };
            if last_tick != Some(tick) {
                last_tick = Some(tick);
                used.push(cpu);
                wanted.push((cpu + wait + steal).min(1.0));
            }
            used.len() >= 4
        });
        let mean = |v: &[f64]| v[2..].iter().sum::<f64>() / (v.len() - 2) as f64;
        (mean(&used), mean(&wanted))
    };
    let (spin_used, spin_wanted) = busiest("spin");
    assert!(
        spin_wanted >= 0.8,
        "a spin wait wanted {spin_wanted} of a core (used {spin_used})"
    );
    let (blocking_used, blocking_wanted) = busiest("blocking");
    assert!(
        blocking_used <= 0.3,
        "a blocking wait used {blocking_used} of a core"
    );
    // Compared by what they wanted: under load the spinning thread may use far less.
    assert!(
        spin_wanted > blocking_wanted + 0.3,
        "spin wanted {spin_wanted}, blocking {blocking_wanted}"
    );
}
