//! The launch windows: kernel launches are probed only 20 ms about every few seconds.

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

/// How long each launch window lasts. A launch traps from the moment its probe is attached
/// until the kernel has taken the breakpoint out again, which it does only tens of
/// milliseconds into detaching (about 45 ms on the development VM: the job's launches trap
/// 60-80 ms a window, not 20); so the mean time from one window to the next
/// (`sources.cuda.launch_windows_every`) is what bounds the job's cost, and attaching and
/// detaching are the exporter's (8 % of its CPU on the training-shaped bench with a window
/// each second).
const LAUNCH_WINDOW: Duration = Duration::from_millis(20);

/// The launch windows: which entry points to attach, and for how long they have been attached
/// in all (seconds), shared by the source and its window thread.
#[derive(Default)]
pub struct LaunchWindows {
    pub targets: Vec<Arc<Windowed>>,
    pub attached_seconds: f64,
}

/// Opens a launch window about every `every` (at a random phase, so that windows do not beat
/// with a training step), until the source is dropped.
pub fn start_launch_windows(pmu: UprobePmu, windows: &Arc<Mutex<LaunchWindows>>, every: Duration) {
    let windows = Arc::downgrade(windows);
    let spawned = std::thread::Builder::new()
        .name("cuda-launches".into())
        .spawn(move || {
            let mut state = std::process::id() as u64 | 1;
            loop {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let gap = every.mul_f64(0.5 + (state % 1000) as f64 / 1000.0);
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
