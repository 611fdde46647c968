"""A training loop drawn at random from a seed: loader kind and speed (local disk, remote store,
CPU-heavy decode), step time, kernel size, sync cadence and wait mode, host work, and
disturbances (CPU hogs, an I/O storm, a second job on the GPU), one rank or two ranks with an
all-reduce a step. Nobody tuned the exporter to
any of them: the runner compares its attribution with the ground truth the loop records
(`python3 workloads/run.py --random N --seed S`).

    python3 workloads/random_loop.py --describe 7     # the loop seed 7 draws, as JSON
    python3 workloads/random_loop.py --describe 7 --family torch   # the same for the torch family
    python3 workloads/random_loop.py --describe 7 --family wide    # and for the wide family
"""

import json
import multiprocessing
import os
import random
import sys
import threading
import time

import common
import contention_cpu_hogs
import data_io_cron_storm
import emugpu
import torch_loop

# A loop of two ranks uses both; the runner gives each loop as many as it has ranks.
GPUS = 2
# The disturbances' size, fixed here (not machine-sized as in their own workloads) so that a
# seed draws the same loop on every machine: CPU hogs, and the I/O storm's writers.
HOGS = 3
STORM_WRITERS = 2


def shape(rng):
    """What every family draws first, in this order (so that a seed draws the same loop as
    before another family existed): the loader kind and its workers, the batch, the step time,
    its kernels and their SM share."""
    loader = rng.choice(["local", "remote", "decode", "light"])
    return {
        "loader": loader,
        "workers": rng.choice([0, 1, 2, 4]) if loader == "light" else rng.choice([1, 2, 4]),
        "batch": rng.choice([8, 16, 32]),
        "step_seconds": round(rng.uniform(0.02, 0.12), 3),
        "kernels": rng.choice([4, 8, 32]),
        # Most steps fill the SMs; one in four is made of small kernels.
        "sm": round(rng.uniform(0.75, 0.95) if rng.random() < 0.75 else rng.uniform(0.1, 0.4), 2),
    }


def draw(seed):
    """The loop of `seed`: a dict of everything that shapes it."""
    rng = random.Random(seed)
    loop = {
        "seed": seed,
        **shape(rng),
        "item_every": rng.choice([0, 1, 1, 5, 10]),
        "sync": rng.choice(["spin", "blocking"]),
        "host_seconds": rng.choice([0.0, 0.0, round(rng.uniform(0.005, 0.06), 3)]),
        "latency": round(rng.uniform(0.005, 0.04), 3),
        "blur": rng.choice([0.0, 1.5, 3.0]),
        "disturbance": rng.choice(["none", "none", "none", "hogs", "storm", "second_job"]),
        # Drawn last, so that a seed's other draws are those it drew before ranks existed. One
        # loop in four is two ranks on two GPUs with an all-reduce a step; rank 1 does this much
        # more Python a step (a straggler, or nearly balanced ranks), rank 0's GPU waits in the
        # collective for it.
        "ranks": rng.choice([1, 1, 1, 2]),
        "straggler": round(rng.uniform(0.0, 0.05), 3),
        "device": device(rng),
    }
    return loop


def device(rng):
    """The device family the loop runs on (run.py FAMILIES), drawn after everything else so
    that a seed's loop is the one it drew before families existed: Hopper (GPM) half the time,
    else Ampere (no GPM: no SM activity) or a MIG slice (no utilization at all)."""
    return rng.choice(["hopper", "hopper", "ampere", "mig"])


def draw_torch(seed):
    """A loop of the torch family (workloads/torch_loop.py, on the emulated torch): the same
    loader, step and host draws as draw(), and where it waits as real PyTorch code does —
    loss.item(), a NaN check, `if loss > x`, mask indexing, `.to("cuda")` of pageable memory,
    or no sync — with hooks on the backward thread and metric code reading host arrays drawn
    too. One loop in four is two ranks meeting in NCCL (DDP, FSDP or a pipeline's stages), rank
    1 slowed by a cause of its own or not at all (parallel())."""
    rng = random.Random(seed)
    loop = {
        "seed": seed,
        "family": "torch",
        **shape(rng),
        "sync": rng.choice(["item", "nan_check", "compare", "mask", "to", "none"]),
        "sync_every": rng.choice([1, 1, 5, 10]),
        "upload": rng.choice(["pinned", "pageable"]),
        "metrics": rng.choice(["none", "none", "tolist"]),
        "host_seconds": rng.choice([0.0, 0.0, round(rng.uniform(0.005, 0.06), 3)]),
        "hook_seconds": rng.choice([0.0, 0.0, 0.0, round(rng.uniform(0.001, 0.01), 4)]),
        "blocking": rng.random() < 0.2,
        "latency": round(rng.uniform(0.005, 0.04), 3),
        "blur": rng.choice([0.0, 1.5, 3.0]),
        "disturbance": rng.choice(["none", "none", "none", "hogs"]),
        "ranks": 1,
        "device": device(rng),
    }
    # Drawn last, so that a seed's other draws are those it drew before ranks existed.
    if rng.random() < 0.25:
        loop.update(parallel(rng, loop))
    return loop


def draw_wide(seed):
    """A loop of the wide family: the torch family's loop of the same seed, with what real jobs
    set that the torch family leaves at torch_loop's defaults, drawn from a stream of their own
    (the torch draws stay as they are): workers replaced every epoch, unnamed or delivering out
    of order, one heavy batch in several, idle children beside the loader (wandb-core, the
    compile pool), a thread prefetcher, the training function off the main thread, Python in
    the model's forward, for two ranks a checkpoint every few steps (rank 0 writes, its peer
    waits in dist.barrier()), and a periodic evaluation. Nothing in the exporter was tuned to
    these draws."""
    loop = {**draw_torch(seed), "family": "wide"}
    rng = random.Random(f"wide-{seed}")
    loop.update(
        {
            "persistent": rng.random() < 0.5,
            "named": rng.random() < 0.8,
            "in_order": rng.random() < 0.8,
            "heavy_every": rng.choice([0, 0, 0, 4, 8]),
            "sidecars": rng.random() < 0.3,
            "prefetcher": rng.random() < 0.2,
            "off_main": rng.random() < 0.15,
            "forward_host_seconds": rng.choice([0.0, 0.0, round(rng.uniform(0.002, 0.02), 3)]),
        }
    )
    if loop["ranks"] > 1 and rng.random() < 0.3:
        loop.update({"checkpoint_every": rng.choice([20, 50]), "checkpoint_seconds": round(rng.uniform(0.3, 1.5), 2)})
    # From a stream of its own, so that the options above stay as drawn: one loop in four
    # evaluates every 50-200 steps (not pipelines and expert-parallel pairs, whose schedules
    # the evaluation would need too).
    rng = random.Random(f"wide-eval-{seed}")
    if not (loop.get("pipeline") or loop.get("moe")) and rng.random() < 0.25:
        loop.update({"eval_every": rng.choice([50, 100, 200]), "eval_batches": rng.choice([10, 20, 40])})
    return loop


LOOP_FAMILIES = {"classic": draw, "torch": draw_torch, "wide": draw_wide}


def parallel(rng, loop):
    """Two ranks meeting in NCCL as DistributedDataParallel (a bucketed all-reduce from the
    backward pass), FullyShardedDataParallel (all-gathers and reduce-scatters), a pipeline
    (sends and receives) or an expert-parallel group (all-to-alls) run them, and
    what slows rank 1, whose peer then waits in the collectives on its GPU: its loader (one
    worker decoding), more Python a step, or nothing (balanced ranks)."""
    straggler = rng.choice(["loader", "python", "none"])
    own = {
        "loader": {"loader": "decode", "workers": 1, "blur": 2.0},
        "python": {"host_seconds": round(loop["host_seconds"] + rng.uniform(0.01, 0.05), 3)},
        "none": {},
    }[straggler]
    wrapper = rng.choice(["ddp", "fsdp"])
    gradient_bytes = rng.choice([25, 100, 400]) << 20
    # Drawn last, so that the loops drawn before pipelines existed keep their other draws: one
    # in three runs its ranks as a pipeline's two stages (GPipe: activations sent forward,
    # gradients back, point to point), a tenth of the gradients' bytes at each stage boundary.
    if rng.random() < 1 / 3:
        wrapper = "pipeline"
    # Drawn last again, so that the loops drawn before expert parallelism keep theirs: one in
    # four data-parallel pairs runs as an expert-parallel pair instead (MoE: each layer's tokens
    # dispatched to and combined from both ranks, dist.all_to_all_single, a tenth of the
    # gradients' bytes an exchange).
    if wrapper != "pipeline" and rng.random() < 1 / 4:
        wrapper = "moe"
    return {
        "ranks": 2,
        wrapper: True,
        "gradient_bytes": gradient_bytes,
        "activation_bytes": gradient_bytes // 10,
        "token_bytes": gradient_bytes // 10,
        "straggler": straggler,
        "rank_specs": {"1": own} if own else {},
    }


def dataset(loop, data):
    """The images the loop reads, as its loader kind needs them."""
    return common.images_for(loop["loader"], data, loop["seconds"], loop["latency"], loop["blur"])


def train(loop, args, rank=0, peers=None):
    """Rank `rank` of the loop on GPU args.gpu + rank (with `peers`, an all-reduce a step)."""
    gpu = emugpu.open_gpu(args.gpu + rank, args.real, sync=loop["sync"])
    common.model(gpu, share=0.2)
    loader = common.Loader(dataset(loop, args.data), batch_size=loop["batch"], workers=loop["workers"])
    started = time.monotonic()

    def on_step(_):
        nonlocal started
        if started and rank == 0 and time.monotonic() - started > 5.0:
            if loop["disturbance"] == "hogs":
                contention_cpu_hogs.hogs(args.seconds, HOGS)
            elif loop["disturbance"] == "storm":
                data_io_cron_storm.storm(args.data, args.seconds, STORM_WRITERS)
            started = None

    try:
        common.train(
            gpu,
            loader,
            args.seconds,
            step_seconds=loop["step_seconds"],
            kernels=loop["kernels"],
            sm=loop["sm"],
            item_every=loop["item_every"],
            host_seconds=loop["host_seconds"] + (loop["straggler"] if rank == 1 else 0.0),
            on_step=on_step,
            collective=(lambda: gpu.all_reduce(peers, rank)) if peers else None,
        )
    except threading.BrokenBarrierError:
        pass  # the other rank finished first
    if peers:
        peers.barrier.abort()


def second_job(args):
    """Another job on the same GPU: a steady loop in a process of its own (in the workload's
    process group, so that the runner stops it with the rest)."""
    if os.fork():
        return
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    gpu.alloc(1 << 30)
    loader = common.Loader(common.Images(files), batch_size=16, workers=1)
    common.train(gpu, loader, args.seconds, step_seconds=0.04, item_every=1, host_seconds=0.02)
    os._exit(0)


def main(argv=None):
    if len(sys.argv) >= 3 and sys.argv[1] == "--describe":
        family = LOOP_FAMILIES[sys.argv[4]] if sys.argv[3:4] == ["--family"] else draw
        print(json.dumps(family(int(sys.argv[2])), indent=1))
        return
    args = common.arguments(__doc__, argv, extra=[("--loop-seed", int), ("--family", str)])
    if args.family in ("torch", "wide"):
        spec = LOOP_FAMILIES[args.family](args.loop_seed)
        if spec["disturbance"] == "hogs":
            # After 5 s, as draw()'s loops start theirs.
            threading.Timer(5.0, contention_cpu_hogs.hogs, (args.seconds, HOGS)).start()
        torch_loop.train(spec, args)
        return
    loop = draw(args.loop_seed)
    loop["seconds"] = args.seconds
    if loop["disturbance"] == "second_job":
        second_job(args)
    context = multiprocessing.get_context("fork")
    peers = emugpu.Peers(loop["ranks"], context) if loop["ranks"] > 1 else None
    ranks = [context.Process(target=train, args=(loop, args, n, peers)) for n in range(loop["ranks"])]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join()


if __name__ == "__main__":
    main()
