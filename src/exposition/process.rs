//! Families of the host context of each GPU process: CPU, threads, state, loader workers and
//! cgroup.

use std::collections::{BTreeSet, HashMap};

use super::gpu::{gpu_key, key_and, per_gpu};
use super::*;
use crate::snapshot::{Activity, GpuSnapshot, ProcessContext, ProcessStacks};

/// Process states as labelled, and the /proc letters that map to each.
const PROCESS_STATES: [(&str, &[char]); 6] = [
    ("running", &['R']),
    ("sleeping", &['S']),
    ("disk_wait", &['D']),
    ("zombie", &['Z']),
    ("stopped", &['T', 't']),
    ("idle", &['I']),
];

/// The four labels of a GPU process series plus one more.
fn and<'a>(base: &[&'a str; 4], extra: &'a str) -> [&'a str; 5] {
    [base[0], base[1], base[2], base[3], extra]
}

/// Where each GPU process's main thread was over the stack window: one series per activity
/// (a fixed set of five), for the processes whose stacks could be read.
pub(super) fn process_stack_families(
    gpu: &GpuSnapshot,
    stacks: &[ProcessStacks],
    out: &mut Vec<Family>,
) {
    let mut activity = Family::new(&PROC_ACTIVITY);
    let by_pid: HashMap<u32, &ProcessStacks> = stacks.iter().map(|s| (s.pid, s)).collect();
    for device in gpu.devices.iter().filter(|d| d.up) {
        let index = device.index.to_string();
        for process in &device.processes {
            let Some(seen) = by_pid.get(&process.pid) else {
                continue;
            };
            let pid = process.pid.to_string();
            let base = [index.as_str(), &device.uuid, &pid, &process.command];
            for kind in Activity::ALL {
                activity.add(&and(&base, kind.name()), seen.share(kind));
            }
        }
    }
    out.push(activity);
}

/// Host context of each GPU process, labelled like its GPU process series.
pub(super) fn process_context_families(
    gpu: &GpuSnapshot,
    contexts: &[ProcessContext],
    out: &mut Vec<Family>,
) {
    per_gpu(out, &GPU_PROCESSES, &gpu.devices, |g| {
        g.process_count.map(f64::from)
    });
    let mut cpu_seconds = Family::new(&PROC_CPU_SECONDS);
    let mut cpu_cores = Family::new(&PROC_CPU_CORES);
    let mut busiest = Family::new(&PROC_BUSIEST_THREAD);
    let mut cpu_wait = Family::new(&PROC_CPU_WAIT);
    let mut loop_cpu_wait = Family::new(&PROC_LOOP_CPU_WAIT);
    let mut threads = Family::new(&PROC_THREADS);
    let mut switches = Family::new(&PROC_SWITCHES);
    let mut blkio = Family::new(&PROC_BLKIO);
    let mut read_bytes = Family::new(&PROC_READ_BYTES);
    let mut state = Family::new(&PROC_STATE);
    let mut allowed = Family::new(&PROC_ALLOWED_CPUS);
    let mut numa = Family::new(&PROC_NUMA_MISMATCH);
    let mut workers = Family::new(&WORKERS);
    let mut asleep_on = Family::new(&WORKERS_ASLEEP_ON);
    let mut others = Family::new(&OTHER_CHILDREN);
    let mut others_cpu = Family::new(&OTHER_CHILDREN_CPU);
    let mut workers_cpu = Family::new(&WORKERS_CPU);
    let mut workers_max = Family::new(&WORKERS_MAX_CPU);
    let mut workers_state = Family::new(&WORKERS_STATE);
    let mut workers_blkio = Family::new(&WORKERS_BLKIO);
    let mut workers_read = Family::new(&WORKERS_READ);
    let mut cgroup_info = Family::new(&CGROUP_INFO);
    let mut quota = Family::new(&CGROUP_QUOTA);
    let mut resident = Family::new(&PROC_RESIDENT);
    let mut started = Family::new(&PROC_START_TIME);
    let mut throttled_ratio = Family::new(&CGROUP_THROTTLED_RATIO);
    let mut pressure = Family::new(&CGROUP_PRESSURE);
    let mut slurm_jobs = Family::new(&GPU_SLURM_JOB);
    let by_pid: HashMap<u32, &ProcessContext> = contexts.iter().map(|c| (c.pid, c)).collect();
    for device in gpu.devices.iter().filter(|d| d.up) {
        let index = device.index.to_string();
        let jobs: BTreeSet<&str> = device
            .processes
            .iter()
            .filter_map(|p| by_pid.get(&p.pid)?.cgroup.as_ref())
            .map(|g| g.slurm_job.as_str())
            .filter(|job| !job.is_empty())
            .collect();
        for job in jobs {
            slurm_jobs.add(&key_and(&gpu_key(device), job), 1.0);
        }
        for process in &device.processes {
            let Some(c) = by_pid.get(&process.pid) else {
                continue;
            };
            let pid = process.pid.to_string();
            let base = [index.as_str(), &device.uuid, &pid, &process.command];
            cpu_seconds.add(&and(&base, "user"), c.cpu_user_seconds);
            cpu_seconds.add(&and(&base, "system"), c.cpu_system_seconds);
            let optional = [
                (&mut cpu_cores, c.cpu_cores),
                (&mut busiest, c.busiest_thread_ratio),
                (&mut cpu_wait, c.cpu_wait_ratio),
                (&mut loop_cpu_wait, c.loop_cpu_wait_ratio),
                (&mut blkio, c.blkio_delay_seconds),
                (&mut read_bytes, c.read_bytes.map(|b| b as f64)),
                (&mut resident, c.resident_bytes.map(|b| b as f64)),
                (&mut started, c.start_time_seconds),
            ];
            for (family, value) in optional {
                if let Some(v) = value {
                    family.add(&base, v);
                }
            }
            threads.add(&base, f64::from(c.threads));
            switches.add(&and(&base, "voluntary"), c.voluntary_switches as f64);
            switches.add(&and(&base, "involuntary"), c.involuntary_switches as f64);
            if let Some((name, _)) = PROCESS_STATES.iter().find(|(_, l)| l.contains(&c.state)) {
                state.add(&and(&base, name), 1.0);
            }
            allowed.add(&base, c.allowed_cpus.len() as f64);
            if let (Some(node), false) = (device.numa_node, c.numa_nodes.is_empty()) {
                numa.add(&base, flag(c.numa_nodes.iter().any(|n| *n != node)));
            }
            let w = &c.workers;
            workers.add(&base, f64::from(w.count));
            others.add(&base, f64::from(c.other_children.count));
            if let Some(a) = w.asleep {
                let idle = a.sampled - a.remote - a.local_file;
                for (on, count) in [
                    ("remote", a.remote),
                    ("local_file", a.local_file),
                    ("idle", idle),
                ] {
                    asleep_on.add(&and(&base, on), f64::from(count));
                }
            }
            let optional = [
                (&mut others_cpu, c.other_children.cpu_cores),
                (&mut workers_cpu, w.cpu_cores),
                (&mut workers_max, w.max_cpu_ratio),
                (&mut workers_blkio, w.blkio_delay_ratio),
                (&mut workers_read, w.read_bytes_per_second),
            ];
            for (family, value) in optional {
                if let Some(v) = value {
                    family.add(&base, v);
                }
            }
            for (name, count) in [
                ("running", w.running),
                ("disk_wait", w.disk_wait),
                ("zombie", w.zombie),
            ] {
                workers_state.add(&and(&base, name), f64::from(count));
            }
            let uid = c.uid.map(|u| u.to_string()).unwrap_or_default();
            let owner = c.cgroup.clone().unwrap_or_default();
            cgroup_info.add(
                &[
                    base[0],
                    base[1],
                    base[2],
                    base[3],
                    &uid,
                    &owner.pod_uid,
                    &owner.container_id,
                    &owner.slurm_job,
                ],
                1.0,
            );
            let Some(g) = &c.cgroup else { continue };
            let optional = [
                (&mut quota, g.cpu_quota_cores),
                (&mut throttled_ratio, g.throttled_ratio),
            ];
            for (family, value) in optional {
                if let Some(v) = value {
                    family.add(&base, v);
                }
            }
            for p in &g.pressure {
                // "some" says the cgroup waits; "full" adds little per process (the host's
                // gpu_host_pressure_stalled_ratio keeps both).
                if let Some(rates) = p.rates {
                    let labels = [base[0], base[1], base[2], base[3], p.resource, "some"];
                    pressure.add(&labels, rates.some_ratio);
                }
            }
        }
    }
    out.extend([
        cpu_seconds,
        cpu_cores,
        busiest,
        cpu_wait,
        loop_cpu_wait,
        threads,
        switches,
        blkio,
        read_bytes,
        state,
        allowed,
        numa,
        workers,
        asleep_on,
        others,
        others_cpu,
        workers_cpu,
        workers_max,
        workers_state,
        workers_blkio,
        workers_read,
        cgroup_info,
        quota,
        resident,
        started,
        throttled_ratio,
        pressure,
        slurm_jobs,
    ]);
}
