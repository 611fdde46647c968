#!/usr/bin/env python3
"""Checks --web.config.file with a TLS stack independent of the server's: Python's ssl module
(OpenSSL) talks to the exporter on the demo node with TLS, optional client certificates and
basic auth, and must see exactly what an operator would expect; then `top --url` reads the same
server as a client (its CA, a client certificate, basic auth from a password file).

usage: check_tls.py BINARY
"""

import base64
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import bcrypt

from loopback import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tls")


def context(client=None, max_version=None):
    ctx = ssl.create_default_context(cafile=os.path.join(FIXTURES, "ca.crt"))
    if client:
        ctx.load_cert_chain(os.path.join(FIXTURES, client + ".crt"), os.path.join(FIXTURES, client + ".key"))
    if max_version:
        ctx.maximum_version = max_version
    return ctx


def get(url, ctx, password=None):
    """Status, headers and the negotiated TLS version of one GET."""
    request = urllib.request.Request(url)
    if password:
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        request.add_header("Authorization", "Basic " + token)
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def main():
    binary = sys.argv[1]
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        web = os.path.join(tmp, "web.yml")
        hashed = bcrypt.hashpw(b"correct horse", bcrypt.gensalt(10)).decode()
        with open(web, "w") as f:
            f.write(
                f"tls_server_config:\n"
                f"  cert_file: {FIXTURES}/server.crt\n"
                f"  key_file: {FIXTURES}/server.key\n"
                f"  client_auth_type: VerifyClientCertIfGiven\n"
                f"  client_ca_file: {FIXTURES}/ca.crt\n"
                f"http_server_config:\n"
                f"  headers:\n"
                f"    Strict-Transport-Security: max-age=31536000\n"
                f"basic_auth_users:\n"
                f"  prometheus: {hashed}\n"
            )
        server = subprocess.Popen(
            [binary, "serve", "--demo", "--listen", f"127.0.0.1:{port}", "--web.config.file", web],
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"https://localhost:{port}"
            deadline = time.time() + 20
            while True:
                try:
                    if get(url + "/readyz", context())[0] == 200:
                        break
                except (OSError, ssl.SSLError):
                    pass
                if time.time() > deadline:
                    sys.exit("the exporter did not answer over TLS within 20 s")
                time.sleep(0.2)

            checks = []

            def check(what, ok):
                checks.append((what, ok))
                print(("ok   " if ok else "FAIL ") + what)

            status, headers, body = get(url + "/metrics", context(), "correct horse")
            check("TLS 1.3 + right password: 200 with the metrics", status == 200 and b"gpu_verdict" in body)
            check("security header from the web config", headers.get("Strict-Transport-Security") == "max-age=31536000")
            status, _, _ = get(url + "/metrics", context(max_version=ssl.TLSVersion.TLSv1_2), "correct horse")
            check("TLS 1.2 is offered too", status == 200)
            status, _, _ = get(url + "/metrics", context("client"), "correct horse")
            check("a client certificate from the trusted CA is accepted", status == 200)
            try:
                get(url + "/metrics", context("stranger"), "correct horse")
                check("a client certificate from another CA is refused", False)
            except (ssl.SSLError, urllib.error.URLError, ConnectionError):
                check("a client certificate from another CA is refused", True)
            status, headers, _ = get(url + "/metrics", context())
            check("no password: 401 asking for basic auth", status == 401 and "Basic" in headers.get("WWW-Authenticate", ""))
            status, _, _ = get(url + "/metrics", context(), "Tr0ub4dor&3")
            check("wrong password: 401", status == 401)
            status, _, body = get(f"http://127.0.0.1:{port}/metrics", None)
            check("plain HTTP: 400 naming the mistake", status == 400 and b"HTTPS server" in body)
            # `top --url` is a client of the same server: the CA, a client certificate, the
            # password from a file; the wrong password is refused with the server's answer.
            password = os.path.join(tmp, "password")
            with open(password, "w") as f:
                f.write("correct horse\n")
            top = [binary, "top", "--url", url, "--tls.ca-file", f"{FIXTURES}/ca.crt",
                   "--tls.cert-file", f"{FIXTURES}/client.crt", "--tls.key-file", f"{FIXTURES}/client.key",
                   "--user", "prometheus", "--password-file", password, "--refreshes", "1"]
            shown = subprocess.run(top, capture_output=True, text=True, timeout=30)
            check("top reads /api/v1/diagnosis over TLS with a client certificate and the password",
                  shown.returncode == 0 and "vision/train-0" in shown.stdout)
            with open(password, "w") as f:
                f.write("Tr0ub4dor&3\n")
            refused = subprocess.run(top, capture_output=True, text=True, timeout=30)
            check("top with the wrong password: the exporter's 401, said so",
                  refused.returncode != 0 and "401" in refused.stderr)
        finally:
            server.terminate()
            server.wait(timeout=10)
    failed = [what for what, ok in checks if not ok]
    if failed:
        sys.exit(f"{len(failed)} TLS/auth check(s) failed")


if __name__ == "__main__":
    main()
