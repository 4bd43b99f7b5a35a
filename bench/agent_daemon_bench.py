#!/usr/bin/env python3
"""Benchmark of the whole k8s4r-agent daemon through a real Mosquitto, as a
robot runs it. Measures, over --repeats runs side by side:

1. dispatch -> exec: from the moment the dispatch is published to the moment
   the task's program (/bin/date, exec'd directly, no shell) reads the clock.
   This includes MQTT delivery, parsing, the journal's fsync and posix_spawn.
2. spawn-exit-reap cycles per second: a burst of /bin/true tasks, from the
   first dispatch until every `completed` report arrived.
3. threads, RSS and CPU: at idle (CPU over --idle-seconds between heartbeats)
   and with 100 and 1,000 tasks running (`sleep`).
4. with --remember N: RSS and state.log size once N more tasks have finished
   (all remembered for their retention), and the cost of each in memory.
5. with --cpu-load N: N processes spinning on the CPU (at the same priority as
   the agent) for the whole run, as a busy robot or a shared test machine has
   them: every step of a task's start then waits for a core.
6. with --bulky-burst N: N dispatches of ~200 KiB each at once (the size limit
   is 256 KiB): the time until every one completed and the agent's peak RSS
   (VmHWM), which is what received messages waiting for the loop cost.

Usage:
  python3 bench/agent_daemon_bench.py --agent build/bin/k8s4r-agent --repeats 3
"""
import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import paho.mqtt.client as mqtt

ROBOT = "bench-robot"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)


def proc_status(pid):
    values = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        values[key] = value.strip()
    return int(values["Threads"]), int(values["VmRSS"].split()[0])  # threads, KiB


def cpu_seconds(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def task(uid, command, args, env=None):
    spec = {"name": "bench", "driver": "exec", "config": {"execConfig": {"command": command, "args": args}}}
    if env:
        spec["env"] = env
    return json.dumps({"action": "create", "task": {
        "apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
        "metadata": {"name": uid, "namespace": "default", "uid": uid}, "spec": spec}})


def shims_memory_kib(agent_pid):
    """(count, RSS KiB, PSS KiB) summed over the k8s4r-task-shim processes under the agent: each task's parent since
    issue 12 item 8. PSS splits shared pages (libc, the shim's text) among the processes sharing them, so it is what
    the shims really add; RSS counts those pages again for each."""
    count = rss = pss = 0
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "k8s4r-task-shim":
                continue
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != agent_pid:
                continue
            for line in (entry / "smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
            count += 1
        except OSError:
            pass
    return count, rss, pss


def peak_rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


class Run:
    def __init__(self, agent_binary, workdir):
        self.workdir = pathlib.Path(workdir)
        self.port = free_port()
        conf = self.workdir / "mosquitto.conf"
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n"
                        + os.environ.get("BENCH_BROKER_EXTRA", ""))
        self.broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        wait_until(self._listening, 10, "mosquitto")
        self.final = {}
        self.running = set()
        self.lock = threading.Lock()
        self.client = mqtt.Client()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", self.port)
        # The bridge sets TCP_NODELAY; paho-python 1.6 does not, and with Nagle a dispatch
        # published just after a PUBACK waits for the broker's delayed ACK (40 ms).
        self.client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client.subscribe(f"k8s4r/robots/{ROBOT}/#", qos=1)
        self.client.loop_start()
        self.work = self.workdir / "work"
        self.agent = subprocess.Popen([agent_binary, "--broker-url", f"tcp://127.0.0.1:{self.port}", "--robot-id", ROBOT,
                                       "--work-dir", str(self.work), "--heartbeat-interval", "30s", "--log-level",
                                       os.environ.get("BENCH_AGENT_LOG_LEVEL", "warn")], stdout=subprocess.DEVNULL, stderr=open(self.workdir / "agent.log", "w"))
        self.online = threading.Event()
        wait_until(self.online.is_set, 10, "the agent online")
        time.sleep(0.3)

    def _listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def _on_message(self, client, userdata, message):
        if message.topic.endswith("/presence"):
            if json.loads(message.payload)["online"]:
                self.online.set()
            return
        if not message.topic.endswith("/status"):
            return
        status = json.loads(message.payload)
        with self.lock:
            if status["state"] == "running":
                self.running.add(status["taskUid"])
            else:
                self.final[status["taskUid"]] = status

    def publish(self, payload):
        self.client.publish(f"k8s4r/robots/{ROBOT}/tasks/dispatch", payload, qos=1)

    def dispatch_to_exec(self, count):
        latencies = []
        for i in range(count):
            uid = f"lat-{i}"
            sent = time.time_ns()
            self.publish(task(uid, "/bin/date", ["+%s%N"]))
            wait_until(lambda: uid in self.final, 10, uid)
            execed = int((self.work / "tasks" / uid / "stdout.log").read_text())
            latencies.append((execed - sent) / 1e6)
        return latencies

    def cycles_per_second(self, count):
        start = time.monotonic()
        for i in range(count):
            self.publish(task(f"cyc-{i}", "/bin/true", []))
        wait_until(lambda: len([u for u in self.final if u.startswith("cyc-")]) == count, 120, "the burst")
        return count / (time.monotonic() - start)

    def remember(self, count):
        """Runs `count` more /bin/true tasks in bursts of 1,000; returns (RSS KiB before, after, state.log bytes)."""
        _, before = proc_status(self.agent.pid)
        for start in range(0, count, 1000):
            batch = [f"mem-{i}" for i in range(start, min(count, start + 1000))]
            for uid in batch:
                self.publish(task(uid, "/bin/true", []))
            wait_until(lambda: all(uid in self.final for uid in batch), 120, "a batch to finish")
        time.sleep(0.5)
        _, after = proc_status(self.agent.pid)
        return before, after, (self.work / "state.log").stat().st_size

    def bulky_burst(self, count):
        """`count` dispatches of ~200 KiB at once; returns (seconds until all completed, peak RSS KiB)."""
        padding = {"PADDING": "x" * (200 * 1024)}
        start = time.monotonic()
        for i in range(count):
            self.publish(task(f"bulky-{i}", "/bin/true", [], padding))
        wait_until(lambda: all(f"bulky-{i}" in self.final for i in range(count)), 300, "the bulky burst")
        return time.monotonic() - start, peak_rss_kib(self.agent.pid)

    def idle(self, seconds):
        before = cpu_seconds(self.agent.pid)
        time.sleep(seconds)
        return cpu_seconds(self.agent.pid) - before

    def hold(self, total):
        """Starts sleeps until `total` run; returns (threads, RSS KiB)."""
        with self.lock:
            have = len([u for u in self.running if u.startswith("hold-")])
        for i in range(have, total):
            self.publish(task(f"hold-{i}", "sleep", ["3600"]))
        wait_until(lambda: len([u for u in self.running if u.startswith("hold-")]) >= total, 300, f"{total} running")
        time.sleep(0.5)
        return proc_status(self.agent.pid) + shims_memory_kib(self.agent.pid)

    def close(self):
        stop_run(self.agent, self.client, self.broker, 120)


def stop_run(agent, client, broker, agent_timeout):
    """The agent stopped as systemd stops it (SIGTERM, then SIGKILL), then the bench's client and broker."""
    agent.send_signal(signal.SIGTERM)
    try:
        agent.wait(timeout=agent_timeout)
    except subprocess.TimeoutExpired:
        agent.kill()
    client.loop_stop()
    client.disconnect()
    broker.terminate()
    broker.wait()


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", default="build/bin/k8s4r-agent")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-tasks", type=int, default=200)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--idle-seconds", type=float, default=10)
    parser.add_argument("--hold", default="100,1000")
    parser.add_argument("--remember", type=int, default=0)
    parser.add_argument("--bulky-burst", type=int, default=0)
    parser.add_argument("--cpu-load", type=int, default=0)
    args = parser.parse_args()
    rows = []
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.cpu_load)]
    try:
        run_all(args, rows)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    print("\nmedians over", len(rows), "runs:")
    for key in rows[0]:
        values = [row[key] for row in rows]
        print(f"  {key}: {statistics.median(values):.3f}  (runs: {', '.join(f'{v:.3f}' for v in values)})")


def run_all(args, rows):
    for repeat in range(args.repeats):
        workdir = tempfile.mkdtemp(prefix="agent-bench-")
        run = Run(args.agent, workdir)
        ok = False
        try:
            row = {}
            row["idle_threads"], row["idle_rss_kib"] = proc_status(run.agent.pid)
            row["idle_cpu_s"] = run.idle(args.idle_seconds)
            latencies = run.dispatch_to_exec(args.latency_tasks)
            row["exec_p50_ms"] = statistics.median(latencies)
            row["exec_p99_ms"] = percentile(latencies, 0.99)
            row["cycles_per_s"] = run.cycles_per_second(args.burst)
            if args.bulky_burst:
                row["bulky_burst_s"], row["bulky_peak_rss_kib"] = run.bulky_burst(args.bulky_burst)
            if args.remember:
                before, after, log_bytes = run.remember(args.remember)
                row["remember_rss_kib_before"], row["remember_rss_kib_after"] = before, after
                row["remember_bytes_each"] = (after - before) * 1024.0 / args.remember
                row["state_log_bytes"] = log_bytes
            for total in (int(n) for n in args.hold.split(",")):
                (row[f"threads_{total}"], row[f"rss_kib_{total}"], row[f"shims_{total}"], row[f"shims_rss_kib_{total}"],
                 row[f"shims_pss_kib_{total}"]) = run.hold(total)
            rows.append(row)
            ok = True
            print(f"run {repeat + 1}: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                                   for k, v in row.items()), flush=True)
        finally:
            run.close()
            if ok and not os.environ.get("BENCH_KEEP"):
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                print("kept for inspection:", workdir, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
