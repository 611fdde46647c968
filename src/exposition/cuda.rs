//! Families of the CUDA boundary: what each GPU process asked of the driver (source::cuda).

use std::collections::HashMap;

use super::*;
use crate::snapshot::{Collective, CudaWait, GpuSnapshot, ProcessCuda};

/// Per GPU process the probes watch: launches and copies by kind, wait time by kind, NCCL
/// collectives and bytes by operation (where NCCL is mapped), the threads that drive the GPU,
/// the main thread's share of time in waits, the share in launches held by a full queue, the
/// longest wait going on, a communicator's creation going on and the loop's step.
/// Bounded: a fixed set of series per process,
/// none per kernel or per call.
pub(super) fn process_cuda_families(
    gpu: &GpuSnapshot,
    cuda: &[ProcessCuda],
    out: &mut Vec<Family>,
) {
    let by_pid: HashMap<u32, &ProcessCuda> = cuda.iter().map(|p| (p.pid, p)).collect();
    let mut launches = Family::new(&PROC_CUDA_LAUNCHES);
    let mut copies = Family::new(&PROC_CUDA_COPIES);
    let mut bytes = Family::new(&PROC_CUDA_COPY_BYTES);
    let mut waits = Family::new(&PROC_CUDA_WAIT);
    let mut collectives = Family::new(&PROC_NCCL_COLLECTIVES);
    let mut collective_bytes = Family::new(&PROC_NCCL_BYTES);
    let mut threads = Family::new(&PROC_CUDA_THREADS);
    let mut main_wait = Family::new(&PROC_CUDA_MAIN_WAIT);
    let mut queue_full = Family::new(&PROC_CUDA_QUEUE_FULL);
    let mut ongoing = Family::new(&PROC_CUDA_WAITING);
    let mut creating = Family::new(&PROC_NCCL_CREATING);
    let mut step = Family::new(&PROC_STEP);
    let mut best = Family::new(&PROC_STEP_BEST);
    for device in gpu.devices.iter().filter(|d| d.up) {
        let index = device.index.to_string();
        for process in &device.processes {
            let Some(seen) = by_pid.get(&process.pid) else {
                continue;
            };
            let pid = process.pid.to_string();
            let base = [
                index.as_str(),
                device.uuid.as_str(),
                pid.as_str(),
                process.command.as_str(),
            ];
            let with = |extra: &'static str| [base[0], base[1], base[2], base[3], extra];
            let t = &seen.totals;
            launches.add(&with("kernel"), t.launches as f64);
            launches.add(&with("graph"), t.graph_launches as f64);
            copies.add(&with("to_device"), t.copies_to_device as f64);
            copies.add(&with("to_host"), t.copies_to_host as f64);
            bytes.add(&with("to_device"), t.bytes_to_device as f64);
            bytes.add(&with("to_host"), t.bytes_to_host as f64);
            for kind in CudaWait::ALL {
                waits.add(&with(kind.name()), t.wait(kind));
            }
            // Only where the process issued any: a process without NCCL has no such series.
            if t.collectives.iter().any(|&n| n > 0) {
                for op in Collective::ALL {
                    collectives.add(&with(op.name()), t.collectives[op as usize] as f64);
                    collective_bytes.add(&with(op.name()), t.collective_bytes[op as usize] as f64);
                }
            }
            let driving = seen
                .threads
                .iter()
                .filter(|t| t.launches_per_second > 0.0)
                .count();
            threads.add(&base, driving as f64);
            let main = seen.threads.iter().find(|t| t.tid == process.pid);
            main_wait.add(&base, main.map_or(0.0, |t| t.wait_ratio));
            ongoing.add(&base, seen.waiting_seconds.unwrap_or(0.0));
            if let Some(seconds) = seen.creating_communicator_seconds {
                creating.add(&base, seconds);
            }
            if let Some(share) = seen.launch_queue_full {
                queue_full.add(&base, share);
            }
            if let Some(s) = seen.step {
                step.add(&base, s.seconds);
                best.add(&base, s.best_seconds);
            }
        }
    }
    out.extend([
        launches,
        copies,
        bytes,
        waits,
        collectives,
        collective_bytes,
        threads,
        main_wait,
        queue_full,
        ongoing,
        creating,
        step,
        best,
    ]);
}
