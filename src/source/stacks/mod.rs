//! Python stacks of GPU processes: where each training loop's main thread is, sampled about
//! twice a second (four times as often while its GPU is starved) at random moments without
//! stopping it (py-spy as a library, reading the process's memory with `process_vm_readv`),
//! classified into a small fixed set of activities and kept over a window.
//!
//! Reading another process's memory needs ptrace access to it: the same user, or root with
//! CAP_SYS_PTRACE. Without it the processes are reported under the `python_stacks` signal as
//! unsupported, and the rules fall back to the counters. Processes that are not Python are
//! passed over quietly. A process is attached once (about 20 ms) and then sampled by a thread of
//! the source's own: the main thread alone (a patch of py-spy, vendor/README.md), about 0.2 ms
//! a sample however many threads the rank has. Where the CUDA probes see another thread drive
//! the GPU while the main thread touches no CUDA (the training function on a thread of its
//! own, as Ray Train runs it), that thread is sampled instead, at the same cost. Each sample
//! keeps its time on the probes' clock: a wait for the loader is resolved against the probes'
//! spans once its thread has called the driver again (whether the GPU worked through it:
//! source::cuda::backlog).

pub mod classify;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use py_spy::config::LockingStrategy;
use py_spy::{Config as SpyConfig, PythonSpy};

use self::classify::{classify, FrameRef};
use super::cuda::bpf::monotonic_ns;
use super::cuda::WaitsNow;
use super::{Source, SourceError};
use crate::config::StacksConfig;
use crate::snapshot::{Activity, FrameShare, PerActivity, ProcessStacks, QueuedSpans, Snapshot};

/// The signal `gpu_exporter_signal_supported` reports for stacks refused for lack of
/// privilege.
pub const STACKS_SIGNAL: &str = "python_stacks";

/// How long a process that could not be attached is left alone before the next try: twice as
/// long after each failure, from `RETRY_FIRST` up to `RETRY_AFTER` (a process may load its
/// interpreter late, an attach may fail on a process still starting or on a loaded host, or it
/// may be granted access). With one 60 s wait from the first failure, a rank that failed once
/// as it started went unobserved for a minute (a two-node run had no stacks for one rank).
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The wait before the next try after `failures` failed attaches (1 or more).
fn retry_after(failures: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(6))
        .min(RETRY_AFTER)
}

/// Source lines kept for the `.item()` test of C-method calls.
const LINE_CACHE: usize = 4096;

/// Frames listed per process in the diagnosis.
const TOP_FRAMES: usize = 5;

/// A GPU busy less than this over the last tick is starved: its processes are sampled this
/// many times faster, so that a short starvation is seen in enough samples to be named.
const STARVED_BUSY: f64 = 0.5;
const STARVED_SPEEDUP: u32 = 4;

/// One sample of a main thread.
#[derive(Clone)]
struct Sample {
    at: Instant,
    /// The same moment on CLOCK_MONOTONIC, the CUDA probes' clock.
    ns: u64,
    /// The thread it came from, where not the main one.
    followed: Option<u32>,
    /// The share of the interval it stands for: 1, or 1/`STARVED_SPEEDUP` when taken at the
    /// starved rate (so that shares over a window that saw both rates stay time shares).
    weight: f64,
    activity: Activity,
    /// For a wait for the loader: whether the GPU worked through it (the CUDA probes saw the
    /// batch's upload after it wait for kernels queued before: source::cuda::backlog), once
    /// the thread has called the driver since; `None` until then, or unknown.
    gpu_queued: Option<bool>,
    /// The innermost frame of the job's own code (else the innermost): function and
    /// `file:line`.
    frame: Option<(String, String)>,
}

/// An attached process and its window of samples.
struct Watched {
    spy: PythonSpy,
    samples: VecDeque<Sample>,
}

/// A process whose attach failed.
struct PassedOver {
    /// Not tried again before this.
    until: Instant,
    /// Whether access was refused (counted as such in the self-metrics), not another failure.
    denied: bool,
    /// Attaches failed in a row.
    failures: u32,
}

/// What the sampling thread and the tick share.
struct Sampler {
    procfs: PathBuf,
    window: Duration,
    /// The GPU processes of the last tick, and those on a starved GPU.
    pids: BTreeSet<u32>,
    starved: BTreeSet<u32>,
    /// Per process, the thread that drives its GPU where it is not the main one.
    followed: HashMap<u32, u32>,
    watched: HashMap<u32, Watched>,
    /// Processes whose attach failed, until they are tried again.
    passed_over: HashMap<u32, PassedOver>,
    /// Source text of (file as the process sees it, line), through `/proc/<pid>/root`.
    lines: HashMap<(String, i32), Option<String>>,
    /// The CUDA probes' view of which threads are inside a driver wait, when they run.
    waits_now: Option<WaitsNow>,
}

impl Sampler {
    /// Attaches to `pid`; `Err(true)` when access was refused, `Err(false)` when it is not a
    /// Python process (or exited).
    fn attach(pid: u32) -> Result<PythonSpy, bool> {
        // The main thread alone (vendored patch): py-spy otherwise walks every Python thread
        // and reads every OS thread's state, 40 µs a thread in a 128-thread rank.
        let config = SpyConfig {
            blocking: LockingStrategy::NonBlocking,
            native: false,
            main_thread_only: true,
            collect_thread_names: false,
            ..SpyConfig::default()
        };
        PythonSpy::new(pid as py_spy::Pid, &config).map_err(|error| {
            let refused = error.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
            }) || format!("{error:#}").contains("Permission denied");
            tracing::debug!(pid, refused, error = %format!("{error:#}"), "python stacks: not attached");
            refused
        })
    }

    /// The source text of `line` in `file` as process `pid` sees it (cached).
    fn source_line(&mut self, pid: u32, file: &str, line: i32) -> Option<String> {
        if self.lines.len() >= LINE_CACHE {
            self.lines.clear();
        }
        let path = self
            .procfs
            .join(pid.to_string())
            .join("root")
            .join(file.trim_start_matches('/'));
        self.lines
            .entry((file.to_string(), line))
            .or_insert_with(|| {
                let text = std::fs::read_to_string(path).ok()?;
                let index = usize::try_from(line).ok()?.checked_sub(1)?;
                text.lines().nth(index).map(str::to_string)
            })
            .clone()
    }

    /// One sample of `pid`'s main thread; `None` when it could not be read this time.
    fn sample_one(&mut self, pid: u32, now: Instant, weight: f64) -> Option<Sample> {
        let followed = self.followed.get(&pid).copied();
        let spy = &mut self.watched.get_mut(&pid)?.spy;
        spy.follow_thread(followed.map(u64::from));
        let traces = spy.get_stack_traces().ok()?;
        let main = traces.first()?;
        // The thread read (a followed one that has ended leaves the main thread read).
        let tid = main.os_thread_id.map_or(pid, |t| t as u32);
        // Asked right after the read.
        let driver = self.waits_now.as_ref().and_then(|w| w.view(pid, tid));
        let innermost = main.frames.first();
        let line = innermost.and_then(|f| self.source_line(pid, &f.filename, f.line));
        let frames: Vec<FrameRef> = main
            .frames
            .iter()
            .map(|f| FrameRef {
                function: &f.name,
                file: &f.filename,
            })
            .collect();
        let quoted = main
            .frames
            .iter()
            .find(|f| classify::is_job_code(&f.filename))
            .or(innermost);
        Some(Sample {
            at: now,
            ns: monotonic_ns(),
            followed: (tid != pid).then_some(tid),
            weight,
            activity: classify(&frames, main.active, line.as_deref(), driver),
            gpu_queued: None,
            frame: quoted.map(|f| (f.name.clone(), format!("{}:{}", f.filename, f.line))),
        })
    }

    /// One pass, `STARVED_SPEEDUP` times an interval: attaches to new GPU processes
    /// (retrying refused or non-Python ones after a while) and samples those on a starved GPU,
    /// and each of the others with a chance of 1 in `STARVED_SPEEDUP` (`draw` gives uniform
    /// numbers in 0..1), which keeps their moments random.
    fn pass(&mut self, now: Instant, draw: &mut impl FnMut() -> f64) {
        let pids: Vec<u32> = self.pids.iter().copied().collect();
        let speedup = f64::from(STARVED_SPEEDUP);
        for pid in pids {
            let weight = if self.starved.contains(&pid) {
                1.0 / speedup
            } else if draw() * speedup < 1.0 {
                1.0
            } else {
                continue;
            };
            if !self.watched.contains_key(&pid) {
                if self
                    .passed_over
                    .get(&pid)
                    .is_some_and(|passed| now < passed.until)
                {
                    continue;
                }
                match Self::attach(pid) {
                    Ok(spy) => {
                        self.passed_over.remove(&pid);
                        let samples = VecDeque::new();
                        self.watched.insert(pid, Watched { spy, samples });
                    }
                    Err(denied) => {
                        let failures = self.passed_over.get(&pid).map_or(0, |p| p.failures) + 1;
                        let passed = PassedOver {
                            until: now + retry_after(failures),
                            denied,
                            failures,
                        };
                        self.passed_over.insert(pid, passed);
                        continue;
                    }
                }
            }
            let sample = self.sample_one(pid, now, weight);
            let window = self.window;
            let watched = self.watched.get_mut(&pid).expect("attached above");
            watched.samples.extend(sample);
            while watched
                .samples
                .front()
                .is_some_and(|s| now.saturating_duration_since(s.at) > window)
            {
                watched.samples.pop_front();
            }
        }
    }

    /// Takes the GPU processes of this tick (and which are starved), and forgets the others;
    /// `driving` says, for the processes the CUDA probes saw this tick, the thread that drives
    /// the GPU where it is not the main one (a process they did not see keeps the last).
    fn track(
        &mut self,
        pids: BTreeSet<u32>,
        starved: BTreeSet<u32>,
        driving: impl Iterator<Item = (u32, Option<u32>)>,
    ) {
        for (pid, tid) in driving {
            match tid {
                Some(tid) => self.followed.insert(pid, tid),
                None => self.followed.remove(&pid),
            };
        }
        self.watched.retain(|pid, _| pids.contains(pid));
        self.passed_over.retain(|pid, _| pids.contains(pid));
        self.followed.retain(|pid, _| pids.contains(pid));
        self.pids = pids;
        self.starved = starved;
    }
}

/// Samples taken this recently make the recent shares: what the last few ticks saw.
const RECENT: Duration = Duration::from_secs(5);

/// The activity shares of `samples` (time-weighted), their count, and the share of them in a
/// loader wait the GPU worked through.
fn activity_shares<'a>(samples: impl Iterator<Item = &'a Sample>) -> (PerActivity<f64>, u32, f64) {
    let mut shares = PerActivity::<f64>::default();
    let (mut count, mut queued) = (0, 0.0);
    for sample in samples {
        shares[sample.activity] += sample.weight;
        if sample.gpu_queued == Some(true) {
            queued += sample.weight;
        }
        count += 1;
    }
    let total: f64 = shares.0.iter().sum();
    if total > 0.0 {
        shares.0.iter_mut().for_each(|s| *s /= total);
        queued /= total;
    }
    (shares, count, queued)
}

/// Resolves the loader waits of `samples` whose thread has called the driver since: whether
/// they lay in a span the GPU worked through (`threads`, the probes' view of the process).
fn resolve_loader_waits(pid: u32, samples: &mut VecDeque<Sample>, threads: &[QueuedSpans]) {
    let open = samples
        .iter_mut()
        .filter(|s| s.activity == Activity::DataLoader && s.gpu_queued.is_none());
    for sample in open {
        let tid = sample.followed.unwrap_or(pid);
        sample.gpu_queued = threads
            .iter()
            .find(|t| t.tid == tid)
            .and_then(|t| t.holds(sample.ns));
    }
}

/// Activity shares and the most seen innermost frames of a window of samples, and the shares
/// of the samples taken since `recent` (the last `RECENT`).
fn summarise(pid: u32, samples: &VecDeque<Sample>, recent: Instant) -> ProcessStacks {
    let total: f64 = samples.iter().map(|s| s.weight).sum();
    let total = if total > 0.0 { total } else { 1.0 };
    let (shares, _, loader_queued) = activity_shares(samples.iter());
    let (recent_shares, recent_samples, recent_loader_queued) =
        activity_shares(samples.iter().filter(|s| s.at >= recent));
    let mut frames: HashMap<(&str, &str), (f64, Activity)> = HashMap::new();
    for sample in samples {
        if let Some((function, location)) = &sample.frame {
            let entry = frames
                .entry((function.as_str(), location.as_str()))
                .or_insert((0.0, sample.activity));
            entry.0 += sample.weight;
        }
    }
    let mut top: Vec<FrameShare> = frames
        .into_iter()
        .map(|((function, location), (weight, activity))| FrameShare {
            function: function.to_string(),
            location: location.to_string(),
            activity,
            share: weight / total,
        })
        .collect();
    top.sort_by(|a, b| {
        b.share
            .total_cmp(&a.share)
            .then_with(|| a.location.cmp(&b.location))
    });
    top.truncate(TOP_FRAMES);
    ProcessStacks {
        pid,
        samples: samples.len() as u32,
        shares,
        top_frames: top,
        recent_samples,
        recent_shares,
        loader_queued,
        recent_loader_queued,
        followed_thread: samples.back().and_then(|s| s.followed),
    }
}

/// The stacks source: a thread of its own samples each process every `interval` on average,
/// `STARVED_SPEEDUP` times as often while its GPU is starved, at random moments (a training
/// loop's step is periodic: samples on the tick's fixed beat would see the same phase of it);
/// the tick hands it the GPU processes and reads the window.
pub struct StacksSource {
    sampler: Arc<Mutex<Sampler>>,
    /// Mean time between two samples of a process.
    interval: Duration,
    started: bool,
}

impl StacksSource {
    /// A source reading processes below `procfs` as `config` says; `waits_now` from the CUDA
    /// probes, when they run.
    pub fn new(procfs: PathBuf, config: StacksConfig, waits_now: Option<WaitsNow>) -> Self {
        StacksSource {
            sampler: Arc::new(Mutex::new(Sampler {
                procfs,
                window: config.window.0,
                pids: BTreeSet::new(),
                starved: BTreeSet::new(),
                followed: HashMap::new(),
                watched: HashMap::new(),
                passed_over: HashMap::new(),
                lines: HashMap::new(),
                waits_now,
            })),
            interval: config.interval.0,
            started: false,
        }
    }

    /// Starts the sampling thread; it ends when the source is dropped.
    fn start(&mut self) {
        let sampler = Arc::downgrade(&self.sampler);
        let interval = self.interval / STARVED_SPEEDUP;
        let spawned = std::thread::Builder::new()
            .name("stacks".into())
            .spawn(move || {
                // Spacing uniform in 0.5..1.5 of the pass interval, from a xorshift seeded by
                // time.
                let mut state = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |t| t.as_nanos() as u64 | 1);
                let mut draw = move || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 1_000_000) as f64 / 1_000_000.0
                };
                loop {
                    std::thread::sleep(interval.mul_f64(0.5 + draw()));
                    let Some(sampler) = sampler.upgrade() else {
                        return;
                    };
                    let mut sampler = sampler.lock().unwrap_or_else(|p| p.into_inner());
                    sampler.pass(Instant::now(), &mut draw);
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "python stacks: no sampling thread");
        }
        self.started = true;
    }
}

impl Source for StacksSource {
    /// It samples the GPU processes gpu listed, following the threads cuda saw drive them.
    fn after(&self) -> &'static [&'static str] {
        &["gpu", "cuda"]
    }

    fn name(&self) -> &'static str {
        "stacks"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, _now: Duration) -> Result<(), SourceError> {
        if !self.started {
            self.start();
        }
        let pids = snapshot.gpu_pids();
        let starved = snapshot
            .gpu
            .iter()
            .flat_map(|g| &g.devices)
            .filter(|d| d.busy.is_some_and(|b| b.mean_ratio < STARVED_BUSY))
            .flat_map(|d| &d.processes)
            .map(|p| p.pid)
            .collect();
        // Only processes whose threads the probes saw this tick say who drives their GPU.
        let driving = snapshot
            .cuda
            .iter()
            .filter(|p| !p.threads.is_empty())
            .map(|p| (p.pid, p.driving_thread()));
        let mut sampler = self.sampler.lock().unwrap_or_else(|p| p.into_inner());
        sampler.track(pids, starved, driving);
        for process in &snapshot.cuda {
            if let Some(watched) = sampler.watched.get_mut(&process.pid) {
                resolve_loader_waits(process.pid, &mut watched.samples, &process.queued_spans);
            }
        }
        let refused = sampler
            .passed_over
            .values()
            .filter(|passed| passed.denied)
            .count();
        let recent = Instant::now()
            .checked_sub(RECENT)
            .unwrap_or_else(Instant::now);
        let mut stacks: Vec<ProcessStacks> = sampler
            .watched
            .iter()
            .filter(|(_, w)| !w.samples.is_empty())
            .map(|(pid, w)| summarise(*pid, &w.samples, recent))
            .collect();
        stacks.sort_by_key(|s| s.pid);
        snapshot.stacks = stacks;
        if refused > 0 {
            snapshot.unsupported_signals.push(STACKS_SIGNAL);
        }
        if refused > 0 && refused == sampler.pids.len() {
            return Err(SourceError::Unsupported(
                "no ptrace access to the GPU processes: run as their user, or as root with \
                 CAP_SYS_PTRACE (as shipped: Helm value `ptrace`, deploy/kubernetes)"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: u64, activity: Activity, function: &str) -> Sample {
        Sample {
            at: Instant::now() + Duration::from_secs(at),
            ns: at * 1_000_000_000,
            followed: None,
            weight: 1.0,
            activity,
            gpu_queued: None,
            frame: Some((function.into(), format!("/job/train.py:{at}"))),
        }
    }

    #[test]
    fn a_failed_attach_is_tried_again_soon_then_ever_less_often() {
        let waits: Vec<u64> = (1..=8).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_after(u32::MAX), RETRY_AFTER);
    }

    #[test]
    fn shares_and_top_frames_of_a_window() {
        let mut samples = VecDeque::new();
        for at in 0..3 {
            samples.push_back(Sample {
                frame: Some(("EmulatedGPU.synchronize".into(), "/w/emugpu.py:174".into())),
                ..sample(at, Activity::GpuSync, "")
            });
        }
        samples.push_back(sample(3, Activity::Python, "train"));
        let summary = summarise(42, &samples, Instant::now());
        assert_eq!(summary.samples, 4);
        assert_eq!(summary.share(Activity::GpuSync), 0.75);
        assert_eq!(summary.share(Activity::Python), 0.25);
        assert_eq!(summary.share(Activity::DataLoader), 0.0);
        assert_eq!(summary.top_frames[0].function, "EmulatedGPU.synchronize");
        assert_eq!(summary.top_frames[0].share, 0.75);
        assert_eq!(summary.top_frames[0].activity, Activity::GpuSync);
        assert_eq!(summary.top_frames.len(), 2);
    }

    #[test]
    fn samples_at_the_starved_rate_count_for_the_time_they_stand_for() {
        // Half a second in Python at the normal rate (one sample), then half a second starved
        // in a sync (four samples at four times the rate): time shares 0.5 and 0.5, not 0.2
        // and 0.8.
        let mut samples = VecDeque::from([sample(0, Activity::Python, "train")]);
        for at in 1..5 {
            samples.push_back(Sample {
                weight: 0.25,
                ..sample(at, Activity::GpuSync, "item")
            });
        }
        let summary = summarise(7, &samples, Instant::now());
        assert_eq!(summary.samples, 5);
        assert_eq!(summary.share(Activity::Python), 0.5);
        assert_eq!(summary.share(Activity::GpuSync), 0.5);
        assert!((summary.top_frames.iter().map(|f| f.share).sum::<f64>() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn loader_waits_the_gpu_worked_through_are_resolved_once_the_thread_called_again() {
        // Samples at 0..4 s: loader waits at 1 and 3, Python at 0 and 2; the probes saw the
        // thread's upload at 1.5 s wait for queued kernels (a span from 0.5 to 1.5 s) and its
        // last call at 2.5 s: the wait at 1 lay in the span, the one at 3 is not resolved.
        let mut samples: VecDeque<Sample> = [
            (0, Activity::Python),
            (1, Activity::DataLoader),
            (2, Activity::Python),
            (3, Activity::DataLoader),
        ]
        .into_iter()
        .map(|(at, activity)| sample(at, activity, "train"))
        .collect();
        let threads = [QueuedSpans {
            tid: 9,
            latest_ns: 2_500_000_000,
            spans: vec![(500_000_000, 1_500_000_000)],
        }];
        resolve_loader_waits(9, &mut samples, &threads);
        assert_eq!(samples[1].gpu_queued, Some(true));
        assert_eq!(samples[3].gpu_queued, None);
        assert_eq!(samples[0].gpu_queued, None);
        let summary = summarise(9, &samples, Instant::now());
        assert_eq!(summary.loader_queued, 0.25);
        // Another thread's spans say nothing of this one's samples.
        let mut other = samples.clone();
        other[1].gpu_queued = None;
        resolve_loader_waits(
            9,
            &mut other,
            &[QueuedSpans {
                tid: 4,
                ..threads[0].clone()
            }],
        );
        assert_eq!(other[1].gpu_queued, None);
    }
}
