//! The CUDA boundary, seen from outside the job: uprobes on the CUDA driver (`libcuda.so*`)
//! that each GPU process maps, found in `/proc/<pid>/maps` and probed through
//! `/proc/<pid>/root` (a container's own copy is its own file). Per process and thread: kernel
//! and graph launches, host↔device copies (count, bytes, direction), and the time spent inside
//! the driver's waits (stream, device and event syncs, copies to or from the host), which no
//! Python frame names: `.item()`, `bool(t)`, `.to("cuda")` from pageable memory and every
//! other implicit sync end there. A thread inside a wait now is what [`WaitsNow`] tells the
//! stack sampler. On NCCL (`libnccl.so*`, mapped beside the driver by PyTorch): collectives
//! issued and their bytes, by operation — enqueued, since NCCL returns at once. Every call but
//! a kernel launch also leaves a mark (when, which entry point, a send's peer) in a BPF ring
//! buffer: the loop's step is the period of those marks (`cadence.rs`; each process's in
//! `steps.rs`), and the ranks its sends go to tell a pipeline stage from an all-to-all
//! (`peers.rs`).
//!
//! Mechanism (docs/development.md): small BPF programs assembled in `programs.rs`, attached to
//! the uprobe PMU with `perf_event_open` — no BPF toolchain at build time, nothing injected into
//! the job. One attachment per driver file serves every process mapping it. Needs CAP_BPF and
//! CAP_PERFMON (or CAP_SYS_ADMIN); without them the source is unsupported
//! (`gpu_exporter_signal_supported{signal="cuda_probes"} 0`) and nothing else changes. Each hit
//! costs the traced thread a trap (1-2 µs on bare metal, 13 µs on this project's VM): waits,
//! copies and graph launches (a few per step) are probed always; kernel launches (tens of
//! thousands a second) only in 20 ms windows about every 8 s (`launch_windows_every`), their
//! count estimated, so a launch-heavy loop is slowed about 1 %. Counting is in kernel maps;
//! only waits are timed, and in the windows the launches that waited for room in the
//! driver's launch queue (a GPU that far behind works while its loop's line reads Python).

mod after_sync;
mod attacher;
mod backlog;
pub mod bpf;
mod cadence;
pub mod elf;
mod issued;
mod libraries;
mod maps;
mod peers;
mod probes;
pub mod programs;
mod readings;
mod ring;
mod steps;
mod windows;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::after_sync::after_sync;
use self::attacher::{refusal, Attacher, Library, LibraryKey};
use self::backlog::{backlog_busy, queued_spans, BACKLOG_WINDOW_NS};
use self::bpf::{monotonic_ns, UprobePmu};
use self::cadence::{per_step, Call};
use self::issued::{last_collective, CollectivesSeen};
use self::libraries::{is_driver, probed_libraries, MappedLibrary};
use self::maps::{
    communicators_being_created, per_process, per_process_and_threads, read_map, threads_calling,
    Maps,
};
use self::peers::send_peers;
use self::probes::{is_transfer, role, Counted, PROBES};
pub use self::readings::{fold, launches_between};
use self::readings::{QueueSeen, Reading};
use self::steps::Steps;
use self::windows::{start_launch_windows, LaunchWindows};
use super::{Source, SourceError};
use crate::snapshot::{DriverView, Snapshot};

/// The signal `gpu_exporter_signal_supported` reports when the probes are refused.
pub const CUDA_SIGNAL: &str = "cuda_probes";

/// Whether a thread is inside a CUDA driver wait now: what a stack sample asks, so that a
/// sample taken there is a GPU sync whatever the Python line reads.
#[derive(Clone)]
pub struct WaitsNow {
    maps: Arc<Maps>,
    /// Per process whose driver is probed, the threads seen calling it (updated every tick).
    probed: Arc<Mutex<HashMap<u32, Vec<u32>>>>,
}

impl WaitsNow {
    /// Whether thread `tid` of `pid` (the sampled one), and another of its threads, are inside
    /// a driver wait now; `None` for a process the probes do not watch (no driver mapped, or it
    /// could not be probed): the stacks then infer from the line.
    ///
    /// A lookup per thread that calls the driver (a handful), not a walk of the map: a walk
    /// visits every bucket of it (4,096: some 6 µs) and a stack sample asks up to eight times
    /// a second per process.
    pub fn view(&self, pid: u32, tid: u32) -> Option<DriverView> {
        let probed = self.probed.lock().unwrap_or_else(|p| p.into_inner());
        let callers = probed.get(&pid)?;
        let waits = |thread: u32| {
            let pid_tgid = (u64::from(pid) << 32) | u64::from(thread);
            self.maps.starts.get(&pid_tgid.to_ne_bytes()).is_some()
        };
        Some(DriverView {
            thread_waits: waits(tid),
            other_waits: callers.iter().any(|&t| t != tid && waits(t)),
        })
    }
}

/// The source: driver files attached once each, the maps read every tick.
pub struct CudaSource {
    procfs: PathBuf,
    setup: Result<(Arc<Maps>, UprobePmu), String>,
    /// Attaches and detaches off the tick (where the probes can run).
    attacher: Option<Attacher>,
    /// Per probed file, driver or NCCL (device, inode): its probes, or why it could not be
    /// probed.
    libraries: HashMap<LibraryKey, Result<Library, String>>,
    /// The driver and NCCL files each GPU process maps, read from its maps once: a process
    /// NVML lists holds a context, so its driver is mapped by then, and NCCL with PyTorch (a
    /// rank's maps run to thousands of lines: not re-read every tick).
    libraries_of: HashMap<u32, Vec<MappedLibrary>>,
    /// The GPU processes mapping a probed driver and the threads seen calling it, shared
    /// with [`WaitsNow`].
    probed: Arc<Mutex<HashMap<u32, Vec<u32>>>>,
    previous: Option<(Reading, Reading, Duration)>,
    launch_windows: Arc<Mutex<LaunchWindows>>,
    /// How often a launch window opens, on average.
    launch_windows_every: Duration,
    /// The launch counts, window seconds and time of the last read that followed a window; the
    /// rates and each process's launch queue measured then; each process's launches,
    /// estimated.
    launch_baseline: Option<LaunchBaseline>,
    launch_rates: HashMap<(u32, u32), f64>,
    queues: HashMap<u32, QueueSeen>,
    launches: HashMap<u32, f64>,
    /// Per process: its collective counts at the last read, and the last collective issued
    /// (seconds of the source's clock).
    collectives_seen: HashMap<u32, CollectivesSeen>,
    /// Each process's recent marked calls and its step.
    steps: Steps,
    /// Per process whose driver is probed: since when, and whether a call of it has been seen.
    heard: HashMap<u32, (Duration, bool)>,
}

impl CudaSource {
    pub fn new(procfs: PathBuf, sysfs: &Path, launch_windows_every: Duration) -> CudaSource {
        let setup = (|| {
            let maps = Maps::create()?;
            let (maps, pmu) = (Arc::new(maps), UprobePmu::find(sysfs)?);
            let attacher = Attacher::start(pmu, maps.clone())?;
            Ok(((maps, pmu), attacher))
        })()
        .map_err(|e: io::Error| refusal(&e));
        if let Err(why) = &setup {
            tracing::warn!("cuda probes: {why}");
        }
        let (setup, attacher) = match setup {
            Ok((setup, attacher)) => (Ok(setup), Some(attacher)),
            Err(why) => (Err(why), None),
        };
        CudaSource {
            procfs,
            setup,
            attacher,
            libraries: HashMap::new(),
            libraries_of: HashMap::new(),
            probed: Arc::default(),
            previous: None,
            launch_windows: Arc::default(),
            launch_windows_every,
            launch_baseline: None,
            launch_rates: HashMap::new(),
            queues: HashMap::new(),
            launches: HashMap::new(),
            collectives_seen: HashMap::new(),
            steps: Steps::default(),
            heard: HashMap::new(),
        }
    }

    /// The in-wait question for the stack sampler, when the probes can run.
    pub fn waits_now(&self) -> Option<WaitsNow> {
        self.setup.as_ref().ok().map(|(maps, _)| WaitsNow {
            maps: maps.clone(),
            probed: self.probed.clone(),
        })
    }

    /// Once a launch window has passed since the last time: the launch rates it measured,
    /// each process's launches since, estimated, and its launch queue as the window thread
    /// read it (the processes in `keep` only).
    fn count_launches(&mut self, counts: &Reading, now: Duration, keep: &HashSet<u32>) {
        let (attached, mut queues) = {
            let windows = self
                .launch_windows
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            (windows.attached_seconds, windows.queues.clone())
        };
        let Some(before) = &self.launch_baseline else {
            return;
        };
        if attached <= before.attached {
            return;
        }
        let seconds = now.saturating_sub(before.at).as_secs_f64();
        let (rates, added) =
            launches_between(counts, &before.counts, attached - before.attached, seconds);
        self.launch_rates = rates;
        queues.retain(|pid, _| keep.contains(pid));
        self.queues = queues;
        for (pid, launches) in added {
            *self.launches.entry(pid).or_insert(0.0) += launches;
        }
        self.launches.retain(|pid, _| keep.contains(pid));
        self.launch_baseline = Some(LaunchBaseline {
            counts: counts.clone(),
            attached,
            at: now,
        });
    }

    /// Asks for the driver files the GPU processes map to be attached (what was attached
    /// since the last tick joins them), and lets go of those none maps any more; the processes
    /// whose driver is probed.
    fn track_libraries(&mut self, attacher: &mut Attacher, pids: &BTreeSet<u32>) -> HashSet<u32> {
        self.libraries.extend(attacher.answered());
        let mut mapped = HashSet::new();
        let mut probed = HashSet::new();
        self.libraries_of.retain(|pid, _| pids.contains(pid));
        for &pid in pids {
            if !self.libraries_of.contains_key(&pid) {
                let Ok(text) = std::fs::read_to_string(self.procfs.join(format!("{pid}/maps")))
                else {
                    continue; // exited, or no ptrace access: its process source says which
                };
                self.libraries_of.insert(pid, probed_libraries(&text));
            }
            for library in &self.libraries_of[&pid] {
                let key = (library.device.clone(), library.inode);
                if !self.libraries.contains_key(&key) {
                    let path = self
                        .procfs
                        .join(format!("{pid}/root"))
                        .join(library.path.trim_start_matches('/'));
                    attacher.request(&key, path, pid, &library.path);
                }
                // Whether a thread waits in the driver is known where the driver is probed.
                if is_driver(&library.path) && self.libraries.get(&key).is_some_and(Result::is_ok) {
                    probed.insert(pid);
                }
                mapped.insert(key);
            }
        }
        let stale: Vec<LibraryKey> = self
            .libraries
            .keys()
            .filter(|key| !mapped.contains(*key))
            .cloned()
            .collect();
        attacher.detach(
            stale
                .iter()
                .filter_map(|key| self.libraries.remove(key))
                .collect(),
        );
        let targets = self
            .libraries
            .values()
            .flatten()
            .flat_map(|l| l.launches.clone())
            .collect();
        self.launch_windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .targets = targets;
        probed
    }
}

/// What the launch rates of the next window are measured against.
struct LaunchBaseline {
    counts: Reading,
    attached: f64,
    at: Duration,
}

impl Source for CudaSource {
    /// It probes the GPU processes gpu listed.
    fn after(&self) -> &'static [&'static str] {
        &["gpu"]
    }

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let (maps, pmu) = match &self.setup {
            Ok((maps, pmu)) => (maps.clone(), *pmu),
            Err(why) => {
                snapshot.unsupported_signals.push(CUDA_SIGNAL);
                return Err(SourceError::Unsupported(why.clone()));
            }
        };
        let pids = snapshot.gpu_pids();
        let mut attacher = self
            .attacher
            .take()
            .expect("an attacher wherever the setup is");
        let probed = self.track_libraries(&mut attacher, &pids);
        self.attacher = Some(attacher);
        if self.launch_baseline.is_none() {
            start_launch_windows(
                pmu,
                &self.launch_windows,
                self.launch_windows_every,
                maps.clone(),
            );
            self.launch_baseline = Some(LaunchBaseline {
                counts: Reading::new(),
                attached: 0.0,
                at: now,
            });
        }
        let keep: HashSet<u32> = pids.iter().copied().collect();
        let counts = read_map(&maps.counts, Some(&keep));
        let waits = read_map(&maps.waits, Some(&keep));
        let (waits_began, inside) = per_process_and_threads(&maps.starts, Some(&keep), u64::min);
        let creating = communicators_being_created(&maps.communicator_starts, &self.procfs);
        let callers = threads_calling(&probed, &counts, &waits, &inside);
        self.heard.retain(|pid, _| callers.contains_key(pid));
        for (&pid, threads) in &callers {
            let heard = self.heard.entry(pid).or_insert((now, false));
            heard.1 |= !threads.is_empty() || creating.contains_key(&pid);
        }
        *self.probed.lock().unwrap_or_else(|p| p.into_inner()) = callers;
        // A launch open when its window closed stays in the map: those of exited processes go.
        per_process(&maps.launch_starts, Some(&keep), u64::min);
        self.count_launches(&counts, now, &keep);
        let before = self
            .previous
            .as_ref()
            .map(|(c, w, at)| (c, w, now.saturating_sub(*at).as_secs_f64()));
        snapshot.cuda = fold(&counts, &waits, before, &self.launch_rates, &self.launches);
        // A process whose first NCCL call creates its communicator may have counted nothing
        // else yet (its first collective waits behind that call), nor one stuck in a call it
        // began before the probes were attached.
        let silent = self.heard.iter().filter(|(_, (_, heard))| !heard);
        let uncounted = creating.keys().chain(silent.map(|(pid, _)| pid));
        for &pid in uncounted.filter(|pid| keep.contains(pid)) {
            if !snapshot.cuda.iter().any(|p| p.pid == pid) {
                snapshot.cuda.push(crate::snapshot::ProcessCuda {
                    pid,
                    ..Default::default()
                });
            }
        }
        self.collectives_seen.retain(|pid, _| keep.contains(pid));
        if let Some(ring) = maps.marks.as_ref() {
            ring.drain(|record| {
                let Some(mark) = programs::decode_mark(record) else {
                    return;
                };
                if !keep.contains(&mark.pid) {
                    return;
                }
                let kind = mark.probe as u32;
                // A batch's upload and a graph's launch come once a step.
                let counted = PROBES.get(mark.probe).and_then(|p| p.counted);
                let once_a_step = matches!(counted, Some(Counted::ToDevice | Counted::GraphLaunch));
                let call = Call {
                    ns: mark.ns,
                    tid: mark.tid,
                    kind,
                    once_a_step,
                    role: role(kind),
                    peer: mark.peer,
                };
                self.steps.add(mark.pid, call);
            })
        }
        self.steps.retain(&keep);
        let now_ns = monotonic_ns();
        for process in &mut snapshot.cuda {
            process.step = self.steps.step(process.pid, now_ns);
            let recent = self
                .steps
                .calls_since(process.pid, now_ns.saturating_sub(BACKLOG_WINDOW_NS));
            process.backlog_busy = backlog_busy(recent);
            let totals = &process.totals;
            let upload_bytes =
                totals.bytes_to_device as f64 / totals.copies_to_device.max(1) as f64;
            process.queued_spans = queued_spans(recent, upload_bytes);
            process.after_sync = after_sync(recent, upload_bytes);
            process.send_peers = send_peers(recent);
            process.transfers_per_step = process
                .step
                .and_then(|s| per_step(recent, s.seconds, |c| is_transfer(c.kind)));
            let since = |began: &u64| now_ns.saturating_sub(*began) as f64 / 1e9;
            process.waiting_seconds = waits_began.get(&process.pid).map(since);
            process.creating_communicator_seconds = creating.get(&process.pid).map(since);
            process.silent_seconds = self
                .heard
                .get(&process.pid)
                .filter(|(_, heard)| !heard)
                .map(|(probed, _)| now.saturating_sub(*probed).as_secs_f64());
            let queue = self.queues.get(&process.pid);
            process.launch_queue_full = queue.map(|q| q.held);
            process.queue_busy = queue.and_then(|q| q.busy);
            process.last_collective =
                last_collective(&mut self.collectives_seen, process, now.as_secs_f64());
        }
        self.previous = Some((counts, waits, now));
        let refused = self
            .libraries
            .values()
            .filter_map(|l| l.as_ref().err())
            .find(|why| why.starts_with("BPF or perf_event refused"));
        if let Some(why) = refused {
            snapshot.unsupported_signals.push(CUDA_SIGNAL);
            if self.libraries.values().all(Result::is_err) {
                return Err(SourceError::Unsupported(why.clone()));
            }
        }
        Ok(())
    }
}
