#!/usr/bin/env python3
"""Benchmark of following tasks' logs (kubectl k8s4r logs -f, docs/logs.md), every part real: k8s4r-kube-sim (RBAC
over TLS), Mosquitto, the bridge (its logs endpoint over HTTPS, each follower checked by a TokenReview and a
SubjectAccessReview), the manager, and real agents running the tasks; the follower is the plugin itself,
tools/kubectl-k8s4r-logs. It measures:

1. bytes over MQTT per log line: every log request and answer on the broker (topic, payload and the MQTT headers of
   a QoS 1 PUBLISH and its PUBACK), over the lines followed; for a fast writer (10,000 lines at once) and a paced
   one (20 lines a second);
2. the end-to-end delay of a followed line: each line carries the time it was written (the task's clock, which is
   the follower's: one machine), taken when the plugin prints it; p50 and p99;
3. what following 10 tasks at once costs the bridge: its CPU time and RSS over the same window with 10 paced tasks
   followed, and with the same tasks unfollowed, side by side.

Usage:
  /usr/bin/python3 bench/logs_bench.py           # the figures in docs/performance.md (3 runs of each, medians)
  /usr/bin/python3 bench/logs_bench.py --short   # quick
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "integration"), str(REPO / "integration" / "bridge"),
                str(REPO / "integration" / "agent"), str(REPO / "integration" / "manager")]

from agent_support import AgentProcess  # noqa: E402
from bridge_bench import percentile, proc_figures  # noqa: E402
from bridge_support import BridgeProcess, apply_bridge_rbac, apply_rbac  # noqa: E402
from conftest import Broker, KubeSim, Observer, free_port, make_tls_files, wait_until  # noqa: E402
from manager_support import DEPLOY, ManagerProcess  # noqa: E402

PLUGIN = REPO / "tools" / "kubectl-k8s4r-logs"
# A QoS 1 PUBLISH: fixed header (2-4 bytes), topic length (2), packet id (2), MQTT 5 properties length (1); its
# PUBACK: 4 bytes. Counted with the topic and payload each message carries.
MQTT_OVERHEAD = 4 + 2 + 2 + 1 + 4


def job(name, count, script):
    return {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"name": name, "type": "batch",
                     "taskGroups": [{"name": "g", "count": count,
                                     "tasks": [{"name": "work", "driver": "exec",
                                                "config": {"execConfig": {"command": "/bin/sh",
                                                                          "args": ["-c", script]}}}]}]}}


# A paced writer: each line "SEQ WALL_NS padding", 20 a second, for SECONDS; the time taken when written.
PACED = ("i=0; end=$(( $(date +%s) + {seconds} )); while [ $(date +%s) -lt $end ]; do i=$((i+1)); "
         "echo \"$i $(date +%s%N) the robot reports its state as it goes along\"; sleep 0.05; done")
FAST = "i=1; while [ $i -le {lines} ]; do echo \"line $i of the fast writer, about sixty bytes long\"; i=$((i+1)); done"


class Stack:
    def __init__(self, workdir, robots):
        self.workdir, self.stopping = workdir, []
        tls = make_tls_files(workdir / "tls")
        self.tls = tls
        self.sim = KubeSim(workdir / "sim", "--authorization-mode=RBAC", token="admin-token", tls=tls)
        self.stopping.append(self.sim.stop)
        self.sim.apply_crds()
        self.sim.bridge_kubeconfig = apply_bridge_rbac(self.sim)
        self.sim.manager_kubeconfig = apply_rbac(self.sim, DEPLOY, "k8s4r-manager")
        self.broker = Broker(workdir / "broker")
        self.stopping.append(self.broker.stop)
        port = free_port()
        self.logs_url = f"https://127.0.0.1:{port}"
        self.bridge = BridgeProcess(workdir / "bridge", self.broker, self.sim, log_level="info", extra=[
            "--logs-bind-address", f"127.0.0.1:{port}", "--logs-tls-cert-file", tls["cert"],
            "--logs-tls-key-file", tls["key"]]).start()
        self.stopping.append(self.bridge.stop)
        self.manager = ManagerProcess(workdir / "manager", self.sim, ["--require-robot-token=false"],
                                      log_level="info", fast=False).start()
        self.stopping.append(self.manager.stop)
        self.agents = []
        for number in range(robots):
            agent = AgentProcess(self.broker, workdir / f"work-{number}", f"robot-{number}").start()
            self.agents.append(agent)
            self.stopping.append(agent.process.kill)

        def online():
            listed = self.sim.request("GET", "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/robots")[2]["items"]
            return sum(r.get("status", {}).get("phase") == "Online" for r in listed) == robots
        wait_until(online, 60, "every robot to be Online")

    def stop(self):
        for stop in reversed(self.stopping):
            try:
                stop()
            except Exception as failed:  # noqa: BLE001 - stop everything, whatever one says
                print(f"stopping: {failed}", file=sys.stderr)

    def run_job(self, name, count, script):
        self.sim.kubectl("apply", "-f", "-", input=json.dumps(job(name, count, script)))

        def running():
            tasks = self.sim.request("GET", "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks"
                                            f"?labelSelector=job%3D{name}")[2]["items"]
            return len(tasks) == count and all(t.get("status", {}).get("state") in ("running", "completed")
                                               for t in tasks) and [t["metadata"]["name"] for t in tasks]
        return wait_until(running, 60, f"job {name} running")

    def follow(self, task, *flags):
        return subprocess.Popen(["/usr/bin/python3", str(PLUGIN), "-f", *flags, task, "--token", "admin-token",
                                 "-n", "default", f"--logs-url={self.logs_url}", f"--logs-ca={self.tls['ca']}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def mqtt_bytes(observer):
    with observer.lock:
        messages = list(observer.messages)
    return len(messages), sum(len(topic) + len(payload) + MQTT_OVERHEAD for topic, payload, _ in messages)


def bytes_per_line(stack, name, count_lines, script):
    observer = Observer(stack.broker, topics=("k8s4r/robots/+/logs/#",))
    try:
        task = stack.run_job(name, 1, script)[0]
        follower = stack.follow(task)
        out, err = follower.communicate(timeout=300)
        assert follower.returncode == 0, err
        lines = out.count(b"\n")
        assert lines == count_lines, (lines, count_lines)
        time.sleep(0.5)  # the last PUBACKs: a window to count in, not a wait for an outcome
        messages, total = mqtt_bytes(observer)
        return {"lines": lines, "log_bytes": len(out), "mqtt_messages": messages, "mqtt_bytes": total,
                "mqtt_bytes_per_line": round(total / lines, 1), "overhead_ratio": round(total / len(out), 3)}
    finally:
        observer.close()


def paced(stack, name, seconds):
    """A task writing 20 lines a second, followed from its start: each line's delay, and the MQTT bytes per line."""
    observer = Observer(stack.broker, topics=("k8s4r/robots/+/logs/#",))
    try:
        task = stack.run_job(name, 1, PACED.format(seconds=seconds))[0]
        follower = stack.follow(task)
        taken, printed = [], 0
        for line in follower.stdout:
            now = time.time_ns()
            printed += len(line)
            fields = line.split()
            if len(fields) >= 2:
                taken.append((now - int(fields[1])) / 1e6)
        follower.wait(timeout=60)
        time.sleep(0.5)  # the last PUBACKs: a window to count in, not a wait for an outcome
        messages, total = mqtt_bytes(observer)
    finally:
        observer.close()
    lines = len(taken)
    taken = taken[5:]  # the first lines were written before the follow began
    return {"lines": lines, "p50_ms": round(percentile(taken, 0.5), 1), "p99_ms": round(percentile(taken, 0.99), 1),
            "max_ms": round(max(taken), 1), "mqtt_messages": messages,
            "mqtt_bytes_per_line": round(total / lines, 1), "overhead_ratio": round(total / printed, 3)}


def ten_followed(stack, seconds, name):
    """The bridge's CPU and RSS over `seconds` with 10 paced tasks unfollowed, then the same tasks followed."""
    tasks = stack.run_job(name, 10, PACED.format(seconds=2 * seconds + 10))
    pid = stack.bridge.process.pid
    before = proc_figures(pid)
    time.sleep(seconds)  # the measured window: the bridge idle beside 10 running tasks
    idle = proc_figures(pid)
    followers = [stack.follow(task) for task in tasks]
    sink = []

    def drain(follower):
        for line in follower.stdout:
            sink.append(len(line))
    threads = [threading.Thread(target=drain, args=(f,), daemon=True) for f in followers]
    for thread in threads:
        thread.start()
    time.sleep(2)  # the followers' start (a TokenReview and a SubjectAccessReview each) is outside the window
    start = proc_figures(pid)
    lines_at_start = len(sink)
    time.sleep(seconds)  # the measured window: 10 follows
    end = proc_figures(pid)
    followed_lines = len(sink) - lines_at_start
    for follower in followers:
        follower.kill()
        follower.wait()
    stack.sim.kubectl("delete", "rjob", name, "--wait=false")
    return {"window_s": seconds,
            "unfollowed_cpu_percent": round(100 * (idle["cpu_s"] - before["cpu_s"]) / seconds, 2),
            "followed_cpu_percent": round(100 * (end["cpu_s"] - start["cpu_s"]) / seconds, 2),
            "unfollowed_rss_kib": idle["rss_kib"], "followed_rss_kib": end["rss_kib"],
            "lines_followed": followed_lines,
            "cpu_us_per_line": round(1e6 * ((end["cpu_s"] - start["cpu_s"]) -
                                            (idle["cpu_s"] - before["cpu_s"])) / max(1, followed_lines), 1)}


def medians(runs):
    """Each figure's median over the runs, with the runs' values beside it."""
    return {key: {"median": statistics.median(run[key] for run in runs), "runs": [run[key] for run in runs]}
            for key in runs[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement, side by side (3)")
    args = parser.parse_args()
    fast_lines = 2000 if args.short else 10000
    paced_seconds = 5 if args.short else 20
    window = 5 if args.short else 20
    with tempfile.TemporaryDirectory(prefix="k8s4r-logs-bench-") as directory:
        stack = Stack(pathlib.Path(directory), robots=2)
        try:
            runs = {"fast_writer": [], "paced_writer": [], "ten_followed": []}
            repeats = 1 if args.short else args.repeats
            for run in range(repeats):
                runs["fast_writer"].append(bytes_per_line(stack, f"fast-{run}", fast_lines,
                                                          FAST.format(lines=fast_lines)))
                runs["paced_writer"].append(paced(stack, f"paced-{run}", paced_seconds))
                runs["ten_followed"].append(ten_followed(stack, window, f"ten-{run}"))
            results = {name: medians(each) for name, each in runs.items()}
        finally:
            stack.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
