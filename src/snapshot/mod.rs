//! The data model every stage shares: plain values, no handles, no IO.
//!
//! Sources fill a [`Snapshot`] on each tick; exposition (and later analysis) only read it.
//! Counters are kept as read; the `*Rates` structs hold what happened over the last interval
//! and are `None` on the first sample, after a counter reset, or for a device that just appeared.

mod cuda;
mod figures;
mod gpu;
mod network;
mod per;
mod process;
mod ras;
mod signal;
mod verdict;

pub use cuda::*;
pub use figures::*;
pub use gpu::*;
pub use network::*;
pub use per::*;
pub use process::*;
pub use ras::*;
pub use signal::*;
pub use verdict::*;

/// Everything sampled on one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Node-wide CPU state, when the cpu source succeeded.
    pub cpu: Option<CpuSnapshot>,
    /// One entry per selected block device, sorted by name.
    pub disks: Vec<DiskSnapshot>,
    /// One entry per PSI resource (cpu, io, memory) the kernel reports.
    pub pressure: Vec<PressureSnapshot>,
    /// Memory and swap, when the memory source succeeded.
    pub memory: Option<MemorySnapshot>,
    /// NVML and the GPUs, when the GPU source is enabled.
    pub gpu: Option<GpuSnapshot>,
    /// NICs, InfiniBand ports, network filesystems and the GPU processes' traffic (each part
    /// empty while its source is off or down).
    pub network: NetworkSnapshot,
    /// Host context of each GPU process (and its workers), by pid.
    pub processes: Vec<ProcessContext>,
    /// Host CPU busy outside the GPU process trees, as a share of all CPUs, over the last
    /// interval: other tenants competing with the data pipeline.
    pub other_cpu_ratio: Option<f64>,
    /// Where each GPU process's main thread was over the stack window, by pid (Python
    /// processes the exporter may read; empty without ptrace access).
    pub stacks: Vec<ProcessStacks>,
    /// What each GPU process asked of the CUDA driver, by pid (empty without the probes'
    /// privilege or a driver to probe).
    pub cuda: Vec<ProcessCuda>,
    /// The GPU processes whose NCCL RAS service is wanted on this tick: set by the sampler
    /// for the GPUs whose hang the previous tick tracked (a RAS query gathers from every
    /// process of the job, so it is asked only then).
    pub ras_wanted: Vec<u32>,
    /// The last RAS answer of each GPU process asked, by pid.
    pub ras: Vec<ProcessRas>,
    /// Whether the node's busiest processes are wanted on this tick: set by the sampler when
    /// the previous tick scored data_io, data_cpu or contention past the leave score on some
    /// GPU (a pass over every process costs too much to run always).
    pub culprits_wanted: bool,
    /// The node's busiest processes outside the GPU process trees (`None` while not wanted).
    pub culprits: Option<Culprits>,
    /// Signals a source could not read on this tick for lack of privilege (e.g.
    /// `process_read_bytes` without CAP_SYS_PTRACE for another user's process).
    pub unsupported_signals: Vec<&'static str>,
    /// Whether the kernel's delay accounting is on (`None`: not known).
    pub delay_accounting: Option<bool>,
    /// Per GPU, why it waits (filled by the analysis after the sources).
    pub verdicts: Vec<GpuVerdict>,
    /// How each enabled source fared on this tick, in configuration order.
    pub sources: Vec<SourceStatus>,
    /// Ticks taken since start, this one included.
    pub samples_total: u64,
    /// The node is the built-in simulation (`--demo`), not real hardware.
    pub simulated: bool,
    /// The node's name: `NODE_NAME` (set by the DaemonSet), else the hostname.
    pub node: String,
}

/// Aggregate CPU time of the node, in seconds per mode since boot.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// Normal processes in user mode (includes guest time).
    pub user: f64,
    /// Niced processes in user mode (includes guest_nice time).
    pub nice: f64,
    /// Kernel mode.
    pub system: f64,
    /// Idle, not waiting for I/O.
    pub idle: f64,
    /// Idle while some task waits for I/O. The kernel may move this counter backwards.
    pub iowait: f64,
    /// Servicing hardware interrupts.
    pub irq: f64,
    /// Servicing soft interrupts.
    pub softirq: f64,
    /// Stolen by the hypervisor for other guests.
    pub steal: f64,
    /// Running a guest VM (already counted in `user`).
    pub guest: f64,
    /// Running a niced guest VM (already counted in `nice`).
    pub guest_nice: f64,
}

impl CpuTimes {
    /// Modes as (label, seconds), in the order /proc/stat lists them.
    pub fn modes(&self) -> [(&'static str, f64); 10] {
        [
            ("user", self.user),
            ("nice", self.nice),
            ("system", self.system),
            ("idle", self.idle),
            ("iowait", self.iowait),
            ("irq", self.irq),
            ("softirq", self.softirq),
            ("steal", self.steal),
            ("guest", self.guest),
            ("guest_nice", self.guest_nice),
        ]
    }
}

/// What /proc/stat says about the node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuStat {
    /// Seconds per mode summed over all CPUs.
    pub times: CpuTimes,
    /// Number of `cpuN` lines: online CPUs.
    pub cpu_count: u32,
    /// Seconds per mode of each online CPU, by CPU number.
    pub per_cpu: Vec<(u32, CpuTimes)>,
    /// Tasks currently runnable (`procs_running`).
    pub procs_running: u64,
    /// Tasks blocked on I/O (`procs_blocked`).
    pub procs_blocked: u64,
    /// Context switches since boot (`ctxt`).
    pub context_switches: u64,
}

/// Shares of CPU time over the last interval, each in 0..1.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuRates {
    /// Share of time in iowait.
    pub iowait_ratio: f64,
    /// Share of time stolen by the hypervisor.
    pub steal_ratio: f64,
    /// Share of time doing anything but idle and iowait.
    pub busy_ratio: f64,
}

/// CPU counters plus the rates over the last interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuSnapshot {
    /// Counters as read.
    pub stat: CpuStat,
    /// Shares over the last interval; `None` on the first sample.
    pub rates: Option<CpuRates>,
    /// Busy share of each CPU over the last interval, by CPU number (empty on the first
    /// sample): what a process pinned to a few CPUs competes for.
    pub busy_by_cpu: Vec<(u32, f64)>,
}

/// One line of /proc/diskstats. Times stay in the kernel's integer milliseconds so that
/// deltas are exact; sizes are in bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiskCounters {
    /// Kernel device name (`nvme0n1`, `sda`, `dm-0`).
    pub name: String,
    /// Reads completed.
    pub reads_completed: u64,
    /// Adjacent reads merged before being issued.
    pub reads_merged: u64,
    /// Bytes read (sectors × 512, whatever the device's block size).
    pub read_bytes: u64,
    /// Milliseconds spent by all reads (sum of per-request latencies), as the kernel counts.
    pub read_time_ms: u64,
    /// Writes completed.
    pub writes_completed: u64,
    /// Adjacent writes merged before being issued.
    pub writes_merged: u64,
    /// Bytes written.
    pub written_bytes: u64,
    /// Milliseconds spent by all writes.
    pub write_time_ms: u64,
    /// Requests in flight right now.
    pub in_flight: u64,
    /// Milliseconds during which at least one request was in flight (basis of %util).
    pub io_time_ms: u64,
    /// In-flight requests integrated over time, in milliseconds (basis of the queue size).
    pub weighted_io_time_ms: u64,
}

/// The same figures `iostat -x` prints, over the last interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DiskRates {
    /// Share of the interval the device had I/O in flight (`%util` / 100).
    pub utilization_ratio: f64,
    /// Mean latency of the reads completed in the interval (`r_await`, in seconds; 0 when none).
    pub read_await_seconds: f64,
    /// Mean latency of the writes completed in the interval (`w_await`, in seconds; 0 when none).
    pub write_await_seconds: f64,
    /// Mean number of requests in flight (`aqu-sz`).
    pub queue_size: f64,
    /// Reads completed per second (`r/s`).
    pub reads_per_second: f64,
    /// Writes completed per second (`w/s`).
    pub writes_per_second: f64,
    /// Bytes read per second (`rkB/s` × 1024).
    pub read_bytes_per_second: f64,
    /// Bytes written per second (`wkB/s` × 1024).
    pub write_bytes_per_second: f64,
}

/// A block device's counters plus the rates over the last interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiskSnapshot {
    /// Counters as read.
    pub counters: DiskCounters,
    /// Rates over the last interval; `None` when the device is new or a counter went back.
    pub rates: Option<DiskRates>,
}

/// One line (`some` or `full`) of a /proc/pressure file.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PressureLine {
    /// Kernel's 10 s running average, as a ratio.
    pub avg10: f64,
    /// Kernel's 60 s running average, as a ratio.
    pub avg60: f64,
    /// Kernel's 300 s running average, as a ratio.
    pub avg300: f64,
    /// Total stalled time since boot, in seconds.
    pub total_seconds: f64,
}

/// A PSI resource file: `some` tasks stalled, and (except cpu on older kernels) `full`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pressure {
    /// Share of time at least one task was stalled.
    pub some: PressureLine,
    /// Share of time all non-idle tasks were stalled; absent in older kernels' cpu file.
    pub full: Option<PressureLine>,
}

/// Stalled shares over the last interval, each in 0..1.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PressureRates {
    /// `some` stall share.
    pub some_ratio: f64,
    /// `full` stall share, when the kernel reports it.
    pub full_ratio: Option<f64>,
}

/// One PSI resource, as read and over the last interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PressureSnapshot {
    /// `cpu`, `io` or `memory`.
    pub resource: &'static str,
    /// Counters and kernel averages as read.
    pub pressure: Pressure,
    /// Shares over the last interval; `None` on the first sample or after a reset.
    pub rates: Option<PressureRates>,
}

/// Memory figures of /proc/meminfo and /proc/vmstat, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemoryCounters {
    /// `MemTotal`.
    pub total_bytes: u64,
    /// `MemAvailable`: what can be allocated without swapping.
    pub available_bytes: u64,
    /// `SwapTotal`.
    pub swap_total_bytes: u64,
    /// `SwapFree`.
    pub swap_free_bytes: u64,
    /// Bytes swapped in since boot (`pswpin` pages).
    pub swapped_in_bytes: u64,
    /// Bytes swapped out since boot (`pswpout` pages).
    pub swapped_out_bytes: u64,
}

/// Swap traffic over the last interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemoryRates {
    /// Bytes swapped in per second.
    pub swap_in_bytes_per_second: f64,
    /// Bytes swapped out per second.
    pub swap_out_bytes_per_second: f64,
}

/// Memory counters plus swap rates over the last interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemorySnapshot {
    /// Figures as read.
    pub counters: MemoryCounters,
    /// Rates over the last interval; `None` on the first sample or after a reset.
    pub rates: Option<MemoryRates>,
}

/// How one source fared on a tick.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceStatus {
    /// Source name, as in the configuration (`cpu`, `disk`, ...).
    pub name: &'static str,
    /// What happened.
    pub outcome: SourceOutcome,
    /// Wall time the source took, in seconds.
    pub duration_seconds: f64,
    /// Failed ticks since start.
    pub errors_total: u64,
}

/// Result of sampling one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceOutcome {
    /// Data was read.
    Ok,
    /// The host does not offer this source (e.g. no /proc/pressure); not an error.
    Unsupported(String),
    /// The read failed; the message says why.
    Failed(String),
}

/// Why the HTTP layer turned a connection or request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// `max_connections` were open: 503 (over TLS the connection is closed).
    ConnectionLimit,
    /// The TLS handshake failed or did not finish within the header timeout.
    TlsHandshake,
    /// The request head did not arrive within `header_read_timeout` (also ends idle
    /// keep-alive connections).
    HeaderTimeout,
    /// Unparsable request or a head over `max_header_bytes` (431).
    BadRequest,
    /// The client stopped reading the response for `write_timeout`.
    WriteTimeout,
    /// Missing or wrong basic-auth credentials (401).
    Unauthorized,
    /// Answering took longer than `request_timeout` (503).
    RequestTimeout,
}

impl Rejection {
    /// Every reason, in the order of [`HttpCounters::rejected`].
    pub const ALL: [Rejection; 7] = [
        Rejection::ConnectionLimit,
        Rejection::TlsHandshake,
        Rejection::HeaderTimeout,
        Rejection::BadRequest,
        Rejection::WriteTimeout,
        Rejection::Unauthorized,
        Rejection::RequestTimeout,
    ];

    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            Rejection::ConnectionLimit => "connection_limit",
            Rejection::TlsHandshake => "tls_handshake",
            Rejection::HeaderTimeout => "header_timeout",
            Rejection::BadRequest => "bad_request",
            Rejection::WriteTimeout => "write_timeout",
            Rejection::Unauthorized => "unauthorized",
            Rejection::RequestTimeout => "request_timeout",
        }
    }
}

/// What the HTTP layer counted, copied for one scrape (kept apart from [`Snapshot`]: it
/// changes between ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HttpCounters {
    /// Connections being served now.
    pub open_connections: u64,
    /// Rejections per [`Rejection::ALL`] entry.
    pub rejected: [u64; Rejection::ALL.len()],
    /// Whether the last attempt to (re)load the web configuration file failed (the previous
    /// settings stay in force).
    pub web_config_reload_failed: bool,
}

impl Snapshot {
    /// Every process with a context on some GPU, once each, in pid order: those listed now,
    /// and those listed on a GPU that does not answer now.
    pub fn gpu_pids(&self) -> std::collections::BTreeSet<u32> {
        self.gpu
            .iter()
            .flat_map(|g| {
                let listed = g.devices.iter().flat_map(|d| &d.processes).map(|p| p.pid);
                listed.chain(g.unanswered_processes.iter().copied())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_pids_hold_the_processes_of_gpus_not_answering() {
        let listed = |pid| GpuProcess {
            pid,
            ..GpuProcess::default()
        };
        let snapshot = Snapshot {
            gpu: Some(GpuSnapshot {
                devices: vec![GpuDevice {
                    processes: vec![listed(9), listed(5)],
                    ..GpuDevice::default()
                }],
                unanswered_processes: vec![7, 5],
                ..GpuSnapshot::default()
            }),
            ..Snapshot::default()
        };
        assert_eq!(
            snapshot.gpu_pids().into_iter().collect::<Vec<_>>(),
            [5, 7, 9]
        );
    }
}
