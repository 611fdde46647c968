//! A snapshot's GPUs as the analysis sees them: one [`GpuObservation`] per GPU and tick,
//! pulled out of the snapshot (pure).

use std::collections::BTreeMap;

use super::device::{
    hardware_errors, link_copy_excess, main_instance, pcie_bandwidth_share, throttled,
    throttled_clock_ratio,
};
use super::jobs::{jobs_on, working};
use crate::snapshot::GpuObservation;
use crate::snapshot::{
    LinkLoad, LinkRates, MountLoad, NetworkSnapshot, ProcessContext, ProcessCuda, ProcessNetwork,
    ProcessStacks, Snapshot,
};

/// Extracts one observation per GPU from a snapshot taken at `at` seconds.
pub fn observe(snapshot: &Snapshot, at: f64) -> Vec<GpuObservation> {
    let Some(gpu) = &snapshot.gpu else {
        return Vec::new();
    };
    let contexts: BTreeMap<u32, &ProcessContext> =
        snapshot.processes.iter().map(|c| (c.pid, c)).collect();
    let stacks: BTreeMap<u32, &ProcessStacks> =
        snapshot.stacks.iter().map(|s| (s.pid, s)).collect();
    let cuda: BTreeMap<u32, &ProcessCuda> = snapshot.cuda.iter().map(|c| (c.pid, c)).collect();
    // A process that is the main one (holds the most memory) on several GPUs drives them
    // (DataParallel, a process per node): they are one job. A rank's stray context on another
    // rank's GPU (a thread that touched CUDA before its device was chosen: the context users
    // find on GPU 0) holds little memory there and makes nothing one job.
    let mut gpus_per_pid: BTreeMap<u32, u32> = BTreeMap::new();
    for main in gpu.devices.iter().filter_map(|d| d.processes.first()) {
        *gpus_per_pid.entry(main.pid).or_default() += 1;
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
            // What the CUDA probes saw of the main process.
            let main_cuda = main.and_then(|p| cuda.get(&p.pid)).copied();
            let network = main.and_then(|p| networks.get(&p.pid).copied());
            let job_ranks = context.and_then(|c| c.world).map(|w| w.ranks);
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
            let instance = main_instance(device, main);
            GpuObservation {
                at,
                index: device.index,
                uuid: device.uuid.clone(),
                up: device.up,
                busy: device
                    .busy
                    .map(|b| b.mean_ratio)
                    .or(device.utilization.map(|u| u.gpu_ratio))
                    .or(instance.and_then(|m| m.busy_ratio)),
                idle_share: device.busy.map(|b| b.idle_share_ratio),
                sm_activity: device
                    .gpm
                    .map(|g| g.sm_activity_ratio)
                    .or(instance.and_then(|m| m.sm_activity_ratio)),
                memory_used_ratio: device
                    .memory
                    .filter(|m| m.total_bytes > 0)
                    .map(|m| m.used_bytes as f64 / m.total_bytes as f64),
                throttled: throttled(device),
                thermal_margin: device
                    .slowdown_temperature_celsius
                    .zip(device.temperature_celsius)
                    .map(|(s, t)| s - t),
                hardware_errors: hardware_errors(device),
                remap_trouble: device.remapped_rows.is_some_and(|r| r.pending || r.failed),
                pcie_bandwidth_share: pcie_bandwidth_share(device),
                link_copy_excess: link_copy_excess(
                    device,
                    main_cuda.and_then(|c| c.copy_bytes_per_second),
                ),
                pcie_bytes_per_second: device
                    .pcie
                    .tx_bytes_per_second
                    .zip(device.pcie.rx_bytes_per_second)
                    .map(|(tx, rx)| tx + rx),
                creating_communicator: main_cuda.and_then(|c| c.creating_communicator_seconds),
                probed: main_cuda.is_some(),
                probes_silent: main_cuda.and_then(|c| c.silent_seconds),
                driver_wait: main_cuda.and_then(|c| c.driver_wait()),
                step: main_cuda.and_then(|c| c.step),
                backlog_busy: main_cuda.and_then(|c| c.backlog_busy),
                after_sync_within_hold: main_cuda.and_then(|c| c.after_sync.map(|a| a.within_hold)),
                host_paused: main_cuda.and_then(|c| c.after_sync.map(|a| a.paused)),
                launch_queue_full: main_cuda.and_then(|c| c.launch_queue_full),
                queue_busy: main_cuda.and_then(|c| c.queue_busy),
                job_spans_nodes: context.and_then(|c| c.world?.spans_nodes()),
                collective_wait: main_cuda.and_then(|c| c.collective_wait_ratio()),
                point_to_point: main_cuda.map(|c| is_pipeline_stage(c, job_ranks)),
                transfers_per_step: main_cuda
                    .filter(|c| is_pipeline_stage(c, job_ranks))
                    .and_then(|c| c.transfers_per_step),
                processes: device.process_count,
                independent_jobs,
                other_jobs,
                job,
                ranks,
                working_processes: work.as_ref().map(|w| w.processes),
                working_jobs: work.as_ref().and_then(|w| w.jobs),
                working_others: work.as_ref().map(|w| w.others.clone()).unwrap_or_default(),
                main_work_share: work.as_ref().and_then(|w| w.main_share),
                working: None,
                working_peer: None,
                main_pid: main.map(|p| p.pid),
                ras: main.and_then(|p| snapshot.ras.iter().find(|r| r.pid == p.pid).cloned()),
                busiest_thread: context.and_then(|c| c.busiest_thread_ratio),
                cpu_wait: context.and_then(|c| c.cpu_wait_ratio),
                loop_cpu_wait: context.and_then(|c| c.loop_cpu_wait_ratio),
                stacks: main.and_then(|p| stacks.get(&p.pid)).map(|s| (*s).clone()),
                stacked_thread_waited: main.zip(main_cuda).map(|(p, c)| {
                    let followed = stacks.get(&p.pid).and_then(|s| s.followed_thread);
                    c.thread_waited(followed.unwrap_or(p.pid))
                }),
                culprits: snapshot.culprits.clone(),
                workers: context.map(|c| c.workers.count),
                workers_max_cpu: context.and_then(|c| c.workers.max_cpu_ratio),
                workers_cpu: context.and_then(|c| c.workers.cpu_cores),
                workers_system_cpu: context.and_then(|c| c.workers.system_cpu_cores),
                workers_voluntary_switches: context.and_then(|c| c.workers.voluntary_switch_share),
                workers_voluntary_rate: context
                    .and_then(|c| c.workers.voluntary_switches_per_second),
                workers_disk_wait: context.map(|c| c.workers.disk_wait),
                workers_blkio: context.and_then(|c| c.workers.blkio_delay_ratio),
                workers_asleep: context.and_then(|c| c.workers.asleep),
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

/// The most ranks a pipeline stage sends to: the stage after it (activations) and the one
/// before (gradients), the first and last stage of an interleaved schedule each other too.
const STAGE_PEERS_MAX: u32 = 2;

/// Whether a process's NCCL transfers are a pipeline stage's: it issued sends or receives, and
/// its sends went to the stages beside it only. One whose sends went to more ranks exchanges
/// with its whole group, as an all-to-all does (expert parallelism's dispatch and combine,
/// grouped sends and receives to every rank): a collective whose ranks run the same kernels,
/// with no pipeline schedule behind its waits. So does one whose sends went to as many ranks
/// as its job has (`job_ranks`, its launcher's WORLD_SIZE): a stage never sends to itself, an
/// all-to-all does, so a group of two exchanging tokens is told from two stages.
fn is_pipeline_stage(cuda: &ProcessCuda, job_ranks: Option<u32>) -> bool {
    let to_itself = |n: u32| job_ranks.is_some_and(|ranks| n >= ranks);
    cuda.totals.issued_point_to_point()
        && cuda
            .send_peers
            .is_none_or(|n| n <= STAGE_PEERS_MAX && !to_itself(n))
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

#[cfg(test)]
mod tests {

    use super::*;
    use crate::analysis::jobs::tests::process;
    use crate::snapshot::{GpuDevice, GpuProcess, GpuSnapshot};

    /// A GPU per context, each with it as its main process and `others` after it (a GPU's
    /// position, a pid), as `observe` groups them: (job, ranks) per GPU.
    fn groups(
        contexts: Vec<ProcessContext>,
        others: &[(usize, u32)],
    ) -> Vec<(Option<String>, Option<String>)> {
        let devices = contexts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pids =
                    std::iter::once(c.pid).chain(others.iter().filter(|o| o.0 == i).map(|o| o.1));
                let processes: Vec<GpuProcess> = pids
                    .map(|pid| GpuProcess {
                        pid,
                        ..GpuProcess::default()
                    })
                    .collect();
                GpuDevice {
                    index: i as u32,
                    uuid: format!("GPU-{i}"),
                    up: true,
                    process_count: Some(processes.len() as u32),
                    processes,
                    ..GpuDevice::default()
                }
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
        let ranks = || vec![process(20, 7, "", &[]), process(21, 7, "", &[])];
        let bare = groups(ranks(), &[]);
        let launcher = Some("launcher:7".to_string());
        assert_eq!(bare, vec![(None, launcher.clone()), (None, launcher)]);
        // Rank 1's stray context on rank 0's GPU (after rank 0, which holds more memory)
        // leaves them ranks.
        assert_eq!(groups(ranks(), &[(0, 21)]), bare);
        // In a pod, the pod is both.
        let pod = groups(
            vec![process(30, 8, "p", &[]), process(31, 9, "p", &[])],
            &[],
        );
        assert_eq!(pod[0], (Some("pod:p".into()), Some("pod:p".into())));
        assert_eq!(pod[0], pod[1]);
        // One process the main one of both GPUs (DataParallel) makes them one job.
        let job = Some("pid:20".to_string());
        let driven = groups(vec![process(20, 7, "", &[]); 2], &[]);
        assert_eq!(driven, vec![(job.clone(), job); 2]);
        // Orphans (reparented to init) are nobody's ranks.
        let orphans = groups(vec![process(40, 1, "", &[]), process(41, 1, "", &[])], &[]);
        assert_eq!(orphans, vec![(None, None), (None, None)]);
    }

    #[test]
    fn sends_to_the_stages_beside_it_make_a_stage_and_sends_to_every_rank_do_not() {
        use crate::snapshot::Collective;
        let in_job = |sends: u64, send_peers: Option<u32>, job_ranks: Option<u32>| {
            let mut cuda = ProcessCuda {
                send_peers,
                ..ProcessCuda::default()
            };
            cuda.totals.collectives[Collective::Send as usize] = sends;
            is_pipeline_stage(&cuda, job_ranks)
        };
        let with = |sends, send_peers| in_job(sends, send_peers, None);
        // A middle stage: the next stage and the one before.
        assert!(with(40, Some(2)));
        // A last stage only receives activations and sends gradients back: one peer, or no
        // send seen lately.
        assert!(with(40, Some(1)));
        assert!(with(40, None));
        // A rank of a four-rank all-to-all sends to every rank.
        assert!(!with(40, Some(4)));
        // No transfer at all: no stage.
        assert!(!with(0, None));
        // Two ranks of a job: two stages each send to the other only; an all-to-all of the
        // two sends to both, itself included, which no stage does. Without the job's size two
        // peers read as a middle stage's.
        assert!(in_job(40, Some(1), Some(2)));
        assert!(!in_job(40, Some(2), Some(2)));
        assert!(in_job(40, Some(2), None));
        // A middle stage of a four-stage job.
        assert!(in_job(40, Some(2), Some(4)));
    }
}
