"""kube-state-metrics as Prometheus scrapes it, for the end-to-end checks: `kube_pod_labels`
for the pods given (with the job labels a training operator sets), served on loopback."""
import http.server
import threading


def serve(pods):
    """Serves `kube_pod_labels` for `pods` [(namespace, pod, {label: value})] on 127.0.0.1;
    returns the server (its port is `server.server_address[1]`; call `shutdown()`)."""
    lines = ["# HELP kube_pod_labels Kubernetes labels converted to Prometheus labels.", "# TYPE kube_pod_labels gauge"]
    for namespace, pod, labels in pods:
        extra = "".join(f',label_{k.replace(".", "_").replace("/", "_").replace("-", "_")}="{v}"' for k, v in labels.items())
        lines.append(f'kube_pod_labels{{namespace="{namespace}",pod="{pod}"{extra}}} 1')
    body = ("\n".join(lines) + "\n").encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def scrape_config(server):
    """The Prometheus scrape job for it (labels kept as kube-state-metrics exports them)."""
    return {"job_name": "kube-state-metrics", "honor_labels": True,
            "static_configs": [{"targets": [f"127.0.0.1:{server.server_address[1]}"]}]}
