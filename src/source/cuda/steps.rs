//! Each GPU process's recent calls across the library boundary, and its step in them: where
//! it shows is looked for every [`REFRESH_NS`] ([`cadence_of`]: a search over a long window
//! costs up to a millisecond), its mean measured at every read ([`seconds_of`]: microseconds),
//! so that the step follows a loop whose pace changes.

use std::collections::{HashMap, HashSet, VecDeque};

use super::cadence::{cadence_of, seconds_of, Cadence, Call};
use crate::snapshot::Step;

/// The recent calls a process's step is found from: a minute, at most this many.
const WINDOW_NS: u64 = 60_000_000_000;
/// Twice what the step needs: each wait is marked twice, entering and returning.
const CALLS_KEPT: usize = 4096;
/// How often a process's step is looked for again.
const REFRESH_NS: u64 = 10_000_000_000;

/// One process's recent calls and what was found in them.
#[derive(Default)]
struct Tracked {
    calls: VecDeque<Call>,
    /// When the last call came (ns): it stays once the window has let every call go (a hang).
    last_ns: u64,
    /// Where the step was found to show, when it was looked for (ns), the last mean measured
    /// (seconds) and the shortest mean measured.
    cadence: Option<Cadence>,
    looked_at: u64,
    seconds: Option<f64>,
    best_seconds: Option<f64>,
}

/// Each GPU process's recent calls across the boundary, and its step.
#[derive(Default)]
pub struct Steps {
    processes: HashMap<u32, Tracked>,
}

impl Steps {
    pub fn add(&mut self, pid: u32, call: Call) {
        let tracked = self.processes.entry(pid).or_default();
        if tracked.calls.len() == CALLS_KEPT {
            tracked.calls.pop_front();
        }
        tracked.calls.push_back(call);
        tracked.last_ns = call.ns;
    }

    /// Forgets the processes not in `keep`.
    pub fn retain(&mut self, keep: &HashSet<u32>) {
        self.processes.retain(|pid, _| keep.contains(pid));
    }

    /// `pid`'s calls since `since_ns`, oldest first.
    pub fn calls_since(&mut self, pid: u32, since_ns: u64) -> &[Call] {
        let Some(tracked) = self.processes.get_mut(&pid) else {
            return &[];
        };
        let calls = tracked.calls.make_contiguous();
        let first = calls.partition_point(|c| c.ns < since_ns);
        &calls[first..]
    }

    /// `pid`'s step at `now_ns`, looked for again when due.
    pub fn step(&mut self, pid: u32, now_ns: u64) -> Option<Step> {
        let tracked = self.processes.get_mut(&pid)?;
        let last_ns = tracked.last_ns;
        let since = now_ns.saturating_sub(WINDOW_NS);
        while tracked.calls.front().is_some_and(|c| c.ns < since) {
            tracked.calls.pop_front();
        }
        let due = now_ns.saturating_sub(tracked.looked_at) >= REFRESH_NS;
        let calls = tracked.calls.make_contiguous();
        if due || tracked.cadence.is_none() {
            tracked.looked_at = now_ns;
            match cadence_of(calls) {
                Some(found) => tracked.cadence = Some(found),
                // The calls stopped (a hang): the last step found stands, the one in
                // progress grows past it.
                None if calls.len() < 2 => {}
                None => (tracked.cadence, tracked.seconds) = (None, None),
            }
        }
        if let Some(measured) = tracked.cadence.and_then(|c| seconds_of(calls, c)) {
            tracked.seconds = Some(measured);
            let best = tracked.best_seconds.get_or_insert(measured);
            *best = best.min(measured);
        }
        let seconds = tracked.seconds?;
        // The step in progress shows once the loop has been quiet longer than it ever is.
        let longest_ns = calls
            .windows(2)
            .map(|w| w[1].ns.saturating_sub(w[0].ns))
            .max()
            .unwrap_or(0);
        let quiet_ns = now_ns.saturating_sub(last_ns);
        let in_progress = if quiet_ns > longest_ns {
            quiet_ns as f64 / 1e9
        } else {
            0.0
        };
        Some(Step {
            seconds: seconds.max(in_progress),
            best_seconds: tracked.best_seconds.unwrap_or(seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::cadence::tests::{calls, MS, UPLOAD};
    use super::super::cadence::{Role, Waiting};
    use super::*;

    #[test]
    fn steps_keep_the_best_and_a_stopped_loop_grows_its_step() {
        let mut steps = Steps::default();
        let c = calls(30, 100, &[(10, 0), (30, 80)], |s| {
            if s >= 20 {
                2.0
            } else {
                1.0
            }
        });
        let mid = c[40].ns; // step 20: the fast steps so far
        for call in &c[..=40] {
            steps.add(7, *call);
        }
        let fast = steps.step(7, mid).unwrap();
        assert!((fast.seconds - 0.1).abs() < 1e-3, "{fast:?}");
        for call in &c[41..] {
            steps.add(7, *call);
        }
        // 10 s on, the slow steps fill a minute's window: twice the best.
        let end = c.last().unwrap().ns;
        let late = end + REFRESH_NS - (end - mid);
        for call in calls(300, 200, &[(10, 0), (30, 160)], |_| 1.0) {
            steps.add(
                7,
                Call {
                    ns: call.ns - c[0].ns + end + 40 * MS,
                    ..call
                },
            );
        }
        let now = late.max(steps.processes[&7].calls.back().unwrap().ns) + 50 * MS;
        let slow = steps.step(7, now).unwrap();
        assert!((slow.seconds - 0.2).abs() < 2e-3, "{slow:?}");
        assert!((slow.best_seconds - 0.1).abs() < 1e-3);
        assert!((slow.behind_best() - 0.5).abs() < 0.01);
        // No call for 30 s: the step in progress is 30 s long; and still after the window has
        // let every call go.
        let stopped = steps.step(7, now + 30_000_000_000).unwrap();
        assert!((stopped.seconds - 30.05).abs() < 0.1, "{stopped:?}");
        for later in [90, 91] {
            let stopped = steps.step(7, now + later * 1_000_000_000).unwrap();
            assert!((stopped.seconds - later as f64).abs() < 0.1, "{stopped:?}");
        }
        // A process never seen, and one forgotten.
        assert_eq!(steps.step(8, now), None);
        steps.retain(&HashSet::new());
        assert_eq!(steps.step(7, now), None);
    }

    #[test]
    fn a_loop_waiting_in_its_sync_every_tenth_step_is_not_read_as_stalled() {
        // Nine steps of 30 ms run ahead of the GPU, the tenth waits 800 ms for it in its sync
        // (the entry and its return marked): 107 ms a step.
        let mut steps = Steps::default();
        let mut ns = 1_000 * MS;
        for step in 0..200u64 {
            steps.add(7, call_at(ns, UPLOAD, Role::Wait(Waiting::Upload)));
            if step % 10 == 9 {
                steps.add(7, call_at(ns + MS, 30, Role::Wait(Waiting::Sync)));
                steps.add(7, call_at(ns + 800 * MS, 30, Role::Returned));
                ns += 800 * MS;
            }
            ns += 30 * MS;
        }
        // Read half a second into the next sync's wait: the mean step, not the wait so far.
        steps.add(7, call_at(ns, 30, Role::Wait(Waiting::Sync)));
        let waiting = steps.step(7, ns + 500 * MS).unwrap();
        assert!((waiting.seconds - 0.107).abs() < 0.005, "{waiting:?}");
        // Quiet for longer than the loop ever is: the step in progress.
        let stalled = steps.step(7, ns + 3_000 * MS).unwrap();
        assert!((stalled.seconds - 3.0).abs() < 0.01, "{stalled:?}");
    }

    /// Adds `count` batches' uploads, `step_ms` apart, from `ns` on.
    fn uploads(steps: &mut Steps, ns: &mut u64, count: usize, step_ms: u64) {
        for _ in 0..count {
            steps.add(7, call_at(*ns, UPLOAD, Role::Wait(Waiting::Upload)));
            *ns += step_ms * MS;
        }
    }

    #[test]
    fn the_step_follows_a_loop_that_slows_down_between_searches() {
        // A minute of 100 ms steps, the step looked for; then 9 s of 300 ms steps: read before
        // the next search, the mean of the last minute, not the one found 9 s ago.
        let (mut steps, mut ns) = (Steps::default(), 1_000 * MS);
        uploads(&mut steps, &mut ns, 600, 100);
        let found = steps.step(7, ns).unwrap();
        assert!((found.seconds - 0.1).abs() < 1e-3, "{found:?}");
        uploads(&mut steps, &mut ns, 30, 300);
        let now = steps.step(7, ns).unwrap();
        // 51 s of 100 ms steps and 9 s of 300 ms ones: 540 steps in the minute.
        assert!((now.seconds - 60.0 / 540.0).abs() < 2e-3, "{now:?}");
        assert!((now.best_seconds - 0.1).abs() < 1e-3, "{now:?}");
    }

    #[test]
    fn the_best_step_is_never_slower_than_the_step() {
        // 200 ms steps, the step looked for; then 9 s of 50 ms steps, read before the next
        // search: the mean of the minute is the best so far.
        let (mut steps, mut ns) = (Steps::default(), 1_000 * MS);
        uploads(&mut steps, &mut ns, 300, 200);
        let slow = steps.step(7, ns).unwrap();
        uploads(&mut steps, &mut ns, 180, 50);
        let faster = steps.step(7, ns).unwrap();
        assert!(faster.seconds < slow.seconds, "{faster:?} {slow:?}");
        assert_eq!(faster.best_seconds, faster.seconds);
    }

    fn call_at(ns: u64, kind: u32, role: Role) -> Call {
        Call {
            ns,
            tid: 1,
            kind,
            once_a_step: kind == UPLOAD,
            role,
            peer: None,
        }
    }
}
