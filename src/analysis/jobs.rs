//! Who runs on a GPU: the independent jobs among its processes, and the processes doing a
//! real share of its work.

use std::collections::{BTreeMap, BTreeSet};

use crate::snapshot::{GpuDevice, GpuProcess, ProcessContext};

/// Per-process SM share at or above which a process does a real share of a GPU's work: a
/// helper holding a context (a loader worker that touched CUDA, a monitoring agent) stays far
/// below it.
pub const SHARER_MIN_SM: f64 = 0.05;

/// Who does the work on a GPU, from the per-process SM samples.
pub struct Work {
    /// Processes doing a real share of the work.
    pub processes: u32,
    /// Jobs among them (`None`: an owner is unknown).
    pub jobs: Option<u32>,
    /// The working processes other than the main one, described.
    pub others: Vec<String>,
    /// The main process's share of the work.
    pub main_share: Option<f64>,
}

/// The processes doing a real share of a GPU's work; `None` where the driver reports no
/// per-process utilization. A GPU is time-shared when two or more do, whatever their
/// parentage; whether they are one job changes the advice, not the verdict.
pub fn working(device: &GpuDevice, contexts: &BTreeMap<u32, &ProcessContext>) -> Option<Work> {
    let main = device.processes.first()?;
    let reported: Vec<(&GpuProcess, f64)> = device
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
    let sharers: Vec<&GpuProcess> = reported
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

/// The independent jobs among a GPU's processes, and a description of each process outside
/// the main (first) process's job. Processes are one job when they share a pod, container or
/// Slurm job, when one descends from the other, or when they are siblings of one launcher
/// (torchrun, mpirun). `None` jobs when a process's host context is missing: its owner is
/// unknown.
pub fn jobs_on(
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::snapshot::CgroupContext;

    /// A process with its parent, pod and descendants.
    pub(in crate::analysis) fn process(
        pid: u32,
        ppid: u32,
        pod: &str,
        descendants: &[u32],
    ) -> ProcessContext {
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
        let by_pid: BTreeMap<u32, &ProcessContext> = contexts.iter().map(|c| (c.pid, c)).collect();
        jobs_on(&device, &by_pid)
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
}
