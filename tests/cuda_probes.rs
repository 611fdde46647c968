//! The CUDA probes end to end: a real Python process drives the stub CUDA driver
//! (crates/fake-cuda, copied as libcuda.so.1), the exporter attaches uprobes to that file and
//! reports what the process asked of it: launches, copies, and the time its main thread spent
//! waiting inside the driver. Without the probes' privilege (tests/kubernetes.rs runs the
//! restricted variants) the source says unsupported.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::exposition::value;
use common::{Exporter, Reaped, Scenario, TempDir};

/// Whether this test process may load BPF programs and open uprobe events: CAP_SYS_ADMIN, or
/// CAP_BPF with CAP_PERFMON, in its effective set.
fn may_probe() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:\t"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let has = |bit: u32| effective & (1 << bit) != 0;
    has(21) || (has(38) && has(39))
}

/// The exporter over one emulated GPU, and a Python process running `script` on it (the
/// workloads directory on its path, the GPU's timeline beside it).
struct Probed {
    _timelines: TempDir,
    _scenario: Scenario,
    exporter: Exporter,
    _workload: Reaped,
    pid: String,
}

fn probed(script: &str) -> Probed {
    probed_with(script, "")
}

/// [`probed`], with `config` after the exporter's sources (an `analysis:` section).
fn probed_with(script: &str, config: &str) -> Probed {
    let timelines = TempDir::new("timelines");
    let scenario = Scenario::new(&format!(
        "devices:\n  - uuid: GPU-emulated\n    timeline: {}\n",
        timelines.path().join("gpu0.timeline").display()
    ));
    // Launch windows about every second instead of 8 s: one catches the loop launching well
    // within the wait's 10 s even on a loaded machine (at 2 s one did not, once, in CI).
    let exporter = scenario.start(
        &common::fake_nvml(false),
        &format!("  cuda: {{launch_windows_every: 1s}}\n{config}"),
    );
    let workloads = common::repo_root().join("workloads");
    let script = format!("import sys\nsys.path.insert(0, {workloads:?})\n{script}");
    let workload = Reaped(
        Command::new("python3")
            .args(["-c", &script])
            .env("EMUGPU_DIR", timelines.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("python3"),
    );
    Probed {
        pid: workload.0.id().to_string(),
        _timelines: timelines,
        _scenario: scenario,
        exporter,
        _workload: workload,
    }
}

#[test]
fn launches_copies_and_driver_waits_are_counted_per_process() {
    // A steady stream of launches for about 70 ms (so that the launch windows, 20 ms about each
    // second, find it launching more often than not), then a 50 ms kernel and loss.item() (it
    // waits about 50 ms inside the driver, spinning): the main thread is inside the driver
    // about 40 % of the time.
    let Probed { exporter, pid, .. } = &probed(
        "import time, emugpu\ngpu = emugpu.open_gpu(0)\n\
         while True:\n    for _ in range(100):\n        gpu.launch(0.0002)\n        time.sleep(0.0005)\n\
         \x20   gpu.launch(0.05)\n    gpu.item()\n",
    );
    let with = |kind: &'static str| [("pid", pid.as_str()), ("kind", kind)];
    if !may_probe() {
        let page = exporter.metrics_when(|p| {
            value(
                p,
                "gpu_exporter_signal_supported",
                &[("signal", "cuda_probes")],
            )
            .is_some()
        });
        assert_eq!(
            value(
                &page,
                "gpu_exporter_source_supported",
                &[("source", "cuda")]
            ),
            Some(0.0)
        );
        assert_eq!(
            value(&page, "gpu_process_cuda_launches_total", &with("kernel")),
            None
        );
        return;
    }
    // Kernel launches are counted in 20 ms windows about each second here (their trap is too
    // dear to keep): the count is an estimate, there once a window has caught the loop
    // launching.
    let direction = |d: &'static str| [("pid", pid.as_str()), ("direction", d)];
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_process_cuda_launches_total", &with("kernel")).is_some_and(|n| n > 0.0)
            && value(p, "gpu_process_cuda_copies_total", &direction("to_host"))
                .is_some_and(|n| n >= 20.0)
            && value(
                p,
                "gpu_process_cuda_main_thread_wait_ratio",
                &[("pid", pid)],
            )
            .is_some_and(|r| r > 0.0)
    });
    assert_eq!(
        value(&page, "gpu_exporter_source_up", &[("source", "cuda")]),
        Some(1.0)
    );
    let copies = value(
        &page,
        "gpu_process_cuda_copies_total",
        &direction("to_host"),
    )
    .unwrap();
    assert_eq!(
        value(
            &page,
            "gpu_process_cuda_copy_bytes_total",
            &direction("to_host")
        ),
        Some(4.0 * copies)
    );
    // Each item() waits about 50 ms inside the copy (to pageable memory), not in the stream
    // sync after it. The sync returns at once but is timed on the wall clock: on a loaded
    // machine a thread that just spun 50 ms is often preempted inside it (CI saw 6 ms a call),
    // so the bound is a share, one that a wait misplaced into the sync (copy ~0) still breaks.
    let copy_wait = value(&page, "gpu_process_cuda_wait_seconds_total", &with("copy")).unwrap();
    let stream_wait = value(
        &page,
        "gpu_process_cuda_wait_seconds_total",
        &with("stream"),
    )
    .unwrap();
    assert!(
        copy_wait / copies > 0.02,
        "{copy_wait} s in {copies} copies"
    );
    assert!(
        stream_wait < copy_wait / 3.0,
        "stream {stream_wait} s, copy {copy_wait} s"
    );
    let ratio = value(
        &page,
        "gpu_process_cuda_main_thread_wait_ratio",
        &[("pid", pid)],
    )
    .unwrap();
    assert!(
        (0.15..=0.75).contains(&ratio),
        "main thread in the driver {ratio} of the time"
    );
    // The thread that launched in the last window (it launches more than half the time: the
    // next window or the one after finds it).
    exporter.metrics_when(|p| {
        value(p, "gpu_process_cuda_driving_threads", &[("pid", pid)]) == Some(1.0)
    });
    // Its waits last 50 ms: whatever one the read found it in, it had not lasted a second.
    let ongoing = value(
        &page,
        "gpu_process_cuda_wait_ongoing_seconds",
        &[("pid", pid)],
    );
    assert!(ongoing.is_some_and(|s| s < 1.0), "{ongoing:?}");
    assert_eq!(
        value(
            &page,
            "gpu_exporter_signal_supported",
            &[("signal", "cuda_probes")]
        ),
        None
    );
}

#[test]
fn a_loop_that_outruns_its_gpu_is_seen_waiting_in_its_launches() {
    // 2 ms kernels launched back to back, never a sync: the launch queue fills within the
    // first thousand and from then on each launch waits in the driver for a kernel to end,
    // the thread's whole time. The launch windows time it; a loop whose kernels keep up with
    // its launches (below) is not held. One launch window in three times the launches (about
    // every 3 s here): the wait is longer than the others'.
    let held =
        probed("import emugpu\ngpu = emugpu.open_gpu(0)\nwhile True:\n    gpu.launch(0.002)\n");
    let share = |probed: &Probed| {
        let pid = probed.pid.clone();
        let of_pid = [("pid", pid.as_str())];
        let page = probed
            .exporter
            .metrics_within(Duration::from_secs(40), |p| {
                value(p, "gpu_process_cuda_launch_queue_full_ratio", &of_pid).is_some()
                    || value(
                        p,
                        "gpu_exporter_signal_supported",
                        &[("signal", "cuda_probes")],
                    )
                    .is_some()
            });
        value(
            &page,
            "gpu_process_cuda_launch_queue_full_ratio",
            &[("pid", pid.as_str())],
        )
    };
    if !may_probe() {
        assert_eq!(share(&held), None);
        return;
    }
    // The queue takes two seconds of kernels to fill: a window in them finds it not yet
    // full, so a later window must find it held.
    let pid = held.pid.clone();
    let of_pid = [("pid", pid.as_str())];
    let mut seen: Vec<Option<f64>> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while !seen.last().is_some_and(|f| f.is_some_and(|f| f > 0.5))
        && std::time::Instant::now() < deadline
    {
        // Answered 503 while a tick runs late on a loaded machine: asked again.
        let page = held
            .exporter
            .metrics_within(Duration::from_secs(10), |_| true);
        let full = value(&page, "gpu_process_cuda_launch_queue_full_ratio", &of_pid);
        if seen.last() != Some(&full) {
            seen.push(full);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        seen.last().is_some_and(|f| f.is_some_and(|f| f > 0.5)),
        "held, window by window: {seen:?}"
    );
    let kept_up = probed(
        "import time, emugpu\ngpu = emugpu.open_gpu(0)\nwhile True:\n    gpu.launch(0.0001)\n    time.sleep(0.001)\n",
    );
    assert_eq!(share(&kept_up), Some(0.0));
}

#[test]
fn nccl_collectives_are_counted_per_process_by_operation() {
    // A rank of a one-rank communicator (nothing to wait for) all-reducing 4 MiB of float32
    // every 50 ms, as DDP's buckets are, through the stub libnccl.so.2 mapped beside the driver,
    // and exchanging 512 KiB of float16 with itself in a group (a send and a receive: their
    // count and datatype are the second and third arguments, not the third and fourth).
    let Probed { exporter, pid, .. } = &probed(
        "import ctypes, os, time, emugpu\ngpu = emugpu.open_gpu(0)\ngpu.launch(0.0001)\n\
         class UniqueId(ctypes.Structure):\n    _fields_ = [('internal', ctypes.c_char * 128)]\n\
         nccl = ctypes.CDLL(os.path.join(emugpu._libraries(), 'libnccl.so.2'))\n\
         nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]\n\
         nccl.ncclAllReduce.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_size_t, ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 2\n\
         nccl.ncclSend.argtypes = nccl.ncclRecv.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 2\n\
         uid, comm = UniqueId(), ctypes.c_void_p()\nassert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0\n\
         assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0\nbuffer = 0x7e0000000000\n\
         while True:\n    assert nccl.ncclAllReduce(buffer, buffer, 1 << 20, 7, 0, comm, None) == 0\n\
         \x20   assert nccl.ncclGroupStart() == 0 and nccl.ncclSend(buffer, 1 << 18, 6, 0, comm, None) == 0\n\
         \x20   assert nccl.ncclRecv(buffer, 1 << 18, 6, 0, comm, None) == 0 and nccl.ncclGroupEnd() == 0\n\
         \x20   gpu.synchronize()\n    time.sleep(0.05)\n",
    );
    let op = |op: &'static str| [("pid", pid.as_str()), ("op", op)];
    if !may_probe() {
        let page = exporter.metrics_when(|p| {
            value(p, "gpu_exporter_source_supported", &[("source", "cuda")]).is_some()
        });
        assert_eq!(
            value(
                &page,
                "gpu_process_nccl_collectives_total",
                &op("all_reduce")
            ),
            None
        );
        return;
    }
    // Each entry point is attached on its own, a few milliseconds apart (more on a loaded
    // machine): the sends' count may start an iteration or two after the all-reduces'.
    let page = exporter.metrics_when(|p| {
        let at_least = |side, n| {
            value(p, "gpu_process_nccl_collectives_total", &op(side)).is_some_and(|c| c >= n)
        };
        at_least("all_reduce", 5.0) && at_least("send", 4.0) && at_least("recv", 4.0)
    });
    let issued = value(
        &page,
        "gpu_process_nccl_collectives_total",
        &op("all_reduce"),
    )
    .unwrap();
    assert_eq!(
        value(&page, "gpu_process_nccl_bytes_total", &op("all_reduce")),
        Some(issued * f64::from(4 << 20))
    );
    assert_eq!(
        value(
            &page,
            "gpu_process_nccl_collectives_total",
            &op("all_gather")
        ),
        Some(0.0)
    );
    for side in ["send", "recv"] {
        let transfers = value(&page, "gpu_process_nccl_collectives_total", &op(side)).unwrap();
        assert_eq!(
            value(&page, "gpu_process_nccl_bytes_total", &op(side)),
            Some(transfers * f64::from(512 << 10)),
            "{side}"
        );
    }
    // Its step, from the cadence of its all-reduces and syncs: 50 ms of sleep and the
    // collective's few hundred microseconds.
    let labels = [("pid", pid.as_str())];
    let page = exporter.metrics_when(|p| value(p, "gpu_process_step_seconds", &labels).is_some());
    let step = value(&page, "gpu_process_step_seconds", &labels).unwrap();
    assert!((0.05..0.08).contains(&step), "step {step} s");
    let best = value(&page, "gpu_process_step_best_seconds", &labels).unwrap();
    assert!(best <= step + 1e-9, "best {best} s, step {step} s");
    let own = [("against", "own_best")];
    assert!(value(&page, "gpu_straggler_score_ratio", &own).is_some_and(|s| s < 0.3));
}

#[test]
fn a_rank_waiting_in_ncclcomminitrank_for_a_peer_that_never_comes_is_hung() {
    // Rank 0 of a two-rank communicator whose rank 1 never calls ncclCommInitRank: the call
    // blocks (NCCL's bootstrap waits for every rank), the host asleep and the GPU idle. The
    // process loads its model for two seconds first, as a job does between its context and its
    // first collective: the probes see a call from its entry.
    let Probed { exporter, pid, .. } = &probed_with(
        "import ctypes, os, time, emugpu\ngpu = emugpu.open_gpu(0)\ngpu.launch(0.0001)\n\
         class UniqueId(ctypes.Structure):\n    _fields_ = [('internal', ctypes.c_char * 128)]\n\
         nccl = ctypes.CDLL(os.path.join(emugpu._libraries(), 'libnccl.so.2'))\n\
         nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]\n\
         uid, comm = UniqueId(), ctypes.c_void_p()\nassert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0\n\
         time.sleep(2)\nnccl.ncclCommInitRank(ctypes.byref(comm), 2, uid, 0)\n",
        "analysis:\n  window: 4s\n  min_duration: 1s\n  hang_after: 3s\n",
    );
    let labels = [("pid", pid.as_str())];
    if !may_probe() {
        let page = exporter.metrics_when(|p| {
            value(p, "gpu_exporter_source_supported", &[("source", "cuda")]).is_some()
        });
        let creating = value(&page, "gpu_process_nccl_communicator_init_seconds", &labels);
        assert_eq!(creating, None);
        return;
    }
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_process_nccl_communicator_init_seconds", &labels).is_some_and(|s| s >= 4.0)
    });
    // The wait is NCCL's, not the driver's: no driver wait goes on meanwhile.
    assert_eq!(
        value(&page, "gpu_process_cuda_wait_ongoing_seconds", &labels),
        Some(0.0)
    );
    let mut diagnosis = serde_json::Value::Null;
    exporter.wait_within(Duration::from_secs(15), || {
        let api = exporter.get("/api/v1/diagnosis", &[]);
        diagnosis = serde_json::from_slice(&api.body).unwrap();
        diagnosis["gpus"][0]["primary"] == "hung"
    });
    let gpu = &diagnosis["gpus"][0];
    let frame = gpu["hang"]["frame"].as_str().unwrap();
    assert!(frame.starts_with("ncclCommInitRank"), "{frame}");
    let explanation = gpu["explanation"].as_str().unwrap();
    assert!(
        explanation.contains("creation of its NCCL communicator"),
        "{explanation}"
    );
}

#[test]
fn the_boundary_is_served_as_a_fixed_set_of_series_per_gpu_process() {
    use gpu_bottleneck_exporter::snapshot::{
        CudaThread, CudaTotals, GpuDevice, GpuProcess, GpuSnapshot, ProcessCuda, Snapshot, Step,
    };
    let snapshot = Snapshot {
        gpu: Some(GpuSnapshot {
            nvml_up: true,
            devices: vec![GpuDevice {
                uuid: "GPU-cuda".into(),
                up: true,
                processes: [4242, 5151]
                    .map(|pid| GpuProcess {
                        pid,
                        command: "python3".into(),
                        ..GpuProcess::default()
                    })
                    .to_vec(),
                ..GpuDevice::default()
            }],
            ..GpuSnapshot::default()
        }),
        // 5151 maps no driver the probes watch: no series of its own.
        cuda: vec![ProcessCuda {
            pid: 4242,
            totals: CudaTotals {
                launches: 120_000,
                graph_launches: 30,
                copies_to_device: 400,
                bytes_to_device: 400 << 20,
                copies_to_host: 400,
                bytes_to_host: 1600,
                wait_seconds: [12.5, 0.25, 0.0, 3.0],
                collectives: [64, 0, 0, 0, 0, 0, 0],
                collective_bytes: [64 * (25 << 20), 0, 0, 0, 0, 0, 0],
            },
            threads: vec![
                CudaThread {
                    tid: 4243,
                    launches_per_second: 1600.0,
                    wait_ratio: 0.0,
                },
                CudaThread {
                    tid: 4242,
                    launches_per_second: 800.0,
                    wait_ratio: 0.62,
                },
                CudaThread {
                    tid: 4250,
                    launches_per_second: 0.0,
                    wait_ratio: 0.01,
                },
            ],
            waiting_seconds: Some(1.5),
            // A subgroup's communicator being split off while it trains.
            creating_communicator_seconds: Some(0.25),
            step: Some(Step {
                seconds: 0.42,
                best_seconds: 0.35,
            }),
            launch_queue_full: Some(0.3),
            ..ProcessCuda::default()
        }],
        ..Snapshot::default()
    };
    let page = common::check_goldens("cuda", &common::render_pinned(&snapshot));
    let of = |name: &str, labels: &[(&str, &str)]| value(&page, name, labels);
    assert_eq!(
        of(
            "gpu_process_cuda_launches_total",
            &[("pid", "4242"), ("kind", "graph")]
        ),
        Some(30.0)
    );
    assert_eq!(
        of(
            "gpu_process_cuda_wait_seconds_total",
            &[("pid", "4242"), ("kind", "stream")]
        ),
        Some(12.5)
    );
    assert_eq!(
        of(
            "gpu_process_cuda_main_thread_wait_ratio",
            &[("pid", "4242")]
        ),
        Some(0.62)
    );
    assert_eq!(
        of(
            "gpu_process_cuda_launch_queue_full_ratio",
            &[("pid", "4242")]
        ),
        Some(0.3)
    );
    // Two threads launched (the third only waited).
    assert_eq!(
        of("gpu_process_cuda_driving_threads", &[("pid", "4242")]),
        Some(2.0)
    );
    assert_eq!(
        of(
            "gpu_process_cuda_launches_total",
            &[("pid", "5151"), ("kind", "kernel")]
        ),
        None
    );
    assert_eq!(
        of(
            "gpu_process_nccl_bytes_total",
            &[("pid", "4242"), ("op", "all_reduce")]
        ),
        Some(64.0 * f64::from(25 << 20))
    );
    let series = |prefix: &str| -> usize {
        page.iter()
            .filter(|f| f.name.starts_with(prefix))
            .map(|f| f.samples.len())
            .sum()
    };
    assert_eq!(
        of("gpu_process_cuda_wait_ongoing_seconds", &[("pid", "4242")]),
        Some(1.5)
    );
    assert_eq!(
        series("gpu_process_cuda_"),
        14,
        "a fixed set per process, none per kernel or call"
    );
    // Seven operations each for the process that issued collectives, and the communicator it
    // creates; none for the other.
    assert_eq!(series("gpu_process_nccl_"), 15);
    assert_eq!(
        of(
            "gpu_process_nccl_communicator_init_seconds",
            &[("pid", "4242")]
        ),
        Some(0.25)
    );
}
