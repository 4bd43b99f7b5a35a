#!/usr/bin/env python3
"""Benchmark of k8s4r-bridge at fleet scale, with every part real: Mosquitto,
k8s4r-kube-sim (RBAC over TLS, the bridge under deploy/bridge's Role, as the
black-box tests run it), the bridge, a simulated fleet (bench/robot_fleet: each
robot its own MQTT connection, client id and last will) and a real k8s4r-agent.

1. Registration: every simulated robot registers and waits for its answer.
2. Heartbeat ingest, in two windows: the fleet at a steady rate (every robot
   every --heartbeat-every seconds), then as fast as the broker takes them.
   Heartbeats the bridge handled per second against those a bare subscriber
   (bench/robot_fleet --count-topic) got from the same Mosquitto in the same
   window; the bridge's CPU and RSS; its Robot writes per robot per minute.
3. Status throughput: Tasks assigned to simulated robots and dispatched; each
   robot reports running (seq 1) and completed (seq 2). Reports per second
   until every Task reads completed in the API, and the writes that took,
   against the stand-in's raw status merge-patch rate through the same client
   library with as many connections as the bridge has writers (Tasks in another
   namespace, which the bridge does not watch).
4. Dispatch latency through a real agent: a Task patched to dispatching, one
   after another; to the child process starting (the task's shell prints the
   clock first) and to `running` seen on a watch of the API.
5. Requests per message: GETs and LISTs the stand-in answered for the bridge's
   ServiceAccount, over MQTT messages the bridge handled.

With --replicas N, N bridge replicas (--replica-id, under deploy/bridge-replicas'
Roles) share the fleet: every figure is theirs together (messages handled and
writes summed, CPU summed, RSS the largest replica's, and each replica's
listed), and the replicas' own Lease and slot-table reads, made by time and
not per message, are reported apart.

With --brokers N, the robots are spread over N Mosquittos: the first, where
the bridges, the bare subscriber and the agent connect, and N-1 edge brokers,
each a Mosquitto bridge to the first forwarding what robots send to it and what
is sent to them back (EDGE_TOPICS): a site broker bridged to a central one, and
the way past the open-file limit one broker process hits (a descriptor per
robot). The broker CPU reported is all of them together.

Usage:
  /usr/bin/python3 bench/bridge_bench.py                 # the figures in docs/performance.md
  /usr/bin/python3 bench/bridge_bench.py --short         # small and quick: run by scripts/test.sh
  /usr/bin/python3 bench/bridge_bench.py --agent-binary before=OLD/k8s4r-agent --agent-binary after=build/bin/k8s4r-agent
                                                         # phase 4 for two agents, alternating, side by side
  /usr/bin/python3 bench/bridge_bench.py --bridge-arg=--heartbeat-ack-interval --bridge-arg=1h
                                                         # the bridge with more flags
  /usr/bin/python3 bench/bridge_bench.py --workdir /tmp/bench-run       # keep every log for a post-mortem
  /usr/bin/python3 bench/bridge_bench.py --replicas 3 --robots 20000 --brokers 2
                                                         # three replicas sharing 20,000 robots on two brokers
Exits non-zero when something did not work (a robot not registered, a Task
never completed or never ran, a GET or LIST per message); the timing goals are
reported, never asserted.
"""
import argparse
import contextlib
import datetime
import http.client
import json
import os
import pathlib
import re
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "integration"), str(REPO / "integration" / "bridge"), str(REPO / "integration" / "agent")]

from agent_support import AgentProcess  # noqa: E402
from bridge_support import BRIDGE_USER, BridgeProcess, apply_bridge_rbac, settled, slot_of  # noqa: E402
from conftest import Broker, KubeSim, make_tls_files, terminate, wait_until  # noqa: E402

SHARD = 2500  # simulated robots per robot_fleet process

# An edge broker's Mosquitto bridge to the first broker: each topic in the direction its messages travel
# (docs/protocol.md's table), so nothing loops back. Heartbeats at QoS 0, as the bridges subscribe to them.
EDGE_TOPICS = [("k8s4r/robots/+/register", "out", 1), ("k8s4r/robots/+/heartbeat", "out", 0),
               ("k8s4r/robots/+/tasks/+/status", "out", 1), ("k8s4r/robots/+/presence", "out", 1),
               ("k8s4r/register", "out", 1), ("k8s4r/heartbeat", "out", 0),
               ("k8s4r/robots/+/response", "in", 1), ("k8s4r/robots/+/tasks/dispatch", "in", 1),
               ("k8s4r/robots/+/acks", "in", 0), ("k8s4r/robots/+/artifacts", "in", 1)]


def edge_broker(workdir, core, name):
    """A Mosquitto bridged to `core` over EDGE_TOPICS, connected once `core` has logged the bridge's client id."""
    config = (f"connection {name}\naddress 127.0.0.1:{core.port}\nremote_clientid {name}\n"
              "bridge_protocol_version mqttv311\ntry_private true\ncleansession true\nnotifications false\n"
              "restart_timeout 1\n" + "".join(f"topic {topic} {direction} {qos}\n"
                                                for topic, direction, qos in EDGE_TOPICS))
    edge = Broker(workdir, extra_config=config)
    wait_until(lambda: f" as {name} " in core.log_text(), 30, f"the edge broker {name} to connect")
    return edge
TASKS = "/apis/robot.k8s4r.io/v1alpha1/namespaces/{ns}/tasks"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_figures(pid):
    status = dict(line.split(":", 1) for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines())
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return {"rss_kib": int(status["VmRSS"].split()[0]), "hwm_kib": int(status["VmHWM"].split()[0]),
            "cpu_s": (int(fields[11]) + int(fields[12])) / CLOCK_TICKS}


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def log_times(text, pattern):
    """{key: epoch ns} of the lines of a daemon's log (its "%Y-%m-%dT%H:%M:%S.%e" local-time prefix) that match
    `pattern`, a regular expression whose one group is the key; the first line per key."""
    found = {}
    for line in text.splitlines():
        match = re.search(pattern, line)
        if match and match.group(1) not in found:
            when = datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f")
            found[match.group(1)] = int(when.timestamp() * 1e9)
    return found


class Lines:
    """A child speaking one JSON object per line on stdout, read on a thread."""

    def __init__(self, command, log):
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                        text=True, bufsize=1)
        self.lines = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            with self.lock:
                self.lines.append(json.loads(line))

    def send(self, command):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def next_event(self, after, timeout):
        """The first line with an "event" past index `after`."""
        def found():
            with self.lock:
                events = [line for line in self.lines[after:] if "event" in line]
            if self.process.poll() is not None and not events:
                raise RuntimeError(f"{self.process.args[0]} exited with {self.process.returncode}")
            return events[0] if events else None
        event = wait_until(found, timeout, "an answer from " + self.process.args[0])
        if event["event"] == "error":
            raise RuntimeError(event["message"])
        return event

    def count_at(self, monotonic_ns):
        """Count mode: the count printed closest after `monotonic_ns`."""
        wait_until(lambda: self.lines and self.lines[-1]["t"] >= monotonic_ns, 5, "the subscriber's count")
        with self.lock:
            return next(line["count"] for line in self.lines if line["t"] >= monotonic_ns)

    def stop(self):
        try:
            self.process.stdin.close()
        except OSError:
            pass
        terminate(self.process)


# What the memory sampler reads off each bridge every second, beside its RSS: the heap and every queue that could
# hold what the resident set grows by.
MEMORY_GAUGES = [
    ("heap_in_use", 'k8s4r_heap_bytes{state="in_use"}'), ("heap_free", 'k8s4r_heap_bytes{state="free"}'),
    ("inbox", "k8s4r_bridge_inbox_depth"), ("loop_backlog", "k8s4r_bridge_loop_backlog"),
    ("write_callbacks", "k8s4r_bridge_kube_write_callbacks"), ("work_queue", "k8s4r_bridge_work_queue_depth"),
    ("mqtt_queued", 'k8s4r_bridge_mqtt_outgoing{state="queued"}'),
    ("mqtt_unacked", 'k8s4r_bridge_mqtt_outgoing{state="unacknowledged"}'),
    ("robot_events", 'k8s4r_bridge_informer_handler_backlog{resource="robots"}'),
    ("task_events", 'k8s4r_bridge_informer_handler_backlog{resource="tasks"}'),
    ("robots_cached", 'k8s4r_bridge_informer_objects{resource="robots"}'),
]


class MemorySampler:
    """Every second, each bridge process's RSS and MEMORY_GAUGES, so a peak can be read against what was queued
    when it happened. Reported: each process's RSS peak with the gauges at that moment, and each gauge's largest."""

    def __init__(self, members, pids):
        self.members, self.pids = members, pids
        self.samples = [[] for _ in members]
        self.stopping = threading.Event()
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping.wait(1.0):
            for index, (member, pid) in enumerate(zip(self.members, self.pids)):
                try:
                    sample = {"t": round(time.monotonic() - self.started, 1),
                              "rss_mib": round(proc_figures(pid)["rss_kib"] / 1024, 1)}
                    text = member.http("/metrics")[1]
                except Exception:  # a replica busy or gone: the next second
                    continue
                values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
                for key, series in MEMORY_GAUGES:
                    value = float(values.get(series, 0))
                    sample[key] = round(value / 1048576, 1) if key.startswith("heap") else int(value)
                self.samples[index].append(sample)

    def stop(self):
        self.stopping.set()
        self.thread.join()

    def report(self):
        peaks = [max(samples, key=lambda s: s["rss_mib"]) for samples in self.samples if samples]
        largest = {key: max((s[key] for samples in self.samples for s in samples), default=0)
                   for key, _ in MEMORY_GAUGES}
        return {"rss_peaks": peaks, "gauge_max": largest, "timeline": self.samples}


class Replicas:
    """Bridge replicas seen as one bridge by the phases: metrics summed, logs joined, /metrics summed by series."""
    name = "bridge replicas"

    def __init__(self, members):
        self.members = members

    def metric(self, name, **labels):
        return sum(member.metric(name, **labels) for member in self.members)

    def metric_sum(self, name, **labels):
        return sum(member.metric_sum(name, **labels) for member in self.members)

    def http(self, path):
        summed = {}
        for member in self.members:
            for line in member.http(path)[1].splitlines():
                if line and not line.startswith("#"):
                    series, value = line.rsplit(" ", 1)
                    summed[series] = summed.get(series, 0.0) + float(value)
        return 200, "\n".join(f"{series} {value}" for series, value in summed.items())

    def log_text(self):
        return "".join(member.log_text() for member in self.members)

    def stop(self):
        for member in self.members:
            member.stop()


class Bench:
    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.log = open(workdir / "bench-children.log", "w")
        self.stopping = []
        self.results = {}

    # ---- the parts -------------------------------------------------------------------
    def start(self):
        tls = make_tls_files(self.workdir / "tls")
        self.sim = KubeSim(self.workdir / "sim", "--authorization-mode=RBAC", token="admin-token", tls=tls)
        self.stopping.append(self.sim.stop)
        self.sim.apply_crds()
        self.sim.bridge_kubeconfig = apply_bridge_rbac(self.sim, replicas=self.args.replicas > 0)
        self.sim.kubectl("create", "namespace", "bench-raw")
        self.broker = Broker(self.workdir / "broker")  # with docs/bridge.md's settings
        self.stopping.append(self.broker.stop)
        self.brokers = [self.broker]
        for number in range(1, self.args.brokers):
            self.brokers.append(edge_broker(self.workdir / f"broker-{number}", self.broker, f"k8s4r-edge-{number}"))
            self.stopping.append(self.brokers[-1].stop)
        # A fleet registering all at once, with no manager to approve it: the bounds on new robots
        # (docs/security.md) lifted, as for a mass onboarding.
        extra = ["--heartbeat-write-interval", self.args.heartbeat_write_interval,
                 "--new-robots-per-second", "1000000", "--max-unapproved-robots", "1000000", *self.args.bridge_arg]
        if self.args.replicas == 0:
            self.bridge = BridgeProcess(self.workdir / "bridge", self.broker, self.sim, log_level="info",
                                        extra=extra)
            self.bridge.start()
            self.stopping.append(self.bridge.stop)
            self.bridge_pids = [self.bridge.process.pid]
        else:
            names = [f"bridge-{i}" for i in range(self.args.replicas)]
            members = [BridgeProcess(self.workdir / name, self.broker, self.sim, log_level="info",
                                     extra=["--replica-id", name, *extra]) for name in names]
            self.bridge = Replicas(members)
            self.stopping.append(self.bridge.stop)
            for member in members:
                member.start()
            wait_until(lambda: settled(self.sim, names), 60, "the replicas to share the slots")
            self.bridge_pids = [member.process.pid for member in members]
        self.sampler = MemorySampler(self.bridge.members if self.args.replicas else [self.bridge], self.bridge_pids)
        self.stopping.append(self.sampler.stop)
        self.subscriber = Lines([str(self.args.bin / "robot_fleet"), "--broker", f"127.0.0.1:{self.broker.port}",
                                 "--count-topic", "k8s4r/robots/+/heartbeat"], self.log)
        self.stopping.append(self.subscriber.stop)

    def stop(self):
        for stop in reversed(self.stopping):
            try:
                stop()
            except Exception as error:  # keep stopping the rest
                print(f"while stopping: {error}", file=sys.stderr)
        self.log.close()

    def bridge_figures(self):
        """CPU of every bridge process together; RSS of the largest (each replica's is listed too)."""
        each = [proc_figures(pid) for pid in self.bridge_pids]
        return {"cpu_s": sum(f["cpu_s"] for f in each), "rss_kib": max(f["rss_kib"] for f in each),
                "hwm_kib": max(f["hwm_kib"] for f in each), "rss_each_mib": [round(f["rss_kib"] / 1024, 1) for f in each]}

    def broker_cpu_s(self):
        return sum(proc_figures(broker.process.pid)["cpu_s"] for broker in self.brokers)

    def bridge_requests(self):
        counts = self.sim.request("GET", "/_sim/stats")[2]["requests"].get(BRIDGE_USER, {})
        return counts

    def messages_handled(self):
        return self.bridge.metric_sum("k8s4r_bridge_messages_total")

    # ---- 1 and 2: registration and heartbeats ------------------------------------
    def fleet(self):
        """Registration: the simulated robots in shards of at most SHARD (libmosquitto takes three descriptors a
        robot), all connecting and registering at once."""
        robots = self.args.robots
        started = time.monotonic()
        self.shards = []
        for number, first in enumerate(range(0, robots, SHARD)):
            count = min(SHARD, robots - first)
            broker = self.brokers[number % len(self.brokers)]
            shard = Lines([str(self.args.bin / "robot_fleet"), "--broker", f"127.0.0.1:{broker.port}",
                           "--robots", str(count), "--first", str(first), "--register"], self.log)
            shard.robots = range(first, first + count)
            self.shards.append(shard)
            self.stopping.append(shard.stop)
        ready = [shard.next_event(0, 900) for shard in self.shards]
        took = time.monotonic() - started
        assert sum(r["registered"] for r in ready) == robots, ready
        listed = self.sim.request("GET", "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/robots")[2]["items"]
        assert len(listed) == robots, f"{len(listed)} Robots for {robots} robots"
        sent = sum(r["register_messages"] for r in ready)
        self.results["registration"] = {"robots": robots, "shards": len(self.shards), "seconds": round(took, 1),
                                        "per_second": round(robots / took), "register_messages": sent}
        print(f"registration: {robots} robots connected and registered in {took:.1f} s ({robots / took:.0f}/s), "
              f"{sent} register messages (a robot asks again every 5 s until answered)")

        windows = [(f"steady, every robot every {self.args.heartbeat_every:g} s", robots / self.args.heartbeat_every)]
        windows += [(f"{rate:g}/s offered", rate) for rate in self.args.rates]
        windows.append(("as fast as the broker takes them", 0))
        writes0, started = self.bridge_requests().get("patch robots/status", 0), time.monotonic()
        self.results["heartbeats"] = [dict(window=name, **self.heartbeat_window(name, rate)) for name, rate in windows]
        writes = self.bridge_requests().get("patch robots/status", 0) - writes0
        minutes = (time.monotonic() - started) / 60
        self.results["heartbeat_writes"] = {
            "robot_writes": writes, "minutes": round(minutes, 2),
            "per_robot_per_min": round(writes / robots / minutes, 3),
            "heartbeats_handled": int(self.bridge.metric("k8s4r_bridge_messages_total", topic="heartbeat"))}
        print(f"heartbeat phase: {writes} Robot status writes for {robots} robots over {minutes:.2f} min = "
              f"{writes / robots / minutes:.3f} per robot per minute (--heartbeat-write-interval "
              f"{self.args.heartbeat_write_interval}), for "
              f"{self.results['heartbeat_writes']['heartbeats_handled']} heartbeats handled")

    def heartbeat_window(self, name, rate):
        seconds = self.args.window
        robot_writes = lambda: self.bridge_requests().get("patch robots/status", 0)  # noqa: E731
        marks = [len(shard.lines) for shard in self.shards]
        for shard in self.shards:
            shard.send(f"heartbeat {seconds + 2} {rate * len(shard.robots) / self.args.robots}")
        time.sleep(1)  # the window starts once the fleet is sending (a measurement window, not a wait)
        t0 = time.monotonic_ns()
        bridge0, figures0, writes0 = (self.bridge.metric("k8s4r_bridge_messages_total", topic="heartbeat"),
                                      self.bridge_figures(), robot_writes())
        broker0 = self.broker_cpu_s()
        dropped0 = self.bridge.metric_sum("k8s4r_bridge_messages_not_served_total")
        sub0 = self.subscriber.count_at(t0)
        time.sleep(seconds)
        t1 = time.monotonic_ns()
        bridge1, figures1, writes1 = (self.bridge.metric("k8s4r_bridge_messages_total", topic="heartbeat"),
                                      self.bridge_figures(), robot_writes())
        broker1 = self.broker_cpu_s()
        dropped1 = self.bridge.metric_sum("k8s4r_bridge_messages_not_served_total")
        sub1 = self.subscriber.count_at(t1)
        answers = [shard.next_event(mark, 300) for shard, mark in zip(self.shards, marks)]
        window = (t1 - t0) / 1e9
        result = {
            "offered_per_s": round(sum(a["sent"] for a in answers) / max(a["seconds"] for a in answers)),
            "bridge_per_s": round((bridge1 - bridge0) / window),
            "subscriber_per_s": round((sub1 - sub0) / window),
            "ratio": round((bridge1 - bridge0) / max(1, sub1 - sub0), 3),
            "bridge_cpu_cores": round((figures1["cpu_s"] - figures0["cpu_s"]) / window, 2),
            "broker_cpu_cores": round((broker1 - broker0) / window, 2),
            # Replicas: messages of robots another replica serves, received and dropped.
            "not_served_per_s": round((dropped1 - dropped0) / window),
            "robots_subscribed": self.bridge.metric("k8s4r_bridge_robots_subscribed"),
            "bridge_rss_mib": round(figures1["rss_kib"] / 1024, 1),
            "bridge_peak_rss_mib": round(figures1["hwm_kib"] / 1024, 1),
            "bridge_rss_each_mib": figures1["rss_each_mib"],
            "robot_writes": writes1 - writes0,
            "writes_per_robot_per_min": round((writes1 - writes0) / self.args.robots / (window / 60), 3),
            "window_s": round(window, 1),
        }
        print(f"heartbeats, {name}: offered {result['offered_per_s']}/s; bridge {result['bridge_per_s']}/s, bare "
              f"subscriber {result['subscriber_per_s']}/s, ratio {result['ratio']}; bridge CPU "
              f"{result['bridge_cpu_cores']} cores (broker {result['broker_cpu_cores']}; "
              f"{result['not_served_per_s']}/s received and dropped, not served; "
              f"{result['robots_subscribed']:.0f} robots followed), RSS {result['bridge_rss_mib']} MiB (peak "
              f"{result['bridge_peak_rss_mib']}); {result['robot_writes']} Robot writes = "
              f"{result['writes_per_robot_per_min']} per robot per minute")
        return result

    # ---- 3: status throughput ------------------------------------------------------
    def create_tasks(self, namespace, names, robots, labels, command=("/bin/true",)):
        for index, name in enumerate(names):
            robot = robots[index % len(robots)]
            # Labelled with its robot's slot, as the manager labels a Task it places (bridge replicas select theirs).
            task = {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
                    "metadata": {"name": name, "namespace": namespace,
                                 "labels": {**labels, "robot.k8s4r.io/slot": str(slot_of(robot))}},
                    "spec": {"name": name, "driver": "exec", "targetRobot": robot,
                             "config": {"execConfig": {"command": command[0], "args": list(command[1:])}}}}
            status, _, body = self.sim.request("POST", TASKS.format(ns=namespace), task)
            assert status == 201, body
        listed = self.sim.request("GET", TASKS.format(ns=namespace) + "?labelSelector=" +
                                  ",".join(f"{k}%3D{v}" for k, v in labels.items()))[2]["items"]
        return {item["metadata"]["name"]: item for item in listed}

    def patch_state(self, namespace, name, state):
        status, _, body = self.sim.request("PATCH", TASKS.format(ns=namespace) + f"/{name}/status",
                                           {"status": {"state": state}},
                                           content_type="application/merge-patch+json")
        assert status == 200, body

    def status_throughput(self):
        count = self.args.status_tasks
        robots = [f"sim-robot-{i:05d}" for i in range(self.args.robots)]
        names = [f"status-{i:05d}" for i in range(count)]
        tasks = self.create_tasks("default", names, robots, {"bench": "status"})
        for name in names:
            self.patch_state("default", name, "dispatching")
        wait_until(lambda: self.bridge.metric("k8s4r_bridge_dispatches_total", action="create") >= count, 120,
                   "every Task to be dispatched")
        listings = []
        for index, shard in enumerate(self.shards):
            listing = self.workdir / f"status-work-{index}.txt"
            listing.write_text("".join(f"{tasks[n]['spec']['targetRobot']} {tasks[n]['metadata']['uid']}\n"
                                       for n in names
                                       if int(tasks[n]["spec"]["targetRobot"].rsplit("-", 1)[1]) in shard.robots))
            listings.append(listing)
        writes0 = self.bridge_requests().get("patch tasks/status", 0)
        marks = [len(shard.lines) for shard in self.shards]
        handled0 = self.bridge.metric("k8s4r_bridge_messages_total", topic="task_status")  # before any is sent
        started = time.monotonic()
        for shard, listing in zip(self.shards, listings):
            shard.send(f"status {listing}")

        def all_written():
            # The Tasks are listed only once the bridge has handled every report (its metrics cost the stand-in
            # nothing; a LIST of every Task each poll would compete with the writes measured).
            if self.bridge.metric("k8s4r_bridge_messages_total", topic="task_status") - handled0 < 2 * count:
                return False
            items = self.sim.request("GET", TASKS.format(ns="default") + "?labelSelector=bench%3Dstatus")[2]["items"]
            return all(item.get("status", {}).get("state") == "completed" for item in items)
        wait_until(all_written, 300, "every Task to read completed")
        took = time.monotonic() - started
        items = self.sim.request("GET", TASKS.format(ns="default") + "?labelSelector=bench%3Dstatus")[2]["items"]
        states = [item.get("status", {}).get("state") for item in items]
        assert states.count("completed") == count, {state: states.count(state) for state in set(states)}
        published = {"reports": sum(shard.next_event(mark, 60)["reports"] for shard, mark in zip(self.shards, marks))}
        writes = self.bridge_requests().get("patch tasks/status", 0) - writes0

        raw_names = [f"raw-{i:05d}" for i in range(min(count, 500))]
        self.create_tasks("bench-raw", raw_names, robots, {"bench": "raw"})
        names_file = self.workdir / "raw-tasks.txt"
        names_file.write_text("\n".join(raw_names) + "\n")
        raw = json.loads(subprocess.run(
            [str(self.args.bin / "status_patch_rate"), "--kubeconfig", str(self.sim.kubeconfig), "--namespace",
             "bench-raw", "--tasks", str(names_file), "--threads", "4", "--seconds", str(self.args.raw_seconds)],
            check=True, capture_output=True, text=True).stdout)
        result = {"reports": published["reports"], "seconds": round(took, 2),
                  "reports_per_s": round(published["reports"] / took), "api_writes": writes,
                  "writes_per_s": round(writes / took), "raw_patches_per_s": round(raw["patches"] / raw["seconds"])}
        result["ratio_writes_to_raw"] = round(result["writes_per_s"] / result["raw_patches_per_s"], 2)
        self.results["status"] = result
        print(f"status: {result['reports']} reports for {count} Tasks applied in {took:.2f} s = "
              f"{result['reports_per_s']} reports/s in {writes} writes ({result['writes_per_s']}/s); the stand-in's "
              f"raw status merge-patch rate (4 connections): {result['raw_patches_per_s']}/s")

    # ---- 4: dispatch latency through a real agent -------------------------------------
    def dispatch_latency(self):
        """Each agent of --agent-binary (else K8S4R_BIN_DIR's) gets --dispatch-tasks Tasks, dispatched one after
        another, alternating between the agents so they share the machine's moments."""
        count = self.args.dispatch_tasks
        agents = {}
        for label, path in self.args.agent_binary or [("agent", None)]:
            robot = f"bench-{label}"
            agent = AgentProcess(self.broker, self.workdir / robot, robot, binary_path=path)
            agent.start()
            self.stopping.append(agent.cleanup)
            agents[label] = agent
            wait_until(lambda: self.sim.request("GET", "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/robots/"
                                                + robot)[0] == 200, 30, f"the Robot {robot}")
            # The agent takes no task before the bridge has answered its register, and on a slow machine that
            # answer waits behind the fleet's register storm (robots ask again every 5 s until answered): the clock
            # must not start before it arrived.
            wait_until(lambda: "] registered" in agent.log_text(), 180, f"{robot}'s register to be answered")
        names = {label: [f"latency-{label}-{i:05d}" for i in range(count)] for label in agents}
        for label in agents:
            self.create_tasks("default", names[label], [f"bench-{label}"], {"bench": "latency"},
                              command=("/bin/sh", "-c", "date +%s%N; sleep 0.1"))
        running_seen = {}
        watch = threading.Thread(target=self.watch_running, args=(running_seen, count * len(agents)), daemon=True)
        watch.start()
        patched = {}
        # One kept-alive connection, as a controller holds one: the clock starts as the PATCH is sent, not before a
        # TLS handshake.
        connection = self.api_connection()
        for i in range(count):
            for label in agents:
                name = names[label][i]
                body = json.dumps({"status": {"state": "dispatching"}})
                patched[name] = time.time_ns()
                connection.request("PATCH", TASKS.format(ns="default") + f"/{name}/status", body=body,
                                   headers={"Authorization": "Bearer admin-token",
                                            "Content-Type": "application/merge-patch+json"})
                response = connection.getresponse()
                assert response.status == 200, response.read()
                response.read()
                wait_until(lambda: name in running_seen, 30, f"{name} to be running")
        connection.close()
        buckets = {line.split('le="')[1].split('"')[0]: float(line.split()[-1])
                   for line in self.bridge.http("/metrics")[1].splitlines()
                   if line.startswith("k8s4r_bridge_dispatch_latency_seconds_bucket")}
        print("bridge's informer-to-PUBACK histogram (cumulative):", buckets)
        items = {}

        def all_completed():
            listed = self.sim.request("GET", TASKS.format(ns="default") + "?labelSelector=bench%3Dlatency")[2]
            items.update({item["metadata"]["name"]: item for item in listed["items"]})
            return all(item.get("status", {}).get("state") == "completed" for item in listed["items"])
        wait_until(all_completed, 120, "every latency Task to complete")
        self.results["dispatch"] = {}
        for label, agent in agents.items():
            own = names[label]
            to_child = [(int(items[n]["status"]["logs"].split()[0]) - patched[n]) / 1e6 for n in own]
            to_running = [(running_seen[n] - patched[n]) / 1e6 for n in own]
            result = {"tasks": count,
                      "to_child_p50_ms": round(statistics.median(to_child), 1),
                      "to_child_p99_ms": round(percentile(to_child, 0.99), 1),
                      "to_running_p50_ms": round(statistics.median(to_running), 1),
                      "to_running_p99_ms": round(percentile(to_running, 0.99), 1)}
            # Where the time goes, from the daemons' logs (millisecond clocks, so small stages read 0 or 1 ms): the
            # PATCH to the bridge publishing (the stand-in's watch, the informer, the loop), to the agent accepting
            # it (the broker, the agent's MQTT thread and loop), to its child started (the journal's fsync, the
            # shim), to the shell printing the clock.
            uid_of = {n: items[n]["metadata"]["uid"] for n in own}
            published = log_times(self.bridge.log_text(), r"dispatching task (\S+) ")
            agent_log = agent.log_text()
            accepted = log_times(agent_log, r"task (\S+) \(\S+\): accepted")
            started = log_times(agent_log, r"task (\S+): started pid")
            child = {n: int(items[n]["status"]["logs"].split()[0]) for n in own}
            stages = {"patch_to_bridge_publish": [published[n] - patched[n] for n in own if n in published],
                      "bridge_publish_to_agent_accept": [accepted[uid_of[n]] - published[n] for n in own
                                                         if n in published and uid_of[n] in accepted],
                      "agent_accept_to_spawned": [started[uid_of[n]] - accepted[uid_of[n]] for n in own
                                                  if uid_of[n] in accepted and uid_of[n] in started],
                      "spawned_to_child_clock": [child[n] - started[uid_of[n]] for n in own if uid_of[n] in started]}
            result["stages_ms"] = {stage: {"p50": round(statistics.median(v) / 1e6, 1),
                                           "p99": round(percentile(v, 0.99) / 1e6, 1), "count": len(v)}
                                   for stage, v in stages.items() if v}
            print(f"{label}: dispatch stages (from the logs, 1 ms resolution):",
                  "; ".join(f"{k} p50 {v['p50']} ms, p99 {v['p99']} ms" for k, v in result["stages_ms"].items()))
            self.results["dispatch"][label] = result
            print(f"{label}: dispatch latency over {count} tasks: to the child p50 {result['to_child_p50_ms']} ms, "
                  f"p99 {result['to_child_p99_ms']} ms; to running in the API p50 {result['to_running_p50_ms']} "
                  f"ms, p99 {result['to_running_p99_ms']} ms")

    def api_connection(self):
        host, port = self.sim.url.split("://", 1)[1].rsplit(":", 1)
        return http.client.HTTPSConnection(host, int(port),
                                           context=ssl.create_default_context(cafile=self.sim.ca_file))

    def watch_running(self, seen, count):
        """A watch on the latency Tasks, as `kubectl get rtask -w` holds one; notes when each first reads running."""
        connection = self.api_connection()
        connection.request("GET", TASKS.format(ns="default") + "?watch=1&labelSelector=bench%3Dlatency",
                           headers={"Authorization": "Bearer admin-token"})
        response = connection.getresponse()
        while len(seen) < count:
            line = response.readline()
            if not line:
                return
            if not line.strip():
                continue  # a keep-alive between events on an idle watch
            now = time.time_ns()
            event = json.loads(line)
            task = event["object"]
            if task.get("status", {}).get("state") in ("running", "completed"):
                seen.setdefault(task["metadata"]["name"], now)

    # ---- 5: requests per message ---------------------------------------------------------
    def requests_per_message(self, first):
        last = self.bridge_requests()
        reads = {key: last.get(key, 0) - first.get(key, 0) for key in last
                 if key.split()[0] in ("get", "list")}
        # Replicas read their Leases and the slot table every quarter of a retry period, list what has no slot label
        # every 15 retry periods, and list again what a slot change gives them: by time, not by message.
        by_time = ("leases", "configmaps") + (("robots", "tasks") if self.args.replicas else ())
        membership = {k: v for k, v in reads.items() if k.split()[-1] in by_time and v}
        reads = {k: v for k, v in reads.items() if k not in membership}
        messages = self.messages_handled()
        self.results["reads"] = {"messages": int(messages), "gets_and_lists": sum(reads.values()),
                                 "by_request": {k: v for k, v in reads.items() if v}, "membership": membership}
        if membership:
            print(f"replicas' own reads (Leases, slot table, unlabelled objects), by time: {membership}")
        print(f"requests per message: {sum(reads.values())} GETs and LISTs for {int(messages)} MQTT messages "
              f"(the bridge's ServiceAccount, after its informers synced)")
        return sum(reads.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", type=pathlib.Path, default=REPO / "build" / "bench",
                        help="where robot_fleet and status_patch_rate are (build/bench)")
    parser.add_argument("--short", action="store_true", help="500 robots, 4 s windows, 200 and 50 Tasks")
    parser.add_argument("--robots", type=int, default=10000)
    parser.add_argument("--heartbeat-every", type=float, default=5.0,
                        help="the steady window's heartbeat interval per robot, seconds (5)")
    parser.add_argument("--heartbeat-write-interval", default="60s")
    parser.add_argument("--window", type=float, default=20.0, help="each heartbeat window, seconds")
    parser.add_argument("--rates", type=lambda text: [float(r) for r in text.split(",") if r], default=[5000, 10000, 20000],
                        help="offered heartbeat rates to measure between the steady window and the flood (5000,10000,20000)")
    parser.add_argument("--status-tasks", type=int, default=2000)
    parser.add_argument("--dispatch-tasks", type=int, default=1000)
    parser.add_argument("--agent-binary", action="append", type=lambda text: tuple(text.split("=", 1)),
                        help="LABEL=PATH of a k8s4r-agent to measure dispatch latency through (repeat to compare "
                             "side by side); default K8S4R_BIN_DIR's")
    parser.add_argument("--bridge-arg", action="append", default=[],
                        help="one more argument for the bridge (repeat: --bridge-arg=--heartbeat-ack-interval "
                             "--bridge-arg=1h)")
    parser.add_argument("--raw-seconds", type=float, default=5.0)
    parser.add_argument("--replicas", type=int, default=0,
                        help="bridge replicas sharing the fleet (0: one bridge without --replica-id)")
    parser.add_argument("--brokers", type=int, default=1,
                        help="Mosquittos the robots are spread over: the first and edge brokers bridged to it (1)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the figures here")
    parser.add_argument("--workdir", type=pathlib.Path,
                        help="run in this directory and keep it afterwards: the bridge's, broker's and fleet's logs "
                             "for a post-mortem (default: a temporary directory, removed)")
    args = parser.parse_args()
    if args.short:
        args.robots, args.window, args.status_tasks, args.dispatch_tasks, args.raw_seconds = 500, 4.0, 200, 50, 2.0
        args.rates = [2000]
    # One descriptor per simulated robot in its broker (a fleet process holds at most SHARD).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    shards = -(-args.robots // SHARD)
    wanted = -(-shards // max(1, args.brokers)) * SHARD + 1024
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            sys.exit(f"{args.robots} robots on {args.brokers} broker(s) need {wanted} open files per broker; the "
                     f"hard limit is {hard}: add --brokers")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))

    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(str(args.workdir)) if args.workdir
          else tempfile.TemporaryDirectory(prefix="k8s4r-bridge-bench-")) as directory:
        bench = Bench(args, pathlib.Path(directory))
        failed = False
        try:
            bench.start()
            first = bench.bridge_requests()
            bench.fleet()
            bench.status_throughput()
            bench.dispatch_latency()
            reads = bench.requests_per_message(first)
            if reads:
                print(f"FAILED: the bridge read the API {reads} times while handling messages", file=sys.stderr)
                failed = True
        except Exception:
            failed = True
            print("bridge log (tail):\n" + bench.bridge.log_text()[-4000:] if hasattr(bench, "bridge") else "",
                  file=sys.stderr)
            agent_log = bench.workdir / "agent-bench-agent.log"
            if agent_log.exists():
                print("agent log (tail):\n" + agent_log.read_text()[-4000:], file=sys.stderr)
            raise
        finally:
            bench.stop()
            if hasattr(bench, "sampler"):
                memory = bench.sampler.report()
                for peak in memory["rss_peaks"]:
                    print("RSS peak, with what was held then (heap MiB, queues in entries): " +
                          ", ".join(f"{key} {value}" for key, value in peak.items()))
                print("largest of each: " + ", ".join(f"{key} {value}" for key, value in memory["gauge_max"].items()))
                if not args.json:
                    del memory["timeline"]
                bench.results["memory"] = memory
            if args.json:
                args.json.write_text(json.dumps(bench.results, indent=2) + "\n")
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
