"""Compiles torch._C from _C.c (gcc, Python's headers) when its source changed, and loads the
stub CUDA libraries under their SONAMEs before it."""

import ctypes
import fcntl
import os
import subprocess
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.dirname(os.path.dirname(HERE))
ROOT = os.path.dirname(WORKLOADS)


def ensure_built():
    """The directory holding an up-to-date _C extension."""
    directory = os.environ.get("EMUTORCH_BUILD") or os.path.join(ROOT, "target", "emutorch")
    os.makedirs(directory, exist_ok=True)
    source = os.path.join(HERE, "_C.c")
    target = os.path.join(directory, "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
    with open(os.path.join(directory, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(target) or os.path.getmtime(target) < os.path.getmtime(source):
            partial = f"{target}.{os.getpid()}"
            command = ["gcc", "-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-I", sysconfig.get_paths()["include"]]
            subprocess.run(command + [source, "-o", partial, "-ldl", "-lpthread"], check=True)
            os.replace(partial, target)
    return directory


def load_cuda():
    """libcuda.so.1, then libcudart.so.12 and libnccl.so.2 (libtorch_cuda.so links both), from
    emugpu's directory of the stubs."""
    import sys

    sys.path.insert(0, WORKLOADS)
    import emugpu

    directory = emugpu._libraries()
    ctypes.CDLL(os.path.join(directory, "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(os.path.join(directory, "libcudart.so.12"), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(os.path.join(directory, "libnccl.so.2"), mode=ctypes.RTLD_GLOBAL)
