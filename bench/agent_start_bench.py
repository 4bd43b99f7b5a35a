#!/usr/bin/env python3
"""How a loaded robot's agent takes a burst of work (issue 28, item 6), measured for one or more agent binaries
side by side in one run (`--agent LABEL=PATH`, alternating per repeat, under the same CPU load):

1. start burst: --starts dispatches (`sleep`) published at once; how many were reported `running` within 2.5 s of
   the first, and how long until all were.
2. end burst: --burst short tasks at once; each prints the time it ends as its last line, so how late its final
   report was published is its report's arrival minus that time (p50, p99); and the longest gap between the
   agent's heartbeats (every --heartbeat-interval) during the burst.

A stand-in bridge confirms every report and heartbeat (docs/protocol.md#ack), as the real one does; an agent
that does not subscribe to confirmations ignores them.

Usage (the figures in docs/performance.md):
  /usr/bin/python3 bench/agent_start_bench.py --agent before=/tmp/old/bin/k8s4r-agent \\
      --agent after=build/bin/k8s4r-agent --cpu-load 6 --repeats 3
"""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import paho.mqtt.client as mqtt

from agent_daemon_bench import free_port, percentile, stop_run, task, wait_until  # one copy of the helpers

ROBOT = "bench-robot"


class Run:
    def __init__(self, agent_binary, workdir, heartbeat_interval):
        self.workdir = pathlib.Path(workdir)
        self.port = free_port()
        conf = self.workdir / "mosquitto.conf"
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n"
                        "set_tcp_nodelay true\n")
        self.broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        wait_until(self._listening, 10, "mosquitto")
        self.lock = threading.Lock()
        self.running_at = {}  # uid -> arrival (monotonic) of its first running report
        self.final = {}  # uid -> (arrival time.time_ns(), report)
        self.heartbeats = []  # arrival times (monotonic)
        self.online = threading.Event()
        self.client = mqtt.Client()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", self.port)
        self.client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client.subscribe(f"k8s4r/robots/{ROBOT}/#", qos=1)
        self.client.loop_start()
        self.agent = subprocess.Popen([agent_binary, "--broker-url", f"tcp://127.0.0.1:{self.port}", "--robot-id",
                                       ROBOT, "--work-dir", str(self.workdir / "work"), "--heartbeat-interval",
                                       heartbeat_interval, "--log-level", "warn",
                                       *os.environ.get("BENCH_AGENT_EXTRA", "").split()],
                                      stdout=subprocess.DEVNULL, stderr=open(self.workdir / "agent.log", "w"))
        wait_until(self.online.is_set, 10, "the agent online")

    def _listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def _on_message(self, client, userdata, message):
        arrived_ns, arrived = time.time_ns(), time.monotonic()
        topic = message.topic
        if topic.endswith("/presence"):
            if json.loads(message.payload)["online"]:
                self.online.set()
            return
        if topic.endswith("/heartbeat"):
            with self.lock:
                self.heartbeats.append(arrived)
            heard = json.loads(message.payload).get("timestamp")
            client.publish(f"k8s4r/robots/{ROBOT}/acks", json.dumps({"robotId": ROBOT, "heartbeat": heard}), qos=0)
            return
        if not topic.endswith("/status"):
            return
        status = json.loads(message.payload)
        uid = status["taskUid"]
        with self.lock:
            if status["state"] == "running":
                self.running_at.setdefault(uid, arrived)
            else:
                self.final.setdefault(uid, (arrived_ns, status))
        if status.get("seq"):
            client.publish(f"k8s4r/robots/{ROBOT}/acks", json.dumps(
                {"robotId": ROBOT, "reports": [{"taskUid": uid, "seq": status["seq"], "result": "recorded"}]}), qos=1)

    def publish(self, payload):
        self.client.publish(f"k8s4r/robots/{ROBOT}/tasks/dispatch", payload, qos=1)

    def start_burst(self, count):
        uids = [f"start-{i}" for i in range(count)]
        first = time.monotonic()
        for uid in uids:
            self.publish(task(uid, "sleep", ["4"]))
        wait_until(lambda: all(uid in self.running_at for uid in uids), 300, "every task running")
        with self.lock:
            within = sum(1 for uid in uids if self.running_at[uid] - first <= 2.5)
            all_running = max(self.running_at[uid] for uid in uids) - first
        wait_until(lambda: all(uid in self.final for uid in uids), 300, "the start burst to end")
        return within, all_running

    def end_burst(self, count):
        uids = [f"end-{i}" for i in range(count)]
        with self.lock:
            beats_before = len(self.heartbeats)
        for uid in uids:
            self.publish(task(uid, "/bin/sh", ["-c", "date +%s%N"]))
        wait_until(lambda: all(uid in self.final for uid in uids), 300, "the end burst")
        # One more heartbeat after it: a gap that the burst caused ends there.
        with self.lock:
            after = len(self.heartbeats)
        wait_until(lambda: len(self.heartbeats) > after, 30, "a heartbeat after the burst")
        lags, seen = [], []
        with self.lock:
            for uid in uids:
                arrived_ns, report = self.final[uid]
                ended_ns = int(report.get("logsTail", "0").strip().splitlines()[-1])
                lags.append((arrived_ns - ended_ns) / 1e9)
                # When the agent saw it end (finishedAt): the shim's and the monitor's part of the lag.
                finished = datetime.datetime.fromisoformat(report["finishedAt"].replace("Z", "+00:00"))
                seen.append(finished.timestamp() - ended_ns / 1e9)
            beats = self.heartbeats[max(beats_before - 1, 0):]
        self.seen_lag_p99 = percentile(seen, 0.99)
        gaps = [later - earlier for earlier, later in zip(beats, beats[1:])]
        return lags, max(gaps) if gaps else 0.0

    def close(self):
        stop_run(self.agent, self.client, self.broker, 60)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", action="append", required=True, help="LABEL=PATH, once per agent to compare")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--heartbeat-interval", default="1s")
    parser.add_argument("--cpu-load", type=int, default=6)
    args = parser.parse_args()
    agents = [entry.split("=", 1) for entry in args.agent]
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.cpu_load)]
    results = {label: [] for label, _ in agents}
    try:
        for repeat in range(args.repeats):
            for label, path in agents:
                workdir = tempfile.mkdtemp(prefix="agent-start-bench-")
                run = Run(path, workdir, args.heartbeat_interval)
                try:
                    within, all_running = run.start_burst(args.starts)
                    lags, gap = run.end_burst(args.burst)
                    row = {"running_within_2_5s": within, "all_running_s": all_running,
                           "report_lag_p50_s": statistics.median(lags), "report_lag_p99_s": percentile(lags, 0.99),
                           "end_seen_p99_s": run.seen_lag_p99, "heartbeat_gap_max_s": gap}
                    results[label].append(row)
                    print(f"run {repeat + 1} {label}: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float)
                                                                    else f"{k}={v}" for k, v in row.items()),
                          flush=True)
                finally:
                    run.close()
                    shutil.rmtree(workdir, ignore_errors=True)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    print(f"\nmedians over {args.repeats} runs each, {args.cpu_load} spinning processes:")
    for label, rows in results.items():
        print(f"  {label}: " + ", ".join(f"{key}={statistics.median(row[key] for row in rows):.3f}"
                                         for key in rows[0]))


if __name__ == "__main__":
    sys.exit(main())
