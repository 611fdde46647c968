//! What a training loop's main thread is doing, from one Python stack sample. Pure.
//!
//! The frames are read innermost first. The first rule that matches decides:
//!
//! 1. **gpu_sync**: where the CUDA probes watch the process (source::cuda), the thread was
//!    inside a driver wait when sampled, whatever the Python line reads (`bool(t)`, a NaN
//!    check, `.to("cuda")` name no sync), and it is no sync when it was not (`.tolist()` of a
//!    host array reads like one). Without the probes, inferred: a frame of a function named
//!    `synchronize` or `item` (torch.cuda's and its streams' and events' synchronize are Python
//!    functions), or — since `.item()`, `.cpu()`, `.tolist()` and `.numpy()` on a tensor are C
//!    methods that leave no frame of their own — an innermost frame whose source line calls one.
//!    A thread in `torch/autograd/graph.py` (`loss.backward()`, asleep while the autograd
//!    engine's thread runs the pass) is judged by that thread: a sync while another thread of
//!    the process is inside a driver wait, else **python** (the host work the pass is).
//! 2. **collective**: a function named `all_reduce`, `all_gather`, `reduce_scatter`,
//!    `broadcast` or `barrier`, or a frame in `torch/distributed/`, met before the job's own
//!    code or a model's module (`torch/nn/modules/`) going outwards: a collective is where the
//!    thread is, not a frame somewhere around it. FSDP1's `forward` wraps the whole model's,
//!    so the model's compute runs under a frame of `torch/distributed/`; and FSDP's own
//!    Python, activation checkpointing's wrapper and DTensor's dispatch are bookkeeping or
//!    compute, not collectives (their waits go through `distributed_c10d` or a file named for
//!    its collectives).
//! 3. **data_loader**: a frame in `torch/utils/data/` (the DataLoader's `__next__`), in
//!    `multiprocessing/queues.py` or `multiprocessing/connection.py` (a loader's result queue),
//!    or in the standard library's `queue.py` (a queue fed by a thread of the process's own: a
//!    thread prefetcher, the pin-memory thread; a training loop's main thread waits on no
//!    other in-process queue).
//! 4. **python**: none of these, and the thread was running (model, optimizer, launch code).
//! 5. **other**: none of these, and the thread was idle (sleeping, blocked elsewhere).

use crate::snapshot::{Activity, DriverView};

/// One frame as the classification needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// Qualified function name as py-spy gives it (`EmulatedGPU.synchronize`, `train`).
    pub function: &'a str,
    /// Path of the source file in the process's filesystem.
    pub file: &'a str,
}

/// Calls on a tensor that copy it to the host and therefore wait for the GPU.
const SYNCING_CALLS: [&str; 6] = [
    ".item()",
    ".cpu()",
    ".tolist()",
    ".numpy()",
    ".synchronize(",
    "synchronize()",
];

/// Code under `torch/distributed/` that wraps compute or does bookkeeping around it: FSDP's
/// (both generations), activation checkpointing's wrapper, DTensor's dispatch.
const DISTRIBUTED_WRAPPERS: [&str; 5] = [
    "/torch/distributed/fsdp/",
    "/torch/distributed/_composable/",
    "/torch/distributed/algorithms/_checkpoint/",
    "/torch/distributed/tensor/",
    "/torch/distributed/_tensor/",
];

/// Whether the thread is in a collective: going outwards from the innermost frame, a
/// collective's frame comes before the job's own code or a model's module.
fn in_collective(frames: &[FrameRef]) -> bool {
    let collective = |f: &FrameRef| {
        COLLECTIVES.contains(&bare(f.function))
            || (f.file.contains("/torch/distributed/")
                && (!DISTRIBUTED_WRAPPERS.iter().any(|w| f.file.contains(w))
                    || f.file.contains("collectives")))
    };
    frames
        .iter()
        .find_map(|f| {
            if collective(f) {
                Some(true)
            } else if is_job_code(f.file) || f.file.contains("/torch/nn/modules/") {
                Some(false)
            } else {
                None
            }
        })
        .unwrap_or(false)
}

const COLLECTIVES: [&str; 5] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "barrier",
];

/// Whether a file is the job's own code rather than Python's or an installed package's: the
/// frame an engineer wants quoted is the line of the training script that waits, not the
/// queue internals it waits in.
pub fn is_job_code(file: &str) -> bool {
    ![
        "/site-packages/",
        "/dist-packages/",
        "/lib/python3",
        "<frozen",
    ]
    .iter()
    .any(|part| file.contains(part))
}

/// The method or function name without its class.
fn bare(function: &str) -> &str {
    function.rsplit('.').next().unwrap_or(function)
}

/// Classifies one sample of a thread: `frames` innermost first, `active` whether py-spy saw
/// it running, `innermost_line` the source text of the innermost frame's line when readable,
/// `driver` what the CUDA probes saw at that moment (`None` where they do not watch the
/// process).
pub fn classify(
    frames: &[FrameRef],
    active: bool,
    innermost_line: Option<&str>,
    driver: Option<DriverView>,
) -> Activity {
    let named = |names: &[&str]| frames.iter().any(|f| names.contains(&bare(f.function)));
    let in_file = |parts: &[&str]| {
        frames
            .iter()
            .any(|f| parts.iter().any(|part| f.file.contains(part)))
    };
    let line_syncs = innermost_line.is_some_and(|line| {
        let code = line.split('#').next().unwrap_or("");
        SYNCING_CALLS.iter().any(|call| code.contains(call))
    });
    let inferred_sync = named(&["synchronize", "item"]) || line_syncs;
    // loss.backward(): the calling thread sleeps while the engine's thread runs the pass, so
    // the sample stands for what that thread does: waiting inside the driver, or the host work
    // (hooks, the engine's own C++, launches) the GPU waits for.
    let in_backward = in_file(&["/torch/autograd/graph.py"]);
    if driver.map_or(inferred_sync, |d| {
        d.thread_waits || (in_backward && d.other_waits)
    }) {
        Activity::GpuSync
    } else if in_backward {
        Activity::Python
    } else if in_collective(frames) {
        Activity::Collective
    } else if in_file(&[
        "/torch/utils/data/",
        "/multiprocessing/queues.py",
        "/multiprocessing/connection.py",
        "/queue.py",
    ]) {
        Activity::DataLoader
    } else if active {
        Activity::Python
    } else {
        Activity::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame<'a>(function: &'a str, file: &'a str) -> FrameRef<'a> {
        FrameRef { function, file }
    }

    const TRAIN: FrameRef = FrameRef {
        function: "train",
        file: "/job/train.py",
    };

    #[test]
    fn synchronizing_is_read_from_frames_or_from_the_calling_line() {
        let emulated = [
            frame("EmulatedGPU._wait_until", "/w/emugpu.py"),
            frame("EmulatedGPU.synchronize", "/w/emugpu.py"),
            TRAIN,
        ];
        assert_eq!(classify(&emulated, true, None, None), Activity::GpuSync);
        let torch = [
            frame("synchronize", "/usr/lib/python3/torch/cuda/__init__.py"),
            TRAIN,
        ];
        assert_eq!(classify(&torch, false, None, None), Activity::GpuSync);
        // loss.item() is a C method: only the calling line shows it.
        assert_eq!(
            classify(&[TRAIN], true, Some("        total += loss.item()"), None),
            Activity::GpuSync
        );
        assert_eq!(
            classify(
                &[TRAIN],
                true,
                Some("    out = model(x)  # not .item()"),
                None
            ),
            Activity::Python
        );
    }

    #[test]
    fn the_probes_observation_stands_against_the_line() {
        // A NaN check spins inside the driver under the job's own line.
        let waits = DriverView {
            thread_waits: true,
            other_waits: false,
        };
        let line = Some("        if torch.isnan(loss).any():");
        assert_eq!(classify(&[TRAIN], true, line, None), Activity::Python);
        assert_eq!(
            classify(&[TRAIN], true, line, Some(waits)),
            Activity::GpuSync
        );
        // .tolist() of a host array reads like a sync; the thread is not in the driver.
        let host = Some("        recent = history.tolist()");
        assert_eq!(classify(&[TRAIN], true, host, None), Activity::GpuSync);
        assert_eq!(
            classify(&[TRAIN], true, host, Some(DriverView::default())),
            Activity::Python
        );
        // A loader wait stays one.
        let loader = [
            frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py"),
            TRAIN,
        ];
        assert_eq!(
            classify(&loader, false, None, Some(DriverView::default())),
            Activity::DataLoader
        );
    }

    #[test]
    fn loader_waits_collectives_python_and_idle() {
        let loader = [
            frame(
                "Connection._recv",
                "/usr/lib/python3.11/multiprocessing/connection.py",
            ),
            frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py"),
            frame("Loader._processes", "/w/common.py"),
            TRAIN,
        ];
        assert_eq!(classify(&loader, false, None, None), Activity::DataLoader);
        // A thread prefetcher: the main thread waits in queue.Queue.get, fed by its thread.
        let prefetched = [
            frame("Condition.wait", "/usr/lib/python3.12/threading.py"),
            frame("Queue.get", "/usr/lib/python3.12/queue.py"),
            frame("thread_prefetcher", "/job/train.py"),
            TRAIN,
        ];
        assert_eq!(
            classify(&prefetched, false, None, None),
            Activity::DataLoader
        );
        let torch_loader = [
            frame(
                "_MultiProcessingDataLoaderIter._next_data",
                "/site-packages/torch/utils/data/dataloader.py",
            ),
            TRAIN,
        ];
        assert_eq!(
            classify(&torch_loader, false, None, None),
            Activity::DataLoader
        );
        let collective = [
            frame(
                "all_reduce",
                "/site-packages/torch/distributed/distributed_c10d.py",
            ),
            TRAIN,
        ];
        assert_eq!(
            classify(&collective, true, None, None),
            Activity::Collective
        );
        let emulated_collective = [
            frame("Barrier.wait", "/usr/lib/python3.11/threading.py"),
            frame("EmulatedGPU.all_reduce", "/w/emugpu.py"),
            TRAIN,
        ];
        assert_eq!(
            classify(&emulated_collective, false, None, None),
            Activity::Collective
        );
        // FSDP1's forward wraps the model's: the model's compute under it is no collective,
        // nor is FSDP's own Python; its all-gather is, and FSDP2's wait in its collectives'
        // file.
        let fsdp = "/site-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py";
        let wrapped_compute = [
            frame(
                "Linear.forward",
                "/site-packages/torch/nn/modules/linear.py",
            ),
            frame("Model.forward", "/job/model.py"),
            frame("FullyShardedDataParallel.forward", fsdp),
            TRAIN,
        ];
        assert_eq!(
            classify(&wrapped_compute, true, None, None),
            Activity::Python
        );
        let bookkeeping = [
            frame(
                "_pre_forward",
                "/site-packages/torch/distributed/fsdp/_runtime_utils.py",
            ),
            frame("FullyShardedDataParallel.forward", fsdp),
            TRAIN,
        ];
        assert_eq!(classify(&bookkeeping, true, None, None), Activity::Python);
        let gather = [
            frame(
                "all_gather_into_tensor",
                "/site-packages/torch/distributed/distributed_c10d.py",
            ),
            frame(
                "FlatParamHandle.unshard",
                "/site-packages/torch/distributed/fsdp/_flat_param.py",
            ),
            frame("FullyShardedDataParallel.forward", fsdp),
            TRAIN,
        ];
        assert_eq!(classify(&gather, false, None, None), Activity::Collective);
        let fsdp2_wait = [
            frame(
                "foreach_all_gather_copy_out",
                "/site-packages/torch/distributed/_composable/fsdp/_fsdp_collectives.py",
            ),
            TRAIN,
        ];
        assert_eq!(
            classify(&fsdp2_wait, false, None, None),
            Activity::Collective
        );
        // The job's own function named for a collective is one.
        let helper = [frame("all_reduce", "/job/dist.py"), TRAIN];
        assert_eq!(classify(&helper, false, None, None), Activity::Collective);
        let model = [
            frame("Linear.forward", "/torch/nn/modules/linear.py"),
            TRAIN,
        ];
        assert_eq!(classify(&model, true, None, None), Activity::Python);
        let sleeping = [frame("sleep", "<builtin>"), TRAIN];
        assert_eq!(classify(&sleeping, false, None, None), Activity::Other);
        // A function that merely contains a syncing name is not one.
        let items = [frame("dict_items", "/job/util.py"), TRAIN];
        assert_eq!(classify(&items, true, None, None), Activity::Python);
    }

    #[test]
    fn the_job_s_own_code_is_told_from_python_s_and_packages() {
        assert!(is_job_code("/job/train.py"));
        assert!(is_job_code("<string>"));
        assert!(is_job_code("/home/me/project/workloads/emugpu.py"));
        assert!(!is_job_code(
            "/usr/lib/python3.11/multiprocessing/queues.py"
        ));
        assert!(!is_job_code(
            "/opt/venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py"
        ));
        assert!(!is_job_code("/usr/lib/python3/dist-packages/numpy/core.py"));
        assert!(!is_job_code("<frozen importlib._bootstrap>"));
    }
}
