#!/usr/bin/env python3
"""Benchmark of the daemons' defaults under an anonymous flood (issue 29): what a client that can reach the broker,
and nothing more, does to the bridge and to honest work.

Every part real: Mosquitto letting anyone in (as the demo's), k8s4r-kube-sim (RBAC over TLS), the bridge and the
manager with their default settings (robots approved by their Secrets' tokens, Go K8s4r's shared topics off), and
--robots real agents, each enrolled with its Secret. Honest work: Tasks of their own, --rate a second, spread over
the agents, each running `true`.

Windows, one after the other:
- quiet (--quiet seconds): honest Tasks only;
- flood (--seconds): --flooders processes publish as fast as they can at QoS 0, each message one of: a register of
  a robot never seen (a new id each time), a heartbeat of one, a payload that is not JSON on a robot's topic, a
  forged task status for a uid that does not exist. Honest Tasks go on meanwhile.

For each window: honest Tasks' creation → `running` (p50, p99, max, seen on a watch of the API), Tasks that never
ran; and over the flood: messages offered a second, the bridge's and the broker's peak RSS, the bridge's log growth
in bytes and lines, Robots created, and none of them Online.

Usage:
  /usr/bin/python3 bench/flood_bench.py                  # the figures in docs/performance.md
  /usr/bin/python3 bench/flood_bench.py --seconds 5      # quicker
Exits non-zero when something did not work (an honest Task never ran, a made-up robot Online); the goals (bridge
RSS < 100 MiB, its log < 1 MB through the flood) are reported, never asserted.
"""
import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "integration"), str(REPO / "integration" / "bridge"), str(REPO / "integration" / "agent"),
                str(REPO / "integration" / "manager")]

from agent_support import AgentProcess  # noqa: E402
from bridge_support import BridgeProcess, apply_bridge_rbac, apply_rbac, create_robot_secret  # noqa: E402
from conftest import Broker, KubeSim, make_tls_files, wait_until  # noqa: E402
from manager_support import DEPLOY, ManagerProcess  # noqa: E402

TASKS = "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks"
ROBOTS = "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/robots"


def peak_rss_mib(pid):
    """VmHWM: the most resident memory the process has had."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def flood(port, seconds, index, counter):
    """One flooding client: as fast as it can, for `seconds`, at QoS 0."""
    import paho.mqtt.client as mqtt
    client = mqtt.Client(client_id=f"flooder-{index}-{os.getpid()}", clean_session=True)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    sent, deadline, n = 0, time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        for _ in range(200):
            n += 1
            robot = f"fake-{index}-{n}"
            kind = n % 4
            if kind == 0:
                client.publish(f"k8s4r/robots/{robot}/register",
                               json.dumps({"robotId": robot, "token": "guess", "runningTasks": []}), qos=0)
            elif kind == 1:
                client.publish(f"k8s4r/robots/{robot}/heartbeat",
                               json.dumps({"robotId": robot, "runningTasks": []}), qos=0)
            elif kind == 2:
                client.publish(f"k8s4r/robots/{robot}/heartbeat", b"not json {", qos=0)
            else:
                uid = f"forged-{index}-{n}"
                client.publish(f"k8s4r/robots/robot-a/tasks/{uid}/status",
                               json.dumps({"taskUid": uid, "robotId": "robot-a", "state": "completed", "seq": 1}),
                               qos=0)
            sent += 1
    client.loop_stop()
    client.disconnect()
    with counter.get_lock():
        counter.value += sent


class TaskTimes:
    """A watch of the bench's Tasks on a thread: when each was first seen running."""

    def __init__(self, sim):
        self.sim, self.running, self.lock, self.stopped = sim, {}, threading.Lock(), False
        _, _, listed = sim.request("GET", f"{TASKS}?labelSelector=bench%3Dflood")
        self.version = listed["metadata"]["resourceVersion"]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        host, port = urllib.parse.urlsplit(self.sim.url).netloc.rsplit(":", 1)
        connection = http.client.HTTPSConnection(host, int(port), context=self.sim.ssl_context(), timeout=3600)
        connection.request("GET", f"{TASKS}?watch=1&labelSelector=bench%3Dflood&resourceVersion={self.version}",
                           headers={"Authorization": f"Bearer {self.sim.token}"})
        for line in connection.getresponse():
            if self.stopped:
                break
            if line.strip():
                task = json.loads(line)["object"]
                if task.get("status", {}).get("state") in ("running", "completed"):
                    with self.lock:
                        self.running.setdefault(task["metadata"]["name"], time.monotonic())


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def run(args, workdir):
    stopping = []
    try:
        tls = make_tls_files(workdir / "tls")
        sim = KubeSim(workdir / "sim", "--authorization-mode=RBAC", token="admin-token", tls=tls)
        stopping.append(sim.stop)
        sim.apply_crds()
        sim.bridge_kubeconfig = apply_bridge_rbac(sim)
        sim.manager_kubeconfig = apply_rbac(sim, DEPLOY, "k8s4r-manager")
        broker = Broker(workdir / "broker")
        stopping.append(broker.stop)
        bridge = BridgeProcess(workdir / "bridge", broker, sim, log_level="info").start()
        stopping.append(bridge.stop)
        manager = ManagerProcess(workdir / "manager", sim, log_level="info", fast=False).start()
        stopping.append(manager.stop)
        robots = [f"robot-{chr(ord('a') + i)}" for i in range(args.robots)]
        for name in robots:
            create_robot_secret(sim, name, f"token-{name}")
            agent = AgentProcess(broker, workdir / f"work-{name}", name, ["--token", f"token-{name}"])
            agent.start()
            stopping.append(agent.cleanup)
        def phase(name):
            body = sim.request("GET", f"{ROBOTS}/{name}")[2]
            return body.get("status", {}).get("phase") if isinstance(body, dict) and body.get("kind") == "Robot" \
                else None
        for name in robots:
            wait_until(lambda: phase(name) == "Online", 60, f"{name} to be Online")

        times = TaskTimes(sim)
        created = {}
        counter = multiprocessing.Value("l", 0)

        def make_tasks(window, seconds):
            n, start = 0, time.monotonic()
            while time.monotonic() - start < seconds:
                name = f"{window}-{n}"
                task = {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
                        "metadata": {"name": name, "labels": {"bench": "flood"}},
                        "spec": {"name": name, "driver": "exec", "targetRobot": robots[n % len(robots)],
                                 "config": {"execConfig": {"command": "/bin/true"}}}}
                sim.request("POST", TASKS, task)
                created[name] = (window, time.monotonic())
                n += 1
                time.sleep(max(0.0, start + n / args.rate - time.monotonic()))

        make_tasks("quiet", args.quiet)
        log_bytes, log_lines = bridge.log_path.stat().st_size, bridge.log_text().count("\n")
        flooders = [multiprocessing.Process(target=flood, args=(broker.port, args.seconds, i, counter))
                    for i in range(args.flooders)]
        flood_start = time.monotonic()
        for process in flooders:
            process.start()
        make_tasks("flood", args.seconds)
        for process in flooders:
            process.join()
        flood_seconds = time.monotonic() - flood_start
        # What the flood left queued is worked through before the figures are read.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(times.running) < len(created):
            time.sleep(0.5)
        times.stopped = True

        results = {"flood_seconds": round(flood_seconds, 1), "messages_offered": counter.value,
                   "offered_per_second": round(counter.value / flood_seconds),
                   "bridge_peak_rss_mib": round(peak_rss_mib(bridge.process.pid), 1),
                   "broker_peak_rss_mib": round(peak_rss_mib(broker.process.pid), 1),
                   "bridge_log_bytes": bridge.log_path.stat().st_size - log_bytes,
                   "bridge_log_lines": bridge.log_text().count("\n") - log_lines,
                   "messages_refused": {}, "windows": {}}
        _, text = bridge.http("/metrics")
        for line in text.splitlines():
            if line.startswith("k8s4r_bridge_messages_refused_total{"):
                results["messages_refused"][line.split('"')[1]] = int(float(line.split()[-1]))
        listed = sim.request("GET", ROBOTS)[2]["items"]
        made_up = [r for r in listed if r["metadata"]["name"] not in robots]
        results["robots_created"] = len(made_up)
        results["made_up_online"] = sum(r.get("status", {}).get("phase") == "Online" for r in made_up)
        for window in ("quiet", "flood"):
            names = [name for name, (w, _) in created.items() if w == window]
            latencies = [(times.running[name] - created[name][1]) * 1000 for name in names if name in times.running]
            results["windows"][window] = {
                "tasks": len(names), "never_ran": len(names) - len(latencies),
                "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
                "p99_ms": round(percentile(latencies, 0.99), 1) if latencies else None,
                "max_ms": round(max(latencies), 1) if latencies else None}
        return results
    finally:
        for stop in reversed(stopping):
            with contextlib.suppress(Exception):
                stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20, help="how long the flood lasts (20)")
    parser.add_argument("--quiet", type=float, default=10, help="the quiet window before it (10)")
    parser.add_argument("--flooders", type=int, default=2, help="flooding processes (2)")
    parser.add_argument("--robots", type=int, default=2, help="honest agents (2)")
    parser.add_argument("--rate", type=float, default=5, help="honest Tasks created a second (5)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    kept = tempfile.mkdtemp(prefix="k8s4r-flood-bench.") if args.keep else None
    with (contextlib.nullcontext(kept) if kept else tempfile.TemporaryDirectory(prefix="k8s4r-flood-bench.")) as d:
        results = run(args, pathlib.Path(d))
    print(json.dumps(results, indent=2))
    bad = results["made_up_online"] > 0 or any(w["never_ran"] for w in results["windows"].values())
    print(f"bridge peak RSS {results['bridge_peak_rss_mib']} MiB (goal < 100), log +{results['bridge_log_bytes']} "
          f"bytes (goal < 1 MB); honest Task → running p99 quiet {results['windows']['quiet']['p99_ms']} ms, "
          f"flood {results['windows']['flood']['p99_ms']} ms")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
