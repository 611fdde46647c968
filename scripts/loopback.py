"""What the standalone scripts (scripts/, bench/, workloads/run.py) share to talk to the
processes they start on loopback: a free port, a GET, and waiting for a URL to answer."""
import json
import socket
import time
import urllib.request


def free_port():
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    """The body of a GET, as text."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8", "replace")


def get_json(url, timeout=10):
    """The body of a GET, parsed as JSON."""
    return json.loads(get(url, timeout))


def wait_for_url(url, seconds=60, interval=0.3):
    """The body of `url` once it answers, or None after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return get(url, timeout=2)
        except OSError:
            time.sleep(interval)
    return None
