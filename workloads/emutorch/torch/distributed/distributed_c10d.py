"""torch/distributed/distributed_c10d.py: the NCCL process group of the emulated torch. As in
PyTorch, a collective enqueues on NCCL's stream and returns (even with async_op=False: "not
guaranteed that the CUDA operation is completed"); the host meets the wait at its next sync.
`barrier()` is the one that blocks the host: an all-reduce of one element, then a wait for the
device, in this frame.

As in PyTorch, the NCCL communicator is created at the first collective (ProcessGroupNCCL's
getNCCLComm: rank 0's unique id through the store, then ncclCommInitRank, which returns once
every rank has called it), unless `init_process_group` is given a `device_id` (then there).
A rank that never reaches its first collective holds the others in that call, their hosts
asleep inside NCCL and their GPUs idle. The unique id travels through the file store
`init_method` names (file://PATH), as torch's FileStore does: rank 0 writes it, the others
read it."""

import time

from .. import _C

_group = None  # (rank, world size) once initialised


class ReduceOp:
    SUM = 0
    AVG = 4
    MAX = 2


class _Work:
    """What async_op=True returns: wait() makes the current stream wait (no host wait)."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return False


def is_available():
    return True


def is_initialized():
    return _group is not None


def get_rank(group=None):
    return _group[0] if _group else -1


def get_world_size(group=None):
    return _group[1] if _group else -1


def _store_path(init_method):
    if not init_method or not init_method.startswith("file://"):
        raise ValueError("the emulated torch.distributed takes init_method='file://PATH'")
    return init_method[len("file://"):]


def _watchdog(seconds):
    """ProcessGroupNCCL's watchdog thread (pt_nccl_watchdg): once the process group's timeout
    has passed, a collective still waiting is aborted and the process goes on to its end
    (TORCH_NCCL_ASYNC_ERROR_HANDLING=3 tears it down). Here the timeout is the run's length."""
    import ctypes
    import threading

    def watch():
        ctypes.CDLL(None).prctl(15, b"pt_nccl_watchdg", 0, 0, 0)  # PR_SET_NAME, this thread
        time.sleep(seconds)
        if _group is not None:
            _C._nccl_abort()

    threading.Thread(target=watch, name="pt_nccl_watchdg", daemon=True).start()


def init_process_group(backend="nccl", init_method=None, rank=-1, world_size=-1, timeout=None, device_id=None, **kwargs):
    """`timeout` (seconds, or a timedelta): when the watchdog aborts (None: never).
    `device_id`: create the communicator now (PyTorch's eager init), not at the first
    collective."""
    global _group
    if backend != "nccl":
        raise RuntimeError(f"backend {backend!r}: the emulated torch has NCCL only")
    _C._nccl_setup(_store_path(init_method), world_size, rank)
    _group = (rank, world_size)
    if timeout is not None:
        _watchdog(getattr(timeout, "total_seconds", lambda: timeout)())
    if device_id is not None:
        _C._nccl_connect()


def destroy_process_group(group=None):
    """Aborts the communicator (its kernels still waiting for peers end), as PyTorch's
    shutdown does when ranks stop at different steps."""
    global _group
    _C._nccl_abort()
    _group = None


def _collective(op, tensor, async_op):
    _C._nccl_connect()
    _C._nccl_collective(op, tensor.nbytes)
    return _Work() if async_op else None


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    return _collective(1, tensor, async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    return _collective(2, input, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    return _collective(3, output_tensor, async_op)


def broadcast(tensor, src=0, group=None, async_op=False):
    return _collective(4, tensor, async_op)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
    """ProcessGroupNCCL's all-to-all of equal splits as PyTorch issues it on NVIDIA's NCCL
    (torch/csrc/cuda/nccl.cpp, all2all_single_equal_split): one group of a send and a receive
    of a rank's share to and from every rank of the group, itself included; enqueued, as every
    collective. At most eight ranks here (the stub's batch holds sixteen transfers)."""
    if output_split_sizes is not None or input_split_sizes is not None:
        raise NotImplementedError("the emulated torch splits an all-to-all equally only")
    _C._nccl_connect()
    ranks = get_world_size()
    share = input.nbytes // ranks
    transfers = []
    for peer in range(ranks):
        transfers += [(True, peer, share), (False, peer, share)]
    _C._nccl_p2p(transfers)
    return _Work() if async_op else None


def send(tensor, dst, group=None, tag=0):
    """ProcessGroupNCCL's send: ncclSend on the current stream; wait() makes the stream wait for
    it, not the host."""
    _C._nccl_connect()
    _C._nccl_p2p([(True, dst, tensor.nbytes)])


def recv(tensor, src=None, group=None, tag=0):
    """ncclRecv from `src`; returns it. NCCL has no receive from any source, and neither has
    ProcessGroupNCCL."""
    if src is None:
        raise RuntimeError("ProcessGroupNCCL does not support recvAnysource")
    _C._nccl_connect()
    _C._nccl_p2p([(False, src, tensor.nbytes)])
    return src


def isend(tensor, dst, group=None, tag=0):
    send(tensor, dst)
    return _Work()


def irecv(tensor, src=None, group=None, tag=0):
    recv(tensor, src)
    return _Work()


class P2POp:
    """One transfer of a batch_isend_irecv: `op` is isend or irecv."""

    def __init__(self, op, tensor, peer, group=None, tag=0):
        self.op, self.tensor, self.peer = op, tensor, peer


def batch_isend_irecv(p2p_op_list):
    """The transfers in one NCCL group (one kernel): what pipeline schedules issue each step."""
    _C._nccl_connect()
    _C._nccl_p2p([(op.op is isend, op.peer, op.tensor.nbytes) for op in p2p_op_list])
    return [_Work() for _ in p2p_op_list]


def barrier(group=None, async_op=False, device_ids=None):
    """ProcessGroupNCCL::barrier: an all-reduce of one element on the current device, then a
    wait for it: the host blocks here until every rank has come."""
    _C._nccl_connect()
    _C._nccl_collective(1, 4)
    _C._cuda_synchronize()
