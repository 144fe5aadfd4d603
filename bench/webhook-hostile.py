#!/usr/bin/env python3
"""Hostile-load benchmark of `injector serve` (the figures the webhook's bounds were accepted on), for one or more builds in
the same run, each against the same scenarios on loopback HTTPS (certificate verified):

  costly   two 2,000-container `grpc-agent` reviews kept in flight (each resent as soon as answered)
           while normal reviews (the hello pod) and /healthz are timed, one after another;
  bodies   40 TLS connections each holding an unfinished body just under the 6 MiB limit: the server's
           RSS with them open, normal-review latency meanwhile, RSS 2 s after they close;
  idle     1,100 TCP connections that never send a ClientHello: normal-review latency meanwhile.

The server runs with this script's environment: set MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
to measure it as deploy/ and the Dockerfile run it.

Usage: bench/webhook-hostile.py [--scenario costly|bodies|idle]... NAME=INJECTOR_BINARY...
  e.g. bench/webhook-hostile.py before=/tmp/old/injector after=target/release/injector
Prints one line per scenario and build. Figures go in bench/README.md and closing notes, never in tests.
Standard library only (ssl, socket, threading), so it runs on a fresh machine as it is.
"""

import argparse
import json
import os
import resource
import socket
import ssl
import statistics
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "testdata", "istio", "inject")
SNI = "localhost"


def review(pod, uid="bench"):
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "object": pod,
        },
    }


def hello_pod():
    # The pod of testdata/istio/inject/hello.yaml's Deployment, as its ReplicaSet would send it.
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "hello-fake-",
            "labels": {"app": "hello", "tier": "backend", "track": "stable"},
        },
        "spec": {
            "containers": [
                {
                    "name": "hello",
                    "image": "fake.docker.io/google-samples/hello-go-gke:1.0",
                    "ports": [{"name": "http", "containerPort": 80}],
                }
            ]
        },
    }


def grpc_pod(n):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "costly",
            "annotations": {"inject.istio.io/templates": "grpc-agent"},
        },
        "spec": {"containers": [{"name": f"c{i}", "image": "app:1"} for i in range(n)]},
    }


class Server:
    def __init__(self, binary, work):
        self.work = work
        certs = os.path.join(work, "certs")
        subprocess.run(
            [binary, "certs", "--out-dir", certs, "--san", "localhost", "--san", "127.0.0.1"],
            check=True,
            stderr=subprocess.DEVNULL,
        )
        ports = os.path.join(work, "ports")
        self.log = open(os.path.join(work, "server.log"), "w")
        self.proc = subprocess.Popen(
            [
                binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                "--port-file", ports,
                "--tls-cert", os.path.join(certs, "tls.crt"),
                "--tls-key", os.path.join(certs, "tls.key"),
                "--values", os.path.join(CORPUS, "base-values.json"),
                "--mesh-config", os.path.join(CORPUS, "base-mesh.yaml"),
                "--injector-config", os.path.join(CORPUS, "base-injector-config.yaml"),
                "--native-sidecars", "true", "--log-format", "json",
            ],
            stderr=self.log,
            env=dict(os.environ, RUST_LOG="warn"),
        )
        for _ in range(200):
            if os.path.exists(ports) and os.path.getsize(ports) > 0:
                break
            time.sleep(0.05)
        lines = dict(l.split("=", 1) for l in open(ports).read().split())
        h, p = lines["https"].rsplit(":", 1)
        self.https = (h, int(p))
        h, p = lines["metrics"].rsplit(":", 1)
        self.metrics = (h, int(p))
        self.ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))

    def rss_mib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def tls(self, timeout=30):
        s = socket.create_connection(self.https, timeout=timeout)
        return self.ctx.wrap_socket(s, server_hostname=SNI)

    def post(self, body, timeout=30):
        """One review on a fresh connection; returns (seconds, status, body)."""
        t = time.monotonic()
        s = self.tls(timeout)
        req = (
            f"POST /inject HTTP/1.1\r\nHost: {SNI}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        s.sendall(req)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1]) if head else 0
        return time.monotonic() - t, status, rest

    def healthz(self):
        t = time.monotonic()
        s = socket.create_connection(self.metrics, timeout=30)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while s.recv(4096):
            pass
        s.close()
        return time.monotonic() - t

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def timed_normals(server, n, spacing=0.05, cap=120.0):
    """Up to `n` normal reviews, stopping after `cap` seconds (an old build can stall for minutes)."""
    body = json.dumps(review(hello_pod())).encode()
    lat, bad = [], 0
    end = time.monotonic() + cap
    for _ in range(n):
        if time.monotonic() > end:
            break
        try:
            dt, status, rest = server.post(body)
            lat.append(dt)
            if status != 200 or b'"patch"' not in rest:
                bad += 1
        except OSError:
            bad += 1
            lat.append(float("inf"))
        time.sleep(spacing)
    return lat, bad


def fmt(lat):
    if not lat:
        return "none"
    return f"p50 {statistics.median(lat)*1000:.1f} ms, max {max(lat)*1000:.1f} ms"


def costly(server):
    stop = threading.Event()
    done = []

    def loop():
        while not stop.is_set():
            # A new pod every time: the same pod again would be answered from the patch cache.
            pod = grpc_pod(2000)
            pod["metadata"]["name"] = f"costly-{threading.get_ident()}-{len(done)}"
            body = json.dumps(review(pod)).encode()
            try:
                dt, status, rest = server.post(body, timeout=120)
                done.append((dt, status, b'"allowed":true' in rest.replace(b" ", b"")))
            except OSError:
                done.append((float("inf"), 0, False))

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    normals, bad = timed_normals(server, 20)
    health = [server.healthz() for _ in range(20)]
    stop.set()
    for t in threads:
        t.join(timeout=120)
    costly_s = [d for d, _, _ in done]
    return (
        f"normal reviews {fmt(normals)} ({bad} bad); /healthz {fmt(health)}; "
        f"2,000-container grpc-agent reviews answered: {len(done)} ({fmt(costly_s)}, "
        f"{sum(1 for _, _, a in done if a)} allowed)"
    )


def bodies(server):
    limit = 6 * 1024 * 1024
    declared = limit - 1
    sent = limit - 1024
    rss0 = server.rss_mib()
    socks, refused = [], 0
    chunk = b"x" * 65536
    for _ in range(40):
        try:
            s = server.tls()
            s.sendall(
                (
                    f"POST /inject HTTP/1.1\r\nHost: {SNI}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {declared}\r\n\r\n"
                ).encode()
            )
            s.settimeout(10.0)
            left = sent
            while left > 0:
                try:
                    left -= s.send(chunk[: min(left, len(chunk))])
                except OSError:
                    # The server stopped reading or closed (over its budget it answers and closes).
                    refused += 1
                    break
            s.settimeout(30)
            socks.append(s)
        except OSError:
            refused += 1
    time.sleep(1.0)
    rss_open = server.rss_mib()
    normals, bad = timed_normals(server, 20)
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
    time.sleep(2.0)
    rss_after = server.rss_mib()
    return (
        f"RSS idle {rss0:.1f} MiB, with 40 bodies open {rss_open:.1f} MiB, 2 s after close "
        f"{rss_after:.1f} MiB; connections cut short {refused}; normal reviews meanwhile {fmt(normals)} ({bad} bad)"
    )


def idle(server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    socks = []
    for _ in range(1100):
        try:
            socks.append(socket.create_connection(server.https, timeout=5))
        except OSError:
            break
    time.sleep(0.5)
    normals, bad = timed_normals(server, 20)
    opened = len(socks)
    for s in socks:
        s.close()
    return f"{opened} idle TCP connections; normal reviews meanwhile {fmt(normals)} ({bad} bad)"


SCENARIOS = {"costly": costly, "bodies": bodies, "idle": idle}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    ap.add_argument("builds", nargs="+", help="NAME=INJECTOR_BINARY")
    a = ap.parse_args()
    builds = [b.split("=", 1) for b in a.builds]
    for name in a.scenario or ["costly", "bodies", "idle"]:
        for build, binary in builds:
            with tempfile.TemporaryDirectory() as work:
                server = Server(binary, work)
                try:
                    result = SCENARIOS[name](server)
                finally:
                    server.stop()
                print(f"{name:7} {build:8} {result}", flush=True)


if __name__ == "__main__":
    main()
