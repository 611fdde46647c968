//! Kernels that spin on a word in memory until another agent writes it: what an NCCL kernel
//! does while it waits for its peers. A real driver queues such a kernel like any other; the GPU
//! runs it (utilization 100 %, a few SMs) until the word changes, and the work queued behind it
//! waits. The stub cannot know at launch when the word will be written, so the context is
//! *held*: the spin is booked on the timeline a little ahead of the clock, again and again,
//! while the work launched after it is kept in order; once the word holds the moment the wait
//! ends, the spin is booked to there and the kept work is booked behind it.
//!
//! The word is a u64 of the caller's memory (shared with the peers' processes) holding the
//! CLOCK_MONOTONIC time at which every peer has arrived (0 until then); the kernel then runs
//! its `seconds` more (the transfer). It must stay mapped until the kernel ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use emu_timeline::{Length, Shares};

use super::*;

/// What `sync_point` and `event_point` answer while the point lies behind a held kernel.
pub const HELD: u64 = u64::MAX;
/// How far ahead of the clock the spin is booked, and how often the holds are looked at.
const AHEAD_NS: u64 = 10_000_000;
pub const POLL_NS: u64 = 1_000_000;

/// The work of a held context, in the order the process queued it.
pub(super) enum Later {
    Launch(Option<Handle>, Vec<KernelCost>),
    Record(Handle, Option<Handle>),
    Copy(Option<Handle>, Copy, u64, bool),
    WaitEvent(Option<Handle>, Handle),
}

/// A context whose queue waits behind a spinning kernel.
pub(super) struct Held {
    kernel: KernelCost,
    stream: Option<Handle>,
    /// The spin is booked on the timeline up to here.
    booked_until_ns: u64,
    /// The kept work, each with the moment it was queued: the device runs it from the
    /// spin's end (or its queueing, if later), however late the hold is looked at.
    later: Vec<(u64, Later)>,
}

impl Held {
    /// Kernels kept, for the launch queue's depth.
    pub(super) fn kept_kernels(&self) -> usize {
        self.later
            .iter()
            .map(|(_, l)| match l {
                Later::Launch(_, kernels) => kernels.len(),
                _ => 0,
            })
            .sum()
    }

    pub(super) fn keep(&mut self, now: u64, later: Later) {
        self.later.push((now, later));
    }
}

/// The word a kernel waits on: the moment its wait ends (0: not yet known).
fn word(kernel: &KernelCost) -> u64 {
    // SAFETY: checked non-null and aligned at launch; the caller keeps it mapped until the
    // kernel ends (the module's contract, as a real kernel's flag must stay allocated).
    unsafe { (*(kernel.until_ns as *const AtomicU64)).load(Ordering::Acquire) }
}

/// Whether a kernel's word address can be read.
pub(super) fn valid_word(kernel: &KernelCost) -> bool {
    kernel.flags & UNTIL_WORD == 0
        || (kernel.until_ns != 0
            && kernel
                .until_ns
                .is_multiple_of(std::mem::align_of::<AtomicU64>() as u64))
}

/// How long a kernel runs; `None` for one that waits on a word nobody has written yet.
fn length_of(kernel: &KernelCost) -> Option<Length> {
    let nanos = (kernel.seconds.max(0.0) * 1e9) as u64;
    if kernel.flags & UNTIL_WORD != 0 {
        match word(kernel) {
            0 => None,
            at => Some(Length::Until(at.saturating_add(nanos))),
        }
    } else if kernel.until_ns > 0 {
        Some(Length::Until(kernel.until_ns))
    } else {
        Some(Length::Nanos(nanos))
    }
}

fn shares_of(kernel: &KernelCost) -> Shares {
    Shares {
        sm: kernel.sm,
        occupancy: kernel.occupancy,
        tensor: kernel.tensor,
        dram: kernel.dram,
    }
}

impl Driver {
    /// Books `kernels`, launched at `now`, on `stream` in order, without the launch queue's
    /// limit; a kernel that waits on an unwritten word holds the context, and the rest are
    /// kept behind it. Work queued while the context is held is kept. Returns the end of the
    /// last booked kernel, or [`HELD`].
    pub(super) fn enqueue(
        &mut self,
        now: u64,
        context: Handle,
        stream: Option<Handle>,
        kernels: &[KernelCost],
    ) -> Result<u64, CuResult> {
        let pid = self.pid;
        let mut not_before = match stream {
            Some(s) => self.stream(s)?.last_end_ns,
            None => 0,
        };
        let ctx = self.context_mut(context)?;
        if let Some(held) = ctx.held.as_mut() {
            held.keep(now, Later::Launch(stream, kernels.to_vec()));
            return Ok(HELD);
        }
        if stream.is_none() {
            not_before = not_before.max(ctx.last_end_ns);
        }
        let mut end = not_before;
        let mut starts = Vec::new();
        for (at, kernel) in kernels.iter().enumerate() {
            let flags = kernel.flags & !UNTIL_WORD;
            let length = length_of(kernel);
            let booked = ctx.timeline.locked(|t| {
                let length = length.unwrap_or(Length::Until(now + AHEAD_NS));
                t.book(pid, now, end, length, shares_of(kernel), flags)
            });
            let booked = booked.map_err(|_| CuResult::Unknown)?;
            if kernel.flags & UNTIL_WORD != 0 {
                starts.push((kernel.until_ns, booked.start_ns));
            }
            end = booked.end_ns;
            if length.is_none() {
                let rest = &kernels[at + 1..];
                ctx.held = Some(Held {
                    kernel: *kernel,
                    stream,
                    booked_until_ns: end,
                    later: if rest.is_empty() {
                        Vec::new()
                    } else {
                        vec![(now, Later::Launch(stream, rest.to_vec()))]
                    },
                });
                break;
            }
        }
        ctx.pending.push_back(end);
        ctx.last_end_ns = ctx.last_end_ns.max(end);
        let held = ctx.held.is_some();
        self.started.extend(starts);
        if let Some(s) = stream {
            self.stream_mut(s)?.last_end_ns = end;
        }
        Ok(if held { HELD } else { end })
    }

    /// When the kernel waiting on `word` started on the device, once it is booked (told once:
    /// a word's memory may serve a later kernel).
    pub fn take_start(&mut self, word: u64) -> Option<u64> {
        self.started.remove(&word)
    }

    /// Whether `context` waits behind a held kernel.
    pub fn is_held(&self, context: Handle) -> Result<bool, CuResult> {
        Ok(self.context(context)?.held.is_some())
    }

    /// Moves every hold on: a spin whose word is still 0 is booked further ahead; one whose
    /// word is written ends there (plus its transfer) and the work kept behind it is booked.
    /// Returns whether a context is still held.
    pub fn advance(&mut self) -> bool {
        let now = wait::now_ns();
        for context in 0..self.contexts.len() {
            let _ = self.advance_one(context, now);
        }
        self.contexts.iter().flatten().any(|c| c.held.is_some())
    }

    fn advance_one(&mut self, context: Handle, now: u64) -> Result<(), CuResult> {
        let pid = self.pid;
        let Some(ctx) = self.contexts.get_mut(context).and_then(Option::as_mut) else {
            return Ok(());
        };
        let Some(held) = ctx.held.as_mut() else {
            return Ok(());
        };
        let length = length_of(&held.kernel);
        let until = match length {
            Some(Length::Until(at)) => at,
            _ if held.booked_until_ns >= now + AHEAD_NS / 2 => return Ok(()),
            _ => now + AHEAD_NS,
        };
        let kernel = held.kernel;
        let after = held.booked_until_ns;
        let end = ctx
            .timeline
            .locked(|t| {
                if until > after {
                    // The same kernel going on: from where its booking ended, however late
                    // this look at it comes.
                    let flags = kernel.flags & !UNTIL_WORD;
                    let length = Length::Until(until);
                    t.book(pid, after, after, length, shares_of(&kernel), flags)
                        .end_ns
                } else {
                    // Booked ahead past the end the word gives: cut back, unless other work
                    // was booked behind it meanwhile.
                    t.shorten_last(pid, after, until).unwrap_or(after)
                }
            })
            .map_err(|_| CuResult::Unknown)?;
        held.booked_until_ns = end;
        let stream = held.stream;
        ctx.pending.push_back(end);
        // Cut back: the queue ends where the spin now does (nothing of the held context was
        // booked behind it); else it ends at the later of the two.
        let moved = |last: u64| if last == after { end } else { last.max(end) };
        ctx.last_end_ns = moved(ctx.last_end_ns);
        let released = length.is_some().then(|| ctx.held.take()).flatten();
        if let Some(s) = stream {
            let stream = self.stream_mut(s)?;
            stream.last_end_ns = moved(stream.last_end_ns);
        }
        if let Some(released) = released {
            // The kept work, in order; a kernel of it that holds the context again keeps the
            // rest behind it (each operation keeps itself while the context is held).
            for (queued, later) in released.later {
                let _ = match later {
                    Later::Launch(stream, kernels) => {
                        self.enqueue(queued, context, stream, &kernels).map(drop)
                    }
                    Later::Record(event, stream) => {
                        self.record_event_at(queued, context, event, stream)
                    }
                    Later::Copy(stream, copy, bytes, pinned) => self
                        .queue_copy_at(queued, context, stream, copy, bytes, pinned)
                        .map(drop),
                    Later::WaitEvent(stream, event) => {
                        self.stream_wait_event(context, stream, event)
                    }
                };
            }
        }
        Ok(())
    }
}

/// Whether the thread that moves the holds on runs.
static MOVER: AtomicBool = AtomicBool::new(false);

/// Starts the thread that moves the holds on, unless it runs: it looks at them every
/// millisecond under the driver's lock and ends once none is left (a real driver's own
/// threads do this work on a real GPU).
pub fn move_holds() {
    if MOVER.swap(true, Ordering::AcqRel) {
        return;
    }
    let started = std::thread::Builder::new()
        .name("cuda-holds".into())
        .spawn(|| loop {
            std::thread::sleep(Duration::from_nanos(POLL_NS));
            let mut guard = lock();
            let still = match guard.as_mut() {
                Some(driver) if !driver.forked() => driver.advance(),
                _ => false,
            };
            if !still {
                MOVER.store(false, Ordering::Release);
                return;
            }
        });
    if started.is_err() {
        MOVER.store(false, Ordering::Release);
    }
}
