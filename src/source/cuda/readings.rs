//! The maps' contents, decoded and folded into what each process and thread did. Pure.

use std::collections::HashMap;

use super::probes::{element_bytes, Counted, PROBES};
use crate::snapshot::{CudaThread, CudaTotals, ProcessCuda};

/// A (process, thread, probe) key of `counts` and `waits`, and its fourth word (an NCCL
/// collective's datatype, else 0).
pub fn decode_key(key: &[u8]) -> Option<(u32, u32, usize, u32)> {
    let word = |i: usize| Some(u32::from_ne_bytes(key.get(i..i + 4)?.try_into().ok()?));
    Some((word(0)?, word(4)?, word(8)? as usize, word(12)?))
}

/// A (hits, bytes or nanoseconds) value.
pub fn decode_value(value: &[u8]) -> Option<(u64, u64)> {
    let word = |i: usize| Some(u64::from_ne_bytes(value.get(i..i + 8)?.try_into().ok()?));
    Some((word(0)?, word(8)?))
}

/// One map entry as a reading's: an NCCL collective's elements (counted per datatype) become
/// bytes, 0 for a datatype NCCL has not. Pure.
pub fn decode(key: &[u8], value: &[u8]) -> Option<(Key, (u64, u64))> {
    let (pid, tid, probe, datatype) = decode_key(key)?;
    let (hits, measured) = decode_value(value)?;
    let measured = match PROBES.get(probe).and_then(|p| p.counted) {
        Some(Counted::Collective(_)) => {
            element_bytes(datatype).map_or(0, |size| measured.saturating_mul(size))
        }
        _ => measured,
    };
    Some(((pid, tid, probe), (hits, measured)))
}

/// A reading's key: (process, thread, probe).
pub type Key = (u32, u32, usize);

/// Per key: cumulative hits and bytes (counts) or nanoseconds (waits).
pub type Reading = HashMap<Key, (u64, u64)>;

fn is_launch(probe: usize) -> bool {
    PROBES.get(probe).and_then(|p| p.counted) == Some(Counted::Launch)
}

/// What the kernel-launch probes, attached `window_seconds` of the `seconds` between two
/// reads, saw: launches per second per (process, thread) while attached, and the launches of
/// each process over the whole span, estimated. Pure.
pub fn launches_between(
    now: &Reading,
    before: &Reading,
    window_seconds: f64,
    seconds: f64,
) -> (HashMap<(u32, u32), f64>, HashMap<u32, f64>) {
    let mut rates = HashMap::new();
    let mut estimated = HashMap::new();
    if window_seconds <= 0.0 {
        return (rates, estimated);
    }
    for (&(pid, tid, probe), &(hits, _)) in now.iter().filter(|(k, _)| is_launch(k.2)) {
        let old = before.get(&(pid, tid, probe)).map_or(0, |v| v.0);
        let new = hits.saturating_sub(old) as f64;
        *rates.entry((pid, tid)).or_insert(0.0) += new / window_seconds;
        *estimated.entry(pid).or_insert(0.0) += new * seconds / window_seconds;
    }
    (rates, estimated)
}

/// Kernels the driver's launch queue holds (the stub's `QUEUE_DEPTH`; "about a thousand" on
/// real drivers).
const QUEUE_DEPTH: u64 = 1024;

/// What a launch window saw of a process's launch queue: the share of the time its threads
/// were held in launches for room, and the share of the window its GPU worked as the queue
/// shows it (`None`: it launched nothing in the window, which then says nothing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueSeen {
    pub held: f64,
    pub busy: Option<f64>,
}

/// Per process whose launches a launch window saw (`window`: the span with every probe
/// attached, ns; `now` against `before`, the counts and waits maps: only windows count
/// launches and time them), from its held launches (`held`: the first one's start and the
/// last one's return, ns). Held: their time over the span they were seen in, at least the
/// window. Busy: the queue was full at the last held launch's return; where fewer kernels
/// were launched in the window than it holds, it never emptied since the window's start (it
/// held more than were launched since), so the GPU worked from the window's start to that
/// return (observed), and after it for as long as the thousand kernels queued take at the
/// pace the window saw kernels complete, no faster than the process launched them between
/// its first and last held launch, and one per held launch's mean wait (inferred); with more
/// launches, at least while the threads were held. A full queue holds launch after launch
/// (each waits for a kernel to end); a thread descheduled in a launch now and then on a busy
/// host is not held by it: unless at least half its launches in the window were held, or its
/// threads were held for half the window (two launches at least), the window shows none of
/// that (0), as one in which it was never held. Pure.
pub fn queue_in_window(
    now: (&Reading, &Reading),
    before: (&Reading, &Reading),
    window: (u64, u64),
    held: &HashMap<u32, (u64, u64)>,
) -> HashMap<u32, QueueSeen> {
    let (start, end) = window;
    let length = end.saturating_sub(start).max(1) as f64;
    // Per process: kernels launched (the counts' hits), launches held and their time (the
    // waits' hits and nanoseconds).
    let mut launched: HashMap<u32, (u64, u64, u64)> = HashMap::new();
    for (&(pid, tid, probe), &(hits, _)) in now.0.iter().filter(|(k, _)| is_launch(k.2)) {
        let old = before.0.get(&(pid, tid, probe)).map_or(0, |v| v.0);
        launched.entry(pid).or_default().0 += hits.saturating_sub(old);
    }
    for (&(pid, tid, probe), &(hits, nanos)) in now.1.iter().filter(|(k, _)| is_launch(k.2)) {
        let old = before
            .1
            .get(&(pid, tid, probe))
            .copied()
            .unwrap_or_default();
        let entry = launched.entry(pid).or_default();
        entry.1 += hits.saturating_sub(old.0);
        entry.2 += nanos.saturating_sub(old.1);
    }
    launched
        .into_iter()
        .map(|(pid, (launches, held_launches, held_ns))| {
            // Held in half its launches, or for half the window: the launches counted and
            // timed are those begun while the window's gate was open, so a queue full
            // throughout holds up most of them (fewer where a thread's launches alternate with
            // other work), and for most of the window.
            let queue_full = held_launches >= 2
                && (2 * held_launches >= launches || 2.0 * held_ns as f64 >= length);
            let (held_share, busy) = match held.get(&pid).filter(|_| queue_full) {
                Some(&(first, last)) => {
                    let span = last.saturating_sub(first) as f64;
                    let held_share = (held_ns as f64 / span.max(length)).min(1.0);
                    // Seen from the window's start to the last return, or its end if later; the
                    // queue, full at the last return, empties no sooner than its kernels
                    // complete at the pace the window saw: no faster than its launches, and
                    // one a held launch's mean wait while held.
                    let seen_until = last.max(end);
                    let pace = (span / launches.max(1) as f64)
                        .max(held_ns as f64 / held_launches.max(1) as f64);
                    let drained = last.saturating_add((pace * QUEUE_DEPTH as f64) as u64);
                    let behind = drained.min(seen_until).saturating_sub(start) as f64
                        / seen_until.saturating_sub(start).max(1) as f64;
                    let busy = if launches < QUEUE_DEPTH {
                        behind.max(held_share)
                    } else {
                        held_share
                    };
                    (held_share, Some(busy))
                }
                None => (0.0, (launches > 0).then_some(0.0)),
            };
            (
                pid,
                QueueSeen {
                    held: held_share,
                    busy,
                },
            )
        })
        .collect()
}

/// Folds one read of the maps into per-process totals (launches as `launches` estimates
/// them), and, against the previous read `seconds` before, the threads that used the driver
/// in between (kernel launches at the rates `launch_rates` last measured) and the bytes each
/// process copied. Pure.
pub fn fold(
    counts: &Reading,
    waits: &Reading,
    before: Option<(&Reading, &Reading, f64)>,
    launch_rates: &HashMap<(u32, u32), f64>,
    launches: &HashMap<u32, f64>,
) -> Vec<ProcessCuda> {
    let mut processes: HashMap<u32, ProcessCuda> = HashMap::new();
    let mut threads: HashMap<(u32, u32), CudaThread> = HashMap::new();
    fn process(processes: &mut HashMap<u32, ProcessCuda>, pid: u32) -> &mut ProcessCuda {
        processes.entry(pid).or_insert_with(|| ProcessCuda {
            pid,
            ..ProcessCuda::default()
        })
    }
    fn totals(processes: &mut HashMap<u32, ProcessCuda>, pid: u32) -> &mut CudaTotals {
        &mut process(processes, pid).totals
    }
    fn thread(
        threads: &mut HashMap<(u32, u32), CudaThread>,
        pid: u32,
        tid: u32,
    ) -> &mut CudaThread {
        threads.entry((pid, tid)).or_insert(CudaThread {
            tid,
            launches_per_second: 0.0,
            wait_ratio: 0.0,
        })
    }
    for (&pid, &estimate) in launches {
        totals(&mut processes, pid).launches = estimate.round() as u64;
    }
    for (&(pid, tid), &rate) in launch_rates {
        if rate > 0.0 {
            thread(&mut threads, pid, tid).launches_per_second += rate;
        }
    }
    for (&(pid, tid, probe), &(hits, bytes)) in counts {
        let Some(counted) = PROBES.get(probe).and_then(|p| p.counted) else {
            continue;
        };
        if matches!(counted, Counted::ToDevice | Counted::ToHost) {
            if let Some((previous, _, seconds)) = before.filter(|b| b.2 > 0.0) {
                let old = previous.get(&(pid, tid, probe)).map_or(0, |v| v.1);
                *process(&mut processes, pid)
                    .copy_bytes_per_second
                    .get_or_insert(0.0) += bytes.saturating_sub(old) as f64 / seconds;
            }
        }
        let totals = totals(&mut processes, pid);
        match counted {
            Counted::Launch => {}
            Counted::GraphLaunch => {
                totals.graph_launches += hits;
                if let Some((previous, _, seconds)) = before.filter(|b| b.2 > 0.0) {
                    let old = previous.get(&(pid, tid, probe)).map_or(0, |v| v.0);
                    if hits > old {
                        thread(&mut threads, pid, tid).launches_per_second +=
                            (hits - old) as f64 / seconds;
                    }
                }
            }
            Counted::ToDevice => {
                totals.copies_to_device += hits;
                totals.bytes_to_device += bytes;
            }
            Counted::ToHost => {
                totals.copies_to_host += hits;
                totals.bytes_to_host += bytes;
            }
            Counted::Collective(op) => {
                totals.collectives[op as usize] += hits;
                totals.collective_bytes[op as usize] += bytes;
            }
        }
    }
    for (&(pid, tid, probe), &(_, nanos)) in waits {
        let Some(kind) = PROBES.get(probe).and_then(|p| p.wait) else {
            continue;
        };
        totals(&mut processes, pid).wait_seconds[kind as usize] += nanos as f64 / 1e9;
        if let Some((_, previous, seconds)) = before.filter(|b| b.2 > 0.0) {
            let old = previous.get(&(pid, tid, probe)).map_or(0, |v| v.1);
            if nanos > old {
                thread(&mut threads, pid, tid).wait_ratio += (nanos - old) as f64 / 1e9 / seconds;
            }
        }
    }
    for ((pid, _), thread) in threads {
        if let Some(process) = processes.get_mut(&pid) {
            process.threads.push(CudaThread {
                wait_ratio: thread.wait_ratio.min(1.0),
                ..thread
            });
        }
    }
    let mut found: Vec<ProcessCuda> = processes.into_values().collect();
    for process in &mut found {
        process.threads.sort_by(|a, b| {
            b.launches_per_second
                .total_cmp(&a.launches_per_second)
                .then(a.tid.cmp(&b.tid))
        });
    }
    found.sort_by_key(|p| p.pid);
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::CudaWait;

    fn number(symbol: &str) -> usize {
        PROBES.iter().position(|p| p.symbol == symbol).unwrap()
    }

    #[test]
    fn totals_add_up_by_kind_and_threads_are_what_changed_since_the_last_read() {
        let launch = number("cuLaunchKernel");
        let graph = number("cuGraphLaunch");
        let to_host = number("cuMemcpyDtoHAsync_v2");
        let stream = number("cuStreamSynchronize");
        let before_counts = Reading::from([((7, 7, launch), (1000, 0)), ((7, 9, launch), (50, 0))]);
        let counts = Reading::from([
            ((7, 7, launch), (1040, 0)),
            ((7, 9, launch), (50, 0)),
            ((7, 9, graph), (4, 0)),
            ((7, 7, to_host), (20, 80)),
        ]);
        let before_waits = Reading::from([((7, 7, stream), (10, 2_000_000_000))]);
        let waits = Reading::from([
            ((7, 7, stream), (30, 3_000_000_000)),
            ((7, 7, to_host), (20, 500_000_000)),
            ((8, 8, stream), (1, 1_000)),
        ]);
        // The launch probes were attached 40 ms of the 2 s: 40 launches then is 1,000 a second,
        // 2,000 over the span.
        let (rates, launches) = launches_between(&counts, &before_counts, 0.04, 2.0);
        assert!((rates[&(7, 7)] - 1000.0).abs() < 1e-6 && rates[&(7, 9)] == 0.0);
        assert!((launches[&7] - 2000.0).abs() < 1e-6);
        let found = fold(
            &counts,
            &waits,
            Some((&before_counts, &before_waits, 2.0)),
            &rates,
            &launches,
        );
        assert_eq!(found.len(), 2);
        let p = &found[0];
        assert_eq!((p.totals.launches, p.totals.graph_launches), (2000, 4));
        assert_eq!((p.totals.copies_to_host, p.totals.bytes_to_host), (20, 80));
        // 80 bytes copied back since the read 2 s before.
        assert_eq!(p.copy_bytes_per_second, Some(40.0));
        assert_eq!(p.totals.wait(CudaWait::Stream), 3.0);
        assert_eq!(p.totals.wait(CudaWait::Copy), 0.5);
        // The main thread waited 1 s in syncs and the whole copy wait it had not had before
        // (0.5 s) of the 2: 0.75; thread 9 launched two graphs a second.
        assert_eq!(p.threads[0].tid, 7);
        assert!((p.threads[0].launches_per_second - 1000.0).abs() < 1e-6);
        assert!((p.threads[0].wait_ratio - 0.75).abs() < 1e-9);
        assert_eq!(
            (p.threads[1].tid, p.threads[1].launches_per_second),
            (9, 2.0)
        );
        // No window in the span: no launch rates, no estimate; the first read has no threads.
        assert_eq!(
            launches_between(&counts, &before_counts, 0.0, 2.0).1.len(),
            0
        );
        let none = HashMap::new();
        assert!(fold(&counts, &waits, None, &none, &HashMap::new())
            .iter()
            .all(|p| p.threads.is_empty() && p.copy_bytes_per_second.is_none()));
    }

    #[test]
    fn a_queue_found_full_shows_the_gpu_busy_since_the_windows_start() {
        let launch = number("cuLaunchKernel");
        let ms = |t: u64| 1_000_000_000 + t * 1_000_000;
        let counts = Reading::from([
            ((7, 7, launch), (100, 0)),
            ((8, 8, launch), (50, 0)),
            ((10, 10, launch), (5, 0)),
        ]);
        let waits = Reading::from([((7, 7, launch), (0, 4_000_000))]);
        // A window attached from t = 0 to 60 ms (times in ms): process 7 launched 40 kernels
        // and was held in 20 of them 36 ms, its held launches from 10 ms (the first's start) to
        // 70 ms (the last's return, past the window: it detaches later); process 8 launched
        // 1,500 (more than the queue holds: it may have emptied and refilled), 1,000 of them
        // held, from 20 to 50; process 9 launched 10, none held; process 10 launched nothing;
        // process 12 launched 100, two of them descheduled over 100 µs on a busy host; process 13
        // launched 500 while the entries were attached, 25 held while the returns were too.
        let now_counts = Reading::from([
            ((7, 7, launch), (140, 0)),
            ((8, 8, launch), (1550, 0)),
            ((9, 9, launch), (10, 0)),
            ((10, 10, launch), (5, 0)),
            ((11, 11, launch), (1000, 0)),
            ((12, 12, launch), (100, 0)),
            ((13, 13, launch), (500, 0)),
        ]);
        let now_waits = Reading::from([
            ((7, 7, launch), (20, 40_000_000)),
            ((8, 8, launch), (1000, 30_000_000)),
            ((11, 11, launch), (600, 1_800_000)),
            ((12, 12, launch), (2, 400_000)),
            ((13, 13, launch), (25, 50_000_000)),
        ]);
        let held = HashMap::from([
            (7, (ms(10), ms(70))),
            (8, (ms(20), ms(50))),
            (11, (ms(2), ms(5))),
            (12, (ms(30), ms(58))),
            (13, (ms(0), ms(60))),
        ]);
        let seen = queue_in_window(
            (&now_counts, &now_waits),
            (&counts, &waits),
            (ms(0), ms(60)),
            &held,
        );
        // 7: held 36 ms of the 60 it was seen in; busy from the window's start to its last
        // held return: the whole 70 ms seen.
        assert!((seen[&7].held - 0.6).abs() < 1e-9, "{:?}", seen[&7]);
        assert_eq!(seen[&7].busy, Some(1.0));
        // 8: held half the window: busy at least that, not shown throughout.
        assert!((seen[&8].held - 0.5).abs() < 1e-9);
        assert_eq!(seen[&8].busy, Some(seen[&8].held));
        // 9: launched with room each time; 10: nothing to tell.
        assert_eq!(
            seen[&9],
            QueueSeen {
                held: 0.0,
                busy: Some(0.0)
            }
        );
        assert_eq!(seen[&10].busy, None);
        // 11: held from 2 to 5 ms, a thousand launches in the window: kernels completing every
        // 3 µs or faster, the full queue drains in 3 ms: busy until 8 ms of the 60.
        let busy = seen[&11].busy.unwrap();
        assert!((busy - 8.072 / 60.0).abs() < 1e-3, "{busy}");
        // 12: two launches held of a hundred is no full queue.
        assert_eq!(
            seen[&12],
            QueueSeen {
                held: 0.0,
                busy: Some(0.0)
            }
        );
        // 13: 500 launches counted while the entry probe was attached, 25 held while the
        // return probe was too (2 ms each, a kernel's time), 50 ms of the 60: a full queue.
        assert!(
            (seen[&13].held - 50.0 / 60.0).abs() < 1e-9,
            "{:?}",
            seen[&13]
        );
    }

    fn key(words: [u32; 4]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    fn value(hits: u64, measured: u64) -> Vec<u8> {
        [hits.to_ne_bytes(), measured.to_ne_bytes()].concat()
    }

    #[test]
    fn keys_and_values_decode_as_the_programs_write_them() {
        let copy = number("cuMemcpyDtoHAsync_v2") as u32;
        assert_eq!(decode_key(&key([7, 9, 3, 0])), Some((7, 9, 3, 0)));
        assert_eq!(decode_value(&value(5, 80)), Some((5, 80)));
        assert_eq!(decode_key(&key([7, 9, 3, 0])[..6]), None);
        assert_eq!(
            decode(&key([7, 9, copy, 0]), &value(5, 80)),
            Some(((7, 9, copy as usize), (5, 80)))
        );
        // A collective's elements become bytes by its datatype: float32 (7) and bfloat16 (9);
        // a datatype NCCL has not counts the call, not its bytes.
        let all_reduce = number("ncclAllReduce") as u32;
        let decoded = |datatype| decode(&key([7, 9, all_reduce, datatype]), &value(2, 1000));
        assert_eq!(decoded(7).unwrap().1, (2, 4000));
        assert_eq!(decoded(9).unwrap().1, (2, 2000));
        assert_eq!(decoded(99).unwrap().1, (2, 0));
    }

    #[test]
    fn collectives_add_up_by_operation() {
        let all_reduce = number("ncclAllReduce");
        let gather = number("ncclAllGather");
        let counts = Reading::from([
            ((7, 8, all_reduce), (4, 400 << 20)),
            ((7, 7, all_reduce), (1, 4)),
            ((7, 8, gather), (2, 64 << 20)),
        ]);
        let found = fold(
            &counts,
            &Reading::new(),
            None,
            &HashMap::new(),
            &HashMap::new(),
        );
        let t = &found[0].totals;
        assert_eq!(t.collectives, [5, 0, 2, 0, 0, 0, 0]);
        assert_eq!(
            t.collective_bytes,
            [(400 << 20) + 4, 0, 64 << 20, 0, 0, 0, 0]
        );
        assert_eq!(t.launches, 0);
    }
}
