//! What the analysis looks at: per GPU and tick, the figures the rules need, pulled out of a
//! snapshot (pure), and their averages over the window.

use std::collections::{BTreeMap, BTreeSet};

use crate::snapshot::{
    Culprits, GpuDevice, LinkLoad, LinkRates, MountLoad, NetworkSnapshot, ProcessContext,
    ProcessNetwork, ProcessStacks, Snapshot,
};

/// Throttle-reason bits that hold clocks down for a reason worth reporting: software power
/// cap, hardware slowdown, software and hardware thermal slowdown, power brake. (Idle, sync
/// boost, application clocks and display clock settings are not bottlenecks.)
pub const LIMITING_THROTTLE_REASONS: u64 = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

/// One GPU on one tick. `None` means the input is not available (never "0").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuObservation {
    /// Monotonic seconds of the tick.
    pub at: f64,
    /// NVML index.
    pub index: u32,
    /// UUID (the key across ticks).
    pub uuid: String,
    /// Whether the GPU answered.
    pub up: bool,
    /// Busy fraction: mean of NVML's utilization samples (or GPU-Util where samples are missing).
    pub busy: Option<f64>,
    /// Share of utilization samples near zero.
    pub idle_share: Option<f64>,
    /// GPM SM activity.
    pub sm_activity: Option<f64>,
    /// Device memory used / total.
    pub memory_used_ratio: Option<f64>,
    /// Whether a limiting throttle reason is active.
    pub throttled: Option<bool>,
    /// Degrees below the slowdown temperature.
    pub thermal_margin: Option<f64>,
    /// XID errors and uncorrected ECC errors so far (cumulative; an increase is an event).
    pub hardware_errors: Option<u64>,
    /// A row remap is pending or failed.
    pub remap_trouble: bool,
    /// Share of its maximum bandwidth the PCIe link trained at (1.0: full generation and width).
    pub pcie_bandwidth_share: Option<f64>,
    /// Bytes per second over the GPU's PCIe link, both directions (GPUDirect RDMA moves a
    /// multi-node all-reduce's data there).
    pub pcie_bytes_per_second: Option<f64>,
    /// Processes on the GPU.
    pub processes: Option<u32>,
    /// Independent jobs among the processes on the GPU (`None` when some process's owner is
    /// unknown).
    pub independent_jobs: Option<u32>,
    /// The processes on the GPU outside the main process's job, described for the evidence.
    pub other_jobs: Vec<String>,
    /// What groups this GPU with others of the same job (a process, pod or Slurm job).
    pub job: Option<String>,
    /// What groups this GPU with the other ranks its main process may exchange gradients
    /// with: its job, else its launcher (children of one parent on separate GPUs, as
    /// torchrun's ranks are on bare metal; two experiments started from one shell are too,
    /// which is why only the collective cap, never the job's busy gap, compares them).
    pub ranks: Option<String>,
    /// Processes doing a real share of the GPU's work (per-process SM samples at or above
    /// [`SHARER_MIN_SM`]); `None` where the driver reports no per-process utilization.
    pub working_processes: Option<u32>,
    /// Whether those working processes belong to more than one job (`None`: owners unknown).
    pub working_jobs: Option<u32>,
    /// The working processes other than the main one, described for the evidence.
    pub working_others: Vec<String>,
    /// The main process's share of the GPU's work (its SM samples over all processes').
    pub main_work_share: Option<f64>,
    /// The main GPU process's busiest thread, share of a core.
    pub busiest_thread: Option<f64>,
    /// Where the main GPU process's main thread was over the stacks source's window (`None`
    /// where its stacks are not read).
    pub stacks: Option<ProcessStacks>,
    /// The node's busiest processes outside the GPU process trees (`None` while not looked
    /// for).
    pub culprits: Option<Culprits>,
    /// Mean number of the main GPU process's main thread and workers waiting for a CPU.
    pub cpu_wait: Option<f64>,
    /// Data-loader workers of the main GPU process.
    pub workers: Option<u32>,
    /// The busiest worker's share of a core.
    pub workers_max_cpu: Option<f64>,
    /// The workers' CPU, in cores, summed.
    pub workers_cpu: Option<f64>,
    /// The part of it in the kernel (system calls), in cores.
    pub workers_system_cpu: Option<f64>,
    /// Share of the workers' context switches that were voluntary (blocking, not preempted).
    pub workers_voluntary_switches: Option<f64>,
    /// Workers in uninterruptible (I/O) wait.
    pub workers_disk_wait: Option<u32>,
    /// Mean number of workers waiting for block I/O (delay accounting).
    pub workers_blkio: Option<f64>,
    /// The GPU process's cgroup throttled-period share.
    pub cgroup_throttled: Option<f64>,
    /// The GPU process or its workers run on another NUMA node than the GPU.
    pub numa_mismatch: Option<bool>,
    /// Busiest disk's utilization.
    pub disk_util: Option<f64>,
    /// Host iowait share.
    pub iowait: Option<f64>,
    /// Host PSI io "some" share.
    pub psi_io: Option<f64>,
    /// Host CPU busy share.
    pub host_cpu: Option<f64>,
    /// CPU used outside the GPU process trees: on the CPUs the main GPU process may run on
    /// when known, else node-wide.
    pub other_cpu: Option<f64>,
    /// Share of the CPUs the main GPU process may run on that GPU process trees use.
    pub own_cpu: Option<f64>,
    /// How many CPUs the main GPU process may run on.
    pub job_cpus: Option<f64>,
    /// Host CPU steal share.
    pub steal: Option<f64>,
    /// The SM clock's share of its maximum on a tick with a limiting throttle reason (`None`
    /// when not throttled or unknown).
    pub throttled_clock_ratio: Option<f64>,
    /// Bytes per second the main GPU process's network namespace received.
    pub job_ingress: Option<f64>,
    /// Bytes per second it transmitted.
    pub job_egress: Option<f64>,
    /// Where that traffic is seen: the namespace's busiest interface, or `None` when the
    /// process shares the node's namespace (its traffic is then the node's).
    pub job_interface: Option<String>,
    /// The node's busiest physical link on this tick.
    pub link: Option<LinkLoad>,
    /// The busiest NFS mount of the node that the main GPU process has mounted, on this tick.
    pub mount: Option<MountLoad>,
    /// The network and FUSE mounts the main GPU process sees, described.
    pub network_mounts: Vec<String>,
    /// The main GPU process (`pid 4242 (python3)`).
    pub main_process: Option<String>,
    /// The pod the GPU is assigned to (`namespace/pod`).
    pub pod: Option<String>,
}

/// Per-process SM share at or above which a process does a real share of a GPU's work: a
/// helper holding a context (a loader worker that touched CUDA, a monitoring agent) stays far
/// below it.
pub const SHARER_MIN_SM: f64 = 0.05;

/// Extracts one observation per GPU from a snapshot taken at `at` seconds.
pub fn observe(snapshot: &Snapshot, at: f64) -> Vec<GpuObservation> {
    let Some(gpu) = &snapshot.gpu else {
        return Vec::new();
    };
    let contexts: BTreeMap<u32, &ProcessContext> =
        snapshot.processes.iter().map(|c| (c.pid, c)).collect();
    let stacks: BTreeMap<u32, &ProcessStacks> =
        snapshot.stacks.iter().map(|s| (s.pid, s)).collect();
    // A process on several GPUs makes them one job.
    let mut gpus_per_pid: BTreeMap<u32, u32> = BTreeMap::new();
    for device in &gpu.devices {
        for p in &device.processes {
            *gpus_per_pid.entry(p.pid).or_default() += 1;
        }
    }
    let disk_util = snapshot
        .disks
        .iter()
        .filter_map(|d| d.rates.map(|r| r.utilization_ratio))
        .fold(None, |max: Option<f64>, u| {
            Some(max.map_or(u, |m| m.max(u)))
        });
    let rates = snapshot.cpu.as_ref().and_then(|c| c.rates);
    let psi_io = snapshot
        .pressure
        .iter()
        .find(|p| p.resource == "io")
        .and_then(|p| p.rates.map(|r| r.some_ratio));
    let link = busiest_link(&snapshot.network);
    let networks: BTreeMap<u32, &ProcessNetwork> = snapshot
        .network
        .processes
        .iter()
        .map(|n| (n.pid, n))
        .collect();
    gpu.devices
        .iter()
        .map(|device| {
            // The main GPU process: the one holding the most memory (processes are ranked).
            let main = device.processes.first();
            let context = main.and_then(|p| contexts.get(&p.pid).copied());
            let network = main.and_then(|p| networks.get(&p.pid).copied());
            let job = main.and_then(|p| {
                let cgroup = context.and_then(|c| c.cgroup.as_ref());
                if gpus_per_pid.get(&p.pid).copied().unwrap_or(0) > 1 {
                    Some(format!("pid:{}", p.pid))
                } else if let Some(g) = cgroup.filter(|g| !g.pod_uid.is_empty()) {
                    Some(format!("pod:{}", g.pod_uid))
                } else {
                    cgroup
                        .filter(|g| !g.slurm_job.is_empty())
                        .map(|g| format!("slurm:{}", g.slurm_job))
                }
            });
            let ranks = job.clone().or_else(|| {
                let parent = context?.ppid;
                (parent > 1).then(|| format!("launcher:{parent}"))
            });
            let (independent_jobs, other_jobs) = jobs_on(device, &contexts);
            let work = working(device, &contexts);
            GpuObservation {
                at,
                index: device.index,
                uuid: device.uuid.clone(),
                up: device.up,
                busy: device
                    .busy
                    .map(|b| b.mean_ratio)
                    .or(device.utilization.map(|u| u.gpu_ratio)),
                idle_share: device.busy.map(|b| b.idle_share_ratio),
                sm_activity: device.gpm.map(|g| g.sm_activity_ratio),
                memory_used_ratio: device
                    .memory
                    .filter(|m| m.total_bytes > 0)
                    .map(|m| m.used_bytes as f64 / m.total_bytes as f64),
                throttled: device
                    .throttle_reasons
                    .map(|r| r & LIMITING_THROTTLE_REASONS != 0),
                thermal_margin: device
                    .slowdown_temperature_celsius
                    .zip(device.temperature_celsius)
                    .map(|(s, t)| s - t),
                hardware_errors: hardware_errors(device),
                remap_trouble: device.remapped_rows.is_some_and(|r| r.pending || r.failed),
                pcie_bandwidth_share: pcie_bandwidth_share(device),
                pcie_bytes_per_second: device
                    .pcie
                    .tx_bytes_per_second
                    .zip(device.pcie.rx_bytes_per_second)
                    .map(|(tx, rx)| tx + rx),
                processes: device.process_count,
                independent_jobs,
                other_jobs,
                job,
                ranks,
                working_processes: work.as_ref().map(|w| w.processes),
                working_jobs: work.as_ref().and_then(|w| w.jobs),
                working_others: work.as_ref().map(|w| w.others.clone()).unwrap_or_default(),
                main_work_share: work.as_ref().and_then(|w| w.main_share),
                busiest_thread: context.and_then(|c| c.busiest_thread_ratio),
                cpu_wait: context.and_then(|c| c.cpu_wait_ratio),
                stacks: main.and_then(|p| stacks.get(&p.pid)).map(|s| (*s).clone()),
                culprits: snapshot.culprits.clone(),
                workers: context.map(|c| c.workers.count),
                workers_max_cpu: context.and_then(|c| c.workers.max_cpu_ratio),
                workers_cpu: context.and_then(|c| c.workers.cpu_cores),
                workers_system_cpu: context.and_then(|c| c.workers.system_cpu_cores),
                workers_voluntary_switches: context.and_then(|c| c.workers.voluntary_switch_share),
                workers_disk_wait: context.map(|c| c.workers.disk_wait),
                workers_blkio: context.and_then(|c| c.workers.blkio_delay_ratio),
                cgroup_throttled: context.and_then(|c| c.cgroup.as_ref()?.throttled_ratio),
                numa_mismatch: context.and_then(|c| {
                    let node = device.numa_node?;
                    (!c.numa_nodes.is_empty()).then(|| c.numa_nodes.iter().any(|n| *n != node))
                }),
                disk_util,
                iowait: rates.map(|r| r.iowait_ratio),
                psi_io,
                host_cpu: rates.map(|r| r.busy_ratio),
                other_cpu: context
                    .and_then(|c| c.others_cpu_ratio)
                    .or(snapshot.other_cpu_ratio),
                own_cpu: context.and_then(|c| c.own_cpu_ratio),
                job_cpus: context
                    .filter(|c| !c.allowed_cpus.is_empty())
                    .map(|c| c.allowed_cpus.len() as f64),
                steal: rates.map(|r| r.steal_ratio),
                throttled_clock_ratio: throttled_clock_ratio(device),
                job_ingress: network.and_then(|n| Some(n.rates?.receive_bytes_per_second)),
                job_egress: network.and_then(|n| Some(n.rates?.transmit_bytes_per_second)),
                job_interface: network
                    .filter(|n| !n.host_network)
                    .and_then(|n| n.interface.clone()),
                link: link.clone(),
                mount: network.and_then(|n| busiest_mount(&snapshot.network, n)),
                main_process: main.map(|p| format!("pid {} ({})", p.pid, p.command)),
                pod: device
                    .pods
                    .first()
                    .map(|p| format!("{}/{}", p.namespace, p.pod)),
                network_mounts: network
                    .and_then(|n| n.mounts.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|m| format!("{} at {} ({})", m.fstype, m.mount_point, m.device))
                    .collect(),
            }
        })
        .collect()
}

/// The node's physical link (NIC or HCA port) with the highest utilization in either
/// direction; links without a known speed or rates are left out.
fn busiest_link(network: &NetworkSnapshot) -> Option<LinkLoad> {
    let load = |name: String, speed: Option<f64>, rates: Option<LinkRates>, waits| {
        let (speed, rates) = (speed.filter(|s| *s > 0.0)?, rates?);
        Some(LinkLoad {
            name,
            speed_bytes_per_second: speed,
            receive_utilization: (rates.receive_bytes_per_second / speed).min(1.0),
            transmit_utilization: (rates.transmit_bytes_per_second / speed).min(1.0),
            transmit_wait_per_second: waits,
        })
    };
    let nics = network.interfaces.iter().filter_map(|i| {
        load(
            i.counters.name.clone(),
            i.speed_bytes_per_second,
            i.rates,
            None,
        )
    });
    let ports = network
        .infiniband
        .iter()
        .filter(|p| p.active)
        .filter_map(|p| {
            let name = format!("{} port {}", p.counters.device, p.counters.port);
            load(
                name,
                p.rate_bytes_per_second,
                p.rates,
                p.transmit_wait_ticks_per_second,
            )
        });
    nics.chain(ports)
        .max_by(|a, b| a.utilization().total_cmp(&b.utilization()))
}

/// The node's NFS mount with the most requests per second among those the process has
/// mounted (none where its mounts are unknown: a node's mount is not every job's input).
fn busiest_mount(network: &NetworkSnapshot, process: &ProcessNetwork) -> Option<MountLoad> {
    let own = process.mounts.as_ref()?;
    network
        .mounts
        .iter()
        .filter(|m| own.iter().any(|o| o.device == m.device))
        .filter_map(|m| {
            let rates = m.nfs_rates.as_ref()?;
            Some(MountLoad {
                mount_point: m.mount_point.clone(),
                device: m.device.clone(),
                fstype: m.fstype.clone(),
                requests_per_second: rates.operations.iter().map(|o| o.per_second).sum(),
                read_rtt_seconds: rates.operation("READ").map_or(0.0, |r| r.rtt_seconds),
                read_bytes_per_second: rates.read_bytes_per_second,
            })
        })
        .max_by(|a, b| a.requests_per_second.total_cmp(&b.requests_per_second))
}

/// The SM clock against its maximum while a limiting throttle reason holds it down.
fn throttled_clock_ratio(device: &GpuDevice) -> Option<f64> {
    if device.throttle_reasons? & LIMITING_THROTTLE_REASONS == 0 {
        return None;
    }
    let sm = device.clocks.iter().find(|c| c.domain == "sm")?;
    let (now, max) = (sm.hertz?, sm.max_hertz?);
    (max > 0.0).then(|| (now / max).clamp(0.0, 1.0))
}

/// Who does the work on a GPU, from the per-process SM samples.
struct Work {
    processes: u32,
    jobs: Option<u32>,
    others: Vec<String>,
    main_share: Option<f64>,
}

/// The processes doing a real share of a GPU's work; `None` where the driver reports no
/// per-process utilization. A GPU is time-shared when two or more do, whatever their
/// parentage; whether they are one job changes the advice, not the verdict.
fn working(device: &GpuDevice, contexts: &BTreeMap<u32, &ProcessContext>) -> Option<Work> {
    let main = device.processes.first()?;
    let reported: Vec<(&crate::snapshot::GpuProcess, f64)> = device
        .processes
        .iter()
        .filter_map(|p| p.sm_ratio.map(|sm| (p, sm)))
        .collect();
    if reported.is_empty() {
        return None;
    }
    let total: f64 = reported.iter().map(|(_, sm)| sm).sum();
    let main_sm = reported
        .iter()
        .find(|(p, _)| p.pid == main.pid)
        .map_or(0.0, |(_, sm)| *sm);
    let sharers: Vec<&crate::snapshot::GpuProcess> = reported
        .iter()
        .filter(|(_, sm)| *sm >= SHARER_MIN_SM)
        .map(|(p, _)| *p)
        .collect();
    let main_context = contexts.get(&main.pid);
    let mut jobs = Some(1);
    let mut others = Vec::new();
    for p in sharers.iter().filter(|p| p.pid != main.pid) {
        match (main_context, contexts.get(&p.pid)) {
            (Some(m), Some(c)) => {
                if !same_job(m, c) {
                    jobs = jobs.map(|j| j + 1);
                }
                others.push(describe(p.pid, &p.command, c));
            }
            _ => {
                jobs = None;
                others.push(format!("pid {} ({})", p.pid, p.command));
            }
        }
    }
    Some(Work {
        processes: sharers.len() as u32,
        jobs,
        others,
        main_share: (total > 0.0).then(|| (main_sm / total).clamp(0.0, 1.0)),
    })
}

fn hardware_errors(device: &GpuDevice) -> Option<u64> {
    let xids: u64 = device.xid_errors.iter().map(|(_, n)| n).sum();
    Some(xids + device.ecc_uncorrected.unwrap_or(0))
}

/// Usable bandwidth of one PCIe lane of a generation, in Gbit/s (after line encoding).
fn lane_gbits(generation: u32) -> f64 {
    match generation {
        0 | 1 => 2.0,
        2 => 4.0,
        3 => 7.877,
        4 => 15.754,
        5 => 31.508,
        // Generation 6 and later double per generation.
        g => 31.508 * f64::from(1u32 << (g - 5).min(8)),
    }
}

fn pcie_bandwidth_share(device: &GpuDevice) -> Option<f64> {
    let p = device.pcie;
    let now = lane_gbits(p.generation?) * f64::from(p.width?);
    let max = lane_gbits(p.max_generation?) * f64::from(p.max_width?);
    (max > 0.0).then(|| (now / max).min(1.0))
}

/// The independent jobs among a GPU's processes, and a description of each process outside
/// the main (first) process's job. Processes are one job when they share a pod, container or
/// Slurm job, when one descends from the other, or when they are siblings of one launcher
/// (torchrun, mpirun). `None` jobs when a process's host context is missing: its owner is
/// unknown.
fn jobs_on(
    device: &GpuDevice,
    contexts: &BTreeMap<u32, &ProcessContext>,
) -> (Option<u32>, Vec<String>) {
    let found: Option<Vec<&ProcessContext>> = device
        .processes
        .iter()
        .map(|p| contexts.get(&p.pid).copied())
        .collect();
    // A process left out of the top-N list has an unknown owner too.
    let listed_all = device.process_count == Some(device.processes.len() as u32);
    let Some(found) = found.filter(|f| !f.is_empty() && listed_all) else {
        return (None, Vec::new());
    };
    // Label propagation over the "same job" relation: a handful of processes per GPU.
    let mut job: Vec<usize> = (0..found.len()).collect();
    loop {
        let mut changed = false;
        for a in 0..found.len() {
            for b in 0..found.len() {
                if job[b] < job[a] && same_job(found[a], found[b]) {
                    job[a] = job[b];
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let distinct: BTreeSet<usize> = job.iter().copied().collect();
    let others = device
        .processes
        .iter()
        .zip(&found)
        .zip(&job)
        .filter(|(_, j)| **j != job[0])
        .map(|((p, c), _)| describe(p.pid, &p.command, c))
        .collect();
    (Some(distinct.len() as u32), others)
}

fn same_job(a: &ProcessContext, b: &ProcessContext) -> bool {
    let shared = |f: fn(&crate::snapshot::CgroupContext) -> &str| {
        let (Some(x), Some(y)) = (&a.cgroup, &b.cgroup) else {
            return false;
        };
        !f(x).is_empty() && f(x) == f(y)
    };
    shared(|g| &g.pod_uid)
        || shared(|g| &g.container_id)
        || shared(|g| &g.slurm_job)
        || a.descendants.contains(&b.pid)
        || b.descendants.contains(&a.pid)
        || (a.ppid > 1 && a.ppid == b.ppid)
}

/// "pid 812 (python3, pod 6f1c...)": who a process is, for evidence.
fn describe(pid: u32, command: &str, context: &ProcessContext) -> String {
    let owner = context.cgroup.as_ref().and_then(|g| {
        if !g.pod_uid.is_empty() {
            Some(format!("pod {}", g.pod_uid))
        } else if !g.slurm_job.is_empty() {
            Some(format!("Slurm job {}", g.slurm_job))
        } else if !g.container_id.is_empty() {
            Some(format!(
                "container {}",
                &g.container_id[..g.container_id.len().min(12)]
            ))
        } else {
            None
        }
    });
    match owner {
        Some(owner) => format!("pid {pid} ({command}, {owner})"),
        None => format!("pid {pid} ({command})"),
    }
}

/// Mean of the values present over the window; `None` if none is.
pub fn mean(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let (sum, n) = values
        .flatten()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Share of the window in which a flag was set, over the ticks where it is known.
pub fn share(values: impl Iterator<Item = Option<bool>>) -> Option<f64> {
    mean(values.map(|v| v.map(|b| if b { 1.0 } else { 0.0 })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{CgroupContext, GpuProcess, GpuSnapshot};

    fn process(pid: u32, ppid: u32, pod: &str, descendants: &[u32]) -> ProcessContext {
        ProcessContext {
            pid,
            ppid,
            descendants: descendants.to_vec(),
            cgroup: Some(CgroupContext {
                pod_uid: pod.into(),
                ..CgroupContext::default()
            }),
            ..ProcessContext::default()
        }
    }

    /// One GPU holding the given processes (first = main), with their host contexts.
    fn jobs(contexts: Vec<ProcessContext>) -> (Option<u32>, Vec<String>) {
        let device = GpuDevice {
            uuid: "GPU-a".into(),
            up: true,
            process_count: Some(contexts.len() as u32),
            processes: contexts
                .iter()
                .map(|c| GpuProcess {
                    pid: c.pid,
                    command: format!("cmd{}", c.pid),
                    ..GpuProcess::default()
                })
                .collect(),
            ..GpuDevice::default()
        };
        let snapshot = Snapshot {
            gpu: Some(GpuSnapshot {
                nvml_up: true,
                devices: vec![device],
                ..GpuSnapshot::default()
            }),
            processes: contexts,
            ..Snapshot::default()
        };
        let o = observe(&snapshot, 0.0).remove(0);
        (o.independent_jobs, o.other_jobs)
    }

    #[test]
    fn processes_of_one_job_are_one_user_of_the_gpu() {
        // A rank and a loader worker that opened a CUDA context (its descendant).
        let rank = process(10, 5, "", &[11, 12]);
        assert_eq!(
            jobs(vec![rank.clone(), process(11, 10, "", &[])]).0,
            Some(1)
        );
        // Two ranks of one launcher (torchrun's children), no cgroup owner.
        assert_eq!(
            jobs(vec![process(20, 7, "", &[]), process(21, 7, "", &[])]).0,
            Some(1)
        );
        // Two processes of one pod, started by different parents.
        assert_eq!(
            jobs(vec![process(30, 8, "p", &[]), process(31, 9, "p", &[])]).0,
            Some(1)
        );
        // Orphans (reparented to init) are not siblings of a launcher.
        assert_eq!(
            jobs(vec![process(40, 1, "", &[]), process(41, 1, "", &[])]).0,
            Some(2)
        );
    }

    /// Two GPUs, each with one main process, as `observe` groups them: (job, ranks) per GPU.
    fn groups(contexts: Vec<ProcessContext>) -> Vec<(Option<String>, Option<String>)> {
        let devices = contexts
            .iter()
            .enumerate()
            .map(|(i, c)| GpuDevice {
                index: i as u32,
                uuid: format!("GPU-{i}"),
                up: true,
                process_count: Some(1),
                processes: vec![GpuProcess {
                    pid: c.pid,
                    ..GpuProcess::default()
                }],
                ..GpuDevice::default()
            })
            .collect();
        let snapshot = Snapshot {
            gpu: Some(GpuSnapshot {
                nvml_up: true,
                devices,
                ..GpuSnapshot::default()
            }),
            processes: contexts,
            ..Snapshot::default()
        };
        observe(&snapshot, 0.0)
            .into_iter()
            .map(|o| (o.job, o.ranks))
            .collect()
    }

    #[test]
    fn children_of_one_launcher_on_separate_gpus_are_ranks_not_a_job() {
        // torchrun on bare metal: two children of pid 7, no pod, no Slurm job.
        let bare = groups(vec![process(20, 7, "", &[]), process(21, 7, "", &[])]);
        let launcher = Some("launcher:7".to_string());
        assert_eq!(bare, vec![(None, launcher.clone()), (None, launcher)]);
        // In a pod, the pod is both.
        let pod = groups(vec![process(30, 8, "p", &[]), process(31, 9, "p", &[])]);
        assert_eq!(pod[0], (Some("pod:p".into()), Some("pod:p".into())));
        assert_eq!(pod[0], pod[1]);
        // Orphans (reparented to init) are nobody's ranks.
        let orphans = groups(vec![process(40, 1, "", &[]), process(41, 1, "", &[])]);
        assert_eq!(orphans, vec![(None, None), (None, None)]);
    }

    #[test]
    fn independent_jobs_are_counted_and_named() {
        let (count, others) = jobs(vec![
            process(10, 5, "pod-a", &[]),
            process(11, 10, "pod-a", &[]),
            process(812, 6, "pod-b", &[]),
        ]);
        assert_eq!(count, Some(2));
        assert_eq!(others, vec!["pid 812 (cmd812, pod pod-b)".to_string()]);
    }

    #[test]
    fn owners_are_unknown_without_every_host_context() {
        let mut snapshot_contexts = vec![process(10, 5, "pod-a", &[])];
        let (count, _) = jobs(snapshot_contexts.clone());
        assert_eq!(count, Some(1));
        // The second process's context is missing (it could not be read).
        snapshot_contexts.push(process(11, 6, "pod-b", &[]));
        let device = GpuDevice {
            process_count: Some(2),
            processes: vec![
                GpuProcess {
                    pid: 10,
                    ..GpuProcess::default()
                },
                GpuProcess {
                    pid: 99,
                    ..GpuProcess::default()
                },
            ],
            ..GpuDevice::default()
        };
        let contexts: BTreeMap<u32, &ProcessContext> =
            snapshot_contexts.iter().map(|c| (c.pid, c)).collect();
        assert_eq!(jobs_on(&device, &contexts).0, None);
    }

    #[test]
    fn processes_doing_real_work_share_the_gpu_whatever_their_parentage() {
        // Two siblings of one launcher (one job), both working; a third holds a context only.
        let contexts = [
            process(20, 7, "", &[]),
            process(21, 7, "", &[]),
            process(22, 7, "", &[]),
        ];
        let device = GpuDevice {
            process_count: Some(3),
            processes: [(20, 0.3), (21, 0.3), (22, 0.0)]
                .iter()
                .map(|(pid, sm)| GpuProcess {
                    pid: *pid,
                    command: "python3".into(),
                    sm_ratio: Some(*sm),
                    ..GpuProcess::default()
                })
                .collect(),
            ..GpuDevice::default()
        };
        let by_pid: BTreeMap<u32, &ProcessContext> = contexts.iter().map(|c| (c.pid, c)).collect();
        let work = working(&device, &by_pid).unwrap();
        assert_eq!(work.processes, 2);
        assert_eq!(work.jobs, Some(1));
        assert_eq!(work.others, vec!["pid 21 (python3)".to_string()]);
        assert_eq!(work.main_share, Some(0.5));
        // Another job's working process counts as another job; without per-process
        // utilization nothing is known.
        let other = [process(20, 7, "a", &[]), process(21, 8, "b", &[])];
        let by_pid: BTreeMap<u32, &ProcessContext> = other.iter().map(|c| (c.pid, c)).collect();
        assert_eq!(working(&device, &by_pid).unwrap().jobs, Some(2));
        let mut blind = device.clone();
        blind.processes.iter_mut().for_each(|p| p.sm_ratio = None);
        assert!(working(&blind, &by_pid).is_none());
    }

    #[test]
    fn pcie_bandwidth_share_counts_generation_and_width() {
        let link = |generation, width| GpuDevice {
            pcie: crate::snapshot::PcieLink {
                generation: Some(generation),
                width: Some(width),
                max_generation: Some(5),
                max_width: Some(16),
                ..Default::default()
            },
            ..GpuDevice::default()
        };
        assert_eq!(pcie_bandwidth_share(&link(5, 16)), Some(1.0));
        assert!((pcie_bandwidth_share(&link(4, 16)).unwrap() - 0.5).abs() < 0.001);
        assert!((pcie_bandwidth_share(&link(5, 8)).unwrap() - 0.5).abs() < 1e-9);
        assert!(pcie_bandwidth_share(&link(2, 4)).unwrap() < 0.04);
    }
}
