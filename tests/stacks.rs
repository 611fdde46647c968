//! Python stacks of real processes with known stacks, read the way the exporter reads them
//! (this test runs as root: it may ptrace them; the unprivileged runs are in
//! tests/kubernetes.rs), and the activity series against a golden file.

mod common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::TempDir;
use gpu_bottleneck_exporter::config::StacksConfig;
use gpu_bottleneck_exporter::snapshot::{
    Activity, CudaThread, FrameShare, GpuDevice, GpuProcess, GpuSnapshot, PerActivity, ProcessCuda,
    ProcessStacks, Snapshot,
};
use gpu_bottleneck_exporter::source::stacks::StacksSource;
use gpu_bottleneck_exporter::source::Source;

/// A Python process running `body` after printing "ready" (emugpu importable, the emulated
/// GPUs in `timelines`).
struct Python(Child);

impl Python {
    fn start(timelines: &TempDir, body: &str) -> Python {
        let script = format!(
            "import sys, time, multiprocessing\nsys.path.insert(0, {workloads:?})\nimport emugpu\n{body}",
            workloads = common::repo_root().join("workloads").to_string_lossy(),
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            // A group of its own, so that its forked workers go with it.
            .process_group(0)
            .env("EMUGPU_DIR", timelines.path())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        // Attach only once the interpreter runs the loop (as a rank is by the time it holds a
        // GPU context).
        assert_eq!(line_from(&mut child), "ready");
        Python(child)
    }
}

/// The next line the child printed, read a byte at a time: a buffered reader dropped after
/// one line would lose what the child printed after it (the thread id the ray test reads
/// next, when both lines are in the pipe before the test reads).
fn line_from(child: &mut Child) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8];
    let stdout = child.stdout.as_mut().unwrap();
    while stdout.read(&mut byte).expect("the child's output") == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    String::from_utf8(line).unwrap()
}

impl Drop for Python {
    /// Kills the process and its workers (which would otherwise keep the test's output pipe).
    fn drop(&mut self) {
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// A node whose one GPU lists `pids`.
fn gpu_with(pids: &[u32]) -> Snapshot {
    Snapshot {
        gpu: Some(GpuSnapshot {
            nvml_up: true,
            devices: vec![GpuDevice {
                uuid: "GPU-stacks".into(),
                up: true,
                processes: pids
                    .iter()
                    .map(|pid| GpuProcess {
                        pid: *pid,
                        command: "python3".into(),
                        ..GpuProcess::default()
                    })
                    .collect(),
                ..GpuDevice::default()
            }],
            ..GpuSnapshot::default()
        }),
        ..Snapshot::default()
    }
}

#[test]
fn each_main_thread_is_seen_where_it_waits() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs ptrace access to the test's own child processes as root");
        return;
    }
    let timelines = TempDir::new("timelines");
    let loader = Python::start(
        &timelines,
        "def worker(q):\n    while True:\n        time.sleep(0.5)\n        q.put(b'batch')\nif __name__ == '__main__':\n    q = multiprocessing.get_context('fork').Queue()\n    multiprocessing.get_context('fork').Process(target=worker, args=(q,), daemon=True).start()\n    print('ready', flush=True)\n    while True:\n        q.get()\n",
    );
    let sync = |mode: &str| {
        Python::start(
            &timelines,
            &format!("gpu = emugpu.open_gpu(0, sync={mode:?})\nprint('ready', flush=True)\nwhile True:\n    gpu.launch(0.2)\n    gpu.synchronize()\n"),
        )
    };
    let spin = sync("spin");
    let blocking = sync("blocking");
    // A busy main thread among 32 napping Python threads started after it (as a rank's
    // pin-memory and logging threads): only the main one is read.
    let busy = Python::start(
        &timelines,
        "import threading\ndef nap():\n    while True:\n        time.sleep(1.0)\nfor _ in range(32):\n    threading.Thread(target=nap, daemon=True).start()\ndef step():\n    total = 0\n    for i in range(10000):\n        total += i * i\n    return total\nprint('ready', flush=True)\nwhile True:\n    step()\n",
    );
    let pids = [&loader, &spin, &blocking, &busy].map(|p| p.0.id());

    let config = StacksConfig {
        interval: gpu_bottleneck_exporter::config::ConfigDuration(Duration::from_millis(50)),
        ..StacksConfig::default()
    };
    let mut source = StacksSource::new(PathBuf::from("/proc"), config, None);
    let mut snapshot = gpu_with(&pids);
    for tick in 0..20 {
        source
            .sample(&mut snapshot, Duration::from_millis(100 * tick))
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let stacks_of = |pid: u32| snapshot.stacks.iter().find(|s| s.pid == pid).unwrap();
    for (pid, expected, what) in [
        (
            pids[0],
            Activity::DataLoader,
            "a queue fed by a slow worker",
        ),
        (pids[1], Activity::GpuSync, "a spin-waiting synchronize"),
        (pids[2], Activity::GpuSync, "a blocking synchronize"),
        (pids[3], Activity::Python, "a busy Python loop"),
    ] {
        let stacks = stacks_of(pid);
        assert!(stacks.samples >= 10, "{what}: {} samples", stacks.samples);
        assert!(
            stacks.share(expected) >= 0.8,
            "{what}: {:?} of {:?}",
            stacks.shares,
            Activity::ALL
        );
        let top = &stacks.top_frames[0];
        assert_eq!(top.activity, expected, "{what}: {top:?}");
        assert!(top.share >= 0.5 && top.location.contains(':'), "{top:?}");
    }
    // The busy loop's innermost frame is its own function, named with file and line.
    assert_eq!(stacks_of(pids[3]).top_frames[0].function, "step");

    // A process that exits is dropped; one that is not Python is passed over quietly.
    drop(busy);
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let mut snapshot = gpu_with(&[pids[0], sleeper.id()]);
    source
        .sample(&mut snapshot, Duration::from_secs(3))
        .unwrap();
    assert_eq!(
        snapshot.stacks.iter().map(|s| s.pid).collect::<Vec<_>>(),
        vec![pids[0]]
    );
    assert!(snapshot.unsupported_signals.is_empty());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn the_thread_that_drives_the_gpu_is_followed_where_the_main_thread_only_joins_it() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs ptrace access to the test's own child processes as root");
        return;
    }
    let timelines = TempDir::new("timelines");
    // Ray Train's shape: the training function on a thread, the main thread joining it; the
    // thread says its native id (what the CUDA probes key their threads by).
    let mut ray = Python::start(
        &timelines,
        "import threading\ndef step():\n    total = 0\n    for i in range(10000):\n        total += i * i\n    return total\ndef train():\n    print(threading.get_native_id(), flush=True)\n    while True:\n        step()\nthread = threading.Thread(target=train, name='train')\nprint('ready', flush=True)\nthread.start()\n",
    );
    let pid = ray.0.id();
    let train: u32 = line_from(&mut ray.0)
        .parse()
        .expect("the thread's native id");
    let config = StacksConfig {
        interval: gpu_bottleneck_exporter::config::ConfigDuration(Duration::from_millis(50)),
        ..StacksConfig::default()
    };
    let mut source = StacksSource::new(PathBuf::from("/proc"), config, None);
    // What the probes saw this tick: `threads` launched and waited.
    let run = |source: &mut StacksSource, threads: &[u32], from: u64| {
        let mut snapshot = gpu_with(&[pid]);
        for tick in 0..15 {
            snapshot.cuda = vec![ProcessCuda {
                pid,
                threads: threads
                    .iter()
                    .map(|&tid| CudaThread {
                        tid,
                        launches_per_second: 500.0,
                        wait_ratio: 0.3,
                    })
                    .collect(),
                ..ProcessCuda::default()
            }];
            source
                .sample(&mut snapshot, Duration::from_millis(100 * (from + tick)))
                .unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        snapshot.stacks.into_iter().find(|s| s.pid == pid).unwrap()
    };
    let followed = run(&mut source, &[train], 0);
    assert_eq!(followed.followed_thread, Some(train));
    assert!(
        followed.recent_shares[Activity::Python] >= 0.8,
        "{followed:?}"
    );
    assert!(
        followed.top_frames.iter().any(|f| f.function == "step"),
        "{followed:?}"
    );
    // The main thread drives the GPU again: it is sampled again (asleep in the interpreter's
    // join of its threads).
    let main = run(&mut source, &[pid, train], 20);
    assert_eq!(main.followed_thread, None);
    assert!(
        main.top_frames
            .iter()
            .any(|f| f.activity == Activity::Other && f.location.contains("threading.py")),
        "{main:?}"
    );
}

#[test]
fn activity_shares_are_served_per_gpu_process() {
    let mut snapshot = gpu_with(&[4242]);
    snapshot.stacks = vec![ProcessStacks {
        pid: 4242,
        samples: 30,
        shares: PerActivity([0.1, 0.6, 0.0, 0.3, 0.0]),
        top_frames: vec![FrameShare {
            function: "EmulatedGPU.synchronize".into(),
            location: "/w/emugpu.py:174".into(),
            activity: Activity::GpuSync,
            share: 0.6,
        }],
        recent_samples: 10,
        recent_shares: PerActivity([0.1, 0.6, 0.0, 0.3, 0.0]),
        loader_queued: 0.0,
        recent_loader_queued: 0.0,
        followed_thread: None,
    }];
    let page = common::check_goldens("stacks", &common::render_pinned(&snapshot));
    let share = |activity| {
        common::exposition::value(
            &page,
            "gpu_process_activity_ratio",
            &[("pid", "4242"), ("activity", activity)],
        )
    };
    assert_eq!(share("gpu_sync"), Some(0.6));
    assert_eq!(share("collective"), Some(0.0));
    assert_eq!(share("data_loader"), Some(0.1));
}
