//! The simulated node around the GPUs: its CPUs, disks, pressure and memory, and its
//! busiest processes outside the GPU jobs.

use std::time::Duration;

use super::{wobble, DemoSource, GIB};
use crate::snapshot::{
    CpuRates, CpuSnapshot, CpuStat, CpuTimes, Culprits, DiskCounters, DiskRates, DiskSnapshot,
    MemoryCounters, MemoryRates, MemorySnapshot, NodeProcess, Pressure, PressureLine,
    PressureRates, PressureSnapshot, Snapshot,
};

impl DemoSource {
    /// Fills the node's own figures.
    pub(super) fn host(snapshot: &mut Snapshot, now: Duration) {
        let seconds = now.as_secs_f64();
        let cpus = 64.0;
        snapshot.cpu = Some(CpuSnapshot {
            stat: CpuStat {
                times: CpuTimes {
                    user: 0.4 * cpus * seconds,
                    system: 0.05 * cpus * seconds,
                    idle: 0.51 * cpus * seconds,
                    iowait: 0.04 * cpus * seconds,
                    ..CpuTimes::default()
                },
                cpu_count: cpus as u32,
                per_cpu: Vec::new(),
                procs_running: 40,
                procs_blocked: 5,
                context_switches: (2.0e5 * seconds) as u64,
            },
            rates: Some(CpuRates {
                iowait_ratio: 0.04,
                steal_ratio: 0.0,
                busy_ratio: 0.45,
            }),
            busy_by_cpu: Vec::new(),
        });
        let read = 1.2e9;
        snapshot.disks = vec![DiskSnapshot {
            counters: DiskCounters {
                name: "nvme0n1".into(),
                reads_completed: (9000.0 * seconds) as u64,
                read_bytes: (read * seconds) as u64,
                read_time_ms: (9000.0 * seconds) as u64,
                io_time_ms: (400.0 * seconds) as u64,
                weighted_io_time_ms: (9000.0 * seconds) as u64,
                ..DiskCounters::default()
            },
            rates: Some(DiskRates {
                utilization_ratio: 0.4 + 0.05 * wobble(0, now, 30.0),
                read_await_seconds: 0.001,
                write_await_seconds: 0.0,
                queue_size: 9.0,
                reads_per_second: 9000.0,
                writes_per_second: 0.0,
                read_bytes_per_second: read,
                write_bytes_per_second: 0.0,
            }),
        }];
        let line = |share: f64| PressureLine {
            avg10: share,
            avg60: share,
            avg300: share,
            total_seconds: share * seconds,
        };
        snapshot.pressure = [("cpu", 0.08), ("io", 0.05), ("memory", 0.0)]
            .into_iter()
            .map(|(resource, share)| PressureSnapshot {
                resource,
                pressure: Pressure {
                    some: line(share),
                    full: Some(line(share / 2.0)),
                },
                rates: Some(PressureRates {
                    some_ratio: share,
                    full_ratio: Some(share / 2.0),
                }),
            })
            .collect();
        snapshot.memory = Some(MemorySnapshot {
            counters: MemoryCounters {
                total_bytes: 1024 * GIB,
                available_bytes: 600 * GIB,
                swap_total_bytes: 0,
                swap_free_bytes: 0,
                swapped_in_bytes: 0,
                swapped_out_bytes: 0,
            },
            rates: Some(MemoryRates::default()),
        });
        snapshot.other_cpu_ratio = Some(0.08);
        snapshot.delay_accounting = Some(true);
    }
}

impl DemoSource {
    /// The node's busiest processes outside the GPU jobs: a backup copying the data set's
    /// disk, a mlocate index, the container runtime.
    pub(super) fn culprits(&self) -> Culprits {
        let process = |pid: u32, command: &str, cpu_cores: f64, read: f64| NodeProcess {
            pid,
            command: command.into(),
            cpu_cores,
            read_bytes_per_second: Some(read),
            write_bytes_per_second: Some(0.0),
            ..NodeProcess::default()
        };
        let rsync = NodeProcess {
            pod_uid: format!("de300000-{}-4000-8001-000000000812", self.group()),
            ..process(812, "rsync", 0.41, 310e6)
        };
        let updatedb = process(4021, "updatedb.mlocat", 0.12, 45e6);
        Culprits {
            by_cpu: vec![
                rsync.clone(),
                process(1377, "containerd", 0.18, 0.0),
                updatedb.clone(),
            ],
            by_disk: vec![rsync, updatedb],
        }
    }
}
