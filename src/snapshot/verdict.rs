//! What the analysis concludes, as plain data: per GPU and bottleneck kind a score, its
//! evidence and whether it is active, the primary verdict, and the window figures behind them.
//! Part of the snapshot (which carries the verdicts of its tick): the data model has one home
//! and depends on no stage; `analysis` computes these values, `exposition` and `report` show
//! them.

use super::{PerCause, Signal, WindowFigures};

/// The bottleneck kinds of the taxonomy, in report order (what each means, its evidence and
/// its rules: `analysis::kinds`, one file per kind; docs/verdicts.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Storage cannot feed the input pipeline.
    DataIo,
    /// CPU preprocessing is too slow.
    DataCpu,
    /// The main training thread is the bottleneck.
    HostBound,
    /// CPU-GPU synchronisation serialises the pipeline.
    SyncStall,
    /// Busy-looking GPU with mostly empty SMs.
    KernelEfficiency,
    /// Device memory near full.
    MemoryPressure,
    /// Waiting on the other GPUs of the job or on links.
    Communication,
    /// Someone else takes the resources.
    Contention,
    /// Clocks held down.
    Throttling,
    /// The device is failing.
    Hardware,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 10] = [
        Kind::DataIo,
        Kind::DataCpu,
        Kind::HostBound,
        Kind::SyncStall,
        Kind::KernelEfficiency,
        Kind::MemoryPressure,
        Kind::Communication,
        Kind::Contention,
        Kind::Throttling,
        Kind::Hardware,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Kind::DataIo => "data_io",
            Kind::DataCpu => "data_cpu",
            Kind::HostBound => "host_bound",
            Kind::SyncStall => "sync_stall",
            Kind::KernelEfficiency => "kernel_efficiency",
            Kind::MemoryPressure => "memory_pressure",
            Kind::Communication => "communication",
            Kind::Contention => "contention",
            Kind::Throttling => "throttling",
            Kind::Hardware => "hardware",
        }
    }
}

/// One input of a rule: its window value, the threshold and how strongly it counted.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    /// The input.
    pub signal: Signal,
    /// Window value.
    pub value: f64,
    /// Threshold it is compared with.
    pub threshold: f64,
    /// Strength in 0..1 (0.5 at the threshold).
    pub strength: f64,
    /// What a categorical fact names (e.g. the other processes on the GPU); empty otherwise.
    pub detail: String,
}

/// A kind's score over the current window, before hysteresis.
#[derive(Debug, Clone, PartialEq)]
pub struct KindScore {
    /// The kind.
    pub kind: Kind,
    /// 0..1, or `None` when an input the rule needs is missing (unknown, never guessed).
    pub score: Option<f64>,
    /// The inputs that decided it.
    pub evidence: Vec<Evidence>,
}

/// What the analysis says about one kind on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct KindVerdict {
    /// The score and its evidence.
    pub scored: KindScore,
    /// Active after hysteresis.
    pub active: bool,
    /// On what the score rests.
    pub basis: Basis,
    /// Share of the window's GPU time this kind cost (idle time it explains, or busy time it
    /// wasted); `None` where it cannot be measured (memory pressure, hardware) or is unknown.
    pub cost: Option<f64>,
}

/// On what a verdict rests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Basis {
    /// Seen directly: where the training loop's main thread was (its Python stacks), or a
    /// fact the device or the driver reports (throttle reasons, errors, memory, per-process
    /// GPU work, link state).
    Observed,
    /// Deduced from counters alone (CPU, disk, process states): no stacks, or too few samples.
    #[default]
    Inferred,
}

impl Basis {
    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Observed => "observed",
            Basis::Inferred => "inferred",
        }
    }
}

/// The causes lost GPU time is attributed to: the kinds whose cost is measured, plus what no
/// cause explains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// A bottleneck kind.
    Kind(Kind),
    /// Idle time no observation or counter explains.
    Unexplained,
}

impl Cause {
    /// Every cause, in label order: the idle-time kinds, the busy-time kinds, unexplained.
    pub const ALL: [Cause; 9] = [
        Cause::Kind(Kind::DataIo),
        Cause::Kind(Kind::DataCpu),
        Cause::Kind(Kind::HostBound),
        Cause::Kind(Kind::SyncStall),
        Cause::Kind(Kind::Communication),
        Cause::Kind(Kind::Contention),
        Cause::Kind(Kind::KernelEfficiency),
        Cause::Kind(Kind::Throttling),
        Cause::Unexplained,
    ];

    /// The `cause` label value.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Kind(kind) => kind.name(),
            Cause::Unexplained => "unexplained",
        }
    }
}

/// Where the window's GPU time went that did no useful work for the GPU's main job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LostTime {
    /// Observed when the main thread's stacks had enough samples, else inferred.
    pub basis: Basis,
    /// Share of the window the GPU ran no work.
    pub idle: f64,
    /// Share of the window's time per cause, idle time split by what
    /// the job was doing, plus busy time wasted (empty SMs, held-down clocks) or taken by other
    /// processes on the GPU.
    pub shares: PerCause<f64>,
    /// The part of communication's share that is busy time: the GPU spinning in collectives'
    /// kernels, whose empty SMs are theirs, not the job's kernels'.
    pub collective_busy: f64,
    /// Where a starved loader's input comes from, when the loader side explains idle time.
    pub input: Option<InputSource>,
    /// Why the split is what it is, a part each, with its numbers (`analysis::text` says
    /// each in a sentence for the report).
    pub reasons: Vec<Reason>,
}

impl LostTime {
    /// The share of the window lost to `cause`.
    pub fn share(&self, cause: Cause) -> f64 {
        self.shares[cause]
    }

    /// Total share of the window lost.
    pub fn total(&self) -> f64 {
        self.shares.total()
    }

    /// Whether the split starts from a busy fraction the loop's waits showed, not one the
    /// device reported: its shares are upper bounds.
    pub fn busy_estimated(&self) -> bool {
        self.reasons
            .iter()
            .any(|r| matches!(r, Reason::BusyFromSyncs { .. }))
    }
}

/// One part of a lost-time split and the figures behind it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The main thread waited for the GPU in `seen` of its samples; `drained`: the share of
    /// the loop's Python then charged to the sync (it ran on the queue the sync drained).
    Synchronizing {
        /// Share of the samples.
        seen: f64,
        /// Share of the Python the GPU idled in that a sync had drained the queue for, where
        /// some was.
        drained: Option<f64>,
    },
    /// The main thread waited for its peers in collectives in `seen` of its samples.
    InCollectives {
        /// Share of the samples.
        seen: f64,
    },
    /// The main thread ran the loop's own Python in `seen` of its samples, waiting for CPUs
    /// others took `waiting_for_others` of that time.
    Python {
        /// Share of the samples.
        seen: f64,
        /// Share of that time spent waiting for a CPU because of others, where some was.
        waiting_for_others: Option<f64>,
    },
    /// The main thread loads its own data (no loader workers), computing, in `seen` of its
    /// samples.
    LoadsItsOwnData {
        /// Share of the samples.
        seen: f64,
    },
    /// The main thread waited for its loader in `seen` of its samples, and what its workers'
    /// time went to (each a share of it).
    LoaderWait {
        /// Share of the samples.
        seen: f64,
        /// Workers.
        workers: f64,
        /// Computing.
        computing: f64,
        /// The part of computing in system calls.
        in_kernel: f64,
        /// Waiting for a CPU.
        waiting_for_cpu: f64,
        /// The share of that wait others' processes caused, where they caused some.
        others_caused: Option<f64>,
        /// Blocked (uninterruptible).
        blocked: f64,
        /// Sleeping.
        sleeping: f64,
        /// The part of the sleep seen waiting for input (a socket, a file) in their system
        /// calls; `None` where those cannot be read (the sleep is then taken for input).
        asleep_on_input: Option<f64>,
    },
    /// Where the input the loop waited for comes from.
    Input {
        /// Who reads it.
        reader: Reader,
        /// From where.
        source: InputSource,
        /// What the network figures name of a remote source.
        remote: RemoteSeen,
    },
    /// No stacks to observe: the idle time is split by the counter rules' scores.
    NoStacks,
    /// Other processes did `share` of the GPU's work.
    OthersWork {
        /// Share of the work.
        share: f64,
    },
    /// The rank waited in collectives while its GPU ran queued work as long as its peers':
    /// collectives cost it at most `at_most` of the time, not the `seen` its stacks show.
    PeersAsBusy {
        /// The cap from the peer comparison.
        at_most: f64,
        /// What the stacks alone would charge.
        seen: f64,
    },
    /// The process issues NCCL collectives and its GPU was busier, with its SMs empty, than
    /// the job's least busy rank (or its host waited in the driver while they crossed a
    /// saturated link, or went to the job's ranks on other nodes): it spun `share` of the
    /// time in the collectives, waiting for its peers or the wire.
    SpunForPeers {
        /// Share of the window.
        share: f64,
    },
    /// The process is a pipeline stage (it issues NCCL sends and receives, `microbatches` of
    /// each a step): its schedule leaves it waiting for the other stages, spinning in the
    /// receive kernels, `share` of the window beyond what the spin seen says. Inferred from
    /// the schedule, not seen.
    PipelineBubble {
        /// Share of the window.
        share: f64,
        /// Microbatches a step, from its transfers.
        microbatches: f64,
    },
    /// The idle time nothing the main thread did explains, `share` of the window, on a GPU
    /// whose PCIe link trained at `bandwidth` of its maximum while it works: charged to the
    /// link.
    DegradedLink {
        /// Share of its maximum bandwidth the link has.
        bandwidth: f64,
        /// Share of the window.
        share: f64,
    },
    /// The main process's copies to and from the device took `share` of the window beyond
    /// what its GPU's PCIe link at full speed would take, the link trained at `bandwidth` of
    /// its maximum while the GPU works: that much idle time is the link's.
    SlowCopies {
        /// Share of its maximum bandwidth the link has.
        bandwidth: f64,
        /// Share of the window.
        share: f64,
    },
    /// The device reports no busy time (a MIG slice): the split starts from the share of the
    /// samples in which the loop waited for the GPU, `busy`, a lower bound of its busy time
    /// (the idle time and its causes are upper bounds); or, `backlog`, from the syncs' timing,
    /// where one found the GPU more than a step of the loop behind, or the launch windows',
    /// where they found the launch queue full.
    BusyFromSyncs {
        /// The busy fraction assumed.
        busy: f64,
        /// Whether it counts the spans the GPU worked through whole, not only the waits.
        backlog: bool,
    },
    /// The loop waited in kernel launches for room in the driver's launch queue `share` of the
    /// time (the launch windows timed it): the GPU worked then, though the stacks read the
    /// launching line as the loop's Python.
    LaunchQueueFull {
        /// Share of the time.
        share: f64,
    },
    /// The loop waited for its loader `share` of the time while its GPU still worked: the
    /// batch's upload after each such wait waited for kernels queued before it (the CUDA
    /// probes timed it), and nothing was handed to the GPU in between.
    LoaderWorkedThrough {
        /// Share of the time.
        share: f64,
    },
    /// The samples are of thread `tid`, which drives the GPU while the main thread touches no
    /// CUDA (the training function on a thread of its own): "the main thread" of the other
    /// reasons is that thread.
    FollowedThread {
        /// Its OS thread id.
        tid: u32,
    },
}

/// Who reads a loop's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The main thread itself (no loader workers).
    MainThread,
    /// The loader workers.
    Workers,
}

/// What the network figures name of a remote input source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RemoteSeen {
    /// The NFS mount read most, where one is read: (mount point, device, READ round trip
    /// in seconds).
    pub nfs: Option<(String, String, f64)>,
    /// Else the network or FUSE filesystems the job has mounted, described.
    pub mounts: Vec<String>,
    /// Else also the job's ingress: its namespace's interface (`None`: the node's) and bytes
    /// per second.
    pub ingress: Option<(Option<String>, f64)>,
}

/// Where a starved loader's workers wait for their input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputSource {
    /// Blocked on the local disk (uninterruptible waits, block-I/O delay).
    LocalStorage,
    /// Sleeping, not on the local disk: a socket, a network or FUSE filesystem, a remote store.
    Remote,
}

/// The primary verdict of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primary {
    /// No process on the GPU.
    Idle,
    /// Compute-bound, nothing to fix on the node.
    Busy,
    /// The highest-scoring active bottleneck.
    Bottleneck(Kind),
    /// Neither: waiting without a recognised cause, or too little data yet.
    Undetermined,
    /// The main thread has sat in one collective for `analysis.hang_after` while the GPU
    /// spins in it: a peer never arrived. Worse than any bottleneck: nothing progresses.
    Hung,
}

impl Primary {
    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Primary::Idle => "idle",
            Primary::Busy => "busy",
            Primary::Bottleneck(kind) => kind.name(),
            Primary::Undetermined => "undetermined",
            Primary::Hung => "hung",
        }
    }
}

/// All verdicts of one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuVerdict {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Every kind, in `Kind::ALL` order.
    pub kinds: Vec<KindVerdict>,
    /// The primary verdict.
    pub primary: Primary,
    /// The window averages behind the verdicts.
    pub figures: WindowFigures,
    /// Where the lost GPU time went (`None` while the GPU's busy fraction is unknown).
    pub lost: Option<LostTime>,
    /// How long the main thread has sat in one collective while the GPU is busy (`None`
    /// while it is not: every recent stack sample in that collective, the GPU above
    /// `gpu_busy_above`).
    pub hang: Option<Hang>,
    /// Share of its job's step this GPU's rank costs against the fastest rank of its group on
    /// this node (0 for that rank; `None` alone, or while a rank's split is unknown).
    pub behind_ranks: Option<f64>,
    /// Whether the GPU's main process works now (its GPU computing, or its busiest thread on
    /// a CPU outside any collective) with no hang tracked on it: what a rank waiting for it on
    /// another node waits for (the fleet's rules read it; on one node `Hang::waiting_for`).
    pub working: bool,
}

/// A main thread sitting in one collective while its GPU spins.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hang {
    /// Since how long, in seconds.
    pub seconds: f64,
    /// The collective's frame (`all_reduce at /job/train.py:97`).
    pub frame: String,
    /// A rank of its group on this node that works meanwhile, described (`GPU 0's rank, pid
    /// 4242, busy on the host`): the collective waits for it, and it is no hang (a barrier
    /// while rank 0 writes a checkpoint). `None`: none works, or no peer is on this node.
    pub waiting_for: Option<String>,
    /// The process whose thread waits (the GPU's main process).
    pub pid: Option<u32>,
    /// Whether it waits on the host before anything reached the GPU (NCCL's creation of a
    /// communicator, which returns once every rank has called it; a host-side collective),
    /// not for a collective spinning on the GPU: its GPU idle meanwhile.
    pub host_side: bool,
    /// What NCCL's RAS service says of the ranks of its communicators (`None`: not asked
    /// yet; asked only while a hang is tracked).
    pub peers: Option<RasEvidence>,
}

/// What NCCL's RAS service says of a hung process's communicators, for the hang's evidence.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RasEvidence {
    /// Ranks of its communicators that do not answer RAS.
    pub missing_ranks: u32,
    /// Ranks that launched fewer collectives of some operation than the rest: they never
    /// reached the collective the others wait in.
    pub ranks_behind: u32,
    /// Said for a person (`NCCL 2.29.3 RAS: rank 1 (pid 4243 on 10.0.0.2, GPU 1) launched
    /// AllReduce up to 48, the others up to 49`), or why RAS was not read.
    pub summary: String,
    /// Whether RAS answered (else `summary` says why not, and the counts are 0).
    pub answered: bool,
}

impl GpuVerdict {
    /// The basis of the primary verdict: its kind's; observed for hung (only the stacks see
    /// it); for idle, busy and undetermined that of the lost-time split (observed where the
    /// stacks decided it).
    pub fn basis(&self) -> Basis {
        match self.primary {
            // Only the stacks can see a rank sitting in one collective.
            Primary::Hung => Basis::Observed,
            Primary::Bottleneck(kind) => self
                .kinds
                .iter()
                .find(|k| k.scored.kind == kind)
                .map_or(Basis::Inferred, |k| k.basis),
            _ => self.lost.as_ref().map_or(Basis::Inferred, |l| l.basis),
        }
    }

    /// The kind's verdict.
    pub fn kind(&self, kind: Kind) -> Option<&KindVerdict> {
        self.kinds.iter().find(|k| k.scored.kind == kind)
    }
}

/// How loaded a physical link is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkLoad {
    /// The interface (`eth0`) or HCA port (`mlx5_0 port 1`).
    pub name: String,
    /// Link speed in bytes per second.
    pub speed_bytes_per_second: f64,
    /// Share of the speed received.
    pub receive_utilization: f64,
    /// Share of the speed transmitted.
    pub transmit_utilization: f64,
    /// Transmit-wait ticks per second (InfiniBand ports that count them).
    pub transmit_wait_per_second: Option<f64>,
}

impl LinkLoad {
    /// The busier direction's share of the link.
    pub fn utilization(&self) -> f64 {
        self.receive_utilization.max(self.transmit_utilization)
    }
}

/// How loaded an NFS mount is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MountLoad {
    /// Where it is mounted.
    pub mount_point: String,
    /// What (`server:/export`).
    pub device: String,
    /// Filesystem type.
    pub fstype: String,
    /// READ, GETATTR, LOOKUP and OPEN requests per second.
    pub requests_per_second: f64,
    /// Mean READ round trip, seconds.
    pub read_rtt_seconds: f64,
    /// Bytes per second read from the server.
    pub read_bytes_per_second: f64,
}

/// Who shares a GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sharing {
    /// Mean processes on the GPU over the window.
    pub processes: f64,
    /// Independent jobs among them on the latest tick; `None` when the owner of some process
    /// is unknown.
    pub independent_jobs: Option<u32>,
    /// The processes outside the main process's job on the latest tick, described.
    pub others: Vec<String>,
    /// Processes doing a real share of the GPU's work on the latest tick (`None` without
    /// per-process utilization).
    pub working: Option<u32>,
    /// Jobs among them: the main process's, plus one per working process outside it (`None`
    /// when an owner is unknown).
    pub working_jobs: Option<u32>,
    /// The working processes other than the main one, described.
    pub working_others: Vec<String>,
    /// Mean share of the GPU's work the main process did.
    pub main_work_share: Option<f64>,
}
