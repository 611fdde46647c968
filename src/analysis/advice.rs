//! What each verdict means in a sentence, and what to try next (the checklist behind the
//! `diagnose` report and `/api/v1/diagnosis`).

use super::{GpuVerdict, InputSource, Kind, Primary};

/// Which reading of the primary verdict applies: data from a remote source, a GPU shared by
/// the job's own processes, or the kind's usual one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    RemoteInput,
    OwnProcessesShareGpu,
    InterNode,
    Usual(Primary),
}

fn reading(verdict: &GpuVerdict) -> Reading {
    let remote = verdict
        .lost
        .as_ref()
        .is_some_and(|l| l.input == Some(InputSource::Remote));
    let own_sharers = verdict.kind(Kind::Contention).is_some_and(|k| {
        k.scored
            .evidence
            .iter()
            .any(|e| e.name == "own_processes_share_gpu" && e.strength >= 0.5)
    });
    // Collectives crossing a saturated or slow link of the node.
    let inter_node = verdict.kind(Kind::Communication).is_some_and(|k| {
        k.scored
            .evidence
            .iter()
            .any(|e| matches!(e.name, "busiest_link" | "slow_link") && e.strength >= 0.5)
    });
    match verdict.primary {
        Primary::Bottleneck(Kind::DataIo) if remote => Reading::RemoteInput,
        Primary::Bottleneck(Kind::Contention) if own_sharers => Reading::OwnProcessesShareGpu,
        Primary::Bottleneck(Kind::Communication) if inter_node => Reading::InterNode,
        primary => Reading::Usual(primary),
    }
}

/// One sentence saying what the verdict means for the GPU.
pub fn explanation(verdict: &GpuVerdict) -> &'static str {
    match reading(verdict) {
        Reading::RemoteInput => "The GPU waits for input data that the loader workers fetch from a remote source (object store, network or FUSE filesystem, a feature service): they sleep waiting for it while the local disks are quiet.",
        Reading::OwnProcessesShareGpu => "Several processes of this job each run real work on this GPU and time-share it: each waits while the other's kernels run.",
        Reading::InterNode => "This rank waits in collectives whose traffic crosses the node's network link, and that link is near saturation or too slow for multi-node training: the GPUs wait for gradients to cross the wire.",
        Reading::Usual(primary) => usual_explanation(primary),
    }
}

/// Concrete next steps for the verdict, most likely first.
pub fn next_steps(verdict: &GpuVerdict) -> &'static [&'static str] {
    match reading(verdict) {
        Reading::RemoteInput => &[
            "Cache the data set on local NVMe or in memory (a node-local cache in front of the object store or NFS).",
            "Pack small samples into large shards (WebDataset, TFRecord, Parquet) so each request carries many samples.",
            "Hide the latency: more DataLoader workers and a larger prefetch_factor, or asynchronous/concurrent fetches inside each worker.",
        ],
        Reading::OwnProcessesShareGpu => &[
            "Run one rank per GPU: give each process its own device (CUDA_VISIBLE_DEVICES, LOCAL_RANK).",
            "If the processes must share, use MPS so their kernels run side by side instead of time-slicing.",
        ],
        Reading::InterNode => &[
            "Communicate less often: gradient accumulation over several micro-batches per all-reduce.",
            "Overlap and batch the traffic: a larger DDP bucket_cap_mb, FSDP/ZeRO prefetch; compress gradients (PowerSGD, bf16 hooks).",
            "Check NCCL uses the fast fabric (NCCL_SOCKET_IFNAME, NCCL_IB_HCA; NCCL_DEBUG=INFO shows the transport): multi-node training wants InfiniBand/RoCE or at least 25 GbE.",
        ],
        Reading::Usual(primary) => usual_next_steps(primary),
    }
}

fn usual_explanation(primary: Primary) -> &'static str {
    match primary {
        Primary::Idle => "No process is using this GPU, or the one holding it runs no work: if it is allocated to a job, it is wasted capacity.",
        Primary::Busy => "The GPU is kept busy: nothing on the node costs it a share of its time worth naming (analysis.lost_share_high); it is compute-bound.",
        Primary::Undetermined => "The GPU is not fully busy, but no rule matched clearly (or the window is still filling).",
        Primary::Hung => "The training loop has sat in one collective for minutes while the GPU spins in it: a peer never arrived (a crashed or stuck rank, a lost node, a network partition). Nothing progresses; the job is hung, not busy.",
        Primary::Bottleneck(kind) => match kind {
            Kind::DataIo => "The GPU waits for input data: storage cannot deliver it fast enough (disk saturated, I/O stalls, loader workers blocked on reads).",
            Kind::DataCpu => "The GPU waits for input data: the CPU-side preprocessing (decode, augmentation) is too slow.",
            Kind::HostBound => "The GPU waits on the training loop itself: its main thread's Python (model code, optimizer, kernel launches) cannot keep the GPU fed.",
            Kind::SyncStall => "The training loop waits for the GPU to drain (.item(), .cpu(), synchronize) and the GPU then idles while the host prepares the next step: synchronisation points serialise the pipeline.",
            Kind::KernelEfficiency => "The GPU reports high utilization but its SMs are mostly empty: many small kernels or low occupancy.",
            Kind::MemoryPressure => "Device memory is nearly full: allocations are at the limit and the allocator may thrash.",
            Kind::Communication => "This GPU waits on the other GPUs of its job (imbalance or collective communication) or on a degraded link.",
            Kind::Contention => "Something else competes for the GPU or for the CPU the job needs (other processes, CPU quota throttling, remote NUMA node, steal).",
            Kind::Throttling => "The GPU's clocks are held down by its power cap or by temperature.",
            Kind::Hardware => "The device reports errors (XID, uncorrectable ECC, row remapping) or stopped answering.",
        },
    }
}

fn usual_next_steps(primary: Primary) -> &'static [&'static str] {
    match primary {
        Primary::Idle => &["Release the GPU or check why the job that holds it is not running.", "Alert on allocated-but-idle GPUs to recover capacity."],
        Primary::Busy => &["Nothing to fix on the node; to go faster, reduce the model's work (mixed precision, better kernels, larger effective batch)."],
        Primary::Undetermined => &["Wait for a full window (30 s by default) and look again.", "Check gpu_bottleneck_score and gpu_bottleneck_unknown for near misses and missing inputs."],
        Primary::Hung => &[
            "Find the rank that did not arrive: the job's other GPUs (one that is not hung in the same collective), crashed or restarted pods, XID errors on their nodes.",
            "Dump every rank's stacks (py-spy dump --pid on each node) and rerun with NCCL_DEBUG=INFO to see which peer each rank waits for.",
            "Make a lost peer fail the job instead of hanging it: a timeout in init_process_group and TORCH_NCCL_ASYNC_ERROR_HANDLING=1, so the scheduler can restart it.",
        ],
        Primary::Bottleneck(kind) => match kind {
            Kind::DataIo => &[
                "Move the data set to faster local storage (NVMe) or cache it in memory.",
                "Use larger, sequentially read shards (WebDataset, TFRecord) instead of many small files.",
                "Increase DataLoader num_workers and prefetch_factor so reads overlap with compute.",
            ],
            Kind::DataCpu => &[
                "Increase DataLoader num_workers (up to the CPUs near the GPU) and enable persistent_workers.",
                "Move decoding and augmentation to the GPU (NVIDIA DALI, torchvision.io on CUDA).",
                "Pre-process the data set once offline instead of on every epoch.",
            ],
            Kind::HostBound => &[
                "Capture the step with CUDA graphs or torch.compile to cut per-kernel launch overhead.",
                "Increase the batch size so each launch does more work.",
                "Profile the Python loop (py-spy) for work that belongs on the GPU or in the loader.",
            ],
            Kind::SyncStall => &[
                "Remove host synchronisations in the step: .item(), .cpu(), printing tensors, torch.cuda.synchronize().",
                "Use pin_memory=True and non_blocking=True copies.",
                "Log metrics every N steps instead of every step.",
            ],
            Kind::KernelEfficiency => &[
                "Fuse small operations: torch.compile, or CUDA graphs for launch-bound steps.",
                "Increase the batch size or sequence length to fill the SMs.",
                "Use mixed precision (bf16/fp16) so tensor cores do the work.",
            ],
            Kind::MemoryPressure => &[
                "Reduce the batch size or use activation checkpointing.",
                "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to limit fragmentation.",
                "Shard optimizer state (ZeRO/FSDP) or offload it.",
            ],
            Kind::Communication => &[
                "Balance work across ranks (uneven shards or sequence lengths make the fast GPUs wait).",
                "Overlap gradient communication with compute (DDP bucket size, FSDP prefetch).",
                "Check NVLink/PCIe link state: a link below its generation or width slows collectives.",
            ],
            Kind::Contention => &[
                "Give the job's processes the GPU to themselves (one process per GPU).",
                "Raise or remove the container's CPU limit if it is throttled.",
                "Pin the loader to the CPUs of the GPU's NUMA node (numactl, taskset, topology-aware scheduling).",
            ],
            Kind::Throttling => &[
                "Check cooling and airflow; compare the temperature with its slowdown threshold.",
                "Check the power cap against the board's default; ask the operator before changing it.",
            ],
            Kind::Hardware => &[
                "Look up the XID codes in NVIDIA's XID catalogue and drain the node if they repeat.",
                "Reset the GPU when a row remap is pending; replace it when a remap failed.",
            ],
        },
    }
}
