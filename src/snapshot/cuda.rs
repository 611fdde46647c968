//! What each GPU process asked of the CUDA driver, from uprobes on the driver it maps.

/// Where a thread waited inside the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CudaWait {
    /// `cuStreamSynchronize` (`.item()`, `.cpu()`, a blocking copy's stream sync).
    Stream,
    /// `cuCtxSynchronize` (`torch.cuda.synchronize()`).
    Device,
    /// `cuEventSynchronize`.
    Event,
    /// Inside a copy to or from the host (a copy into pageable memory returns once done).
    Copy,
}

impl CudaWait {
    /// Every kind, in label order.
    pub const ALL: [CudaWait; 4] = [
        CudaWait::Stream,
        CudaWait::Device,
        CudaWait::Event,
        CudaWait::Copy,
    ];

    /// The `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            CudaWait::Stream => "stream",
            CudaWait::Device => "device",
            CudaWait::Event => "event",
            CudaWait::Copy => "copy",
        }
    }
}

/// An NCCL operation, as the probes on `libnccl.so*` count it: a collective, or one side of a
/// point-to-point transfer (`ncclSend`, `ncclRecv`: a pipeline's stages, MoE's all-to-all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Collective {
    AllReduce,
    ReduceScatter,
    AllGather,
    Broadcast,
    Reduce,
    Send,
    Recv,
}

impl Collective {
    /// Every operation, in label order.
    pub const ALL: [Collective; 7] = [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Send,
        Collective::Recv,
    ];

    /// The `op` label.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllGather => "all_gather",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::Send => "send",
            Collective::Recv => "recv",
        }
    }

    /// One side of a point-to-point transfer: its wait is for one peer, not the whole
    /// communicator, and NCCL's RAS does not count it.
    pub fn is_point_to_point(self) -> bool {
        matches!(self, Collective::Send | Collective::Recv)
    }
}

/// Totals of one process (or thread) since its probes were attached.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CudaTotals {
    /// Kernel launches (`cuLaunchKernel`, `cuLaunchKernelEx`).
    pub launches: u64,
    /// CUDA graph launches (`cuGraphLaunch`: a whole captured step each).
    pub graph_launches: u64,
    /// Copies host to device, and their bytes.
    pub copies_to_device: u64,
    pub bytes_to_device: u64,
    /// Copies device to host, and their bytes.
    pub copies_to_host: u64,
    pub bytes_to_host: u64,
    /// Seconds spent inside driver waits, by kind ([`CudaWait::ALL`] order).
    pub wait_seconds: [f64; 4],
    /// NCCL collectives issued and the bytes of their buffers, by operation
    /// ([`Collective::ALL`] order): enqueued, not completed (NCCL returns at once).
    pub collectives: [u64; Collective::ALL.len()],
    pub collective_bytes: [u64; Collective::ALL.len()],
}

impl CudaTotals {
    pub fn wait(&self, kind: CudaWait) -> f64 {
        self.wait_seconds[kind as usize]
    }

    /// Every wait together.
    pub fn waited(&self) -> f64 {
        self.wait_seconds.iter().sum()
    }

    /// Whether any NCCL point-to-point transfer was issued.
    pub fn issued_point_to_point(&self) -> bool {
        Collective::ALL
            .iter()
            .zip(self.collectives)
            .any(|(op, n)| op.is_point_to_point() && n > 0)
    }
}

/// One thread that used the driver over the last interval.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaThread {
    pub tid: u32,
    /// Kernel and graph launches per second.
    pub launches_per_second: f64,
    /// Share of the interval the thread spent inside driver waits.
    pub wait_ratio: f64,
}

/// A GPU process at the CUDA boundary.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessCuda {
    pub pid: u32,
    /// Since its probes were attached.
    pub totals: CudaTotals,
    /// Bytes it copied to and from the device per second over the last interval (the PCIe
    /// link's load from this process; `None` on the first read).
    pub copy_bytes_per_second: Option<f64>,
    /// The threads that launched or waited over the last interval, busiest launcher first:
    /// the threads that drive the GPU (empty on the first read).
    pub threads: Vec<CudaThread>,
    /// How long the thread of the process longest inside a driver wait has been in it, in
    /// seconds, at the read (`None`: no thread waits).
    pub waiting_seconds: Option<f64>,
    /// How long a thread of the process has been inside an NCCL call creating a
    /// communicator (`ncclCommInitRank*`, `ncclCommSplit`), in seconds, at the read (`None`:
    /// none is, or its call began before the probes were attached: an entry is seen only as
    /// it happens). It returns once every rank of the communicator has called it.
    pub creating_communicator_seconds: Option<f64>,
    /// How long its driver has been probed without one call from it seen, in seconds (`None`
    /// once one was). A process stuck inside a call it began before the probes were attached
    /// (a rank's first sync, within a second of its first allocation) shows none at all.
    pub silent_seconds: Option<f64>,
    /// The last NCCL collective it issued, and how many seconds before the read (`None`:
    /// none since its probes were attached).
    pub last_collective: Option<(Collective, f64)>,
    /// Its loop's step, from the cadence of its syncs, copies and collectives (`None`: no
    /// repeating step found yet).
    pub step: Option<Step>,
    /// The share of the last seconds its GPU worked for it as its syncs show it, where one
    /// found the GPU more than a step of the loop behind (it never ran dry since that span's
    /// work began: source::cuda::backlog; `None`: no sync did).
    pub backlog_busy: Option<f64>,
    /// How its host's time between its syncs split against how long each had held it, over
    /// the last seconds (`None`: too few syncs).
    pub after_sync: Option<AfterSync>,
    /// Per thread that called the driver over the last seconds, the spans in which its GPU
    /// worked through what launches nothing (source::cuda::backlog::queued_spans): what the
    /// stack sampler asks of its samples in a loader wait.
    pub queued_spans: Vec<QueuedSpans>,
    /// NCCL point-to-point transfers (sends and receives) it issued a step, over the last
    /// seconds: a pipeline stage's microbatches (`None`: no step found).
    pub transfers_per_step: Option<f64>,
    /// How many ranks its NCCL sends went to over the last seconds: two at most for a
    /// pipeline stage, every rank of the group for an all-to-all (`None`: no send seen).
    pub send_peers: Option<u32>,
    /// The share of its time its threads spent in kernel launches that waited for room in the
    /// driver's launch queue (the GPU a thousand kernels behind), as the last launch window
    /// timed them (`None`: no window has seen it launch).
    pub launch_queue_full: Option<f64>,
    /// The share of the last launch window its GPU worked as its launch queue showed it: from
    /// the window's start to its last launch held for room (the queue full then, and fewer
    /// launches since the start than it holds, so it never emptied), 0 where none was held
    /// (`None`: it launched nothing in that window, which then tells nothing).
    pub queue_busy: Option<f64>,
}

/// How a GPU process's host time between its syncs split, as shares of the time read
/// (source::cuda::after_sync).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AfterSync {
    /// Within as long as each sync had held the host while the GPU worked: a loop without the
    /// sync would have been that far ahead of the GPU, which would have had work queued (an
    /// upper bound of the idle time the syncs cost).
    pub within_hold: f64,
    /// Beyond both each sync's hold and the loop's usual time between syncs: the host's
    /// pauses between steps (a checkpoint written, an evaluation on the host), in which its
    /// loop's schedule stopped.
    pub paused: f64,
}

/// One thread's spans from a call to the next where that next one is the batch's upload and
/// waited for kernels queued before it: the GPU's queue held work through the span, and the
/// thread handed it nothing marked (times in CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueuedSpans {
    pub tid: u32,
    /// Its latest call: a sample taken before it lies in a span or in none.
    pub latest_ns: u64,
    /// (after, until]: from the call before the upload to the upload's entry.
    pub spans: Vec<(u64, u64)>,
}

impl QueuedSpans {
    /// Whether the thread's sample at `ns` lay in a span; `None` while the thread has not
    /// called since (the span it may lie in is not over).
    pub fn holds(&self, ns: u64) -> Option<bool> {
        (ns < self.latest_ns).then(|| {
            self.spans
                .iter()
                .any(|&(after, until)| after < ns && ns <= until)
        })
    }
}

/// A GPU process's training step, timed from outside (source::cuda::cadence).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The mean step of the last window, in seconds; the step in progress instead, once it
    /// has lasted longer (a stalled or hung loop's grows).
    pub seconds: f64,
    /// The shortest mean step of any window of the process so far: its own best pace.
    pub best_seconds: f64,
}

impl Step {
    /// Share of its step the process loses against its own best pace: 0 at its best, 0.5
    /// when a step takes twice as long.
    pub fn behind_best(&self) -> f64 {
        if self.seconds <= 0.0 {
            return 0.0;
        }
        (1.0 - self.best_seconds / self.seconds).clamp(0.0, 1.0)
    }
}

impl ProcessCuda {
    /// The thread that drives the GPU where the main thread does not (the training function
    /// on a thread of its own, as Ray Train runs it), while the main thread neither launched
    /// nor waited over the interval: the one that waits for the GPU the most (the loop's own
    /// syncs gate its progress; the autograd engine's thread launches the backward but does
    /// not wait; launches are counted in short windows, and a few a second may show none),
    /// else the busiest launcher. `None` while the main thread drives it, or while
    /// nothing was seen.
    pub fn driving_thread(&self) -> Option<u32> {
        if self.threads.iter().any(|t| t.tid == self.pid) {
            return None;
        }
        let waiter = self
            .threads
            .iter()
            .filter(|t| t.wait_ratio > 0.0)
            .max_by(|a, b| a.wait_ratio.total_cmp(&b.wait_ratio));
        waiter
            .or_else(|| self.threads.iter().find(|t| t.launches_per_second > 0.0))
            .map(|t| t.tid)
    }

    /// Share of the last interval thread `tid` spent inside driver waits: 0 for a thread that
    /// did not wait (and on the source's first read, which has no interval yet).
    pub fn thread_waited(&self, tid: u32) -> f64 {
        let thread = self.threads.iter().find(|t| t.tid == tid);
        thread.map_or(0.0, |t| t.wait_ratio)
    }
}

/// How recently a process must have issued a collective for its waits to count as waits for
/// it, in seconds (two reads at the default interval).
const RECENT_COLLECTIVE_S: f64 = 2.0;

impl ProcessCuda {
    /// Share of the last interval the thread that drives the GPU spent inside driver waits,
    /// where the process issued an NCCL collective lately (`None` where it issued none): NCCL
    /// returned at once, so the host meets the collective's wait at its next sync, and those
    /// waits include it.
    pub fn collective_wait_ratio(&self) -> Option<f64> {
        // A wait begun after the last collective and still going on (timed only when it
        // returns) is the collective's: the whole interval, once it has lasted that long.
        let stuck = self
            .driver_wait()
            .is_some_and(|w| w.after.is_some() && w.seconds >= RECENT_COLLECTIVE_S);
        if stuck {
            return Some(1.0);
        }
        let recent = self
            .last_collective
            .is_some_and(|(_, ago)| ago <= RECENT_COLLECTIVE_S);
        if !recent {
            return None;
        }
        let tid = self.driving_thread().unwrap_or(self.pid);
        let waited = self.threads.iter().find(|t| t.tid == tid);
        Some(waited.map_or(0.0, |t| t.wait_ratio))
    }
}

/// A GPU process's thread inside a CUDA driver wait now (the CUDA probes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DriverWait {
    /// How long it has waited, in seconds.
    pub seconds: f64,
    /// The NCCL collective the process issued last, where it issued it before the wait began
    /// (the wait is then, at least in part, for the collective: NCCL returned at once).
    pub after: Option<Collective>,
}

impl ProcessCuda {
    /// The wait a thread of it is inside now, tied to the collective issued before it.
    pub fn driver_wait(&self) -> Option<DriverWait> {
        let seconds = self.waiting_seconds?;
        let after = self
            .last_collective
            .filter(|(_, ago)| *ago >= seconds)
            .map(|(op, _)| op);
        Some(DriverWait { seconds, after })
    }
}

/// What the CUDA probes saw of a process at one moment (a stack sample's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DriverView {
    /// The sampled thread (the main one, or the one followed) was inside a driver wait.
    pub thread_waits: bool,
    /// Another of its threads was (the autograd engine's, a pin-memory thread's).
    pub other_waits: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(threads: &[(u32, f64, f64)]) -> ProcessCuda {
        ProcessCuda {
            pid: 10,
            totals: CudaTotals::default(),
            threads: threads
                .iter()
                .map(|&(tid, launches_per_second, wait_ratio)| CudaThread {
                    tid,
                    launches_per_second,
                    wait_ratio,
                })
                .collect(),
            ..ProcessCuda::default()
        }
    }

    #[test]
    fn waits_count_for_collectives_issued_lately_or_begun_after_the_last_one() {
        let mut p = process(&[(10, 0.0, 0.4)]);
        assert_eq!(p.collective_wait_ratio(), None);
        p.last_collective = Some((Collective::AllReduce, 1.0));
        assert_eq!(p.collective_wait_ratio(), Some(0.4));
        // Long ago, and the thread waits in a wait begun before it: not the collective's.
        p.last_collective = Some((Collective::AllReduce, 30.0));
        p.waiting_seconds = Some(40.0);
        assert_eq!(p.collective_wait_ratio(), None);
        // In one wait ever since the collective (a hang): all of the time.
        p.waiting_seconds = Some(25.0);
        assert_eq!(p.collective_wait_ratio(), Some(1.0));
    }

    #[test]
    fn the_thread_followed_is_the_launcher_while_the_main_thread_touches_no_cuda() {
        // Ray Train: the main thread joins, thread 12 launches and waits.
        assert_eq!(process(&[(12, 900.0, 0.4)]).driving_thread(), Some(12));
        // The loop's thread, which waits (its launches unseen in this window), is followed
        // rather than the engine's thread that launches its backward.
        assert_eq!(
            process(&[(14, 1500.0, 0.0), (12, 0.0, 0.4)]).driving_thread(),
            Some(12)
        );
        // Nobody waits (no sync in the step): the busiest launcher.
        assert_eq!(
            process(&[(14, 1500.0, 0.0), (12, 900.0, 0.0)]).driving_thread(),
            Some(14)
        );
        // The autograd engine's thread launches more than the main thread, which waits: the
        // main thread stays sampled.
        assert_eq!(
            process(&[(11, 1200.0, 0.0), (10, 0.0, 0.5)]).driving_thread(),
            None
        );
        assert_eq!(process(&[]).driving_thread(), None);
    }
}
