//! The process-context source: fixture /proc and /sys trees sampled twice (golden files and
//! hand-computed figures), and a live process tree read against /proc and `ps`.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::exposition::value;
use common::{Scenario, TempDir};
use gpu_bottleneck_exporter::config::ProcessConfig;
use gpu_bottleneck_exporter::snapshot::{
    CpuRates, CpuSnapshot, CpuStat, GpuDevice, GpuProcess, GpuSnapshot, ProcessContext, Snapshot,
};
use gpu_bottleneck_exporter::source::process::ProcessSource;
use gpu_bottleneck_exporter::source::{HostRoots, Source};

/// A node whose GPU 0 (NUMA node 0) runs `pid`, with 8 CPUs half busy.
fn node_with_gpu_process(pid: u32, command: &str) -> Snapshot {
    let process = GpuProcess {
        pid,
        command: command.into(),
        kind: "compute",
        used_memory_bytes: 1 << 30,
        ..GpuProcess::default()
    };
    Snapshot {
        cpu: Some(CpuSnapshot {
            stat: CpuStat {
                cpu_count: 8,
                ..CpuStat::default()
            },
            rates: Some(CpuRates {
                busy_ratio: 0.5,
                ..CpuRates::default()
            }),
            busy_by_cpu: Vec::new(),
        }),
        gpu: Some(GpuSnapshot {
            nvml_up: true,
            devices: vec![GpuDevice {
                index: 0,
                uuid: "GPU-ctx".into(),
                up: true,
                numa_node: Some(0),
                process_count: Some(1),
                processes: vec![process],
                ..GpuDevice::default()
            }],
            ..GpuSnapshot::default()
        }),
        ..Snapshot::default()
    }
}

/// Samples a fixture's t0 and t1 trees one second apart (through `proc` and `sys` symlinks
/// swapped between ticks) and returns the second snapshot.
fn sample_fixture(name: &str, pid: u32, command: &str) -> Snapshot {
    let work = TempDir::new(name);
    let fixtures = common::repo_root().join("tests/fixtures").join(name);
    sample_twice(work.path(), &fixtures, || {
        node_with_gpu_process(pid, command)
    })
}

/// Samples the `t0` and `t1` trees under `fixtures` one second apart with the default
/// settings; see [`sample_ticks`].
fn sample_twice(work: &Path, fixtures: &Path, node: impl Fn() -> Snapshot) -> Snapshot {
    sample_ticks(
        work,
        fixtures,
        &["t0", "t1"],
        ProcessConfig::default(),
        node,
    )
}

/// Samples the `trees` under `fixtures` one second apart, through `proc` and `sys` links in
/// `work` swapped between ticks, on the snapshot `node` makes for each tick; returns the last
/// snapshot.
fn sample_ticks(
    work: &Path,
    fixtures: &Path,
    trees: &[&str],
    config: ProcessConfig,
    node: impl Fn() -> Snapshot,
) -> Snapshot {
    let roots = HostRoots {
        procfs: work.join("proc"),
        sysfs: work.join("sys"),
    };
    let mut source = ProcessSource::new(roots.clone(), config);
    let mut snapshot = Snapshot::default();
    for (second, tree) in trees.iter().enumerate() {
        for (link, dir) in [(&roots.procfs, "proc"), (&roots.sysfs, "sys")] {
            let _ = std::fs::remove_file(link);
            std::os::unix::fs::symlink(fixtures.join(tree).join(dir), link).unwrap();
        }
        snapshot = node();
        source
            .sample(&mut snapshot, Duration::from_secs(second as u64))
            .unwrap();
    }
    snapshot
}

/// Copies a fixture tree (`cp -r`), for a test that changes it.
fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -r {} {}",
        from.display(),
        to.display()
    );
}

fn context(snapshot: &Snapshot) -> &ProcessContext {
    snapshot
        .processes
        .first()
        .expect("a context for the GPU process")
}

#[test]
fn cgroup_v2_systemd_pod_with_throttling_workers_and_numa() {
    let snapshot = sample_fixture("process-v2", 1000, "python3");
    let c = context(&snapshot);
    common::assert_close(c.cpu_cores, 1.3); // 130 ticks in 1 s
    common::assert_close(c.busiest_thread_ratio, 0.98); // the main thread: the host-bound signature
    assert_eq!(c.threads, 3);
    assert_eq!(c.allowed_cpus.len(), 8);
    assert_eq!((c.uid, c.resident_bytes), (Some(1000), Some(8 << 30)));
    // Boot time (btime) plus the start time in clock ticks after boot.
    let started_ticks = std::fs::read_to_string(
        common::repo_root().join("tests/fixtures/process-v2/t1/proc/1000/stat"),
    )
    .unwrap()
    .rsplit(')')
    .next()
    .unwrap()
    .split_whitespace()
    .nth(19)
    .unwrap()
    .parse::<f64>()
    .unwrap();
    common::assert_close(
        c.start_time_seconds,
        1_796_025_600.0 + started_ticks / 100.0,
    );
    common::assert_close(c.blkio_delay_seconds, 0.45);
    assert_eq!(
        c.numa_nodes,
        vec![0, 1],
        "worker 1010 last ran on CPU 5, node 1"
    );
    let w = &c.workers;
    // 1020 was listed under 1012 but exited before t1: skipped quietly, not an error.
    assert_eq!((w.count, w.running, w.disk_wait, w.zombie), (3, 1, 1, 0));
    common::assert_close(w.cpu_cores, 1.15);
    common::assert_close(w.max_cpu_ratio, 0.9);
    common::assert_close(w.blkio_delay_ratio, 0.6);
    common::assert_close(w.read_bytes_per_second, 2.4e7);
    // Run-queue delay (schedstat): workers 0.5 + 0.3 + 0 s in 1 s, the main thread 0.2 s.
    common::assert_close(w.cpu_wait_ratio, 0.8);
    common::assert_close(c.cpu_wait_ratio, 1.0);
    let g = c.cgroup.as_ref().unwrap();
    assert_eq!(g.pod_uid, "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d");
    assert_eq!(
        g.container_id,
        "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100"
    );
    common::assert_close(g.cpu_quota_cores, 4.0);
    common::assert_close(g.throttled_ratio, 0.4);
    common::assert_close(snapshot.other_cpu_ratio, (4.0 - 2.45) / 8.0);
    assert_eq!(snapshot.delay_accounting, Some(true));

    let f = common::check_goldens("process-v2", &common::render_pinned(&snapshot));
    let pressure = |resource: &str, kind: &str| {
        value(
            &f,
            "gpu_process_cgroup_pressure_stalled_ratio",
            &[("resource", resource), ("kind", kind)],
        )
    };
    common::assert_close(pressure("cpu", "some"), 0.3);
    // "full" only for memory (thrashing); the fixture's cgroup has no memory.pressure.
    assert_eq!(pressure("cpu", "full"), None);
    common::assert_close(pressure("io", "some"), 0.15);
    assert_eq!(
        value(&f, "gpu_process_numa_mismatch", &[("pid", "1000")]),
        Some(1.0)
    );
    assert_eq!(
        value(&f, "gpu_process_state", &[("state", "running")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &f,
            "gpu_process_workers_in_state",
            &[("state", "disk_wait")]
        ),
        Some(1.0)
    );
}

/// A pod with one rank per GPU in one container: every rank's cgroup figures come from the
/// same cgroup and every one of them gets them (not only the first read in a tick).
#[test]
fn every_gpu_process_of_one_cgroup_gets_its_throttling_and_pressure() {
    let work = TempDir::new("one-cgroup");
    copy_tree(
        &common::repo_root().join("tests/fixtures/process-v2"),
        &work.path().join("tree"),
    );
    let ranks = [1000, 1010, 1011, 1012];
    for tree in ["t0", "t1"] {
        let proc = work.path().join("tree").join(tree).join("proc");
        for rank in &ranks[1..] {
            std::fs::copy(
                proc.join("1000/cgroup"),
                proc.join(format!("{rank}/cgroup")),
            )
            .unwrap();
        }
    }
    let snapshot = sample_twice(work.path(), &work.path().join("tree"), || {
        let mut snapshot = node_with_gpu_process(1000, "python3");
        let gpu = snapshot.gpu.as_mut().unwrap();
        let template = gpu.devices[0].clone();
        gpu.devices = ranks
            .iter()
            .enumerate()
            .map(|(index, pid)| {
                let mut device = template.clone();
                device.index = index as u32;
                device.uuid = format!("GPU-{index}");
                device.processes[0].pid = *pid;
                device
            })
            .collect();
        snapshot
    });
    assert_eq!(snapshot.processes.len(), ranks.len());
    for c in &snapshot.processes {
        let g = c.cgroup.as_ref().unwrap();
        assert_eq!(
            g.pod_uid, "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "pid {}",
            c.pid
        );
        common::assert_close(g.throttled_ratio, 0.4);
        let cpu = g.pressure.iter().find(|p| p.resource == "cpu").unwrap();
        common::assert_close(cpu.rates.map(|r| r.some_ratio), 0.3);
    }
    // The throttled-ratio series is there for every GPU process, so the analysis of every GPU
    // sees the cgroup's throttling.
    let (text, _) = common::render_pinned(&snapshot);
    let f = common::exposition::parse(&text, false).unwrap();
    for pid in ranks {
        assert_eq!(
            value(
                &f,
                "gpu_process_cgroup_cpu_throttled_ratio",
                &[("pid", &pid.to_string())]
            ),
            Some(0.4),
            "pid {pid}"
        );
    }
}

/// Deployed unprivileged, the exporter cannot read `/proc/<pid>/io` of another user's process
/// (it needs CAP_SYS_PTRACE or the same uid): the read bytes are absent, the signal is listed as
/// unsupported, and everything else is read as before. The sampling runs on a thread whose
/// credentials alone are dropped to nobody (a raw setresuid changes only the calling thread),
/// against a copy of the fixture whose io file is readable by its owner only.
#[test]
fn an_io_file_the_exporter_may_not_read_is_reported_unsupported() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to drop to another uid");
        return;
    }
    let work = TempDir::new("unprivileged");
    let tree = work.path().join("tree");
    copy_tree(
        &common::repo_root().join("tests/fixtures/process-v2"),
        &tree,
    );
    use std::os::unix::fs::PermissionsExt;
    for t in ["t0", "t1"] {
        let io = tree.join(t).join("proc/1000/io");
        std::fs::set_permissions(&io, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // Nobody swaps the proc and sys links between ticks.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let root = work.path().to_path_buf();
    let snapshot = std::thread::spawn(move || {
        let dropped = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        assert_eq!(dropped, 0, "setresuid on this thread");
        sample_twice(&root, &root.join("tree"), || {
            node_with_gpu_process(1000, "python3")
        })
    })
    .join()
    .unwrap();
    let c = context(&snapshot);
    assert_eq!(c.read_bytes, None);
    assert_eq!(snapshot.unsupported_signals, vec!["process_read_bytes"]);
    // The rest is read as with privilege.
    common::assert_close(c.cpu_cores, 1.3);
    common::assert_close(c.busiest_thread_ratio, 0.98);
    common::assert_close(c.workers.read_bytes_per_second, 2.4e7);
    let f = common::check_goldens("process-unprivileged", &common::render_pinned(&snapshot));
    assert_eq!(
        value(
            &f,
            "gpu_exporter_signal_supported",
            &[("signal", "process_read_bytes")]
        ),
        Some(0.0)
    );
}

/// Adds `ticks` to the user time (field 14) of a stat file.
fn add_utime(path: &Path, ticks: u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let close = text.rfind(')').unwrap();
    let mut fields: Vec<String> = text[close + 2..].split(' ').map(String::from).collect();
    fields[11] = (fields[11].parse::<u64>().unwrap() + ticks).to_string();
    std::fs::write(path, format!("{}{}", &text[..close + 2], fields.join(" "))).unwrap();
}

/// The busiest thread: the main thread every tick, every thread every `thread_interval`. A
/// third tick in which the main thread idles and thread 1001 burns 0.9 of a core: read with a
/// 1 s thread interval the pass finds 1001; with the default 15 s the figure still holds the
/// last pass's busiest (the main thread's 0.98 between t0 and t1) until the next pass.
#[test]
fn the_busiest_thread_is_the_main_thread_every_tick_and_any_thread_every_pass() {
    let work = TempDir::new("threads");
    let tree = work.path().join("tree");
    copy_tree(
        &common::repo_root().join("tests/fixtures/process-v2"),
        &tree,
    );
    copy_tree(&tree.join("t1"), &tree.join("t2"));
    // Advance the main thread by 10 ticks and thread 1001 by 90.
    for (thread, ticks) in [(1000, 10), (1001, 90)] {
        add_utime(
            &tree.join(format!("t2/proc/1000/task/{thread}/stat")),
            ticks,
        );
    }
    let busiest_at_t2 = |thread_interval: &str| {
        let config: ProcessConfig =
            serde_saphyr::from_str(&format!("thread_interval: {thread_interval}")).unwrap();
        let snapshot = sample_ticks(work.path(), &tree, &["t0", "t1", "t2"], config, || {
            node_with_gpu_process(1000, "python3")
        });
        context(&snapshot).busiest_thread_ratio
    };
    common::assert_close(busiest_at_t2("1s"), 0.9);
    common::assert_close(busiest_at_t2("15s"), 0.98);
}

#[test]
fn the_wait_for_a_cpu_counts_the_busiest_thread_beside_the_main_thread() {
    // Backward on the autograd engine's thread: the main thread sleeps (no CPU, no wait)
    // while thread 1001 computes 90 ticks a second and waits 0.6 s a second for a CPU.
    let work = TempDir::new("driving-thread");
    let tree = work.path().join("tree");
    copy_tree(
        &common::repo_root().join("tests/fixtures/process-v2"),
        &tree,
    );
    let mut waited_ns = 2_000_000_000u64;
    for (from, to) in [("t1", "t2"), ("t2", "t3")] {
        copy_tree(&tree.join(from), &tree.join(to));
        add_utime(&tree.join(format!("{to}/proc/1000/task/1001/stat")), 90);
        waited_ns += 600_000_000;
        std::fs::write(
            tree.join(format!("{to}/proc/1000/task/1001/schedstat")),
            format!("1000000000 {waited_ns} 10\n"),
        )
        .unwrap();
    }
    let config: ProcessConfig = serde_saphyr::from_str("thread_interval: 1s").unwrap();
    let waiting_at = |trees: &[&str]| {
        let snapshot = sample_ticks(work.path(), &tree, trees, config.clone(), || {
            node_with_gpu_process(1000, "python3")
        });
        context(&snapshot).cpu_wait_ratio
    };
    // The main thread and workers wait 0.2 + 0.8 between t0 and t1, nothing after.
    common::assert_close(waiting_at(&["t0", "t1"]), 1.0);
    // t2 finds thread 1001 the busiest; from t3 on its wait is counted.
    common::assert_close(waiting_at(&["t0", "t1", "t2"]), 0.0);
    common::assert_close(waiting_at(&["t0", "t1", "t2", "t3"]), 0.6);
}

#[test]
fn cgroup_v1_cgroupfs_without_delay_accounting_or_children_files() {
    let snapshot = sample_fixture("process-v1", 2000, "train.py");
    let c = context(&snapshot);
    // No children files: the worker is found by its parent pid; the unrelated sshd is not.
    assert_eq!(c.workers.count, 1);
    common::assert_close(c.workers.cpu_cores, 0.95);
    assert_eq!(
        c.blkio_delay_seconds, None,
        "delay accounting off: unknown, not 0"
    );
    assert_eq!(c.workers.blkio_delay_ratio, None);
    assert_eq!(snapshot.delay_accounting, Some(false));
    let g = c.cgroup.as_ref().unwrap();
    assert_eq!(g.pod_uid, "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d");
    common::assert_close(g.cpu_quota_cores, 2.0);
    common::assert_close(g.throttled_ratio, 0.5);
    assert_eq!(g.pressure, vec![], "v1 has no per-cgroup PSI");
    let f = common::check_goldens("process-v1", &common::render_pinned(&snapshot));
    assert_eq!(
        value(&f, "gpu_host_delay_accounting_enabled", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(&f, "gpu_process_blkio_delay_seconds_total", &[]),
        None
    );
}

#[test]
fn a_slurm_job_on_cgroup_v1_labels_its_gpu() {
    let snapshot = sample_fixture("process-slurm", 2000, "train.py");
    let g = context(&snapshot).cgroup.as_ref().unwrap();
    assert_eq!((g.slurm_job.as_str(), g.pod_uid.as_str()), ("4242", ""));
    assert_eq!(g.cpu_quota_cores, None, "cfs_quota_us -1: no quota");
    common::assert_close(g.throttled_ratio, 0.5);
    let f = common::check_goldens("process-slurm", &common::render_pinned(&snapshot));
    assert_eq!(
        value(
            &f,
            "gpu_slurm_job_info",
            &[("gpu", "0"), ("slurm_job", "4242")]
        ),
        Some(1.0)
    );
}

#[test]
fn a_gpu_process_that_exits_disappears_without_an_error() {
    let work = TempDir::new("gone");
    let roots = HostRoots {
        procfs: work.path().join("proc"),
        sysfs: work.path().join("sys"),
    };
    std::fs::create_dir_all(&roots.procfs).unwrap();
    let mut source = ProcessSource::new(roots, ProcessConfig::default());
    let mut snapshot = node_with_gpu_process(4_000_123, "gone");
    source.sample(&mut snapshot, Duration::ZERO).unwrap();
    assert!(snapshot.processes.is_empty());
}

/// Reads (state, utime + stime) of a pid from /proc, or None once it has exited.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some((
        fields[0].chars().next()?,
        fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?,
    ))
}

struct Tree(Child);

impl Drop for Tree {
    fn drop(&mut self) {
        // The shell's children share its process group (setsid made the shell its leader).
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &group])
            .status();
        // Never block a failing test on a shell that did not die.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(self.0.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_live_process_tree_agrees_with_proc_and_ps() {
    // A parent with three CPU-burning children and one asleep on a FIFO (its workers: forks
    // running its executable), and `sleep`, another program (not a worker), in its own group.
    let fifo = std::env::temp_dir().join(format!("gbe-live-tree-{}", std::process::id()));
    let script = format!(
        "mkfifo {0}; for i in 1 2 3; do (while :; do :; done) & done; (read x < {0}) & sleep 600 & wait",
        fifo.display()
    );
    let mut command = Command::new("setsid");
    command.args(["sh", "-c", &script]);
    let tree = Tree(command.spawn().unwrap());
    let parent = tree.0.id();
    let scenario = Scenario::new(&format!("devices:\n  - uuid: GPU-live\n    processes:\n      - {{pid: {parent}, used_memory: 1000, sm: 5}}\n"));
    let exporter = scenario.start(&common::fake_nvml(false), "");
    let labels = [("pid", parent.to_string())];
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_process_workers", &labels) == Some(4.0)
            && value(p, "gpu_process_other_children", &labels) == Some(1.0)
            && value(p, "gpu_process_workers_cpu_cores", &labels).is_some()
    });
    let _ = std::fs::remove_file(&fifo);

    // The same moment from /proc and ps.
    let children: Vec<u32> =
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
    let ps = Command::new("ps")
        .args(["-o", "stat=", "--ppid", &parent.to_string()])
        .output()
        .unwrap();
    let ps_states: Vec<char> = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .filter_map(|l| l.trim().chars().next())
        .collect();
    assert_eq!(children.len(), 5, "/proc children: {children:?}");
    assert_eq!(ps_states.len(), 5, "ps: {ps_states:?}");
    // `sleep` sleeps too, but is no worker.
    let ps_sleeping = ps_states.iter().filter(|s| **s == 'S').count() as f64 - 1.0;
    let state = |s: &str| {
        value(
            &page,
            "gpu_process_workers_in_state",
            &[("pid", &parent.to_string()), ("state", s)],
        )
        .unwrap()
    };
    // The workers not running, in disk wait or zombies sleep.
    let sleeping = 4.0 - state("running") - state("disk_wait") - state("zombie");
    // Tolerance: a busy loop is briefly S when preempted at the moment of reading; ps and the
    // exporter read a few milliseconds apart, so the counts may differ by one.
    assert!(
        sleeping >= 1.0 && (sleeping - ps_sleeping).abs() <= 1.0,
        "exporter sleeping {sleeping} ps {ps_sleeping}"
    );

    // CPU: three busy loops share this machine's cores. Over the same two seconds, measure
    // them from /proc and average the exporter's per-tick figures (one per 200 ms tick), then
    // compare within 0.35 cores: the windows' edges differ by up to a tick and the machine is
    // shared.
    let cpu_ticks = || -> u64 {
        children
            .iter()
            .filter_map(|c| proc_stat(*c))
            .map(|(_, t)| t)
            .sum()
    };
    let before = cpu_ticks();
    let started = Instant::now();
    let mut reports: Vec<(f64, f64)> = Vec::new();
    let mut busiest: Vec<f64> = Vec::new();
    while started.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(100));
        let page = exporter.metrics();
        let tick = value(&page, "gpu_exporter_samples_total", &[]).unwrap();
        if reports.last().is_none_or(|(last, _)| *last != tick) {
            reports.push((
                tick,
                value(&page, "gpu_process_workers_cpu_cores", &labels).unwrap(),
            ));
            busiest.push(value(&page, "gpu_process_workers_max_cpu_ratio", &labels).unwrap());
        }
    }
    let measured = (cpu_ticks() - before) as f64 / 100.0 / started.elapsed().as_secs_f64();
    let reported = reports.iter().map(|(_, cores)| cores).sum::<f64>() / reports.len() as f64;
    println!("workers' CPU: exporter {reported:.2} cores (mean of {} ticks), /proc over 2 s {measured:.2} cores; ps states {ps_states:?}", reports.len());
    assert!(
        (reported - measured).abs() <= 0.35,
        "exporter {reported} vs /proc {measured}"
    );
    // The busiest worker over those ticks (one tick of a loaded machine can leave each of the
    // spinning workers under a fifth of a core; a clean-clone run saw 0.195).
    let max = busiest.iter().copied().fold(0.0, f64::max);
    assert!((0.2..=1.0).contains(&max), "busiest worker {busiest:?}");
    let page = exporter.metrics();
    // The parent itself only waits.
    assert!(value(&page, "gpu_process_cpu_cores", &labels).unwrap() < 0.1);
}

#[test]
fn the_other_driver_layouts_find_the_same_pod_and_throttling() {
    // cgroup v2 with the cgroupfs driver, cgroup v1 with the systemd driver: the same pod,
    // found through differently shaped paths, with the same counters as their twins above.
    for (fixture, pid, command, quota, throttled) in [
        ("process-v2-cgroupfs", 1000, "python3", 4.0, 0.4),
        ("process-v1-systemd", 2000, "train.py", 2.0, 0.5),
    ] {
        let snapshot = sample_fixture(fixture, pid, command);
        let g = context(&snapshot)
            .cgroup
            .as_ref()
            .unwrap_or_else(|| panic!("{fixture}: no cgroup"));
        assert_eq!(
            g.pod_uid, "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "{fixture}"
        );
        assert_eq!(
            g.container_id, "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100",
            "{fixture}"
        );
        common::assert_close(g.cpu_quota_cores, quota);
        common::assert_close(g.throttled_ratio, throttled);
    }
}

/// Two ranks pinned to one CPU each; a hog outside the GPU trees shares the second CPU.
#[test]
fn others_are_measured_on_the_cpus_a_rank_may_run_on() {
    use gpu_bottleneck_exporter::snapshot::{ProcessContext, WorkerSummary};
    use gpu_bottleneck_exporter::source::process::share_cpus;
    let rank = |pid, cpu, cores: f64| ProcessContext {
        pid,
        allowed_cpus: vec![cpu],
        cpu_cores: Some(cores * 0.25),
        workers: WorkerSummary {
            cpu_cores: Some(cores * 0.75),
            ..WorkerSummary::default()
        },
        ..ProcessContext::default()
    };
    let mut contexts = vec![rank(10, 0, 0.9), rank(20, 1, 0.45)];
    share_cpus(&mut contexts, &[(0, 0.92), (1, 1.0)]);
    let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-9;
    assert!(close(contexts[0].own_cpu_ratio, 0.9));
    assert!(close(contexts[0].others_cpu_ratio, 0.02));
    assert!(close(contexts[1].own_cpu_ratio, 0.45));
    assert!(close(contexts[1].others_cpu_ratio, 0.55));
    // Unpinned, the same figures are node-wide.
    let mut unpinned = vec![ProcessContext {
        allowed_cpus: vec![0, 1],
        ..rank(30, 0, 0.5)
    }];
    share_cpus(&mut unpinned, &[(0, 0.5), (1, 0.5)]);
    assert!(close(unpinned[0].own_cpu_ratio, 0.25));
    assert!(close(unpinned[0].others_cpu_ratio, 0.25));
    // A tree whose CPU use is not known yet (first tick): nothing is claimed for anyone.
    let mut first = vec![ProcessContext {
        cpu_cores: None,
        ..rank(40, 0, 0.5)
    }];
    share_cpus(&mut first, &[(0, 0.9)]);
    assert_eq!(first[0].others_cpu_ratio, None);
}

#[test]
fn sleeping_workers_are_told_by_what_they_wait_on_and_sidecars_are_not_workers() {
    // A rank with three workers named as the DataLoader names them: one asleep in recv on a
    // socket (remote input), one polling its index queue (a pipe), one in sleep(); and two
    // sidecars that are no workers: a forkserver-like helper and `sleep`, another program.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: reading another process's system call needs ptrace access (root)");
        return;
    }
    let script = r#"
import ctypes, os, select, socket, subprocess, sys, time
def worker(wait):
    ctypes.CDLL(None).prctl(15, b"pt_data_worker", 0, 0, 0)
    wait()
    os._exit(0)
ours, theirs = socket.socketpair()
reader, writer = os.pipe()
poller = select.poll()
poller.register(reader, select.POLLIN)
waits = [lambda: ours.recv(1), lambda: poller.poll(600_000), lambda: time.sleep(600)]
for wait in waits:
    if os.fork() == 0:
        worker(wait)
subprocess.Popen([sys.executable, "-c", "from multiprocessing.resource_tracker import main; import time; time.sleep(600)"])
subprocess.Popen(["sleep", "600"])
print("ready", flush=True)
time.sleep(600)
"#;
    let mut command = Command::new("setsid");
    command
        .args(["python3", "-c", script])
        .stdout(std::process::Stdio::piped());
    let mut tree = Tree(command.spawn().unwrap());
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(tree.0.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    let parent = tree.0.id().to_string();
    let scenario = Scenario::new(&format!("devices:\n  - uuid: GPU-live\n    processes:\n      - {{pid: {parent}, used_memory: 1000, sm: 5}}\n"));
    let exporter = scenario.start(&common::fake_nvml(false), "");
    let of = |page: &[common::exposition::Family], metric: &str, on: Option<&str>| {
        let mut labels = vec![("pid", parent.as_str())];
        labels.extend(on.map(|on| ("on", on)));
        value(page, metric, &labels)
    };
    let page = exporter.metrics_when(|p| {
        of(p, "gpu_process_workers_asleep_on", Some("remote")) == Some(1.0)
            && of(p, "gpu_process_workers_asleep_on", Some("idle")) == Some(2.0)
    });
    assert_eq!(of(&page, "gpu_process_workers", None), Some(3.0));
    assert_eq!(of(&page, "gpu_process_other_children", None), Some(2.0));
    assert_eq!(
        of(&page, "gpu_process_workers_asleep_on", Some("local_file")),
        Some(0.0)
    );
    // Only signals that are not supported are listed.
    assert_eq!(
        value(
            &page,
            "gpu_exporter_signal_supported",
            &[("signal", "worker_waits")]
        ),
        None
    );
}

#[test]
fn status_files_are_read_every_few_seconds_and_switches_shared_over_that_span() {
    let work = TempDir::new("switches");
    let fixtures = work.path().join("fixtures");
    copy_tree(
        &common::repo_root().join("tests/fixtures/process-v2"),
        &fixtures,
    );
    // Between t0 and t1 worker 1010 waited 30 times (I/O) and 1011 was preempted 10 times.
    for (worker, voluntary, involuntary) in [(1010, 40, 1), (1011, 10, 11)] {
        let path = fixtures.join(format!("t1/proc/{worker}/status"));
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text
            .replace(
                "voluntary_ctxt_switches:\t10\nnon",
                &format!("voluntary_ctxt_switches:\t{voluntary}\nnon"),
            )
            .replace(
                "nonvoluntary_ctxt_switches:\t1\n",
                &format!("nonvoluntary_ctxt_switches:\t{involuntary}\n"),
            );
        std::fs::write(&path, text).unwrap();
    }
    let last = |trees: &[&str]| {
        let snapshot = sample_ticks(
            work.path(),
            &fixtures,
            trees,
            ProcessConfig::default(),
            || node_with_gpu_process(1000, "python3"),
        );
        context(&snapshot).clone()
    };
    // A second after the first reading the switches are not read again: no share yet, and
    // the rank's status (its own switches: 300 and 50 at t0, 310 and 52 at t1) is carried.
    let second = last(&["t0", "t1"]);
    assert_eq!(second.workers.voluntary_switch_share, None);
    assert_eq!(
        (second.voluntary_switches, second.involuntary_switches),
        (300, 50)
    );
    // Five seconds after, they are: 30 voluntary of 40 switches; the rank's are t1's.
    let sixth = last(&["t0", "t1", "t1", "t1", "t1", "t1"]);
    common::assert_close(sixth.workers.voluntary_switch_share, 0.75);
    assert_eq!(
        (sixth.voluntary_switches, sixth.involuntary_switches),
        (310, 52)
    );
}
