//! The host's time between its syncs, against how long each sync held it: how much of the
//! GPU's idle time after a sync the sync itself can have cost.
//!
//! A sync that waited for kernels returns with the GPU's queue empty; the host's time until it
//! hands the GPU kernels again leaves the GPU idle. Without the sync the host would have been
//! as far ahead as the sync held it, the queue that full: that much of the time after it, at
//! most, is the sync's (the counterfactual the analysis charges to sync_stall); the rest the
//! host would have idled the GPU anyway. Kernel launches leave no mark, so the time after a
//! sync is taken up to the thread's next wait, an upper bound of the idle time: a copy that
//! found the queue empty (a pageable upload right after the sync, waiting for its copy only)
//! hands the GPU no kernels, so the sync's credit carries over it, and only a wait that found
//! kernels queued proves the host launched some meanwhile. A host that stops between steps
//! far longer than both the sync's hold and its usual time between syncs (a checkpoint
//! written, an evaluation on the host) pauses its loop's schedule. Pure.

use super::backlog::{COPY_BYTES_PER_S_MIN, SAME_CALL_NS, WAITED_NS};
use super::cadence::{Call, Role, Waiting};
use crate::snapshot::AfterSync;

/// Times between syncs needed to say anything.
const GAPS_MIN: usize = 3;

/// One stretch of host time from a wait's return to the next wait's entry, and the hold it
/// was credited with.
struct Gap {
    host_ns: u64,
    credit_ns: u64,
}

/// How the host's time after the waits of `calls` (oldest first, every thread of a process)
/// splits against how long the waits held it; `None` where fewer than [`GAPS_MIN`] stretches
/// lie between waits. `upload_bytes` is the process's mean upload (an upload that took no
/// longer than its copy found the queue empty).
pub fn after_sync(calls: &[Call], upload_bytes: f64) -> Option<AfterSync> {
    let copy_ns = (upload_bytes / COPY_BYTES_PER_S_MIN * 1e9) as u64;
    // Each thread's open wait: thread, entry, what it waits on.
    let mut open: Vec<(u32, u64, Waiting)> = Vec::new();
    // The last wait's return and the hold credited to the host from there.
    let mut drain: Option<(u64, u64)> = None;
    let mut gaps: Vec<Gap> = Vec::new();
    // Each thread's last upload: its entry and return.
    let mut uploads: Vec<(u32, u64, u64)> = Vec::new();
    let (mut first_ns, mut last_ns) = (None, 0);
    for call in calls {
        match call.role {
            Role::Wait(waiting) => {
                open.retain(|(tid, _, _)| *tid != call.tid);
                open.push((call.tid, call.ns, waiting));
            }
            Role::Returned => {
                let Some(at) = open.iter().position(|(tid, _, _)| *tid == call.tid) else {
                    continue;
                };
                let (_, entry, waiting) = open.swap_remove(at);
                let held = call.ns.saturating_sub(entry);
                if waiting == Waiting::Upload {
                    uploads.retain(|(tid, _, _)| *tid != call.tid);
                    uploads.push((call.tid, entry, call.ns));
                    if held < WAITED_NS {
                        // An asynchronous upload, or one whose sync follows: no wait yet.
                        continue;
                    }
                }
                let left = match drain {
                    Some((since, credit_ns)) if entry >= since => {
                        let host_ns = entry - since;
                        gaps.push(Gap { host_ns, credit_ns });
                        last_ns = entry;
                        credit_ns.saturating_sub(host_ns)
                    }
                    _ => 0,
                };
                // `.to("cuda")`: the copy, then a stream sync at once; together they waited
                // for the copy and whatever was queued before it.
                let upload = uploads.iter().find(|(tid, _, returned)| {
                    *tid == call.tid
                        && (waiting == Waiting::Upload
                            || (waiting == Waiting::Sync
                                && entry.saturating_sub(*returned) <= SAME_CALL_NS))
                });
                let found_kernels = match upload {
                    Some(&(_, upload_entry, _)) => {
                        call.ns.saturating_sub(upload_entry) >= copy_ns + WAITED_NS
                    }
                    None => held >= WAITED_NS,
                };
                drain = Some((call.ns, if found_kernels { held } else { left }));
                first_ns.get_or_insert(call.ns);
            }
            Role::Work | Role::Other => {}
        }
    }
    let total = last_ns.saturating_sub(first_ns?);
    if gaps.len() < GAPS_MIN || total == 0 {
        return None;
    }
    let mut hosts: Vec<u64> = gaps.iter().map(|g| g.host_ns).collect();
    hosts.sort_unstable();
    let usual = hosts[hosts.len() / 2];
    let within: u64 = gaps.iter().map(|g| g.host_ns.min(g.credit_ns)).sum();
    let paused: u64 = gaps
        .iter()
        .map(|g| g.host_ns.saturating_sub(g.credit_ns.max(usual)))
        .sum();
    Some(AfterSync {
        within_hold: within as f64 / total as f64,
        paused: paused as f64 / total as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::super::backlog::tests::{call, MS};
    use super::*;

    /// 30 steps: `loader` ms for the batch, its upload held `upload_ns` (a pinned one returns
    /// at once; a pageable one waits for its copy, 0.3 ms, and for whatever kernels are
    /// queued), `python` ms before and while launching, a sync held 30 ms; after every
    /// `every`th step's sync the host writes a checkpoint for 300 ms.
    fn steps(loader: u64, upload_ns: u64, python: u64, every: u64) -> Vec<Call> {
        steps_synced(loader, upload_ns, 0, python, every)
    }

    /// The same, each upload followed at once by a stream sync held `sync_ns` where not 0
    /// (`.to("cuda")` as the runtime makes it).
    fn steps_synced(
        loader: u64,
        upload_ns: u64,
        sync_ns: u64,
        python: u64,
        every: u64,
    ) -> Vec<Call> {
        let mut calls = Vec::new();
        let mut at = 1_000 * MS;
        for step in 0..30u64 {
            at += loader * MS;
            if step > 0 && step % every == 0 {
                at += 300 * MS;
            }
            calls.push(call(at, Role::Wait(Waiting::Upload)));
            at += upload_ns;
            calls.push(call(at, Role::Returned));
            if sync_ns > 0 {
                at += 30_000;
                calls.push(call(at, Role::Wait(Waiting::Sync)));
                at += sync_ns;
                calls.push(call(at, Role::Returned));
            }
            at += python * MS;
            calls.push(call(at, Role::Wait(Waiting::Download)));
            at += 30 * MS;
            calls.push(call(at, Role::Returned));
        }
        calls
    }

    const PINNED: u64 = 20_000;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-3
    }

    #[test]
    fn a_pause_after_a_sync_beyond_its_hold_is_the_hosts_own() {
        // From the first sync's return to the last one's entry: 29 stretches of 15.02 ms
        // (the pinned upload is no wait), 28 holds of 30 ms, two checkpoints of 300 ms. Within
        // the holds 27 x 15.02 + 2 x 30 ms; paused 2 x (315.02 - 30) ms.
        let paused = after_sync(&steps(5, PINNED, 10, 10), 1.5e6).expect("stretches");
        let total = 29.0 * 15.02 + 28.0 * 30.0 + 600.0;
        assert!(
            close(paused.within_hold, (27.0 * 15.02 + 60.0) / total),
            "{paused:?}"
        );
        assert!(close(paused.paused, 2.0 * 285.02 / total), "{paused:?}");
        // Without the checkpoints, every stretch lies within its hold; nothing paused.
        let steady = after_sync(&steps(5, PINNED, 10, 100), 1.5e6).expect("stretches");
        let total = 29.0 * 15.02 + 28.0 * 30.0;
        assert!(
            close(steady.within_hold, 29.0 * 15.02 / total),
            "{steady:?}"
        );
        assert_eq!(steady.paused, 0.0);
    }

    #[test]
    fn a_copy_that_found_the_queue_empty_hands_over_no_kernels() {
        // `.to("cuda")` from pageable memory right after the loader waits for its 1.5 MB copy
        // only (0.3 ms, under the 3 ms it may take): the host's 10 ms after it still lie
        // within the last sync's hold (from the first upload's return, which has no credit:
        // 10 + 30 ms, then 29 steps of 15.3 and 28 holds).
        let read = after_sync(&steps(5, 300_000, 10, 100), 1.5e6).expect("stretches");
        let total = 40.0 + 29.0 * 15.3 + 28.0 * 30.0;
        assert!(close(read.within_hold, 29.0 * 15.0 / total), "{read:?}");
        // The same copy staged at once and its stream sync waiting 0.27 ms for it.
        let read =
            after_sync(&steps_synced(5, PINNED, 270_000, 10, 100), 1.5e6).expect("stretches");
        let total = 40.0 + 29.0 * 15.32 + 28.0 * 30.0;
        assert!(close(read.within_hold, 29.0 * 15.05 / total), "{read:?}");
        // One that waited 5 ms found kernels queued: the host had launched some, and after
        // it only its own hold counts (5 ms of the 10).
        let read = after_sync(&steps(5, 5 * MS, 10, 100), 1.5e6).expect("stretches");
        let total = 40.0 + 29.0 * 20.0 + 28.0 * 30.0;
        assert!(
            close(read.within_hold, (5.0 + 29.0 * 10.0) / total),
            "{read:?}"
        );
    }

    #[test]
    fn a_loop_that_never_waits_or_seldom_says_nothing() {
        // Pinned uploads only: no wait.
        let uploads: Vec<Call> = steps(5, PINNED, 10, 100)
            .chunks(4)
            .flat_map(|step| step[..2].to_vec())
            .collect();
        assert_eq!(after_sync(&uploads, 1.5e6), None);
        // Two syncs: one stretch between them.
        assert_eq!(after_sync(&steps(5, PINNED, 10, 100)[..8], 1.5e6), None);
    }
}
