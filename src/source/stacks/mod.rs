//! Python stacks of GPU processes: where each training loop's main thread is, sampled once a
//! tick without stopping it (py-spy as a library, reading the process's memory with
//! `process_vm_readv`), classified into a small fixed set of activities and kept over a window.
//!
//! Reading another process's memory needs ptrace access to it: the same user, or root with
//! CAP_SYS_PTRACE. Without it the processes are reported under the `python_stacks` signal as
//! unsupported, and the rules fall back to the counters. Processes that are not Python are
//! passed over quietly. A process is attached once (about 20 ms) and then sampled (about
//! 0.5 ms a sample for a training rank).

pub mod classify;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use py_spy::config::LockingStrategy;
use py_spy::{Config as SpyConfig, PythonSpy, StackTrace};

use self::classify::{classify, FrameRef};
use super::{Source, SourceError};
use crate::config::StacksSource as StacksConfig;
use crate::snapshot::{Activity, FrameShare, ProcessStacks, Snapshot};

/// The signal `gpu_exporter_signal_supported` reports for stacks refused for lack of
/// privilege.
pub const STACKS_SIGNAL: &str = "python_stacks";

/// How long a process that could not be attached is left alone before the next try (a
/// process may load its interpreter late, or be granted access).
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// Source lines kept for the `.item()` test of C-method calls.
const LINE_CACHE: usize = 4096;

/// Frames listed per process in the diagnosis.
const TOP_FRAMES: usize = 5;

/// One sample of a main thread.
struct Sample {
    at: Duration,
    activity: Activity,
    /// Innermost frame: function and `file:line`.
    frame: Option<(String, String)>,
}

/// An attached process and its window of samples.
struct Watched {
    spy: PythonSpy,
    samples: VecDeque<Sample>,
}

/// The stacks source.
pub struct StacksSource {
    procfs: PathBuf,
    window: Duration,
    watched: HashMap<u32, Watched>,
    /// Processes not to try again before the given time, and whether access was refused.
    passed_over: HashMap<u32, (Duration, bool)>,
    /// Source text of (file as the process sees it, line), through `/proc/<pid>/root`.
    lines: HashMap<(String, i32), Option<String>>,
}

impl StacksSource {
    /// A source reading processes below `procfs`, keeping `config.window` of samples.
    pub fn new(procfs: PathBuf, config: StacksConfig) -> Self {
        StacksSource {
            procfs,
            window: config.window.0,
            watched: HashMap::new(),
            passed_over: HashMap::new(),
            lines: HashMap::new(),
        }
    }

    /// Attaches to `pid`; `Err(true)` when access was refused, `Err(false)` when it is not a
    /// Python process (or exited).
    fn attach(pid: u32) -> Result<PythonSpy, bool> {
        let config = SpyConfig {
            blocking: LockingStrategy::NonBlocking,
            native: false,
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
    fn sample_one(&mut self, pid: u32, now: Duration) -> Option<Sample> {
        let traces = self.watched.get_mut(&pid)?.spy.get_stack_traces().ok()?;
        let main = main_thread(&traces, pid)?;
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
        Some(Sample {
            at: now,
            activity: classify(&frames, main.active, line.as_deref()),
            frame: innermost.map(|f| (f.name.clone(), format!("{}:{}", f.filename, f.line))),
        })
    }
}

/// The main thread of a process's traces: the one whose OS thread id is the pid, else the
/// one holding the GIL, else the first.
fn main_thread(traces: &[StackTrace], pid: u32) -> Option<&StackTrace> {
    traces
        .iter()
        .find(|t| t.os_thread_id == Some(u64::from(pid)))
        .or_else(|| traces.iter().find(|t| t.owns_gil))
        .or_else(|| traces.first())
}

/// Activity shares and the most seen innermost frames of a window of samples.
fn summarise(pid: u32, samples: &VecDeque<Sample>) -> ProcessStacks {
    let total = samples.len().max(1) as f64;
    let mut shares = [0.0; 5];
    let mut frames: HashMap<(&str, &str), (usize, Activity)> = HashMap::new();
    for sample in samples {
        let slot = Activity::ALL
            .iter()
            .position(|a| *a == sample.activity)
            .unwrap_or(4);
        shares[slot] += 1.0 / total;
        if let Some((function, location)) = &sample.frame {
            let entry = frames
                .entry((function.as_str(), location.as_str()))
                .or_insert((0, sample.activity));
            entry.0 += 1;
        }
    }
    let mut top: Vec<FrameShare> = frames
        .into_iter()
        .map(|((function, location), (count, activity))| FrameShare {
            function: function.to_string(),
            location: location.to_string(),
            activity,
            share: count as f64 / total,
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
    }
}

impl Source for StacksSource {
    fn name(&self) -> &'static str {
        "stacks"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let mut pids: Vec<u32> = snapshot
            .gpu
            .iter()
            .flat_map(|g| &g.devices)
            .flat_map(|d| &d.processes)
            .map(|p| p.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        self.watched.retain(|pid, _| pids.contains(pid));
        self.passed_over.retain(|pid, _| pids.contains(pid));

        let mut refused = 0;
        for &pid in &pids {
            if !self.watched.contains_key(&pid) {
                match self.passed_over.get(&pid) {
                    Some((until, denied)) if now < *until => {
                        refused += usize::from(*denied);
                        continue;
                    }
                    _ => {}
                }
                match Self::attach(pid) {
                    Ok(spy) => {
                        self.passed_over.remove(&pid);
                        self.watched.insert(
                            pid,
                            Watched {
                                spy,
                                samples: VecDeque::new(),
                            },
                        );
                    }
                    Err(denied) => {
                        refused += usize::from(denied);
                        self.passed_over.insert(pid, (now + RETRY_AFTER, denied));
                        continue;
                    }
                }
            }
            let sample = self.sample_one(pid, now);
            let window = self.window;
            let watched = self.watched.get_mut(&pid).expect("attached above");
            watched.samples.extend(sample);
            while watched
                .samples
                .front()
                .is_some_and(|s| now.saturating_sub(s.at) > window)
            {
                watched.samples.pop_front();
            }
        }

        let mut stacks: Vec<ProcessStacks> = self
            .watched
            .iter()
            .filter(|(_, w)| !w.samples.is_empty())
            .map(|(pid, w)| summarise(*pid, &w.samples))
            .collect();
        stacks.sort_by_key(|s| s.pid);
        snapshot.stacks = stacks;
        if refused > 0 {
            snapshot.unsupported_signals.push(STACKS_SIGNAL);
        }
        if refused > 0 && refused == pids.len() {
            return Err(SourceError::Unsupported(
                "no ptrace access to the GPU processes: run as their user, or as root with \
                 CAP_SYS_PTRACE (Helm: helm/gpu-bottleneck-exporter/ci/root-ptrace-values.yaml)"
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
            at: Duration::from_secs(at),
            activity,
            frame: Some((function.into(), format!("/job/train.py:{at}"))),
        }
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
        let summary = summarise(42, &samples);
        assert_eq!(summary.samples, 4);
        assert_eq!(summary.share(Activity::GpuSync), 0.75);
        assert_eq!(summary.share(Activity::Python), 0.25);
        assert_eq!(summary.share(Activity::DataLoader), 0.0);
        assert_eq!(summary.top_frames[0].function, "EmulatedGPU.synchronize");
        assert_eq!(summary.top_frames[0].share, 0.75);
        assert_eq!(summary.top_frames[0].activity, Activity::GpuSync);
        assert_eq!(summary.top_frames.len(), 2);
    }
}
