//! The only loop: every tick asks each source for its part of a new [`Snapshot`], renders the
//! exposition once and publishes it. It runs on its own thread because /proc (and later NVML)
//! reads block; the HTTP runtime only ever reads what was published.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::analysis::Analyzer;
use crate::config::{Config, Metrics};
use crate::exposition::{self, Exposition};
use crate::snapshot::{Snapshot, SourceOutcome, SourceStatus};
use crate::source::demo::DemoSource;
use crate::source::{Source, SourceError};

/// Owns the sources and what the sampler remembers between ticks.
pub struct Sampler {
    sources: Vec<Box<dyn Source>>,
    /// The analysis window and verdict latches.
    analyzer: Analyzer,
    /// Per source, in the same order: the last outcome (to log changes once) and error count.
    history: Vec<(Option<SourceOutcome>, u64)>,
    samples_total: u64,
    /// The node's name, for the `node` label.
    node: String,
    /// Which families the exposition serves.
    metrics: Arc<Metrics>,
    /// Whether the next tick looks for the node's busiest processes (see
    /// [`Snapshot::culprits_wanted`]).
    culprits_wanted: bool,
    /// The GPU processes whose NCCL RAS service the next tick asks (see
    /// [`Snapshot::ras_wanted`]).
    ras_wanted: Vec<u32>,
}

impl Sampler {
    /// A sampler over the given sources.
    pub fn new(sources: Vec<Box<dyn Source>>) -> Self {
        let history = vec![(None, 0); sources.len()];
        Sampler {
            sources,
            analyzer: Analyzer::default(),
            history,
            samples_total: 0,
            node: String::new(),
            metrics: Arc::default(),
            culprits_wanted: false,
            ras_wanted: Vec::new(),
        }
    }

    /// The sampler a configuration describes: its sources and its analysis thresholds.
    pub fn from_config(config: &Config) -> Self {
        Sampler::with_sources(crate::source::from_config(config), config)
    }

    /// The simulated node of `--demo`, analysed with the configuration's thresholds and
    /// named gpu-demo-<node> unless NODE_NAME says otherwise.
    pub fn demo(config: &Config, demo: DemoSource) -> Self {
        let mut sampler = Sampler::with_sources(vec![Box::new(demo)], config);
        if std::env::var("NODE_NAME").is_ok_and(|n| !n.is_empty()) {
            return sampler;
        }
        sampler.node = format!("gpu-demo-{}", demo.node);
        sampler
    }

    fn with_sources(sources: Vec<Box<dyn Source>>, config: &Config) -> Self {
        // NODE_NAME (set by the DaemonSet), else the host's name as the kernel knows it.
        let node = std::env::var("NODE_NAME")
            .ok()
            .filter(|n| !n.is_empty())
            .or_else(|| {
                std::fs::read_to_string(config.paths.procfs.join("sys/kernel/hostname")).ok()
            })
            .map(|n| n.trim().to_string())
            .unwrap_or_default();
        Sampler {
            analyzer: Analyzer::new(config.analysis.clone()),
            node,
            metrics: Arc::new(config.metrics.clone()),
            ..Sampler::new(sources)
        }
    }

    /// Takes one snapshot. `now` is monotonic time since the sampler started.
    pub fn tick(&mut self, now: Duration) -> Snapshot {
        self.samples_total += 1;
        let mut snapshot = Snapshot {
            samples_total: self.samples_total,
            node: self.node.clone(),
            culprits_wanted: self.culprits_wanted,
            ras_wanted: self.ras_wanted.clone(),
            ..Snapshot::default()
        };
        for (source, (last, errors_total)) in self.sources.iter_mut().zip(&mut self.history) {
            let started = Instant::now();
            // A bug in one parser must degrade that source, not kill the daemon.
            let result = catch_unwind(AssertUnwindSafe(|| source.sample(&mut snapshot, now)))
                .unwrap_or_else(|panic| Err(SourceError::Failed(panic_message(&*panic))));
            let duration_seconds = started.elapsed().as_secs_f64();
            let outcome = match result {
                Ok(()) => SourceOutcome::Ok,
                Err(SourceError::Unsupported(why)) => SourceOutcome::Unsupported(why),
                Err(SourceError::Failed(why)) => {
                    *errors_total += 1;
                    SourceOutcome::Failed(why)
                }
            };
            log_change(source.name(), last.as_ref(), &outcome);
            snapshot.sources.push(SourceStatus {
                name: source.name(),
                outcome: outcome.clone(),
                duration_seconds,
                errors_total: *errors_total,
            });
            *last = Some(outcome);
        }
        snapshot.verdicts = self.analyzer.update(&snapshot, now.as_secs_f64());
        // Other processes can explain a data or contention case: look for them while one
        // scores past the leave score (a latched case stays active down to it).
        let leave_score = self.analyzer.thresholds().leave_score;
        self.culprits_wanted = snapshot.verdicts.iter().flat_map(|v| &v.kinds).any(|k| {
            k.scored.kind.spec().wants_culprits && k.scored.score.is_some_and(|s| s >= leave_score)
        });
        // A hang tracked for half of hang_after: RAS's answer is in by the time it is named.
        let half_hang = self.analyzer.thresholds().hang_after.0.as_secs_f64() / 2.0;
        self.ras_wanted = snapshot
            .verdicts
            .iter()
            .filter_map(|v| v.hang.as_ref())
            .filter(|h| h.seconds >= half_hang)
            .filter_map(|h| h.pid)
            .collect();
        self.ras_wanted.sort_unstable();
        self.ras_wanted.dedup();
        snapshot
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    format!("source panicked: {text}")
}

/// Logs a source's outcome only when it changes, so a broken source does not flood the log.
fn log_change(name: &str, last: Option<&SourceOutcome>, now: &SourceOutcome) {
    if last == Some(now) {
        return;
    }
    match now {
        SourceOutcome::Ok if last.is_some() => tracing::info!(source = name, "source recovered"),
        SourceOutcome::Ok => {}
        SourceOutcome::Unsupported(why) => {
            tracing::debug!(source = name, reason = %why, "source not supported on this host")
        }
        SourceOutcome::Failed(why) => tracing::warn!(source = name, error = %why, "source failed"),
    }
}

/// What the sampler thread publishes: the latest exposition, `None` until the first tick.
pub type Published = Option<Arc<Exposition>>;

/// Runs ticks every `interval` until `stop` receives a message or is dropped. Ticks that would
/// start late because a tick overran are skipped rather than run back to back.
pub fn run(
    mut sampler: Sampler,
    interval: Duration,
    publish: watch::Sender<Published>,
    stop: Receiver<()>,
) {
    lower_priority();
    let start = Instant::now();
    let mut next = start;
    loop {
        let tick_started = Instant::now();
        let snapshot = sampler.tick(tick_started - start);
        let tick_seconds = tick_started.elapsed().as_secs_f64();
        let exposition = exposition::render(
            snapshot,
            tick_seconds,
            tick_started,
            sampler.metrics.clone(),
        );
        publish.send_replace(Some(Arc::new(exposition)));

        let now = Instant::now();
        while next <= now {
            next += interval;
        }
        match stop.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => continue,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Gives this thread, and the GPU, XID and kubelet threads it starts, a lower CPU priority
/// (nice 10) than the HTTP thread: a scrape is waited for by someone, a tick has the rest of
/// its interval. Under full load the sampler still gets its few milliseconds a second (nice 10
/// weighs a tenth of nice 0), only later within the second.
fn lower_priority() {
    // SAFETY: plain syscalls on the calling thread; Linux keeps nice values per thread.
    let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
    if result != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower the sampler's priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scripted {
        results: Vec<Result<(), SourceError>>,
    }

    impl Source for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }
        fn sample(&mut self, _: &mut Snapshot, _: Duration) -> Result<(), SourceError> {
            match self.results.remove(0) {
                Err(SourceError::Failed(m)) if m == "panic" => panic!("boom"),
                other => other,
            }
        }
    }

    #[test]
    fn outcomes_errors_and_panics_are_recorded_per_source() {
        let scripted = Scripted {
            results: vec![
                Ok(()),
                Err(SourceError::Failed("read error".into())),
                Err(SourceError::Failed("panic".into())),
                Err(SourceError::Unsupported("no such thing".into())),
                Ok(()),
            ],
        };
        let mut sampler = Sampler::new(vec![Box::new(scripted)]);
        let outcomes: Vec<SourceStatus> = (0..5)
            .map(|i| sampler.tick(Duration::from_secs(i)).sources.remove(0))
            .collect();
        assert_eq!(outcomes[0].outcome, SourceOutcome::Ok);
        assert_eq!(
            outcomes[1].outcome,
            SourceOutcome::Failed("read error".into())
        );
        assert_eq!(outcomes[1].errors_total, 1);
        assert_eq!(
            outcomes[2].outcome,
            SourceOutcome::Failed("source panicked: boom".into())
        );
        assert_eq!(outcomes[2].errors_total, 2);
        assert!(matches!(outcomes[3].outcome, SourceOutcome::Unsupported(_)));
        assert_eq!(outcomes[3].errors_total, 2, "unsupported is not an error");
        assert_eq!(outcomes[4].outcome, SourceOutcome::Ok);
        assert_eq!(sampler.samples_total, 5);
    }
}
