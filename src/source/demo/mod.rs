//! `--demo`: a simulated GPU node, so every metric, verdict, dashboard panel and alert has
//! data on a machine without a GPU. It fills the same snapshot the real sources fill (host,
//! GPUs, process context), and the analysis and exposition run unchanged. Twelve GPUs each
//! show a different case — every bottleneck kind, a two-GPU job with a lagging rank, an idle
//! GPU — and the cases move one GPU along every five minutes so dashboards show change.

mod host;
mod network;

use std::time::Duration;

use super::{Source, SourceError};
use crate::snapshot::{
    Activity, AsleepWorkers, BusySummary, CgroupContext, Collective, CudaThread, CudaTotals,
    CudaWait, FrameShare, GpmMetrics, GpuClock, GpuDevice, GpuMemory, GpuProcess, GpuSnapshot,
    GpuUtilization, NvLinkState, PcieLink, PerActivity, PodRef, ProcessContext, ProcessCuda,
    ProcessStacks, RemappedRows, Snapshot, Step, WorkerSummary, World,
};

/// What a simulated GPU is meant to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Storage-starved input pipeline.
    DataIo,
    /// CPU-starved input pipeline.
    DataCpu,
    /// Main thread pinned.
    HostBound,
    /// Bursty with nothing busy.
    SyncStall,
    /// High utilization, empty SMs.
    KernelEfficiency,
    /// Memory nearly full.
    MemoryPressure,
    /// The fast rank of a two-GPU job.
    JobFastRank,
    /// The lagging rank of the same job: its own loop is slow (host-bound), which makes the
    /// fast rank wait in the collective.
    JobSlowRank,
    /// Three processes share the GPU.
    Contention,
    /// Power-capped below the board's default (a power manager's 500 W of 700), near its
    /// thermal limit.
    Throttling,
    /// A row remap is pending.
    Hardware,
    /// Nothing runs.
    Idle,
}

/// The cases, in GPU order at time zero.
pub const ROLES: [Role; 12] = [
    Role::DataIo,
    Role::DataCpu,
    Role::HostBound,
    Role::SyncStall,
    Role::KernelEfficiency,
    Role::MemoryPressure,
    Role::JobFastRank,
    Role::JobSlowRank,
    Role::Contention,
    Role::Throttling,
    Role::Hardware,
    Role::Idle,
];

/// How long each GPU keeps its case before the cases move one GPU along.
pub const ROTATION: Duration = Duration::from_secs(300);

/// The case of GPU `index` at `now`, with the default rotation.
pub fn role_of(index: usize, now: Duration) -> Role {
    role_at(index, now, ROTATION)
}

/// The case of GPU `index` at `now` when the cases move one GPU along every `rotation`.
pub fn role_at(index: usize, now: Duration, rotation: Duration) -> Role {
    let shift = (now.as_millis() / rotation.as_millis().max(1)) as usize;
    ROLES[(index + ROLES.len() - shift % ROLES.len()) % ROLES.len()]
}

/// A simulated node. Node `n` of a simulated fleet has GPU UUIDs, pod UIDs and pod names of
/// its own and starts its rotation of cases `n` GPUs further along, so that a fleet of demo
/// exporters does not show the same case on the same GPU everywhere.
#[derive(Debug, Clone, Copy)]
pub struct DemoSource {
    /// Which node of a simulated fleet (0 for a single demo node).
    pub node: u32,
    /// How long each GPU keeps its case ([`ROTATION`] unless shortened for a test).
    pub rotation: Duration,
}

impl Default for DemoSource {
    fn default() -> Self {
        DemoSource {
            node: 0,
            rotation: ROTATION,
        }
    }
}

impl DemoSource {
    /// The case of GPU `index` of this node at `now`.
    fn role(&self, index: usize, now: Duration) -> Role {
        role_at(index + self.node as usize, now, self.rotation)
    }

    /// The second group of this node's UUIDs (`de300000-0001-...` for node 1).
    fn group(&self) -> String {
        format!("{:04x}", self.node & 0xffff)
    }

    /// A pod name made unique to this node (node 0 keeps the bare name).
    fn pod_name(&self, name: String) -> String {
        if self.node == 0 {
            name
        } else {
            format!("{name}-n{}", self.node)
        }
    }
}

/// A small deterministic wobble in -1..1, so lines on a dashboard move.
fn wobble(index: usize, now: Duration, period: f64) -> f64 {
    (now.as_secs_f64() / period + index as f64 * 1.7).sin()
}

const GIB: u64 = 1 << 30;

impl DemoSource {
    fn gpu(&self, index: usize, now: Duration) -> (GpuDevice, Vec<ProcessContext>) {
        let role = self.role(index, now);
        let seconds = now.as_secs_f64();
        let (busy, idle_share, sm_activity) = match role {
            Role::DataIo => (0.35, 0.55, 0.3),
            Role::DataCpu => (0.4, 0.45, 0.34),
            Role::HostBound => (0.45, 0.3, 0.38),
            Role::SyncStall => (0.3, 0.65, 0.26),
            Role::KernelEfficiency => (0.96, 0.0, 0.18),
            Role::MemoryPressure | Role::Hardware => (0.92, 0.0, 0.8),
            // Mostly spinning in the collective's kernels, which leave the SMs nearly empty.
            Role::JobFastRank => (0.92, 0.0, 0.35),
            Role::JobSlowRank => (0.45, 0.1, 0.38),
            Role::Contention => (0.55, 0.15, 0.45),
            Role::Throttling => (0.94, 0.0, 0.78),
            Role::Idle => (0.0, 1.0, 0.0),
        };
        let busy = if role == Role::Idle {
            0.0
        } else {
            (busy + 0.02 * wobble(index, now, 20.0)).clamp(0.0, 1.0)
        };
        let total = 80 * GIB;
        let used = match role {
            Role::MemoryPressure => total - total / 70,
            Role::Idle => 0,
            _ => 48 * GIB,
        };
        let temperature = if role == Role::Throttling {
            84.0
        } else {
            55.0 + 10.0 * busy
        };
        let power_limit = if role == Role::Throttling {
            500.0
        } else {
            700.0
        };
        let power = if role == Role::Throttling {
            power_limit
        } else {
            90.0 + 520.0 * busy
        };
        let numa = (index / 6) as u32;
        let processes = match role {
            Role::Idle => 0,
            Role::Contention => 3,
            _ => 1,
        };
        let gpu_processes: Vec<GpuProcess> = (0..processes)
            .map(|p| GpuProcess {
                pid: 100_000 + index as u32 * 10 + p,
                command: if p == 0 {
                    "python3".into()
                } else {
                    "jupyter-kernel".into()
                },
                kind: "compute",
                used_memory_bytes: used / u64::from(processes.max(1)),
                sm_ratio: Some(busy / f64::from(processes.max(1))),
                memory_ratio: Some(busy * 0.5),
                gpu_instance_id: None,
            })
            .collect();
        let contexts = gpu_processes
            .iter()
            .enumerate()
            .map(|(p, process)| self.context(index, role, process.pid, numa, p == 0))
            .collect();
        let device = GpuDevice {
            index: index as u32,
            uuid: format!("GPU-de300000-{}-4000-8000-{index:012}", self.group()),
            model: "NVIDIA H100 80GB HBM3 (simulated)".into(),
            vbios_version: "96.00.99.00.01".into(),
            architecture: "Hopper".into(),
            brand: "Tesla".into(),
            pci_bus_id: format!("00000000:{:02x}:00.0", 0x18 + index * 0x10),
            numa_node: Some(numa),
            cpu_affinity: Some(if numa == 0 {
                "0-31".into()
            } else {
                "32-63".into()
            }),
            up: true,
            error: String::new(),
            utilization: Some(GpuUtilization {
                gpu_ratio: busy,
                memory_ratio: busy * 0.6,
            }),
            busy: Some(BusySummary {
                mean_ratio: busy,
                max_ratio: if idle_share > 0.0 {
                    1.0
                } else {
                    (busy + 0.03).min(1.0)
                },
                idle_share_ratio: idle_share,
                samples: 6,
            }),
            memory: Some(GpuMemory {
                total_bytes: total,
                used_bytes: used,
            }),
            temperature_celsius: Some(temperature),
            slowdown_temperature_celsius: Some(87.0),
            power_watts: Some(power),
            power_limit_watts: Some(power_limit),
            power_limit_default_watts: Some(700.0),
            performance_state: Some(if role == Role::Idle { 8 } else { 0 }),
            // SXM boards are cooled by the chassis: no fan of their own.
            fan_speed_ratio: None,
            encoder_ratio: Some(0.0),
            decoder_ratio: Some(0.0),
            energy_joules: Some(1.0e9 + power * seconds),
            clocks: vec![
                GpuClock {
                    domain: "sm",
                    hertz: Some(if role == Role::Throttling {
                        1.41e9
                    } else {
                        1.98e9
                    }),
                    max_hertz: Some(1.98e9),
                },
                GpuClock {
                    domain: "memory",
                    hertz: Some(2.619e9),
                    max_hertz: Some(2.619e9),
                },
            ],
            throttle_reasons: Some(match role {
                Role::Throttling => 0x4,
                Role::Idle => 0x1,
                _ => 0,
            }),
            pcie: PcieLink {
                generation: Some(5),
                width: Some(16),
                max_generation: Some(5),
                max_width: Some(16),
                tx_bytes_per_second: Some(2.0e9 * busy),
                rx_bytes_per_second: Some(6.0e9 * busy),
                replays: Some(0),
            },
            ecc_corrected: Some(0),
            ecc_uncorrected: Some(0),
            violation_power_seconds: Some(if role == Role::Throttling {
                0.6 * seconds
            } else {
                0.0
            }),
            violation_thermal_seconds: Some(0.0),
            remapped_rows: Some(RemappedRows {
                correctable: 0,
                uncorrectable: u64::from(role == Role::Hardware),
                pending: role == Role::Hardware,
                failed: false,
            }),
            nvlink: Some(NvLinkState {
                links: vec![true; 18],
                tx_bytes: Some((4.0e10 * busy * seconds) as u64),
                rx_bytes: Some((4.0e10 * busy * seconds) as u64),
            }),
            gpm: Some(GpmMetrics {
                sm_activity_ratio: sm_activity,
                sm_occupancy_ratio: sm_activity * 0.45,
                tensor_activity_ratio: sm_activity * 0.6,
                dram_bandwidth_ratio: sm_activity * 0.5,
            }),
            xid_errors: Vec::new(),
            mig_enabled: Some(false),
            mig_devices: Vec::new(),
            processes: gpu_processes,
            process_count: Some(processes),
            pods: vec![self.pod(index, role)],
            allocatable: Some(true),
            // The idle GPU is assigned to a notebook nobody uses: allocated but idle.
            allocated_idle_seconds: (role == Role::Idle).then_some(seconds + 3600.0),
            allocated_idle: role == Role::Idle,
            unsupported: vec!["fans"],
        };
        (device, contexts)
    }

    /// The pod each simulated GPU is assigned to.
    fn pod(&self, index: usize, role: Role) -> PodRef {
        let (namespace, pod) = match role {
            Role::JobFastRank | Role::JobSlowRank => ("nlp", "llm-ddp-0".to_string()),
            Role::Idle => ("research", "notebook-7".to_string()),
            _ if index < 6 => ("vision", format!("train-{index}")),
            _ => ("nlp", format!("finetune-{index}")),
        };
        PodRef {
            namespace: namespace.into(),
            pod: self.pod_name(pod),
            container: "trainer".into(),
        }
    }

    fn context(&self, index: usize, role: Role, pid: u32, numa: u32, main: bool) -> ProcessContext {
        let (busiest, worker_max, workers_cpu, disk_wait, blkio, read_rate) = match role {
            Role::DataIo => (0.6, 0.35, 2.4, 5, 2.5, 9.0e8),
            Role::DataCpu => (0.55, 1.0, 7.9, 0, 0.0, 1.5e8),
            Role::HostBound => (0.99, 0.3, 2.0, 0, 0.0, 1.0e8),
            Role::SyncStall => (0.25, 0.15, 0.8, 0, 0.0, 5.0e7),
            Role::Idle => (0.0, 0.0, 0.0, 0, 0.0, 0.0),
            _ => (0.6, 0.4, 3.0, 0, 0.1, 2.0e8),
        };
        let workers = if main && role != Role::Idle { 8 } else { 0 };
        // The two ranks of the simulated job share one pod.
        let pod = match role {
            Role::JobFastRank | Role::JobSlowRank => {
                format!("de300000-{}-4000-8000-00000000006a", self.group())
            }
            // The notebooks on the contended GPU belong to other pods.
            Role::Contention if !main => {
                format!("de300000-{}-4000-8001-{pid:012}", self.group())
            }
            _ => format!("de300000-{}-4000-8000-{index:012}", self.group()),
        };
        ProcessContext {
            pid,
            ppid: pid - 50_000,
            state: if busiest > 0.9 { 'R' } else { 'S' },
            threads: 48,
            uid: Some(1000),
            resident_bytes: Some(12 * GIB),
            // A fixed start: 2026-11-30 08:00 UTC.
            start_time_seconds: Some(1_796_025_600.0),
            cpu_user_seconds: 1000.0,
            cpu_system_seconds: 100.0,
            cpu_cores: Some(busiest * 1.4),
            busiest_thread_ratio: Some(busiest),
            cpu_wait_ratio: Some(0.1),
            loop_cpu_wait_ratio: Some(0.02),
            voluntary_switches: 50_000,
            involuntary_switches: 2_000,
            blkio_delay_seconds: Some(blkio * 10.0),
            read_bytes: Some(10 * GIB),
            allowed_cpus: (0..32).collect(),
            others_cpu_ratio: None,
            own_cpu_ratio: None,
            numa_nodes: vec![numa],
            workers: WorkerSummary {
                count: workers,
                cpu_cores: Some(if workers > 0 { workers_cpu } else { 0.0 }),
                // Storage-bound workers spend their CPU in reads; decoders in user space.
                system_cpu_cores: Some(if workers > 0 && disk_wait > 0 {
                    0.6 * workers_cpu
                } else if workers > 0 {
                    0.05 * workers_cpu
                } else {
                    0.0
                }),
                voluntary_switch_share: Some(if disk_wait > 0 { 0.9 } else { 0.3 }),
                // A read a block blocks; a decoder sleeps once a batch.
                voluntary_switches_per_second: Some(if disk_wait > 0 { 2000.0 } else { 5.0 }),
                max_cpu_ratio: Some(if workers > 0 { worker_max } else { 0.0 }),
                running: if workers > 0 {
                    8 - disk_wait.min(8) - 2
                } else {
                    0
                },
                disk_wait: if workers > 0 { disk_wait } else { 0 },
                zombie: 0,
                blkio_delay_ratio: Some(if workers > 0 { blkio } else { 0.0 }),
                read_bytes_per_second: Some(if workers > 0 { read_rate } else { 0.0 }),
                cpu_wait_ratio: Some(if workers > 0 { 0.05 } else { 0.0 }),
                // The two asleep read local files (storage-bound) or wait on their index
                // queues (the others).
                asleep: (workers > 0).then_some(AsleepWorkers {
                    sampled: 2,
                    remote: 0,
                    local_file: if disk_wait > 0 { 2 } else { 0 },
                }),
            },
            // wandb-core and the torch.compile sidecar, idle between compiles.
            other_children: WorkerSummary {
                count: 2,
                cpu_cores: Some(0.02),
                system_cpu_cores: Some(0.005),
                max_cpu_ratio: Some(0.015),
                ..WorkerSummary::default()
            },
            descendants: (1..=workers + 2).map(|w| pid + 1_000_000 + w).collect(),
            cgroup: Some(CgroupContext {
                pod_uid: pod,
                container_id: format!("{:064x}", 0xde30_0000u64 + pid as u64),
                slurm_job: String::new(),
                cpu_quota_cores: Some(32.0),
                throttled_ratio: Some(0.0),
                pressure: Vec::new(),
            }),
            // The job's two ranks, started by torchrun on this node.
            world: matches!(role, Role::JobFastRank | Role::JobSlowRank).then_some(World {
                ranks: 2,
                local_ranks: Some(2),
                nodes: None,
            }),
        }
    }
}

impl DemoSource {
    /// Where a case's main thread would be seen in its Python stack samples (the frames the
    /// stacks source quotes: the innermost of the job's own code).
    fn stacks(role: Role, pid: u32) -> ProcessStacks {
        // Shares in Activity::ALL order: data_loader, gpu_sync, collective, python, other.
        let (shares, function, location): ([f64; 5], &str, &str) = match role {
            Role::DataIo | Role::DataCpu => (
                [0.7, 0.05, 0.0, 0.2, 0.05],
                "train",
                "/workspace/train.py:61",
            ),
            Role::SyncStall => (
                [0.02, 0.6, 0.0, 0.33, 0.05],
                "train_step",
                "/workspace/train.py:88",
            ),
            // The fast rank waits in the collective for the slow one, which computes.
            Role::JobFastRank => (
                [0.05, 0.05, 0.6, 0.25, 0.05],
                "average_gradients",
                "/workspace/train.py:97",
            ),
            Role::JobSlowRank => (
                [0.05, 0.05, 0.1, 0.75, 0.05],
                "Transformer.forward",
                "/workspace/model.py:142",
            ),
            Role::Idle => ([0.0, 0.0, 0.0, 0.0, 1.0], "sleep", "/workspace/serve.py:12"),
            _ => (
                [0.05, 0.1, 0.0, 0.8, 0.05],
                "Transformer.forward",
                "/workspace/model.py:142",
            ),
        };
        let shares = PerActivity(shares);
        let (strongest, share) = shares
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or((Activity::Other, 0.0), |(a, s)| (a, *s));
        ProcessStacks {
            pid,
            samples: 30,
            shares,
            recent_samples: 10,
            recent_shares: shares,
            loader_queued: 0.0,
            recent_loader_queued: 0.0,
            followed_thread: None,
            top_frames: vec![FrameShare {
                function: function.into(),
                location: location.into(),
                activity: strongest,
                share,
            }],
        }
    }
}

impl DemoSource {
    /// What a case's process asks of the CUDA driver (the probes' view): a step's launches
    /// from the main thread and the autograd engine's, its batch uploaded and its loss read
    /// back, and the main thread's share of time inside driver waits (its stack samples' share
    /// in a sync: the probes time what the samples see).
    fn cuda(role: Role, pid: u32, now: Duration) -> ProcessCuda {
        let seconds = now.as_secs_f64();
        let wait_ratio = Self::stacks(role, pid).shares[Activity::GpuSync];
        let launches = if role == Role::Idle { 0.0 } else { 2400.0 };
        let steps = if role == Role::Idle { 0.0 } else { 20.0 };
        // The job's ranks all-reduce their gradients: four 25 MB DDP buckets a step.
        let (mut collectives, mut collective_bytes) = ([0; 7], [0; 7]);
        if matches!(role, Role::JobFastRank | Role::JobSlowRank) {
            let issued = (4.0 * steps * seconds) as u64;
            collectives[Collective::AllReduce as usize] = issued;
            collective_bytes[Collective::AllReduce as usize] = issued * (25 << 20);
        }
        let mut wait_seconds = [0.0; 4];
        wait_seconds[CudaWait::Stream as usize] = wait_ratio * 0.8 * seconds;
        wait_seconds[CudaWait::Copy as usize] = wait_ratio * 0.2 * seconds;
        let thread = |tid, launches_per_second, wait_ratio| CudaThread {
            tid,
            launches_per_second,
            wait_ratio,
        };
        ProcessCuda {
            pid,
            totals: CudaTotals {
                launches: (launches * seconds) as u64,
                graph_launches: 0,
                copies_to_device: (steps * seconds) as u64,
                bytes_to_device: (steps * seconds) as u64 * (6 << 20),
                copies_to_host: (steps * seconds) as u64,
                bytes_to_host: (steps * seconds) as u64 * 4,
                wait_seconds,
                collectives,
                collective_bytes,
            },
            threads: if role == Role::Idle {
                Vec::new()
            } else {
                // The engine's thread launches the backward pass (two thirds of the kernels).
                vec![
                    thread(pid + 1, launches * 2.0 / 3.0, 0.0),
                    thread(pid, launches / 3.0, wait_ratio),
                ]
            },
            // Twenty steps a second at its best; the job's ranks step together at the
            // straggler's pace, behind the best they had before it slowed.
            step: (role != Role::Idle).then(|| {
                let slowed = matches!(role, Role::JobFastRank | Role::JobSlowRank);
                Step {
                    seconds: if slowed { 0.08 } else { 0.05 },
                    best_seconds: 0.05,
                }
            }),
            ..ProcessCuda::default()
        }
    }
}

impl Source for DemoSource {
    fn name(&self) -> &'static str {
        "demo"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        Self::host(snapshot, now);
        let mut devices = Vec::new();
        let mut mains = Vec::new();
        for index in 0..ROLES.len() {
            let (device, contexts) = self.gpu(index, now);
            if let Some(main) = device.processes.first() {
                let role = self.role(index, now);
                snapshot.stacks.push(Self::stacks(role, main.pid));
                snapshot.cuda.push(Self::cuda(role, main.pid, now));
                mains.push((main.pid, role));
            }
            devices.push(device);
            snapshot.processes.extend(contexts);
        }
        snapshot.processes.sort_by_key(|c| c.pid);
        snapshot.network = network::network(now, &mains);
        snapshot.gpu = Some(GpuSnapshot {
            nvml_up: true,
            nvml_error: String::new(),
            driver_version: "550.54.15 (simulated)".into(),
            cuda_driver_version: "12.4".into(),
            devices,
            unanswered_processes: Vec::new(),
        });
        if snapshot.culprits_wanted {
            snapshot.culprits = Some(self.culprits());
        }
        snapshot.simulated = true;
        Ok(())
    }
}
