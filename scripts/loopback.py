"""What the standalone scripts (scripts/, bench/, workloads/) share to talk to the processes
they start on loopback: a free port, a GET, waiting for a URL to answer, and a real Prometheus
evaluating a copy of deploy/rules with its time shortened."""
import json
import os
import re
import socket
import subprocess
import time
import urllib.parse
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


def short_rules(work):
    """A copy of deploy/rules in `work` with time shortened (every `for:` to 3 s, every range
    window to 20 s): what they compute is the shipped rules', only sooner. Its path."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(root, "deploy/rules/gpu-bottleneck.rules.yml")) as f:
        rules = f.read()
    rules = re.sub(r"(\n\s+for: )\S+", r"\g<1>3s", rules)
    rules = re.sub(r"\[\d+[mh]\]", "[20s]", rules)
    path = os.path.join(work, "rules.yml")
    with open(path, "w") as f:
        f.write(rules)
    return path


def start_prometheus(work, scrape_configs, rule_files=(), alertmanager_port=None):
    """A real Prometheus (Debian `prometheus`) scraping and evaluating every second: (the
    process, its port)."""
    import yaml  # PyYAML: installed by scripts/test.sh; the other helpers need only the stdlib

    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": list(rule_files),
        "scrape_configs": scrape_configs,
    }
    if alertmanager_port:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]}
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        yaml.safe_dump(config, f)
    port = free_port()
    process = subprocess.Popen(
        ["prometheus", f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/tsdb",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, port


def query(port, expression):
    """An instant query's result vector: a list of (labels, value)."""
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expression)}"
    answer = get_json(url)
    return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]
