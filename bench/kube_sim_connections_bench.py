#!/usr/bin/env python3
"""Benchmark: what open watches and idle keep-alive connections cost
k8s4r-kube-sim. For each step it holds --watches open watches (one per
connection, as one informer per replica per resource makes them) and as many
idle keep-alive connections, then measures, over --repeats runs side by side:

1. /readyz latency: --probes sequential GETs on a fresh connection each, p50
   and p99 in milliseconds (what a kubelet's readiness probe would see);
2. fan-out: one ConfigMap created, time until every open watch has its event;
3. the server's threads and RSS.

The machine has 2 cores shared with this client, so the client's own work is
in the figures. Usage:
  python3 bench/kube_sim_connections_bench.py --sim build/bin/k8s4r-kube-sim --steps 0,1000,2000,4000 --repeats 3
"""
import argparse
import json
import pathlib
import resource
import selectors
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def proc_status(pid):
    values = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        values[key] = value.strip()
    return int(values["Threads"]), int(values["VmRSS"].split()[0]) // 1024  # threads, MiB


def start_sim(binary, workdir):
    kubeconfig = pathlib.Path(workdir) / "kubeconfig"
    log = open(pathlib.Path(workdir) / "sim.log", "w")
    process = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--write-kubeconfig", str(kubeconfig)],
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while not kubeconfig.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("k8s4r-kube-sim did not start")
        time.sleep(0.02)
    url = next(line.split("server:")[1].strip() for line in kubeconfig.read_text().splitlines() if "server:" in line)
    host, port = url.split("://")[1].split(":")
    return process, url, host, int(port)


class Stalled(Exception):
    """The server did not answer within the timeout: it has no thread left."""


def open_connections(host, port, request, count):
    opened = []
    for _ in range(count):
        connection = socket.create_connection((host, port), timeout=10)
        connection.sendall(request)
        opened.append(connection)
    for connection in opened:  # every one answered: headers read, then left open
        data = b""
        while b"\r\n\r\n" not in data:
            try:
                chunk = connection.recv(4096)
            except socket.timeout:
                for other in opened:
                    other.close()
                raise Stalled() from None
            if not chunk:
                raise RuntimeError("the server closed a connection")
            data += chunk
    return opened


def probe_latencies(host, port, probes):
    latencies = []
    request = b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    for _ in range(probes):
        start = time.perf_counter()
        with socket.create_connection((host, port), timeout=30) as connection:
            connection.sendall(request)
            data = b""
            while not data.endswith(b"ok"):
                chunk = connection.recv(4096)
                if not chunk:
                    break
                data += chunk
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def fan_out_seconds(url, watches, name):
    selector = selectors.DefaultSelector()
    for connection in watches:
        connection.setblocking(False)
        selector.register(connection, selectors.EVENT_READ, bytearray())
    needle = name.encode()
    body = json.dumps({"metadata": {"name": name}}).encode()
    start = time.perf_counter()
    urllib.request.urlopen(urllib.request.Request(url + CONFIGMAPS, data=body, method="POST",
                                                  headers={"Content-Type": "application/json"}), timeout=30).read()
    waiting = len(watches)
    deadline = time.monotonic() + 120
    while waiting and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            key.data.extend(chunk)
            if needle in key.data:
                selector.unregister(key.fileobj)
                waiting -= 1
    elapsed = time.perf_counter() - start
    for key in list(selector.get_map().values()):
        selector.unregister(key.fileobj)
    for connection in watches:
        connection.setblocking(True)
    if waiting:
        raise RuntimeError(f"{waiting} watches never saw the event")
    return elapsed


def run_once(binary, steps, probes, run):
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        process, url, host, port = start_sim(binary, workdir)
        watches, idle = [], []
        try:
            for step in steps:
                try:
                    watches += open_connections(host, port, f"GET {CONFIGMAPS}?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                                                step - len(watches))
                    idle += open_connections(host, port, b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n", step - len(idle))
                except Stalled:
                    threads, rss = proc_status(process.pid)
                    rows.append({"step": step, "stalled": True, "threads": threads, "rss_mib": rss})
                    break
                latencies = sorted(probe_latencies(host, port, probes))
                fan_out = fan_out_seconds(url, watches, f"run{run}-step{step}") if step else 0.0
                threads, rss = proc_status(process.pid)
                rows.append({"step": step, "p50": latencies[len(latencies) // 2],
                             "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
                             "fan_out_s": fan_out, "threads": threads, "rss_mib": rss})
        finally:
            for connection in watches + idle:
                connection.close()
            process.terminate()
            process.wait(timeout=10)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sim", required=True)
    parser.add_argument("--baseline", help="another k8s4r-kube-sim binary to measure side by side, run for run")
    parser.add_argument("--steps", default="0,1000,2000,4000")
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    steps = [int(step) for step in args.steps.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if 2 * max(steps) + 100 > hard:
        raise SystemExit(f"needs {2 * max(steps) + 100} descriptors, the hard limit is {hard}")
    binaries = [args.sim] + ([args.baseline] if args.baseline else [])
    results = {binary: [] for binary in binaries}
    for run in range(args.repeats):  # side by side: each run measures every binary
        for binary in binaries:
            results[binary].append(run_once(binary, steps, args.probes, run))
    for binary in binaries:
        print(f"\n{binary}")
        print(f"{'watches+idle':>14} {'readyz p50 ms':>14} {'readyz p99 ms':>14} {'fan-out s':>10} {'threads':>8} {'RSS MiB':>8}")
        for index, step in enumerate(steps):
            rows = [run[index] for run in results[binary] if index < len(run)]
            if not rows:
                break
            if any(row.get("stalled") for row in rows):
                print(f"{f'{step}+{step}':>14} {'no answer: every thread held':>40} {statistics.median(r['threads'] for r in rows):>19.0f}")
                break
            median = lambda key: statistics.median(row[key] for row in rows)  # noqa: E731
            spread = lambda key: f"{min(row[key] for row in rows):.2f}-{max(row[key] for row in rows):.2f}"  # noqa: E731
            print(f"{f'{step}+{step}':>14} {median('p50'):>14.2f} {median('p99'):>14.2f} {median('fan_out_s'):>10.3f} "
                  f"{median('threads'):>8.0f} {median('rss_mib'):>8.0f}   (p99 runs {spread('p99')}, fan-out runs {spread('fan_out_s')})")


if __name__ == "__main__":
    main()
