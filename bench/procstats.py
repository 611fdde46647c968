"""What the benchmark scripts read about a process (and the loopback helpers every standalone
script shares, from scripts/loopback.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from loopback import free_port, get, wait_for_url  # noqa: E402,F401  (re-exported)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User plus system CPU time of the process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_seconds_by_thread(pid):
    """User plus system CPU time so far of each live thread of the process, added up by the
    thread's name (threads that ended are in the process's figure only)."""
    seconds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                name, rest = f.read().split(" (", 1)[1].rsplit(") ", 1)
        except (OSError, ValueError):
            continue
        fields = rest.split()
        seconds[name] = seconds.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
    return seconds


def memory_mib(pid, field):
    """A memory line of /proc/PID/status in MiB: VmRSS (now) or VmHWM (peak)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")
