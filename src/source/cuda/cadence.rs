//! A loop's step time from the moments it crossed the library boundary: its syncs, copies to
//! and from the device, graph launches and NCCL collectives (the mark probes). A training step
//! makes the same calls every time, so each kind of call repeats with the step: its period is
//! the shortest lag, in calls, at which the time between the calls repeats and (for a lag of
//! several calls) the gaps between them come in the same order, their autocorrelation
//! (Greyhound finds the iteration period of NCCL calls the same way). The step is the
//! shortest period of any kind, or the mean interval of a batch's uploads, made once a step
//! ([`step_of`]).
//!
//! A lag too short splits a step unevenly (DDP's buckets a few milliseconds apart, then the
//! forward pass): its intervals are then both shorter and longer than their median, where a
//! step's are at most slower now and then. A kind called once a step but unevenly twice (at
//! one third and at the end) can read half steps; a kind called only every few steps (a
//! logging sync) is outrun by the others.
//!
//! Pure; `steps.rs` keeps each process's recent calls and looks again now and then.

use std::collections::{BTreeMap, HashMap};

/// The longest period looked for, in calls (an FSDP step of a large model issues a few
/// hundred collectives).
const MAX_CALLS_PER_STEP: usize = 400;
/// Steps a window must hold for a period to be found.
const MIN_STEPS: usize = 3;
/// How far from their median the lagged intervals of a repeating period lie: most within
/// [`SPREAD`] of it, few shorter (a step is slow now and then, seldom much faster than
/// usual), and their mean at most [`MEAN_OVER_MEDIAN_MAX`] times the median (a few slow
/// steps are steps; a long gap every few calls is the rest of a step).
const SPREAD: f64 = 0.25;
const TYPICAL_MIN: f64 = 0.5;
const SHORTER_MAX: f64 = 0.1;
const MEAN_OVER_MEDIAN_MAX: f64 = 1.6;
/// How alike the gaps between calls a lag of several calls apart must be (their
/// autocorrelation): over many calls a sum of random gaps varies little too, but random gaps
/// are not in the same order every step.
const GAPS_CORRELATION_MIN: f64 = 0.5;
/// Two uploads of one batch: the next tensor's copy entered this soon after the last one's
/// returned, on the same thread (a `.to()` call's own overhead: microseconds). Between two
/// batches lies the step's host work: launching its kernels, a few hundred microseconds
/// even where the loop runs ahead of the GPU.
const BATCH_GAP_NS: u64 = 50_000;
/// The periods either side of an interval the loop's pace around it is taken over.
const NEARBY_PERIODS: usize = 8;
/// Intervals sampled per lag: enough for the median, bounded cost on long windows.
const SAMPLES: usize = 96;

/// One call across the boundary: when (ns, CLOCK_MONOTONIC), by which thread, of what kind,
/// whether its kind is made once a step (a batch's upload, a CUDA graph's launch), and what
/// it means for the GPU's queue (backlog.rs). A wait's return is marked too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub ns: u64,
    pub tid: u32,
    pub kind: u32,
    pub once_a_step: bool,
    pub role: Role,
    /// The peer of an NCCL send (`None` for every other call).
    pub peer: Option<u32>,
}

/// What a call means for the GPU's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Hands the GPU work without waiting: a collective, a graph launch.
    Work,
    /// Enters a driver wait: a copy to the device (work too), one to the host, or a sync.
    Wait(Waiting),
    /// Returns from the thread's wait.
    Returned,
    /// Neither.
    Other,
}

/// What a driver wait waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// A copy to the device (a batch's upload).
    Upload,
    /// A copy to the host (`.item()`, `.cpu()`).
    Download,
    /// A stream, context or event sync.
    Sync,
}

/// Where a loop's step shows: a kind of call (whether it comes once a step, its probe) and
/// how many of its calls make a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    kind: (bool, u32),
    calls_per_step: usize,
}

/// Where the step of `calls` (oldest first) shows; `None` where no kind of call repeats at
/// least [`MIN_STEPS`] times. Each kind of call repeats with the step, some several times a
/// step (DDP's buckets), some once in several (a logging sync every ten steps): the step is
/// the shortest period any kind has.
///
/// A loop that reads its loss only every few steps runs ahead of the GPU between those syncs:
/// every kind of call then repeats every few steps (three quick steps, one long), and only
/// knowing which calls come once a step tells the step. A batch's upload does (its tensors'
/// copies back to back, however long each takes): its batches are the steps. A tensor
/// uploaded apart from the batch every step (a mask built after the forward) halves the
/// step read.
pub fn cadence_of(calls: &[Call]) -> Option<Cadence> {
    let by_kind = times_by_kind(calls);
    let (first_ns, last_ns) = (calls.first()?.ns, calls.last()?.ns);
    // Uploads that stopped early in the window (the model's, at start-up) do not step.
    let recent = last_ns - (last_ns - first_ns) / 4;
    let shortest = |found: Vec<Cadence>| {
        found.into_iter().min_by(|a, b| {
            let seconds = |c: &Cadence| mean_period(&by_kind[&c.kind], c.calls_per_step);
            seconds(a).total_cmp(&seconds(b))
        })
    };
    // Uploads step however irregular the loop: it may run ahead of the GPU between syncs,
    // wait for its loader now and then, or slow down when CPU hogs arrive.
    let uploads = by_kind
        .iter()
        .filter(|((once, _), times)| {
            *once && times.len() > MIN_STEPS && times.last().is_some_and(|&t| t >= recent)
        })
        .map(|(&kind, _)| Cadence {
            kind,
            calls_per_step: 1,
        })
        .collect();
    shortest(uploads).or_else(|| {
        let periodic = by_kind
            .iter()
            .filter_map(|(&kind, times)| {
                period_of(times).map(|calls_per_step| Cadence {
                    kind,
                    calls_per_step,
                })
            })
            .collect();
        shortest(periodic)
    })
}

/// The mean step of `calls` (oldest first) in seconds, where `cadence` shows it: over the
/// whole steps they hold, so slow steps count; `None` under [`MIN_STEPS`] of them.
pub fn seconds_of(calls: &[Call], cadence: Cadence) -> Option<f64> {
    let times = times_by_kind(calls).remove(&cadence.kind)?;
    let steps = times.len().saturating_sub(1) / cadence.calls_per_step;
    (steps >= MIN_STEPS).then(|| mean_period(&times, cadence.calls_per_step))
}

/// The mean step of `calls` in seconds (the search and the measure at once).
#[cfg(test)]
pub fn step_of(calls: &[Call]) -> Option<f64> {
    seconds_of(calls, cadence_of(calls)?)
}

/// Each kind's calls (ns, oldest first), a wait's return left out; of a kind made once a
/// step, the first of each batch: its tensors are uploaded back to back, as many each step
/// (the most common count is taken: a thread descheduled between two of them splits a
/// batch now and then).
fn times_by_kind(calls: &[Call]) -> BTreeMap<(bool, u32), Vec<u64>> {
    let mut by_kind: BTreeMap<(bool, u32), Vec<u64>> = BTreeMap::new();
    // Per once-a-step kind, its batches' sizes; per thread, its last upload's kind and when
    // it entered or returned.
    let mut batches: BTreeMap<(bool, u32), Vec<usize>> = BTreeMap::new();
    let mut uploading: HashMap<u32, (u32, u64)> = HashMap::new();
    for call in calls {
        if call.role == Role::Returned {
            if let Some(last) = uploading.get_mut(&call.tid) {
                last.1 = call.ns;
            }
            continue;
        }
        let key = (call.once_a_step, call.kind);
        by_kind.entry(key).or_default().push(call.ns);
        let previous = uploading.remove(&call.tid);
        if !call.once_a_step {
            continue;
        }
        let sizes = batches.entry(key).or_default();
        match sizes.last_mut() {
            Some(size)
                if previous
                    .is_some_and(|(kind, ns)| kind == call.kind && call.ns < ns + BATCH_GAP_NS) =>
            {
                *size += 1
            }
            _ => sizes.push(1),
        }
        if matches!(call.role, Role::Wait(_)) {
            uploading.insert(call.tid, (call.kind, call.ns));
        }
    }
    for (key, sizes) in batches {
        let tensors = most_common(&sizes);
        let times = by_kind.get_mut(&key).expect("a batch's kind has calls");
        *times = times.iter().copied().step_by(tensors.max(1)).collect();
    }
    by_kind
}

/// The most common of `values` (the smallest of those tied), 1 where there are none.
fn most_common(values: &[usize]) -> usize {
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for &v in values {
        *counts.entry(v).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map_or(1, |(v, _)| v)
}

/// The mean time of `lag` calls over the whole periods `times` holds, in seconds.
fn mean_period(times: &[u64], lag: usize) -> f64 {
    let periods = (times.len().saturating_sub(1) / lag).max(1);
    let span = times[(periods * lag).min(times.len() - 1)].saturating_sub(times[0]);
    span as f64 / 1e9 / periods as f64
}

/// How many of `calls` (oldest first) `counted` picks a step of `step_seconds`, over the
/// steps their span holds; `None` where it holds fewer than [`MIN_STEPS`]. A pipeline stage's
/// sends and receives a step tell its microbatches. Pure.
pub fn per_step(calls: &[Call], step_seconds: f64, counted: impl Fn(&Call) -> bool) -> Option<f64> {
    let (first, last) = (calls.first()?, calls.last()?);
    let steps = last.ns.saturating_sub(first.ns) as f64 / 1e9 / step_seconds;
    if !steps.is_finite() || steps < MIN_STEPS as f64 {
        return None;
    }
    let n = calls.iter().filter(|c| counted(c)).count();
    Some(n as f64 / steps)
}

/// The period of one kind's calls (ns, oldest first), in calls: the shortest lag at which
/// the time between them repeats.
fn period_of(times: &[u64]) -> Option<usize> {
    let n = times.len();
    let longest = MAX_CALLS_PER_STEP.min(n.saturating_sub(1) / MIN_STEPS);
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]) as f64)
        .collect();
    // A lag that repeats: the share of its intervals away from their median, and the lag.
    let judge = |lag: usize| -> Option<(f64, usize)> {
        // Each interval against the loop's pace around it (the mean time per call a few
        // periods either side): a loop whose pace changes within the window (CPU hogs
        // arriving, a straggler's phases) still repeats at its step.
        let pace = |i: usize| {
            let (from, to) = (
                i.saturating_sub(lag * NEARBY_PERIODS),
                (i + lag * (NEARBY_PERIODS + 1)).min(n - 1),
            );
            times[to].saturating_sub(times[from]) as f64 / (to - from) as f64 * lag as f64
        };
        let mut intervals: Vec<f64> = sampled(n - lag)
            .map(|i| times[i + lag].saturating_sub(times[i]) as f64 / pace(i).max(1.0))
            .collect();
        let middle = median(&mut intervals)?;
        let atypical = repeats(&intervals, middle)?;
        if lag > 1 && autocorrelation(&gaps, lag) < GAPS_CORRELATION_MIN {
            return None;
        }
        Some((atypical, lag))
    };
    let found = (1..=longest).find_map(judge)?;
    let first = found.1;
    // A lag a call or two short of a long step passes too, with those calls' intervals
    // short: the lag just after it that repeats best is the step.
    let (_, lag) = (first + 1..=(first + first / 4).min(longest))
        .filter_map(judge)
        .fold(found, |best, j| if j.0 < best.0 { j } else { best });
    Some(lag)
}

/// Up to [`SAMPLES`] of the indices below `pairs`, spread in no regular order: a regular
/// stride could meet a step's calls always at the same places in it.
fn sampled(pairs: usize) -> impl Iterator<Item = usize> {
    let all = pairs <= SAMPLES;
    (0..pairs.min(SAMPLES)).map(move |k| {
        if all {
            k
        } else {
            // splitmix64 of k
            let mut z = (k as u64)
                .wrapping_add(1)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as usize % pairs
        }
    })
}

/// Autocorrelation of the gaps at `lag`: near 1 where they come in the same order every
/// `lag` calls, near 0 for gaps in random order.
fn autocorrelation(gaps: &[f64], lag: usize) -> f64 {
    let n = gaps.len();
    if n <= lag {
        return 0.0;
    }
    let mean = gaps.iter().sum::<f64>() / n as f64;
    let variance = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
    if variance <= 0.0 {
        return 0.0;
    }
    let covariance = (0..n - lag)
        .map(|i| (gaps[i] - mean) * (gaps[i + lag] - mean))
        .sum::<f64>()
        / (n - lag) as f64;
    covariance / variance
}

/// Whether the intervals at a lag repeat as a step's do, `middle` their median: the share
/// of them away from it if they do.
fn repeats(intervals: &[f64], middle: f64) -> Option<f64> {
    let (typical, shorter) = around(intervals, middle);
    let mean = intervals.iter().sum::<f64>() / intervals.len() as f64;
    let repeat = middle > 0.0
        && typical >= TYPICAL_MIN
        && shorter <= SHORTER_MAX
        && mean <= MEAN_OVER_MEDIAN_MAX * middle;
    repeat.then_some(1.0 - typical)
}

/// The shares of `intervals` within [`SPREAD`] of `middle`, and below that.
fn around(intervals: &[f64], middle: f64) -> (f64, f64) {
    let share = |f: &dyn Fn(f64) -> bool| {
        intervals.iter().filter(|&&d| f(d)).count() as f64 / intervals.len() as f64
    };
    (
        share(&|d| (d - middle).abs() <= SPREAD * middle),
        share(&|d| d < (1.0 - SPREAD) * middle),
    )
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub const MS: u64 = 1_000_000;

    /// Kind 10 is a batch's upload, made once a step.
    pub const UPLOAD: u32 = 10;

    /// `steps` steps of `pattern` (kind, ms after the step's start), `step_ms` apart, each step
    /// lasting `slow(step)` times longer.
    pub fn calls(
        steps: u64,
        step_ms: u64,
        pattern: &[(u32, u64)],
        slow: impl Fn(u64) -> f64,
    ) -> Vec<Call> {
        let mut start = 1_000 * MS;
        let mut out = Vec::new();
        for step in 0..steps {
            let scale = slow(step);
            let at = |ms: u64| (ms as f64 * MS as f64 * scale) as u64;
            out.extend(pattern.iter().map(|&(kind, ms)| Call {
                ns: start + at(ms),
                tid: 1,
                kind,
                once_a_step: kind == UPLOAD,
                role: Role::Other,
                peer: None,
            }));
            start += at(step_ms);
        }
        out
    }

    /// A pseudo-random factor in 1 ± `by` for each step.
    fn jitter(by: f64) -> impl Fn(u64) -> f64 {
        move |step| {
            let x = step.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) % 1000;
            1.0 + by * (x as f64 / 500.0 - 1.0)
        }
    }

    fn seconds(calls: &[Call]) -> Option<f64> {
        step_of(calls).map(|s| (s * 1e4).round() / 1e4)
    }

    #[test]
    fn one_sync_a_step_is_the_step() {
        let c = calls(20, 100, &[(1, 90)], |_| 1.0);
        assert_eq!(seconds(&c), Some(0.1));
    }

    #[test]
    fn ddp_buckets_of_one_kind_are_one_step_with_the_upload_and_the_sync() {
        // The batch uploaded at the start, 25 all-reduce buckets 4 ms apart during the backward, the
        // loss's sync at the end; 250 ms a step.
        let mut pattern = vec![(10, 0)];
        pattern.extend((0..25).map(|b| (20, 100 + 4 * b)));
        pattern.push((30, 240));
        let c = calls(12, 250, &pattern, |_| 1.0);
        assert_eq!(seconds(&c), Some(0.25));
        // Only the buckets (the data already on the GPU, no sync): the gap of the forward
        // says where a step ends.
        let only: Vec<(u32, u64)> = (0..25).map(|b| (20, 100 + 4 * b)).collect();
        let c = calls(12, 250, &only, |_| 1.0);
        assert_eq!(seconds(&c), Some(0.25));
    }

    #[test]
    fn jittery_ddp_steps_with_a_sync_every_third_step_are_steps() {
        // communication_ddp_straggler's shape without its batch's upload: 6 buckets, the loss
        // read back every third step; each step 10 % faster or slower than the last.
        let pattern: Vec<(u32, u64)> = (0..6).map(|b| (20, 60 + 5 * b)).collect();
        let steps: Vec<Call> = calls(60, 110, &pattern, jitter(0.1))
            .into_iter()
            .enumerate()
            .flat_map(|(i, c)| {
                let sync = (i % 6 == 5 && (i / 6) % 3 == 2).then_some(Call {
                    ns: c.ns + 20 * MS,
                    tid: 1,
                    kind: 30,
                    once_a_step: false,
                    role: Role::Other,
                    peer: None,
                });
                std::iter::once(c).chain(sync)
            })
            .collect();
        let step = step_of(&steps).unwrap();
        assert!((step - 0.11).abs() < 0.005, "{step}");
    }

    #[test]
    fn a_loop_running_ahead_of_the_gpu_between_syncs_steps_with_its_uploads() {
        // The loss read every fourth step: three steps whose host work takes 100 us (CUDA
        // graphs, launches queued), then the sync waits for the GPU, 140 ms in all; each batch
        // uploaded as two tensors, the next one's copy entered 10 us after the last returned,
        // a copy taking 20 us (pinned) or 3 ms (a large pageable batch).
        for copy_ns in [20_000, 3_000_000] {
            let mut c = Vec::new();
            let at = |ns: u64, kind: u32, role: Role| Call {
                ns,
                tid: 1,
                kind,
                once_a_step: kind == UPLOAD,
                role,
                peer: None,
            };
            for period in 0..30u64 {
                let mut ns = 1_000 * MS + period * 140 * MS;
                for _step in 0..4 {
                    for _tensor in 0..2 {
                        c.push(at(ns, UPLOAD, Role::Wait(Waiting::Upload)));
                        c.push(at(ns + copy_ns, UPLOAD, Role::Returned));
                        ns += copy_ns + 10_000;
                    }
                    ns += 100_000;
                }
                c.push(at(ns, 30, Role::Wait(Waiting::Sync)));
                c.push(at(
                    1_000 * MS + (period + 1) * 140 * MS - MS,
                    30,
                    Role::Returned,
                ));
            }
            let step = step_of(&c).unwrap();
            assert!(
                (step - 0.035).abs() < 0.001,
                "copies of {copy_ns} ns: {step}"
            );
            // Without the uploads known as such, the calls repeat every four steps.
            c.iter_mut().for_each(|call| call.once_a_step = false);
            let period = step_of(&c).unwrap();
            assert!(
                (period - 0.14).abs() < 0.001,
                "copies of {copy_ns} ns: {period}"
            );
        }
    }

    #[test]
    fn a_loop_whose_pace_changes_within_the_window_steps_at_its_mean() {
        // One sync a step, 100 ms a step for 10 s, then CPU hogs arrive: 160 ms, each step
        // 20 % faster or slower than the next.
        let pace = |step: u64| {
            if step < 100 {
                1.0
            } else {
                1.6 * jitter(0.2)(step)
            }
        };
        let c = calls(300, 100, &[(30, 90)], pace);
        let mean = (c.last().unwrap().ns - c[0].ns) as f64 / 1e9 / 299.0;
        let step = step_of(&c).unwrap();
        assert!((step / mean - 1.0).abs() < 0.02, "{step} against {mean}");
        // The same with a batch uploaded each step and the loss read only every fourth, the
        // loop running ahead of the GPU in between: the uploads step.
        let pattern = [(UPLOAD, 0), (30, 90)];
        let c: Vec<Call> = calls(300, 100, &pattern, pace)
            .into_iter()
            .enumerate()
            .filter(|(i, c)| c.kind == UPLOAD || i % 8 == 7)
            .map(|(_, c)| c)
            .collect();
        let step = step_of(&c).unwrap();
        assert!((step / mean - 1.0).abs() < 0.02, "{step} against {mean}");
    }

    #[test]
    fn slow_steps_now_and_then_count_in_the_mean() {
        // The batch uploaded, the loss read; every fourth step three times as long (a heavy batch).
        let pattern = [(10, 0), (30, 80)];
        let c = calls(40, 100, &pattern, |s| if s % 4 == 3 { 3.0 } else { 1.0 });
        let step = step_of(&c).unwrap();
        assert!((step - 0.15).abs() < 0.01, "{step}");
    }

    #[test]
    fn a_stages_transfers_a_step_are_counted_over_the_steps_seen() {
        // A GPipe stage of four microbatches: a send after each forward, a receive before each
        // backward, the step's sync at its end.
        let (send, recv, sync) = (5, 6, 1);
        let pattern = [
            (UPLOAD, 0),
            (send, 10),
            (send, 20),
            (send, 30),
            (send, 40),
            (recv, 50),
            (recv, 60),
            (recv, 70),
            (recv, 80),
            (sync, 95),
        ];
        let c = calls(50, 100, &pattern, jitter(0.1));
        let step = step_of(&c).unwrap();
        let transfers = per_step(&c, step, |c| c.kind == send || c.kind == recv).unwrap();
        assert!((transfers - 8.0).abs() < 0.3, "{transfers}");
        assert_eq!(
            per_step(&c[..20], step, |_| true),
            None,
            "two steps are too few"
        );
        assert_eq!(per_step(&c, 0.0, |_| true), None);
    }

    #[test]
    fn no_repeating_period_is_none() {
        assert_eq!(step_of(&[]), None);
        let c = calls(2, 100, &[(1, 90)], |_| 1.0);
        assert_eq!(step_of(&c), None, "two steps are too few");
        // Calls at random moments, of one kind or three: thirty trains, none periodic.
        for seed in 1..=30u64 {
            let mut x = seed;
            let mut next = || {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 11) as f64 / (1u64 << 53) as f64
            };
            let mut ns = 0.0;
            let kinds = if seed % 2 == 0 { 3.0 } else { 1.0 };
            let random: Vec<Call> = (0..600)
                .map(|_| {
                    ns += -(1.0 - next()).ln() * 30.0 * MS as f64; // exponential gaps
                    let kind = (next() * kinds) as u32;
                    Call {
                        ns: ns as u64,
                        tid: 1,
                        kind,
                        once_a_step: false,
                        role: Role::Other,
                        peer: None,
                    }
                })
                .collect();
            assert_eq!(step_of(&random), None, "seed {seed}");
        }
    }
}
