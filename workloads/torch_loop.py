"""A training loop written as PyTorch code is written, for the waits real PyTorch hides: run on
the emulated torch (workloads/emutorch: C tensor methods over the stub CUDA runtime and driver),
its syncs leave no Python frame that names them, its backward pass runs on the engine's thread
`pt_autograd_0` while the main thread sleeps under torch/autograd/graph.py, and every wait is
inside libcuda. The named workloads (sync_stall_nan_check, ...) are specs of it; the random
suite draws them too.

A spec (a dict) says how the loop syncs:
  "sync"        where the host waits for the GPU, written as real code writes it:
                "item"      loss.item() on the line (the named one),
                "nan_check" `if torch.isnan(loss).any() or torch.isinf(loss).any():`
                            (HF Trainer's per-step check),
                "compare"   `if loss > threshold:` (bool(t)),
                "mask"      `kept = losses[losses > 0]` (mask indexing: the count comes back),
                "to"        `batch.to("cuda")` of a pageable batch (a copy and a stream sync),
                "none"      no sync in the step;
  "sync_every"  steps per sync;
  "upload"      "pageable" (batch.to(device)), or "pinned" (pin_memory() then
                non_blocking=True: no wait), of images "image_side" pixels square (3
                channels of a byte, normalized on the GPU);
  "metrics"     "tolist": the metric code calls .tolist() on a host array (no GPU involved);
and what the step costs: "step_seconds" of kernels ("kernels" of them, a third forward),
"sm", "host_seconds" of Python on the main thread before the step's first kernel,
"forward_host_seconds" of Python in the model's forward (under FSDP's forward where wrapped),
"hook_seconds" of Python per backward node
on the engine's thread (DDP-style hooks, custom autograd Functions), "loader" and "workers" as
random_loop draws them; how the loader delivers, as torch's DataLoader does: "named" workers
(pt_data_worker), "in_order" delivery, "persistent" workers (else replaced every epoch),
"heavy_every" N (every Nth batch costs "heavy" times the others); "sidecars": idle children beside the loader
(wandb-core, the torch.compile pool, a forkserver); "prefetcher": a thread and a
queue.Queue(2) in front of the loader; "off_main": the training function on a thread of its
own while the main thread joins it (Ray Train); "ranks" processes on as many GPUs, meeting in
NCCL (the stub libnccl.so.2), "ddp" wrapping the model in DistributedDataParallel (a bucketed
all-reduce of "gradient_bytes" from the engine's thread during backward), "fsdp" in
FullyShardedDataParallel (four units: all-gathers before each unit's forward on the main
thread, all-gathers and reduce-scatters in backward on the engine's), "rank_specs" each
rank's own overrides ({"1": {"workers": 1}}: a straggler; {"1": {"stop_after": 5}}: a rank
that stops arriving after 5 s, a hang for the others; with "stop_how": "freeze" its whole process
stops, as a lost node does; {"1": {"late_by": 8}}: a rank that reaches its first collective 8 s
after the others, who wait for it in NCCL's creation of the communicator); "eager_init": the
communicator created in init_process_group (its device_id given), not at the first collective;
"load_seconds": the
host's time building the model and loading its weights before it is wrapped; "pipeline": the ranks as the stages of a pipeline instead
(GPipe's schedule: "microbatches" forwards, each receiving "activation_bytes" from the stage
before and sending as many to the one after, then as many backwards sending gradients back,
each transfer a batch_isend_irecv: ncclSend/ncclRecv in a group); "moe": the ranks as an
expert-parallel group instead (each of "moe_layers" MoE layers exchanges "token_bytes" of tokens
with every rank twice in forward and twice in backward, dist.all_to_all_single: a send and a
receive to and from every rank in one group); every "checkpoint_every" steps rank 0
spends "checkpoint_seconds" writing a checkpoint (torch.save: the host serializes, its GPU
idles) while the others wait for it in dist.barrier(); every "eval_every" steps an evaluation
of "eval_batches" batches (HF Trainer's eval_steps, Lightning's val_check_interval: a loader of
its own whose workers start for each evaluation unless persistent, the forward only, the
metric added up on the host each batch with .item()); "cpus": the CPUs a rank and its loader
workers are pinned to (torchrun --bind-core-list, numactl); "env": variables a rank's process
gets (as each node's launcher sets its own: NCCL_IB_HCA; $VARIABLES in them expanded).

    python3 workloads/torch_loop.py --spec '{"sync": "nan_check"}' --seconds 30
"""

import array
import json
import os
import signal
import sys
import time

import common
import emugpu

DEFAULTS = {
    "sync": "item",
    "sync_every": 1,
    "upload": "pinned",
    "metrics": "none",
    "step_seconds": 0.06,
    "kernels": 8,
    "sm": 0.85,
    "host_seconds": 0.0,
    "forward_host_seconds": 0.0,
    "hook_seconds": 0.0,
    "loader": "light",
    "workers": 2,
    "batch": 16,
    "image_side": 64,
    "blocking": False,
    "named": True,
    "in_order": True,
    "persistent": True,
    "heavy_every": 0,
    "heavy": 4,
    "sidecars": False,
    "prefetcher": False,
    "off_main": False,
    "ranks": 1,
    "ddp": False,
    "fsdp": False,
    "gradient_bytes": 100 << 20,
    "pipeline": False,
    "microbatches": 4,
    "activation_bytes": 16 << 20,
    "moe": False,
    "moe_layers": 2,
    "token_bytes": 8 << 20,
    "rank_specs": {},
    "stop_after": 0.0,
    "stop_how": "sleep",
    "late_by": 0.0,
    "eager_init": False,
    "load_seconds": 0.0,
    "checkpoint_every": 0,
    "checkpoint_seconds": 0.0,
    "eval_every": 0,
    "eval_batches": 20,
    "cpus": None,
    "env": {},
}


def probes_unavailable():
    """Why the exporter this runner starts cannot run its CUDA probes ("" when it can): they
    need CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN, which the runner passes on to it. The
    verdicts of the loops below rest on them (their waits have no Python frame of their own)."""
    with open("/proc/self/status") as f:
        effective = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    if effective & (1 << 21) or (effective & (1 << 38) and effective & (1 << 39)):
        return ""
    return "needs the CUDA probes (CAP_BPF and CAP_PERFMON: run as root)"


def import_torch(real):
    """The real torch with --real, else the emulated one (workloads/emutorch first on the path)."""
    if not real:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "emutorch"))
    import torch

    return torch


class Model:
    """The step's kernels: a third forward, two thirds backward on the engine's thread, with
    `hook_seconds` of Python before each backward kernel."""

    def __init__(self, kernels, spec):
        self.kernels = kernels
        count = max(2, spec["kernels"])
        self.forward_count = max(1, count // 3)
        self.backward_count = count - self.forward_count
        self.forward_seconds = spec["step_seconds"] / 3 / self.forward_count
        self.backward_seconds = spec["step_seconds"] * 2 / 3 / self.backward_count
        self.sm = spec["sm"]
        self.forward_host = spec["forward_host_seconds"]
        hook = spec["hook_seconds"]
        self.hook = (lambda: common.burn(hook)) if hook > 0 else None

    def __call__(self, x):
        if self.forward_host:
            common.burn(self.forward_host)  # the model's own Python: many small ops
        return self.kernels._forward(
            x,
            self.forward_seconds,
            sm=self.sm,
            tensor=self.sm * 0.6,
            dram=0.4,
            count=self.forward_count,
            backward_seconds=self.backward_seconds,
            backward_count=self.backward_count,
            backward_hook=self.hook,
        )


def pipeline_step(torch, spec, model, x):
    """One step of a pipeline stage, as torch.distributed.pipelining's ScheduleGPipe runs it:
    each microbatch's forward receives its activations from the stage before and sends its
    output to the stage after; then each backward receives its gradient from the stage after
    and sends one to the stage before. Every transfer is a batch_isend_irecv (NCCL: enqueued,
    its kernel spinning until the peer's side has started): the host never waits in one, the
    GPU does. Returns the last microbatch's output (the loss, on the last stage)."""
    dist = torch.distributed
    stage, stages = dist.get_rank(), dist.get_world_size()
    boundary = torch.empty(spec["activation_bytes"])

    def transfer(op, peer):
        if 0 <= peer < stages:
            for work in dist.batch_isend_irecv([dist.P2POp(op, boundary, peer)]):
                work.wait()

    outputs = []
    for _ in range(spec["microbatches"]):
        transfer(dist.irecv, stage - 1)
        outputs.append(model(x))
        transfer(dist.isend, stage + 1)
    for output in reversed(outputs):
        transfer(dist.irecv, stage + 1)
        output.backward()
        transfer(dist.isend, stage - 1)
    return outputs[-1]


def moe_step(torch, spec, model, x):
    """One step of an expert-parallel rank: each MoE layer sends its tokens to the ranks holding
    their experts and takes the results back (dispatch and combine, two all-to-alls), in forward
    and again for the gradients in backward. Each all-to-all is one NCCL kernel per rank that
    waits for every rank of the group (a straggler makes all the others spin, as in an
    all-reduce); the host never waits in one. The experts' kernels are the model's."""
    dist = torch.distributed
    tokens, routed = torch.empty(spec["token_bytes"]), torch.empty(spec["token_bytes"])

    def exchange():
        for _ in range(spec["moe_layers"]):
            dist.all_to_all_single(routed, tokens)  # dispatch to the experts
            dist.all_to_all_single(tokens, routed)  # combine their outputs

    exchange()
    loss = model(x)
    loss.backward()
    exchange()  # the layers' backward exchanges, after the gradients they carry
    return loss


def step_sync(torch, spec, loss, losses):
    """The step's wait, in the form the spec names (the line that waits is this function's)."""
    form = spec["sync"]
    if form == "item":
        return loss.item()
    if form == "nan_check":
        if torch.isnan(loss).any() or torch.isinf(loss).any():
            raise FloatingPointError("loss is not finite")
    elif form == "compare":
        if loss > 1e9:
            raise FloatingPointError("loss diverged")
    elif form == "mask":
        return losses[losses > 0]
    return None


def checkpoint(torch, spec):
    """Rank 0 writes a checkpoint; every rank then meets the others in a barrier."""
    if torch.distributed.get_rank() == 0:
        common.burn(spec["checkpoint_seconds"])  # torch.save(model.state_dict(), path)
    torch.distributed.barrier()


def evaluation_batches(loader, persistent):
    """Each evaluation's batches, `count` a time: from workers started for it and stopped after
    it (DataLoader's default), or from persistent workers idle between evaluations."""
    kept = iter(loader) if persistent else None

    def batches(count):
        source = kept or iter(loader)
        try:
            for _ in range(count):
                yield next(source)
        finally:
            if source is not kept:
                source.close()

    return batches


def evaluate(torch, spec, model, batches, truth):
    """One evaluation: the model's forward on each batch (torch.no_grad(): no backward) and
    `correct += (pred == labels).sum().item()`, a sync a batch."""
    correct = 0.0
    source = batches(spec["eval_batches"])
    for _ in range(spec["eval_batches"]):
        batch = truth.timed(common.LOADER, next, source)
        start, cpu = time.monotonic_ns(), time.thread_time_ns()
        host = torch.empty(len(batch) * 3 * spec["image_side"] ** 2)
        x = host.pin_memory().to("cuda", non_blocking=True)
        correct += model(x).item()
        truth.record(common.PYTHON, start, time.monotonic_ns(), time.thread_time_ns() - cpu)
    source.close()
    return correct


def train(spec, args):
    spec = {**DEFAULTS, **spec}
    if spec["ranks"] == 1:
        return train_rank(spec, args)
    # The ranks as torchrun starts them: a process each (forked before any CUDA call), rank n on
    # GPU args.gpu + n, meeting through a file store; each with its own overrides.
    import multiprocessing

    store = os.path.join(os.environ.get("EMUGPU_DIR") or args.data, f"store-{os.getpid()}")
    context = multiprocessing.get_context("fork")
    ranks = []
    for n in range(spec["ranks"]):
        own = {**spec, **spec["rank_specs"].get(str(n), {})}
        ranks.append(context.Process(target=train_rank, args=(own, args, n, store), name=f"rank {n}"))
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join()
    # torchrun's elastic agent reports a rank that died (a signal, an exit status), and so
    # does this: a rank that vanished silently once read as an idle GPU.
    died = [f"{rank.name} exited {rank.exitcode}" for rank in ranks if rank.exitcode]
    if died:
        print("torch_loop: " + "; ".join(died), file=sys.stderr, flush=True)
    return 1 if died else 0


def arrive_late(spec):
    """A rank late to its first collective (its data still being prepared, a loader stuck
    before the loop): the others wait for it where their communicator is created."""
    if spec["late_by"]:
        time.sleep(spec["late_by"])


def train_rank(spec, args, rank=0, store=None):
    os.environ.update({name: os.path.expandvars(value) for name, value in spec["env"].items()})
    if spec["cpus"]:
        os.sched_setaffinity(0, spec["cpus"])
    torch = import_torch(args.real)
    gpu = args.gpu + rank
    if spec["blocking"]:
        common.blocking_sync(gpu, args.real)
    torch.cuda.set_device(gpu)
    if store:
        # The watchdog's timeout is the run's end: a rank still waiting then is torn down.
        timeout = args.seconds + 2.0
        eager = {"device_id": torch.device(f"cuda:{gpu}")} if spec["eager_init"] else {}
        if eager:
            arrive_late(spec)
        torch.distributed.init_process_group(
            "nccl", init_method=f"file://{store}", rank=rank, world_size=spec["ranks"], timeout=timeout, **eager
        )
    # The kernels: the emulated torch's own calls, or the same on a real GPU.
    kernels = emugpu.RealKernels(torch, gpu) if args.real else torch._C
    if spec["pipeline"]:
        # A stage's step is its microbatches': each forward and backward a share of it.
        micro = spec["microbatches"]
        model = Model(kernels, {**spec, "step_seconds": spec["step_seconds"] / micro, "kernels": max(2, spec["kernels"] // micro)})
    else:
        model = Model(kernels, spec)
    if spec["load_seconds"]:
        # The model placed on its GPU (its first allocation: the context), then its weights
        # read from a checkpoint into it (load_state_dict) before it is wrapped.
        torch.empty(1 << 20).to("cuda")
        common.burn(spec["load_seconds"])
    if not spec["eager_init"]:
        arrive_late(spec)
    if spec["ddp"]:
        model = torch.nn.parallel.DistributedDataParallel(model, gradient_bytes=spec["gradient_bytes"])
    elif spec["fsdp"]:
        model = torch.distributed.fsdp.FullyShardedDataParallel(model, parameter_bytes=spec["gradient_bytes"])
    images = common.images_for(spec["loader"], args.data, args.seconds, spec.get("latency", 0.02), spec.get("blur", 0.0))
    loader = common.Loader(
        images,
        batch_size=spec["batch"],
        workers=spec["workers"],
        named=spec["named"],
        in_order=spec["in_order"],
        persistent=spec["persistent"],
        heavy_every=spec["heavy_every"],
        heavy=spec["heavy"],
    )
    if spec["sidecars"]:
        # A directory a rank: two ranks writing one wandb-core while the other runs it fail
        # (ETXTBSY), and the rank that fails leaves its peer spinning for ever.
        common.sidecars(os.path.join(os.environ.get("EMUGPU_DIR") or "/tmp", f"sidecars-{os.getpid()}"))
    batches = thread_prefetcher(iter(loader)) if spec["prefetcher"] else iter(loader)
    evaluation = None
    if spec["eval_every"]:
        evaluation = evaluation_batches(
            common.Loader(images, batch_size=spec["batch"], workers=spec["workers"], named=spec["named"], in_order=spec["in_order"]),
            spec["persistent"],
        )
    if spec["off_main"]:
        return on_a_thread(loop, torch, kernels, spec, args, model, batches, evaluation)
    return loop(torch, kernels, spec, args, model, batches, evaluation)


def thread_prefetcher(batches, depth=2):
    """Batches fetched ahead by a thread into a queue.Queue(depth), as hand-written prefetchers
    (and CUDA-stream prefetchers) do: the loop waits in the queue, not in the loader."""
    import queue
    import threading

    ahead = queue.Queue(depth)

    def fill():
        for batch in batches:
            ahead.put(batch)

    threading.Thread(target=fill, name="prefetcher", daemon=True).start()
    while True:
        yield ahead.get()


def on_a_thread(loop, *args):
    """Runs the training function on a thread of its own, the main thread joining it (Ray
    Train's PropagatingThread)."""
    import threading

    result = []
    worker = threading.Thread(target=lambda: result.append(loop(*args)), name="train")
    worker.start()
    worker.join()
    return result[0] if result else 0


def loop(torch, kernels, spec, args, model, batches, evaluation=None):
    optimizer_seconds = spec["step_seconds"] * 0.05
    truth = common.Truth.mine()
    # The metric code's host-side history (a few million floats: its .tolist() is real work).
    history = array.array("f", bytes(4 << 21)) if spec["metrics"] == "tolist" else None
    deadline = time.monotonic() + args.seconds
    steps = 0
    losses = None
    stop_at = time.monotonic() + spec["stop_after"] if spec["stop_after"] else deadline
    while time.monotonic() < deadline:
        if time.monotonic() >= stop_at:
            # This rank stops arriving: stuck outside the loop (a deadlocked loader; "sleep"),
            # or the whole process frozen, NCCL's threads too, as a lost node or a stopped
            # container is to its peers ("freeze"). Its peers' collectives wait for it.
            if spec["stop_how"] == "freeze":
                os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(max(0.0, deadline - time.monotonic()))
            break
        batch = truth.timed(common.LOADER, next, batches)
        start, cpu = time.monotonic_ns(), time.thread_time_ns()
        host = torch.empty(len(batch) * 3 * spec["image_side"] ** 2)
        if spec["upload"] == "pinned" and spec["sync"] != "to":
            x = host.pin_memory().to("cuda", non_blocking=True)
        else:
            x = host.to("cuda")  # pageable, non_blocking=False: a copy and a stream sync
        if spec["host_seconds"]:
            common.burn(spec["host_seconds"])  # the step's Python before its first kernel
        if spec["pipeline"]:
            loss = pipeline_step(torch, spec, model, x)
        elif spec["moe"]:
            loss = moe_step(torch, spec, model, x)
        else:
            loss = model(x)
            loss.backward()
        kernels._launch(optimizer_seconds, sm=0.5, dram=0.8)  # optimizer.step()
        losses = loss if losses is None else losses
        steps += 1
        if spec["sync"] not in ("none", "to") and steps % spec["sync_every"] == 0:
            step_sync(torch, spec, loss, losses)
        if spec["checkpoint_every"] and steps % spec["checkpoint_every"] == 0:
            checkpoint(torch, spec)
        if evaluation and steps % spec["eval_every"] == 0:
            evaluate(torch, spec, model, evaluation, truth)
        if history is not None:
            recent = history.tolist()  # a host array: no GPU involved, however the line reads
            del recent
        truth.record(common.PYTHON, start, time.monotonic_ns(), time.thread_time_ns() - cpu)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    torch.cuda.synchronize()
    return steps


def main(argv=None, spec=None):
    args = common.arguments(__doc__, argv, extra=[("--spec", str)])
    train({**(spec or {}), **json.loads(args.spec or "{}")}, args)


if __name__ == "__main__":
    main()
