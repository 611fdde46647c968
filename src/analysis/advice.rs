//! What each verdict means in a sentence, and what to try next (the checklist behind the
//! `diagnose` report and `/api/v1/diagnosis`): a bottleneck's from its kind's file, the
//! states that are not bottlenecks here.

use super::kinds::Advice;
use super::{GpuVerdict, Primary};

fn advice(verdict: &GpuVerdict) -> Advice {
    match verdict.primary {
        Primary::Bottleneck(kind) => (kind.spec().advice)(verdict),
        Primary::Idle => Advice {
            explanation: "No process is using this GPU, or the one holding it runs no work: if it is allocated to a job, it is wasted capacity.",
            next_steps: &["Release the GPU or check why the job that holds it is not running.", "Alert on allocated-but-idle GPUs to recover capacity."],
        },
        Primary::Busy => Advice {
            explanation: "The GPU is kept busy: nothing on the node costs it a share of its time worth naming (analysis.lost_share_high); it is compute-bound.",
            next_steps: &["Nothing to fix on the node; to go faster, reduce the model's work (mixed precision, better kernels, larger effective batch)."],
        },
        Primary::Undetermined => Advice {
            explanation: "The GPU is not fully busy, but no rule matched clearly (or the window is still filling).",
            next_steps: &["Wait for a full window (30 s by default) and look again.", "Check gpu_bottleneck_score and gpu_bottleneck_unknown for near misses and missing inputs."],
        },
        Primary::Hung if verdict.hang.as_ref().is_some_and(|h| h.host_side) => Advice {
            explanation: "The job has waited for minutes in a call every rank must make, with nothing running on the GPU: the creation of its NCCL communicator (ncclCommInitRank, which returns once every rank has called it; PyTorch calls it at the first collective, or in init_process_group when given a device_id), or a host-side collective: a rank never came (it crashed or is stuck before its first collective, its pod is still pending, or the ranks disagree on the world size or the rendezvous address). Nothing progresses; the job is hung, not idle.",
            next_steps: &[
                "Find the rank that did not come: the job's pods that are pending, crashed or restarted, and ranks whose stacks (diagnose on their node, or py-spy dump --pid) show them still before their first collective (loading data, a deadlocked loader).",
                "A rank of the job that works on another node (gpu_rank_working 1 there: rank 0 preprocessing the dataset under main_process_first while the others wait at their first collective) makes this a wait, not a hang: this node cannot see it, and the fleet's hang alerts hold while it works. Give such work a process-group timeout long enough (init_process_group(timeout=...), HF's ddp_timeout), or do it before the ranks start.",
                "Check that every rank was started with the same world size and rendezvous (WORLD_SIZE, MASTER_ADDR, MASTER_PORT); NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP logs which ranks connected and the interface each chose (a wrong NCCL_SOCKET_IFNAME stalls the bootstrap too).",
                "Restarting the job only helps once the missing rank can start: fix its pod or node first.",
            ],
        },
        Primary::Hung => Advice {
            explanation: "The job has waited for one collective for minutes while the GPU spins in it (NCCL's kernel waits on the GPU for its peers; the host waits in the collective or in its next sync): a peer never arrived (a crashed or stuck rank, a lost node, a network partition). Nothing progresses; the job is hung, not busy.",
            next_steps: &[
                "Find the rank that did not arrive: the one NCCL's RAS service names in the hang's report (one that does not answer: a stopped or crashed process, a lost node; one behind, with fewer collectives launched: stuck outside its loop, where its own stacks show), else the job's other GPUs (one that is not hung in the same collective), crashed or restarted pods, XID errors on their nodes.",
                "Collect before the job is torn down: every rank's stacks (diagnose on each node, or py-spy dump --pid), and PyTorch's Flight Recorder of recent collectives per rank (start the job with TORCH_NCCL_DEBUG_INFO_PIPE_FILE set; writing to a rank's pipe dumps it); NCCL_DEBUG=INFO names the peer each rank waits for.",
                "Nothing needs turning on for the job to fail: ProcessGroupNCCL's watchdog times the collective out after the process group's timeout (10 min by default) and, with TORCH_NCCL_ASYNC_ERROR_HANDLING at its default (3), tears the process down for the scheduler to restart; a shorter timeout in init_process_group fails it sooner.",
            ],
        },
    }
}

/// One sentence saying what the verdict means for the GPU.
pub fn explanation(verdict: &GpuVerdict) -> &'static str {
    advice(verdict).explanation
}

/// Concrete next steps for the verdict, most likely first.
pub fn next_steps(verdict: &GpuVerdict) -> &'static [&'static str] {
    advice(verdict).next_steps
}
