//! How far behind its host a GPU was when the loop synced, from the syncs' timing: on a device
//! that reports no busy time (a MIG slice) the only clock of the GPU's work the node has.
//!
//! After a sync returns the GPU's queue is empty. The loop then hands it a few steps of work
//! (each step's batch uploaded, its kernels launched — launches are not timed) and syncs again;
//! the sync waits for the work still queued, its backlog. A GPU that keeps up with its host
//! runs dry each step and is behind by at most one step's work when the sync comes, less than
//! a step of the host's; so a sync that waits longer than the span's mean step found a GPU that
//! never ran dry since the span's first work: busy from that work to the sync's return. Other
//! spans count their wait only (the GPU worked at least while the loop waited for it), and
//! where no span shows a backlog there is nothing here beyond the samples in which the loop
//! waited.

use super::cadence::{Call, Role, Waiting};
use crate::snapshot::QueuedSpans;

/// The recent calls the backlog is read from.
pub const BACKLOG_WINDOW_NS: u64 = 10_000_000_000;
/// A copy to the device that returned sooner than this did not wait (an asynchronous one
/// from pinned memory): work handed over, not a sync.
pub(super) const WAITED_NS: u64 = 100_000;

/// The slowest a copy to the device is taken to move (half a gigabyte a second: pageable
/// memory over a PCIe link a few generations down; healthy ones stage at several): an upload
/// that took longer than its bytes at this rate waited for kernels queued before it.
pub(super) const COPY_BYTES_PER_S_MIN: f64 = 0.5e9;

/// A stream or device sync entered this soon after an upload returned, on the same thread, is
/// that upload's (`.to("cuda")` without `non_blocking`: `cudaMemcpyAsync`, then
/// `cudaStreamSynchronize`, back to back: the probes' traps between them, tens of
/// microseconds). A copy to the host is never an upload's: it is the step's own sync
/// (`.item()`), which may follow a pinned upload as soon where the step launches a few
/// kernels, and waits for all of them.
pub(super) const SAME_CALL_NS: u64 = 200_000;

/// Per thread of `calls` (oldest first), the spans in which it handed the GPU nothing while
/// the GPU's queue held work: from a call to the next one where that one is an upload (the
/// batch's) that, with the sync right after it, waited longer than its copy of `upload_bytes`
/// could take, so the kernels queued before it still ran when it was entered. Kernel
/// launches leave no mark, so a span tells only of what launches nothing: the stack samples
/// in it that waited for the loader (the loop cannot compute on a batch before uploading it),
/// which the GPU worked through. Pure.
pub fn queued_spans(calls: &[Call], upload_bytes: f64) -> Vec<QueuedSpans> {
    let copy_ns = (upload_bytes / COPY_BYTES_PER_S_MIN * 1e9) as u64;
    let mut threads: Vec<QueuedSpans> = Vec::new();
    // Per thread (as in `threads`), its upload in progress.
    let mut uploads: Vec<Option<Upload>> = Vec::new();
    for call in calls {
        let at = match threads.iter().position(|t| t.tid == call.tid) {
            Some(at) => at,
            None => {
                threads.push(QueuedSpans {
                    tid: call.tid,
                    latest_ns: call.ns,
                    spans: Vec::new(),
                });
                uploads.push(None);
                threads.len() - 1
            }
        };
        let thread = &mut threads[at];
        let upload = uploads[at].take();
        uploads[at] = match (call.role, upload) {
            (Role::Wait(Waiting::Upload), _) => Some(Upload {
                after: thread.latest_ns,
                entered: call.ns,
                waiting_since: call.ns,
                returned: false,
            }),
            (Role::Returned, Some(upload)) => {
                let waited = call.ns.saturating_sub(upload.waiting_since);
                if waited >= copy_ns + WAITED_NS {
                    thread.spans.push((upload.after, upload.entered));
                    None
                } else {
                    // Its own return: the sync that may follow is still its.
                    (!upload.returned).then_some(Upload {
                        returned: true,
                        waiting_since: call.ns,
                        ..upload
                    })
                }
            }
            (Role::Wait(Waiting::Sync), Some(upload))
                if upload.returned
                    && call.ns.saturating_sub(upload.waiting_since) <= SAME_CALL_NS =>
            {
                Some(Upload {
                    waiting_since: call.ns,
                    ..upload
                })
            }
            _ => None,
        };
        thread.latest_ns = call.ns;
    }
    threads
}

/// A thread's upload of a batch in progress: the thread's call before it, when it entered,
/// when the wait now timed began (the upload's own, or the sync right after it), and whether
/// the upload itself has returned.
#[derive(Clone, Copy)]
struct Upload {
    after: u64,
    entered: u64,
    waiting_since: u64,
    returned: bool,
}

/// One span between two syncs' returns: the queue drained at `drained`, the first work was
/// handed over at `work`, `steps` batches were uploaded, the host entered the next sync at
/// `entered`, which returned at `returned`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Span {
    drained: u64,
    work: u64,
    steps: u32,
    entered: u64,
    returned: u64,
}

impl Span {
    /// Whether the sync waited longer than the span's mean step: the GPU was more than a
    /// step behind and never ran dry since the work began.
    fn backlogged(&self) -> bool {
        let wait = self.returned.saturating_sub(self.entered);
        let span = self.returned.saturating_sub(self.drained);
        self.steps >= 2 && wait * u64::from(self.steps) > span
    }

    /// The time the GPU is known to have worked in the span.
    fn busy_ns(&self) -> u64 {
        if self.backlogged() {
            self.returned.saturating_sub(self.work)
        } else {
            self.returned.saturating_sub(self.entered)
        }
    }
}

/// The share of the time of `calls` (oldest first) the GPU worked as its syncs show it,
/// where at least one sync found it more than a step behind; `None` where none did. Pure.
pub fn backlog_busy(calls: &[Call]) -> Option<f64> {
    let spans = spans(calls);
    if !spans.iter().any(Span::backlogged) {
        return None;
    }
    let total: u64 = spans
        .iter()
        .map(|s| s.returned.saturating_sub(s.drained))
        .sum();
    let busy: u64 = spans.iter().map(Span::busy_ns).sum();
    (total > 0).then(|| (busy as f64 / total as f64).clamp(0.0, 1.0))
}

/// The spans between consecutive syncs whose first work is seen: an upload, a collective or a
/// graph launch after the queue drained, or the drain itself where it was a synchronous upload
/// (the step's kernels follow it at once). A span whose work started unseen (kernel launches
/// only) is left out.
fn spans(calls: &[Call]) -> Vec<Span> {
    let mut spans = Vec::new();
    // The last drain, the first work since and the batches uploaded since.
    let mut drained: Option<(u64, Option<u64>, u32)> = None;
    // Each thread's open wait (a few threads drive a GPU: the loop's, the autograd engine's).
    let mut entered: Vec<(u32, u64, bool)> = Vec::new();
    for call in calls {
        match call.role {
            Role::Work => {
                if let Some((_, work, _)) = &mut drained {
                    work.get_or_insert(call.ns);
                }
            }
            Role::Wait(waiting) => {
                let upload = waiting == Waiting::Upload;
                entered.retain(|(tid, _, _)| *tid != call.tid);
                entered.push((call.tid, call.ns, upload));
                if let (true, Some((_, work, _))) = (upload, &mut drained) {
                    work.get_or_insert(call.ns);
                }
            }
            Role::Returned => {
                let Some(open) = entered.iter().position(|(tid, _, _)| *tid == call.tid) else {
                    continue;
                };
                let (_, entry, upload) = entered.swap_remove(open);
                if upload && call.ns.saturating_sub(entry) < WAITED_NS {
                    // An asynchronous upload: a step's batch, no sync.
                    if let Some((_, _, steps)) = &mut drained {
                        *steps += 1;
                    }
                    continue;
                }
                if let Some((drain, Some(work), steps)) = drained {
                    spans.push(Span {
                        drained: drain,
                        work: work.max(drain),
                        steps,
                        entered: entry.max(work),
                        returned: call.ns,
                    });
                }
                // A synchronous upload starts the next span's first step.
                drained = Some((call.ns, upload.then_some(call.ns), u32::from(upload)));
            }
            Role::Other => {}
        }
    }
    spans
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::source::cuda) const MS: u64 = 1_000_000;

    /// A call of thread 1 at `ns`.
    pub(in crate::source::cuda) fn call(ns: u64, role: Role) -> Call {
        Call {
            ns,
            tid: 1,
            kind: 0,
            once_a_step: false,
            role,
            peer: None,
        }
    }

    /// A loop that reads its loss every `every` steps: each step waits `loader` ms for its
    /// batch, uploads it from pinned memory (the GPU's `gpu` ms of work queued behind what it
    /// has), runs `python` ms of host work, and every `every` steps syncs, returning when the
    /// GPU has done all of it. Returns the calls and the GPU's busy share.
    fn loop_of(steps: u64, every: u64, loader: u64, python: u64, gpu: u64) -> (Vec<Call>, f64) {
        let (mut at, mut gpu_free, mut busy) = (1_000 * MS, 0, 0);
        let mut calls = Vec::new();
        let start = at;
        for step in 1..=steps {
            at += loader * MS;
            calls.push(call(at, Role::Wait(Waiting::Upload)));
            calls.push(call(at + 20_000, Role::Returned));
            let begins = at.max(gpu_free);
            gpu_free = begins + gpu * MS;
            busy += gpu * MS;
            at += python * MS;
            if step % every == 0 {
                calls.push(call(at, Role::Wait(Waiting::Sync)));
                at = at.max(gpu_free) + 50_000;
                calls.push(call(at, Role::Returned));
            }
        }
        (calls, busy as f64 / (at - start) as f64)
    }

    #[test]
    fn a_gpu_more_than_a_step_behind_at_the_sync_worked_since_the_spans_first_upload() {
        // 40 ms of GPU work a step against 35 of the host's, read every ten steps: the GPU
        // falls 5 ms further behind each step, the sync waits ~50 ms, more than the mean step.
        let (calls, truth) = loop_of(60, 10, 5, 30, 40);
        let busy = backlog_busy(&calls).expect("behind");
        assert!(
            truth > 0.85 && (busy - truth).abs() < 0.03,
            "{busy} against {truth}"
        );
    }

    #[test]
    fn a_gpu_that_keeps_up_shows_no_backlog() {
        // 20 ms of GPU work against 35 of the host's: at each sync it is behind by at most the
        // last step's 20 ms, less than the step; nothing beyond the waits.
        let (calls, _) = loop_of(60, 10, 5, 30, 20);
        assert_eq!(backlog_busy(&calls), None);
        // A sync every step: one step a span says nothing about falling behind.
        let (calls, _) = loop_of(60, 1, 5, 30, 40);
        assert_eq!(backlog_busy(&calls), None);
    }

    #[test]
    fn asynchronous_uploads_are_work_and_spans_without_seen_work_are_left_out() {
        let (calls, _) = loop_of(30, 10, 5, 30, 40);
        let spans = spans(&calls);
        // The first sync has no drain before it; the other two spans hold ten uploads each.
        assert_eq!(spans.len(), 2);
        assert!(spans.iter().all(|s| s.steps == 10 && s.backlogged()));
        // Syncs only, their work launched unseen: no span.
        let syncs: Vec<Call> = (0..30)
            .flat_map(|n| {
                [
                    call(n * 50 * MS, Role::Wait(Waiting::Sync)),
                    call(n * 50 * MS + 30 * MS, Role::Returned),
                ]
            })
            .collect();
        assert!(super::spans(&syncs).is_empty());
    }

    #[test]
    fn a_synchronous_upload_drains_the_queue_and_begins_the_next_step() {
        // `.to("cuda")` of pageable memory each step, `.item()` every fifth: the upload waits
        // for the queue, then the step's kernels follow it at once.
        let mut calls = Vec::new();
        let mut at = 1_000 * MS;
        for step in 1..=20u64 {
            at += 5 * MS; // the loader
            calls.push(call(at, Role::Wait(Waiting::Upload)));
            at += 2 * MS;
            calls.push(call(at, Role::Returned));
            at += 10 * MS;
            if step % 5 == 0 {
                calls.push(call(at, Role::Wait(Waiting::Sync)));
                at += 30 * MS;
                calls.push(call(at, Role::Returned));
            }
        }
        // Each span begun by an upload's return holds that one step, its work from the
        // return on; the spans after `.item()` begin at the next upload, which ends them.
        let spans = spans(&calls);
        let after_uploads: Vec<&Span> = spans.iter().filter(|s| s.work == s.drained).collect();
        assert_eq!(after_uploads.len(), 20);
        assert_eq!(spans.len(), 23);
        assert!(after_uploads.iter().all(|s| s.steps == 1));
        assert!(spans.iter().all(|s| !s.backlogged()));
    }

    /// `.to("cuda")` of a pageable 1.5 MB batch each step, `gpu_behind` ms of the queued
    /// kernels still running at each upload's entry; the copy takes 0.3 ms.
    fn pageable_uploads(gpu_behind: u64) -> Vec<Call> {
        let mut calls = Vec::new();
        let mut at = 1_000 * MS;
        for _ in 0..10 {
            at += 30 * MS; // the step's launches, then its loader
            calls.push(call(at, Role::Wait(Waiting::Upload)));
            at += gpu_behind * MS + 300_000;
            calls.push(call(at, Role::Returned));
        }
        calls
    }

    #[test]
    fn an_upload_that_waited_for_kernels_ends_a_span_the_gpu_worked_through() {
        let calls = pageable_uploads(20);
        let threads = queued_spans(&calls, 1.5e6);
        assert_eq!(threads.len(), 1);
        let thread = &threads[0];
        assert_eq!(thread.latest_ns, calls.last().unwrap().ns);
        // From each upload's return to the next one's entry (the first has no call before
        // it: its span starts at itself, empty).
        assert_eq!(thread.spans.len(), 10);
        assert_eq!(thread.spans[1], (calls[1].ns, calls[2].ns));
        // A sample in the loader wait before the third upload lies in a span; one after the
        // last call is not resolved yet.
        assert_eq!(thread.holds(calls[4].ns - MS), Some(true));
        assert_eq!(thread.holds(calls[4].ns + MS), Some(false));
        assert_eq!(thread.holds(thread.latest_ns + MS), None);
    }

    #[test]
    fn an_upload_then_its_sync_that_waited_for_kernels_end_a_span_too() {
        // PyTorch's `.to("cuda")`: `cudaMemcpyAsync` returns once staged, then
        // `cudaStreamSynchronize` waits for the queue. The span still ends at the upload.
        let mut calls = Vec::new();
        let mut at = 1_000 * MS;
        for _ in 0..5 {
            at += 30 * MS;
            calls.push(call(at, Role::Wait(Waiting::Upload)));
            at += 200_000;
            calls.push(call(at, Role::Returned));
            at += 30_000;
            calls.push(call(at, Role::Wait(Waiting::Sync)));
            at += 20 * MS;
            calls.push(call(at, Role::Returned));
        }
        let threads = queued_spans(&calls, 1.5e6);
        assert_eq!(threads[0].spans.len(), 5);
        assert_eq!(threads[0].spans[1], (calls[3].ns, calls[4].ns));
        // A sync long after the upload returned (kernels launched between) is not its.
        let late: Vec<Call> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| Call {
                ns: c.ns + if i % 4 >= 2 { 5 * MS } else { 0 },
                ..*c
            })
            .collect();
        assert!(queued_spans(&late, 1.5e6)[0].spans.is_empty());
        // Nor is a copy to the host that follows as soon: a pinned upload, a few kernels
        // launched within microseconds, then the step's `.item()` waiting for them all.
        let item: Vec<Call> = calls
            .iter()
            .map(|c| match c.role {
                Role::Wait(Waiting::Sync) => call(c.ns, Role::Wait(Waiting::Download)),
                _ => *c,
            })
            .collect();
        assert!(queued_spans(&item, 1.5e6)[0].spans.is_empty());
    }

    #[test]
    fn an_upload_that_took_its_copy_time_only_found_the_queue_empty() {
        // The GPU kept up: each upload waits for nothing but its copy.
        let threads = queued_spans(&pageable_uploads(0), 1.5e6);
        assert!(threads[0].spans.is_empty());
        // A batch so large that its copy alone could take the 20 ms proves nothing either.
        let threads = queued_spans(&pageable_uploads(20), 20e6);
        assert!(threads[0].spans.is_empty());
        // Nor does a sync that is not an upload (the loop may launch between it and its
        // loader's wait).
        let syncs: Vec<Call> = pageable_uploads(20)
            .into_iter()
            .map(|c| match c.role {
                Role::Wait(_) => call(c.ns, Role::Wait(Waiting::Sync)),
                _ => c,
            })
            .collect();
        assert!(queued_spans(&syncs, 1.5e6)[0].spans.is_empty());
    }

    #[test]
    fn each_thread_closes_its_own_wait() {
        // The engine's thread (2) enters a wait while the loop's (1) is in one: each return
        // closes its own thread's wait, and the loop's sync still ends the span.
        let mut calls = loop_of(30, 10, 5, 30, 40).0;
        let last = calls.len() - 1;
        let returned = calls[last].ns;
        calls.insert(
            last,
            Call {
                tid: 2,
                ..call(returned - MS, Role::Wait(Waiting::Sync))
            },
        );
        calls.push(Call {
            tid: 2,
            ..call(returned + MS, Role::Returned)
        });
        let spans = spans(&calls);
        assert_eq!(spans[1].returned, returned);
    }
}
