//! The launch windows: kernel launches are probed only 20 ms about every 2 s.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::bpf::{Attached, Program, UprobePmu};

/// A launch entry point, attached only for short windows: its trap (about 13 µs a call on this
/// project's VM, measured by bench/probe_cost.py) would cost a loop launching tens of thousands of kernels a
/// second far more than counting is worth, and a disabled event keeps the trap.
pub struct Windowed {
    pub path: PathBuf,
    pub offset: u64,
    pub program: Arc<Program>,
}

/// How long each launch window lasts, and the mean time from one to the next: 1 % of the time,
/// so the launching thread is slowed at most 1 % whatever its launch rate (only while a window
/// is open does a launch trap). Attaching and detaching cost the exporter more than the window
/// itself (the kernel writes the breakpoint into every process mapping the driver, then takes
/// it out: 8 % of the exporter's CPU on the training-shaped bench with 10 ms each second), so
/// the same 1 % comes in fewer, longer windows.
const LAUNCH_WINDOW: Duration = Duration::from_millis(20);
const LAUNCH_PERIOD: Duration = Duration::from_secs(2);

/// The launch windows: which entry points to attach, and for how long they have been attached
/// in all (seconds), shared by the source and its window thread.
#[derive(Default)]
pub struct LaunchWindows {
    pub targets: Vec<Arc<Windowed>>,
    pub attached_seconds: f64,
}

/// Opens a launch window about every [`LAUNCH_PERIOD`] (at a random phase, so that windows do
/// not beat with a training step), until the source is dropped.
pub fn start_launch_windows(pmu: UprobePmu, windows: &Arc<Mutex<LaunchWindows>>) {
    let windows = Arc::downgrade(windows);
    let spawned = std::thread::Builder::new()
        .name("cuda-launches".into())
        .spawn(move || {
            let mut state = std::process::id() as u64 | 1;
            loop {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let gap = LAUNCH_PERIOD.mul_f64(0.5 + (state % 1000) as f64 / 1000.0);
                std::thread::sleep(gap.saturating_sub(LAUNCH_WINDOW));
                let Some(windows) = windows.upgrade() else {
                    return;
                };
                let targets = windows
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .targets
                    .clone();
                let events: Vec<Attached> = targets
                    .iter()
                    .filter_map(|t| {
                        Attached::new(pmu, &t.path, t.offset, false, t.program.clone()).ok()
                    })
                    .collect();
                if events.is_empty() {
                    continue;
                }
                let opened = std::time::Instant::now();
                std::thread::sleep(LAUNCH_WINDOW);
                let seconds = opened.elapsed().as_secs_f64();
                drop(events);
                windows
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .attached_seconds += seconds;
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cuda probes: no launch-window thread; launches go uncounted");
    }
}
