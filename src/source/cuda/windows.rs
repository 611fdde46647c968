//! The launch windows: kernel launches are probed only 20 ms about every few seconds.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::bpf::{monotonic_ns, Attached, Program, UprobePmu};
use super::maps::{per_process, read_map, Maps};
use super::readings::{queue_in_window, QueueSeen};

/// A launch entry point, attached only for short windows: its trap (about 13 µs a call on this
/// project's VM, measured by bench/probe_cost.py) would cost a loop launching tens of thousands of kernels a
/// second far more than counting is worth, and a disabled event keeps the trap.
pub struct Windowed {
    pub path: PathBuf,
    pub offset: u64,
    /// Counts each launch, in every window.
    pub count: Arc<Program>,
    /// Times each launch, in one window of [`TIMED_EVERY`]: its start noted on entry, and on
    /// return whether it waited for room in the launch queue.
    pub timing: [Arc<Program>; 2],
}

/// One launch window in this many also times the launches. Timing triples the events a
/// window attaches and detaches (each detach waits out the kernel's uprobe bookkeeping), and
/// the launch queue's state lasts for seconds: a window of three (about every 24 s at the
/// default period, within the analysis window; the second window first) reads it, and the
/// job pays the dearer window a third as often.
const TIMED_EVERY: u64 = 3;

/// How long each launch window lasts. A launch traps from the moment its probe is attached
/// until the kernel has taken the breakpoint out again, which it does only tens of
/// milliseconds into detaching (about 45 ms on the development VM: the job's launches trap
/// 60-80 ms a window, not 20); so the mean time from one window to the next
/// (`sources.cuda.launch_windows_every`) is what bounds the job's cost, and attaching and
/// detaching are the exporter's (8 % of its CPU on the training-shaped bench with a window
/// each second).
const LAUNCH_WINDOW: Duration = Duration::from_millis(20);

/// The launch windows: which entry points to attach, and for how long they have counted in all
/// (seconds their gate was open, from after the last attach to before the first detach),
/// shared by the source and its window thread.
#[derive(Default)]
pub struct LaunchWindows {
    pub targets: Vec<Arc<Windowed>>,
    pub attached_seconds: f64,
    /// Per process whose launches the last window saw, its launch queue then.
    pub queues: HashMap<u32, QueueSeen>,
}

/// Opens a launch window about every `every` (at a random phase, so that windows do not beat
/// with a training step), until the source is dropped.
pub fn start_launch_windows(
    pmu: UprobePmu,
    windows: &Arc<Mutex<LaunchWindows>>,
    every: Duration,
    maps: Arc<Maps>,
) {
    let windows = Arc::downgrade(windows);
    let spawned = std::thread::Builder::new()
        .name("cuda-launches".into())
        .spawn(move || {
            let mut state = std::process::id() as u64 | 1;
            // Windows opened so far (with a launch entry point to attach).
            let mut opened: u64 = 0;
            loop {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let gap = every.mul_f64(0.5 + (state % 1000) as f64 / 1000.0);
                std::thread::sleep(gap.saturating_sub(LAUNCH_WINDOW));
                let Some(windows) = windows.upgrade() else {
                    return;
                };
                let targets = locked(&windows).targets.clone();
                // The second window is the first timed: the first counts the launches soon,
                // the second reads the queue some 16 s after a start at the default period.
                let timed = opened % TIMED_EVERY == 1;
                let attach = |pick: &dyn Fn(&Windowed) -> Vec<&Arc<Program>>, returns: bool| {
                    targets
                        .iter()
                        .flat_map(|t| {
                            pick(t).into_iter().filter_map(|program| {
                                Attached::new(pmu, &t.path, t.offset, returns, program.clone()).ok()
                            })
                        })
                        .collect::<Vec<Attached>>()
                };
                // A timed window: what it adds to the counts and waits, and its held launches
                // alone.
                let before = timed.then(|| {
                    for map in [&maps.held_first, &maps.held_last] {
                        for (key, _) in map.entries() {
                            map.delete(&key);
                        }
                    }
                    (read_map(&maps.counts, None), read_map(&maps.waits, None))
                });
                // The entries' programs first and the returns' last: a launch whose return is
                // timed was counted, and its start noted.
                let entries = attach(
                    &|t| {
                        if timed {
                            vec![&t.count, &t.timing[0]]
                        } else {
                            vec![&t.count]
                        }
                    },
                    false,
                );
                if entries.is_empty() {
                    continue;
                }
                opened += 1;
                let returns = if timed {
                    attach(&|t| vec![&t.timing[1]], true)
                } else {
                    Vec::new()
                };
                // Counted from here to the gate's closing: the span the estimate scales by.
                let gate = |open: u64| {
                    maps.window_open
                        .set(&0u32.to_ne_bytes(), &open.to_ne_bytes())
                };
                let opened_gate = gate(1);
                let (began, began_ns) = (std::time::Instant::now(), monotonic_ns());
                std::thread::sleep(LAUNCH_WINDOW);
                let closed_gate = gate(0);
                let (seconds, ended_ns) = (began.elapsed().as_secs_f64(), monotonic_ns());
                if let Err(error) = opened_gate.and(closed_gate) {
                    tracing::debug!(%error, "cuda probes: launch window's gate not set");
                }
                // Each detach waits out the kernel's uprobe bookkeeping (tens of ms), the
                // launches trapping meanwhile: the two sets at once. A return whose entry was
                // already detached finds no start (the last return deleted it) and adds nothing.
                std::thread::scope(|scope| {
                    scope.spawn(|| drop(returns));
                    drop(entries);
                });
                let queues = before.map(|before| {
                    let after = (read_map(&maps.counts, None), read_map(&maps.waits, None));
                    let first = per_process(&maps.held_first, None, u64::min);
                    let last = per_process(&maps.held_last, None, u64::max);
                    let held = first
                        .into_iter()
                        .filter_map(|(pid, began)| Some((pid, (began, *last.get(&pid)?))))
                        .collect();
                    queue_in_window(
                        (&after.0, &after.1),
                        (&before.0, &before.1),
                        (began_ns, ended_ns),
                        &held,
                    )
                });
                let mut windows = locked(&windows);
                windows.attached_seconds += seconds;
                if let Some(queues) = queues {
                    windows.queues = queues;
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cuda probes: no launch-window thread; launches go uncounted");
    }
}

/// The windows' state, even where a thread panicked holding it (the counts stay usable).
fn locked(windows: &Mutex<LaunchWindows>) -> std::sync::MutexGuard<'_, LaunchWindows> {
    windows.lock().unwrap_or_else(|p| p.into_inner())
}
