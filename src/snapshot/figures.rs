//! What the analysis reads of one GPU: per tick a [`GpuObservation`] (filled by
//! `analysis::observe` from a snapshot), over the window its [`WindowFigures`]. Each signal
//! is declared once, in [`figures!`], with its type and how the window folds it: the two
//! structs and the fold come from that one line, as `exposition/catalog.rs` does for metrics.
//! `None` means the input is not available (never "0").

use super::{
    Activity, AsleepWorkers, Culprits, DriverWait, LinkLoad, MountLoad, ProcessRas, ProcessStacks,
    Sharing, Step,
};

/// Declares the signals: `tick` fields exist per tick only, each `signals` line per tick and
/// over the window (`name: tick type => fold -> window type`; the fold is a function of the
/// window's values, oldest first), and each `window` field is derived from the whole window
/// (or, `nothing`, filled by a later stage).
macro_rules! figures {
    (
        tick { $( $(#[$tdoc:meta])* $tick:ident: $ttype:ty, )* }
        signals { $( $(#[$sdoc:meta])* $signal:ident: $stype:ty => $fold:ident -> $wtype:ty, )* }
        window { $( $(#[$wdoc:meta])* $window:ident: $wwtype:ty = $derive:ident, )* }
    ) => {
        /// One GPU on one tick.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct GpuObservation {
            $( $(#[$tdoc])* pub $tick: $ttype, )*
            $( $(#[$sdoc])* pub $signal: $stype, )*
        }

        /// One GPU's observations folded over the analysis window: what the rules read.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct WindowFigures {
            $(
                $(#[$sdoc])*
                #[doc = concat!("\n\nOver the window: `", stringify!($fold), "`.")]
                pub $signal: $wtype,
            )*
            $( $(#[$wdoc])* pub $window: $wwtype, )*
        }

        impl WindowFigures {
            /// Folds one GPU's observations (oldest first) over the window.
            pub fn over(window: &[&GpuObservation]) -> WindowFigures {
                WindowFigures {
                    $( $signal: $fold(window.iter().map(|o| &o.$signal)), )*
                    $( $window: $derive(window), )*
                }
            }
        }
    };
}

figures! {
    tick {
        /// Monotonic seconds of the tick.
        at: f64,
        /// NVML index.
        index: u32,
        /// UUID (the key across ticks).
        uuid: String,
        /// What groups this GPU with others of the same job (a process, pod or Slurm job).
        job: Option<String>,
        /// What groups this GPU with the other ranks its main process may exchange gradients
        /// with: its job, else its launcher (children of one parent on separate GPUs, as
        /// torchrun's ranks are on bare metal; two experiments started from one shell are
        /// too, which is why only the collective cap, never the job's busy gap, compares
        /// them).
        ranks: Option<String>,
        /// Bytes per second over the GPU's PCIe link, both directions (GPUDirect RDMA moves a
        /// multi-node all-reduce's data there).
        pcie_bytes_per_second: Option<f64>,
        /// The main GPU process's thread inside a CUDA driver wait now, and the collective
        /// it issued before (the CUDA probes; `None` where nothing waits or unprobed).
        driver_wait: Option<DriverWait>,
        /// How long a thread of the main GPU process has been inside NCCL's creation of a
        /// communicator, in seconds (the CUDA probes; `None` where none is, or unprobed).
        creating_communicator: Option<f64>,
        /// Whether the CUDA probes watch the main GPU process's driver.
        probed: bool,
        /// How long the main GPU process's driver has been probed without one call of it seen,
        /// in seconds (`None` once one was, or unprobed).
        probes_silent: Option<f64>,
        /// Independent jobs among the processes on the GPU (`None` when some process's owner
        /// is unknown).
        independent_jobs: Option<u32>,
        /// The processes on the GPU outside the main process's job, described for the
        /// evidence.
        other_jobs: Vec<String>,
        /// Processes doing a real share of the GPU's work (per-process SM samples at or above
        /// `analysis::jobs::SHARER_MIN_SM`); `None` where the driver reports no per-process
        /// utilization.
        working_processes: Option<u32>,
        /// Whether those working processes belong to more than one job (`None`: owners
        /// unknown).
        working_jobs: Option<u32>,
        /// The working processes other than the main one, described for the evidence.
        working_others: Vec<String>,
        /// The main process's share of the GPU's work (its SM samples over all processes').
        main_work_share: Option<f64>,
        /// What the main process does where it works now, not waiting in a collective (its
        /// busiest thread on a CPU, or its GPU computing), described; `None` while it waits
        /// or sleeps.
        working: Option<String>,
        /// A rank of its group on this node that is working (its `working`), described.
        working_peer: Option<String>,
        /// The main GPU process (`None`: no process on the GPU).
        main_pid: Option<u32>,
        /// What NCCL's RAS service last said of the main GPU process's communicators (only
        /// while its hang is tracked; `None` when not asked).
        ras: Option<ProcessRas>,
    }
    signals {
        /// Whether the GPU answered (over the window: unless it missed its last ticks in a
        /// row or half of them, [`answering`]).
        up: bool => answering -> bool,
        /// Busy fraction: mean of NVML's utilization samples (or GPU-Util where samples are
        /// missing).
        busy: Option<f64> => mean -> Option<f64>,
        /// Share of utilization samples near zero.
        idle_share: Option<f64> => mean -> Option<f64>,
        /// GPM SM activity.
        sm_activity: Option<f64> => mean -> Option<f64>,
        /// Device memory used / total.
        memory_used_ratio: Option<f64> => mean -> Option<f64>,
        /// Whether a limiting throttle reason is active (over the window: the share of ticks
        /// it was).
        throttled: Option<bool> => share -> Option<f64>,
        /// Degrees below the slowdown temperature.
        thermal_margin: Option<f64> => mean -> Option<f64>,
        /// XID errors and uncorrected ECC errors so far (cumulative; over the window: their
        /// increase, each an event).
        hardware_errors: Option<u64> => increase -> Option<u64>,
        /// A row remap is pending or failed.
        remap_trouble: bool => last -> bool,
        /// Share of its maximum bandwidth the PCIe link trained at (1.0: full generation and
        /// width).
        pcie_bandwidth_share: Option<f64> => last -> Option<f64>,
        /// Share of the time the main GPU process's copies to and from the device took beyond
        /// what its link at full generation and width would take (`None`: a healthy link, or
        /// no CUDA probes on the process).
        link_copy_excess: Option<f64> => mean -> Option<f64>,
        /// Processes on the GPU.
        processes: Option<u32> => mean_count -> Option<f64>,
        /// The main GPU process's busiest thread, share of a core.
        busiest_thread: Option<f64> => mean -> Option<f64>,
        /// Where the main GPU process's main thread was over the stacks source's own window
        /// (`None` where its stacks are not read).
        stacks: Option<ProcessStacks> => last -> Option<ProcessStacks>,
        /// Share of the last interval the thread the stacks follow (the main thread, or the
        /// thread that drives the GPU) spent inside CUDA driver waits, timed by the probes
        /// (`None`: no probes).
        stacked_thread_waited: Option<f64> => mean -> Option<f64>,
        /// The node's busiest processes outside the GPU process trees (`None` while not
        /// looked for; over the window: as last found).
        culprits: Option<Culprits> => latest -> Option<Culprits>,
        /// The main GPU process's training step, timed from the cadence of its calls into CUDA
        /// and NCCL (`None`: unprobed, or no repeating step found).
        step: Option<Step> => last -> Option<Step>,
        /// The main GPU process's busy share as its syncs show it, where one found the GPU
        /// more than a step behind (`None`: none did, or no probes): on a device that reports
        /// no busy time, a better bound than the samples in which the loop waited.
        backlog_busy: Option<f64> => mean -> Option<f64>,
        /// Share of the time the main GPU process's host spent between its syncs within as
        /// long as each sync had held it while the GPU worked: a loop without the syncs would
        /// have been that far ahead of the GPU, whose queue they drained (`None`: no probes,
        /// or too few syncs).
        after_sync_within_hold: Option<f64> => mean -> Option<f64>,
        /// Share of the time its host paused between steps beyond both each sync's hold and
        /// its usual time between syncs (a checkpoint written): its loop's schedule stopped.
        host_paused: Option<f64> => mean -> Option<f64>,
        /// Share of the time the main GPU process's loop waited in kernel launches for room in
        /// the driver's launch queue, as the launch windows timed it (`None`: no probes, or no
        /// window saw it launch): the GPU worked meanwhile, whatever line the stacks read.
        launch_queue_full: Option<f64> => mean -> Option<f64>,
        /// Share of the launch windows in which the main GPU process launched that its GPU
        /// worked as its launch queue showed it (`None`: no probes, or no window saw it
        /// launch): on a device that reports no busy time, a reading beside the waits'.
        queue_busy: Option<f64> => mean -> Option<f64>,
        /// Whether the main GPU process's job has ranks on other nodes, as its launcher said
        /// (`None`: not said, or its environment unreadable).
        job_spans_nodes: Option<bool> => last -> Option<bool>,
        /// Whether the main GPU process is a pipeline's stage, whose layers and kernels are
        /// not its peers': it has issued NCCL point-to-point transfers since its probes were
        /// attached, its sends to the stages beside it only (an all-to-all's go to every rank
        /// of its group) (`None`: no CUDA probes on it).
        point_to_point: Option<bool> => last -> Option<bool>,
        /// NCCL point-to-point transfers the main GPU process issued a step: a pipeline
        /// stage's microbatches, a send and a receive each at either end of the pipeline
        /// (`None`: no CUDA probes on it, or no step found).
        transfers_per_step: Option<f64> => mean -> Option<f64>,
        /// Share of the time the main GPU process's GPU-driving thread waited inside the CUDA
        /// driver while it issued NCCL collectives (`None`: no CUDA probes on it, or no
        /// collective issued lately).
        collective_wait: Option<f64> => mean -> Option<f64>,
        /// Number of the main GPU process's main thread, busiest other thread and workers
        /// waiting for a CPU.
        cpu_wait: Option<f64> => mean -> Option<f64>,
        /// The part of it of the threads that run the loop's host work (the main thread and
        /// the busiest other thread).
        loop_cpu_wait: Option<f64> => mean -> Option<f64>,
        /// Data-loader workers of the main GPU process.
        workers: Option<u32> => mean_count -> Option<f64>,
        /// The busiest worker's share of a core.
        workers_max_cpu: Option<f64> => mean -> Option<f64>,
        /// The workers' CPU, in cores, summed.
        workers_cpu: Option<f64> => mean -> Option<f64>,
        /// The part of it in the kernel (system calls), in cores.
        workers_system_cpu: Option<f64> => mean -> Option<f64>,
        /// Share of the workers' context switches that were voluntary (blocking, not
        /// preempted).
        workers_voluntary_switches: Option<f64> => mean -> Option<f64>,
        /// Voluntary context switches a second of one worker.
        workers_voluntary_rate: Option<f64> => mean -> Option<f64>,
        /// Workers in uninterruptible (I/O) wait.
        workers_disk_wait: Option<u32> => mean_count -> Option<f64>,
        /// Number of workers waiting for block I/O (delay accounting).
        workers_blkio: Option<f64> => mean -> Option<f64>,
        /// What the sleeping workers were seen waiting on (`None` where it cannot be read).
        workers_asleep: Option<AsleepWorkers> => summed -> Option<AsleepWorkers>,
        /// The GPU process's cgroup throttled-period share.
        cgroup_throttled: Option<f64> => mean -> Option<f64>,
        /// The GPU process or its workers run on another NUMA node than the GPU (over the
        /// window: the share of ticks they did).
        numa_mismatch: Option<bool> => share -> Option<f64>,
        /// Busiest disk's utilization.
        disk_util: Option<f64> => mean -> Option<f64>,
        /// Host iowait share.
        iowait: Option<f64> => mean -> Option<f64>,
        /// Host PSI io "some" share.
        psi_io: Option<f64> => mean -> Option<f64>,
        /// Host CPU busy share.
        host_cpu: Option<f64> => mean -> Option<f64>,
        /// CPU used outside the GPU process trees: on the CPUs the main GPU process may run
        /// on when known, else node-wide.
        other_cpu: Option<f64> => mean -> Option<f64>,
        /// Share of the CPUs the main GPU process may run on that GPU process trees use.
        own_cpu: Option<f64> => mean -> Option<f64>,
        /// How many CPUs the main GPU process may run on.
        job_cpus: Option<f64> => mean -> Option<f64>,
        /// Host CPU steal share.
        steal: Option<f64> => mean -> Option<f64>,
        /// The SM clock's share of its maximum on a tick with a limiting throttle reason
        /// (`None` when not throttled or unknown).
        throttled_clock_ratio: Option<f64> => mean -> Option<f64>,
        /// Bytes per second the main GPU process's network namespace received (its pod's
        /// ingress; the node's where it shares the node's namespace).
        job_ingress: Option<f64> => mean -> Option<f64>,
        /// Bytes per second it transmitted.
        job_egress: Option<f64> => mean -> Option<f64>,
        /// Where that traffic is seen: the namespace's busiest interface, or `None` when the
        /// process shares the node's namespace (its traffic is then the node's).
        job_interface: Option<String> => last -> Option<String>,
        /// The node's busiest physical link (NIC or InfiniBand / RoCE port); over the window
        /// as last seen, with its utilization averaged.
        link: Option<LinkLoad> => mean_link -> Option<LinkLoad>,
        /// The busiest NFS mount of the node that the main GPU process has mounted; over the
        /// window as last seen, with its rates averaged.
        mount: Option<MountLoad> => mean_mount -> Option<MountLoad>,
        /// The network and FUSE mounts the main GPU process sees, described
        /// (`fuse.s3fs at /mnt/bucket (s3fs)`).
        network_mounts: Vec<String> => last -> Vec<String>,
        /// The main GPU process (`pid 4242 (python3)`).
        main_process: Option<String> => last -> Option<String>,
        /// The pod the GPU is assigned to (`namespace/pod`).
        pod: Option<String> => last -> Option<String>,
    }
    window {
        /// Highest device memory used share in the window.
        memory_used_peak: Option<f64> = memory_peak,
        /// Who shares the GPU.
        sharing: Option<Sharing> = sharing,
        /// Busy spread to the busiest GPU of the same job (`None`: not in a multi-GPU job;
        /// filled by the peer comparison).
        job_gap: Option<f64> = nothing,
        /// The most of the busy time collectives can have cost this rank: how much longer its
        /// GPU was busy, or its SMs empty, than its job's least busy rank's, plus the least
        /// busy time any of the ranks spent in collectives (`None`: no peers, or peers
        /// without stacks; filled by the peer comparison).
        collective_busy_cap: Option<f64> = nothing,
        /// How much longer this rank's GPU was busy with its SMs empty than its job's least
        /// busy rank's (`None`: no peers whose busy time is known; filled by the peer
        /// comparison): the most its GPU can have spun waiting for them.
        spin_excess: Option<f64> = nothing,
        /// The share of the time this pipeline stage's GPU spun in its schedule's bubble
        /// beyond what `spin_excess` and the host's driver waits show, inferred from its
        /// microbatches (`None`: not a stage, or its peers' busy times unknown; filled by the
        /// peer comparison).
        pipeline_bubble: Option<f64> = nothing,
    }
}

impl WindowFigures {
    /// The stacks with their share of samples in a GPU sync replaced by the share of the time
    /// the probes timed the same thread inside driver waits, the other activities sharing the
    /// rest as sampled: the probes time every wait, while a few dozen samples a window only
    /// estimate it (and a sampler that must win a CPU from a spinning thread and CPU hogs
    /// samples it unevenly: 6 % of the samples against 18 % timed, seen on a loop under hogs).
    pub fn time_stacks(&mut self) {
        if let (Some(stacks), Some(waited)) = (self.stacks.as_mut(), self.stacked_thread_waited) {
            let loader = stacks.shares[Activity::DataLoader];
            stacks.shares = stacks.shares.with_share(Activity::GpuSync, waited);
            // The loader waits the GPU worked through scale with the loader's share.
            if loader > 0.0 {
                stacks.loader_queued *= stacks.shares[Activity::DataLoader] / loader;
            }
        }
    }

    /// The share of the main thread's stack samples in `activity`, where stacks are read.
    pub fn stack_share(&self, activity: Activity) -> Option<f64> {
        self.stacks.as_ref().map(|s| s.share(activity))
    }

    /// The frame seen most in `activity`, described for the evidence
    /// (`train at /job/train.py:57, 62 % of the samples`); empty when none.
    pub fn top_frame(&self, activity: Activity) -> String {
        self.stacks
            .iter()
            .flat_map(|s| &s.top_frames)
            .find(|f| f.activity == activity)
            .map(|f| {
                format!(
                    "{} at {}, {:.0} % of the samples",
                    f.function,
                    f.location,
                    100.0 * f.share
                )
            })
            .unwrap_or_default()
    }
}

/// Mean of the values present; `None` if none is.
fn average(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let (sum, n) = values
        .flatten()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Mean of the values present.
fn mean<'a>(values: impl Iterator<Item = &'a Option<f64>>) -> Option<f64> {
    average(values.copied())
}

/// The sleeping workers of the ticks where they were read, summed.
fn summed<'a>(values: impl Iterator<Item = &'a Option<AsleepWorkers>>) -> Option<AsleepWorkers> {
    values
        .flatten()
        .fold(None, |sum: Option<AsleepWorkers>, tick| {
            let sum = sum.unwrap_or_default();
            Some(AsleepWorkers {
                sampled: sum.sampled + tick.sampled,
                remote: sum.remote + tick.remote,
                local_file: sum.local_file + tick.local_file,
            })
        })
}

/// Mean of a count.
fn mean_count<'a>(values: impl Iterator<Item = &'a Option<u32>>) -> Option<f64> {
    average(values.map(|v| v.map(f64::from)))
}

/// Share of the ticks in which a flag was set, over the ticks where it is known.
fn share<'a>(values: impl Iterator<Item = &'a Option<bool>>) -> Option<f64> {
    average(values.map(|v| v.map(|b| if b { 1.0 } else { 0.0 })))
}

/// Ticks in a row a GPU must miss, up to the latest, to count as not answering.
const DOWN_TICKS: usize = 3;

/// Whether the GPU answered over the window: a missed tick is one call past the deadline (on
/// a loaded node, or while the driver is busy elsewhere), counted in the self-metrics and
/// logged, not a failing device; one that missed its last [`DOWN_TICKS`] in a row, or half of
/// the window's, is down.
fn answering<'a>(values: impl Iterator<Item = &'a bool>) -> bool {
    let answered: Vec<bool> = values.copied().collect();
    let missed = answered.iter().filter(|up| !**up).count();
    let missed_last = answered.iter().rev().take_while(|up| !**up).count();
    missed_last < DOWN_TICKS && 2 * missed < answered.len().max(1)
}

/// The latest tick's value.
fn last<'a, T: Clone + Default + 'a>(values: impl Iterator<Item = &'a T>) -> T {
    values.last().cloned().unwrap_or_default()
}

/// The latest value present.
fn latest<'a, T: Clone + 'a>(values: impl Iterator<Item = &'a Option<T>>) -> Option<T> {
    values.flatten().last().cloned()
}

/// How much a cumulative count rose between the first and the last tick that have it.
fn increase<'a>(values: impl Iterator<Item = &'a Option<u64>>) -> Option<u64> {
    let counts: Vec<u64> = values.flatten().copied().collect();
    let (first, last) = (counts.first()?, counts.last()?);
    Some(last.saturating_sub(*first))
}

/// The latest link, its utilization averaged over the ticks that have a link.
fn mean_link<'a>(values: impl Iterator<Item = &'a Option<LinkLoad>>) -> Option<LinkLoad> {
    let links: Vec<&Option<LinkLoad>> = values.collect();
    let last = links.last().copied().cloned().flatten()?;
    let over =
        |f: fn(&LinkLoad) -> Option<f64>| average(links.iter().map(|l| l.as_ref().and_then(f)));
    Some(LinkLoad {
        receive_utilization: over(|l| Some(l.receive_utilization)).unwrap_or(0.0),
        transmit_utilization: over(|l| Some(l.transmit_utilization)).unwrap_or(0.0),
        transmit_wait_per_second: over(|l| l.transmit_wait_per_second),
        ..last
    })
}

/// The latest mount, its rates averaged over the ticks that have a mount.
fn mean_mount<'a>(values: impl Iterator<Item = &'a Option<MountLoad>>) -> Option<MountLoad> {
    let mounts: Vec<&Option<MountLoad>> = values.collect();
    let last = mounts.last().copied().cloned().flatten()?;
    let over =
        |f: fn(&MountLoad) -> f64| average(mounts.iter().map(|m| m.as_ref().map(f))).unwrap_or(0.0);
    Some(MountLoad {
        requests_per_second: over(|m| m.requests_per_second),
        read_rtt_seconds: over(|m| m.read_rtt_seconds),
        read_bytes_per_second: over(|m| m.read_bytes_per_second),
        ..last
    })
}

/// The window's peak of device memory used.
fn memory_peak(window: &[&GpuObservation]) -> Option<f64> {
    window
        .iter()
        .filter_map(|o| o.memory_used_ratio)
        .reduce(f64::max)
}

/// Who shares the GPU: the latest tick's processes and owners, the window's mean counts.
fn sharing(window: &[&GpuObservation]) -> Option<Sharing> {
    let last = window.last();
    Some(Sharing {
        processes: mean_count(window.iter().map(|o| &o.processes))?,
        independent_jobs: last.and_then(|o| o.independent_jobs),
        others: last.map(|o| o.other_jobs.clone()).unwrap_or_default(),
        working: last.and_then(|o| o.working_processes),
        working_jobs: last.and_then(|o| o.working_jobs),
        working_others: last.map(|o| o.working_others.clone()).unwrap_or_default(),
        main_work_share: mean(window.iter().map(|o| &o.main_work_share)),
    })
}

/// Filled by a later stage.
fn nothing(_: &[&GpuObservation]) -> Option<f64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_folds_as_declared() {
        let tick = |busy, throttled, errors, link: Option<f64>| GpuObservation {
            up: true,
            busy,
            throttled,
            hardware_errors: errors,
            processes: Some(2),
            link: link.map(|receive| LinkLoad {
                name: "eth0".into(),
                receive_utilization: receive,
                ..LinkLoad::default()
            }),
            ..GpuObservation::default()
        };
        let ticks = [
            tick(Some(0.2), Some(true), Some(3), Some(0.5)),
            tick(None, Some(false), None, None),
            tick(Some(0.6), None, Some(5), Some(0.1)),
        ];
        let window: Vec<&GpuObservation> = ticks.iter().collect();
        let w = WindowFigures::over(&window);
        assert!(w.up);
        assert_eq!(w.busy, Some(0.4), "the mean of the ticks that have it");
        assert_eq!(w.throttled, Some(0.5), "the share of the ticks that know");
        assert_eq!(w.hardware_errors, Some(2), "the increase");
        assert_eq!(w.processes, Some(2.0));
        let link = w.link.unwrap();
        assert!((link.receive_utilization - 0.3).abs() < 1e-12);
        assert_eq!(w.job_gap, None);
    }

    #[test]
    fn a_gpu_is_down_once_it_missed_its_last_ticks_or_half_of_them_not_one_slow_call() {
        let over =
            |ticks: &str| answering(ticks.chars().map(|c| c == 'u').collect::<Vec<_>>().iter());
        // One call past the deadline, or two apart, in a window of answers: up.
        assert!(over("uuuuuduuuu"));
        assert!(over("uuduuuuudu"));
        assert!(over("uuuuuuuudd"));
        // The last three missed in a row (a GPU that stopped answering), or half of the
        // window (one that answers now and then): down.
        assert!(!over("uuuuuuuddd"));
        assert!(!over("dudududuud"));
        assert!(!over("d"));
        assert!(over(""));
    }
}
