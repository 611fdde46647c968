"""Real network paths for the workloads, built and torn down by the workload itself: a storage
host in a network namespace of its own behind a veth pair with an htb rate limit (netem is not
available on every kernel; htb is), a pod namespace for the training loop, and a FUSE
filesystem that answers every read after a delay (a network filesystem's stand-in).

Traffic goes only to the link-local addresses of the two namespaces made here; nothing leaves
the machine. Each needs root (and /dev/fuse with libfuse 3 and mfusepy for the mount).
"""

import ctypes
import errno
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

CLONE_NEWNET = 0x40000000
PREFIX = "gbe-wl"
STORE_ADDRESS, POD_ADDRESS = "169.254.77.1", "169.254.77.2"


def missing_for_namespaces():
    """Why the namespaces cannot be made here ('' when they can)."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            return f"needs `{tool}` (iproute2)"
    return ""


def missing_for_fuse():
    """Why the FUSE mount cannot be made here ('' when it can)."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        return "needs root and /dev/fuse"
    if not shutil.which("fusermount3"):
        return "needs fusermount3 (Debian: fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as error:
        return f"needs mfusepy and libfuse 3 ({error})"
    return ""


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def setns(name):
    """Moves the calling thread (and what it forks from now on) into network namespace `name`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
    finally:
        os.close(fd)


class Link:
    """A storage namespace and a pod namespace joined by a veth pair; the storage side sends
    at most `rate` (an htb rate: "32mbit")."""

    def __init__(self, rate):
        tag = str(os.getpid())
        self.store, self.pod = f"{PREFIX}-store-{tag}", f"{PREFIX}-pod-{tag}"
        self.remove_stale()
        _ip("netns", "add", self.store)
        _ip("netns", "add", self.pod)
        _ip("link", "add", "gbe-s" + tag, "netns", self.store, "type", "veth", "peer", "name", "eth0", "netns", self.pod)
        for ns, device, address in ((self.store, "gbe-s" + tag, STORE_ADDRESS), (self.pod, "eth0", POD_ADDRESS)):
            _ip("-n", ns, "addr", "add", f"{address}/30", "dev", device)
            _ip("-n", ns, "link", "set", device, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        # The storage host's uplink: what it sends to the pod is shaped to `rate`.
        tc = ["ip", "netns", "exec", self.store, "tc"]
        subprocess.run([*tc, "qdisc", "add", "dev", "gbe-s" + tag, "root", "handle", "1:", "htb", "default", "10"], check=True, capture_output=True)
        subprocess.run([*tc, "class", "add", "dev", "gbe-s" + tag, "parent", "1:", "classid", "1:10", "htb", "rate", rate], check=True, capture_output=True)

    @staticmethod
    def remove_stale():
        """Namespaces left by a run that was killed before it could remove its own."""
        listing = _ip("netns", "list", check=False).stdout.split()
        for name in listing:
            if name.startswith(PREFIX + "-"):
                pid = name.rsplit("-", 1)[-1]
                if not os.path.exists(f"/proc/{pid}"):
                    _ip("netns", "del", name, check=False)

    def remove(self):
        """Removes both namespaces (the veth pair goes with them once their processes end)."""
        for name in (self.store, self.pod):
            _ip("netns", "del", name, check=False)


def wait_for(address, port, seconds=20):
    """Waits until a server listens on (address, port)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class SlowMount:
    """`source` mounted read-only at `mount_point` through FUSE, each read answered after
    `latency` seconds, by a daemon process of its own (in the caller's process group)."""

    def __init__(self, source, mount_point, latency):
        self.mount_point = mount_point
        os.makedirs(mount_point, exist_ok=True)
        subprocess.run(["fusermount3", "-u", "-q", mount_point], capture_output=True)
        self.daemon = subprocess.Popen(
            [sys.executable, __file__, "--serve-fuse", source, mount_point, str(latency)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while not os.path.ismount(mount_point):
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the FUSE mount at {mount_point} did not come up")
            time.sleep(0.05)

    def remove(self):
        subprocess.run(["fusermount3", "-u", "-z", self.mount_point], capture_output=True)
        if self.daemon.poll() is None:
            self.daemon.terminate()


def on_exit(cleanup):
    """Runs `cleanup` when the runner stops the workload (SIGTERM) or it ends."""

    def handler(signum, _frame):
        cleanup()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    import atexit

    atexit.register(cleanup)


def serve_fuse(source, mount_point, latency):
    """The FUSE daemon: a passthrough of `source` whose reads each wait `latency` seconds."""
    import mfusepy as fuse

    class Slow(fuse.Operations):
        use_ns = True

        def _path(self, path):
            return os.path.join(source, path.lstrip("/"))

        def getattr(self, path, fh=None):
            try:
                st = os.lstat(self._path(path))
            except OSError as error:
                raise fuse.FuseOSError(error.errno)
            keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime_ns", "st_mtime_ns", "st_ctime_ns")
            attrs = {k.replace("_ns", ""): getattr(st, k) for k in keys}
            attrs["st_mode"] = stat.S_IMODE(st.st_mode) & 0o555 | stat.S_IFMT(st.st_mode)
            return attrs

        def readdir(self, path, fh):
            return [".", ".."] + os.listdir(self._path(path))

        def open(self, path, flags):
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise fuse.FuseOSError(errno.EROFS)
            return os.open(self._path(path), os.O_RDONLY)

        def read(self, path, size, offset, fh):
            time.sleep(latency)
            return os.pread(fh, size, offset)

        def release(self, path, fh):
            os.close(fh)

    fuse.FUSE(Slow(), mount_point, foreground=True, ro=True, fsname="slowfs", subtype="slowfs", nothreads=False)


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--serve-fuse":
    serve_fuse(sys.argv[2], sys.argv[3], float(sys.argv[4]))
