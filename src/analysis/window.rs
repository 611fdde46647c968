//! One GPU's observations averaged over the analysis window: the figures every rule and the
//! attribution read.

use super::observation::GpuObservation;
use super::{LinkLoad, MountLoad, Sharing, WindowFigures};

/// Averages one GPU's observations (oldest first) over the window.
pub fn window_figures(window: &[&GpuObservation]) -> WindowFigures {
    let m = |f: fn(&GpuObservation) -> Option<f64>| mean(window.iter().map(|o| f(o)));
    let counts =
        |f: fn(&GpuObservation) -> Option<u32>| mean(window.iter().map(|o| f(o).map(f64::from)));
    let errors: Vec<u64> = window.iter().filter_map(|o| o.hardware_errors).collect();
    WindowFigures {
        up: window.iter().all(|o| o.up),
        busy: m(|o| o.busy),
        idle_share: m(|o| o.idle_share),
        sm_activity: m(|o| o.sm_activity),
        memory_used_ratio: m(|o| o.memory_used_ratio),
        memory_used_peak: window
            .iter()
            .filter_map(|o| o.memory_used_ratio)
            .reduce(f64::max),
        throttled_share: share(window.iter().map(|o| o.throttled)),
        thermal_margin: m(|o| o.thermal_margin),
        new_hardware_errors: errors
            .first()
            .zip(errors.last())
            .map(|(a, b)| b.saturating_sub(*a)),
        remap_trouble: window.last().is_some_and(|o| o.remap_trouble),
        pcie_bandwidth_share: window.last().and_then(|o| o.pcie_bandwidth_share),
        processes: counts(|o| o.processes),
        sharing: counts(|o| o.processes).map(|processes| Sharing {
            processes,
            independent_jobs: window.last().and_then(|o| o.independent_jobs),
            others: window
                .last()
                .map(|o| o.other_jobs.clone())
                .unwrap_or_default(),
            working: window.last().and_then(|o| o.working_processes),
            working_jobs: window.last().and_then(|o| o.working_jobs),
            working_others: window
                .last()
                .map(|o| o.working_others.clone())
                .unwrap_or_default(),
            main_work_share: m(|o| o.main_work_share),
        }),
        busiest_thread: m(|o| o.busiest_thread),
        workers: counts(|o| o.workers),
        workers_max_cpu: m(|o| o.workers_max_cpu),
        workers_disk_wait: counts(|o| o.workers_disk_wait),
        workers_blkio: m(|o| o.workers_blkio),
        cgroup_throttled: m(|o| o.cgroup_throttled),
        numa_mismatch_share: share(window.iter().map(|o| o.numa_mismatch)),
        disk_util: m(|o| o.disk_util),
        iowait: m(|o| o.iowait),
        psi_io: m(|o| o.psi_io),
        host_cpu: m(|o| o.host_cpu),
        other_cpu: m(|o| o.other_cpu),
        own_cpu: m(|o| o.own_cpu),
        job_cpus: m(|o| o.job_cpus),
        throttled_clock_ratio: m(|o| o.throttled_clock_ratio),
        cpu_wait: m(|o| o.cpu_wait),
        stacks: window.last().and_then(|o| o.stacks.clone()),
        culprits: window.iter().rev().find_map(|o| o.culprits.clone()),
        workers_cpu: m(|o| o.workers_cpu),
        workers_system_cpu: m(|o| o.workers_system_cpu),
        workers_voluntary_switches: m(|o| o.workers_voluntary_switches),
        steal: m(|o| o.steal),
        job_gap: None,
        collective_busy_cap: None,
        job_ingress: m(|o| o.job_ingress),
        job_egress: m(|o| o.job_egress),
        job_interface: window.last().and_then(|o| o.job_interface.clone()),
        link: window
            .last()
            .and_then(|o| o.link.clone())
            .map(|last| LinkLoad {
                receive_utilization: mean_of(window, |o| {
                    o.link.as_ref().map(|l| l.receive_utilization)
                }),
                transmit_utilization: mean_of(window, |o| {
                    o.link.as_ref().map(|l| l.transmit_utilization)
                }),
                transmit_wait_per_second: m(|o| o.link.as_ref()?.transmit_wait_per_second),
                ..last
            }),
        mount: window
            .last()
            .and_then(|o| o.mount.clone())
            .map(|last| MountLoad {
                requests_per_second: mean_of(window, |o| {
                    o.mount.as_ref().map(|l| l.requests_per_second)
                }),
                read_rtt_seconds: mean_of(window, |o| o.mount.as_ref().map(|l| l.read_rtt_seconds)),
                read_bytes_per_second: mean_of(window, |o| {
                    o.mount.as_ref().map(|l| l.read_bytes_per_second)
                }),
                ..last
            }),
        network_mounts: window
            .last()
            .map(|o| o.network_mounts.clone())
            .unwrap_or_default(),
        main_process: window.last().and_then(|o| o.main_process.clone()),
        pod: window.last().and_then(|o| o.pod.clone()),
    }
}

/// The mean of a figure over the ticks that have it (0 where none has: only called for a
/// figure the last tick has).
fn mean_of(window: &[&GpuObservation], f: impl Fn(&GpuObservation) -> Option<f64>) -> f64 {
    mean(window.iter().map(|o| f(o))).unwrap_or(0.0)
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
