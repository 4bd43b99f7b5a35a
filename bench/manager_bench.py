#!/usr/bin/env python3
"""Benchmark of k8s4r-manager: a Job of --tasks tasks (one task group, count N) applied with kubectl across
--robots simulated robots, every part real: Mosquitto, k8s4r-kube-sim (RBAC over TLS), the bridge and the manager
each under its deploy/ Role, and a fleet of simulated robots (bench/robot_fleet --answer-dispatch: each robot its own
MQTT connection, reporting every Task it is sent running at once, as an agent that started it would).

For each run (a fresh Job each time; the one before deleted and gone):
- the time from `kubectl apply` to every Task created, placed (spec.targetRobot) and `running`, seen on a watch of
  the API;
- the manager's API requests per task, by verb, as the stand-in counted them for its ServiceAccount;
- the manager's CPU time and RSS (and peak RSS) over the run;
- how evenly the Tasks were spread (the most and fewest on one robot).

Usage:
  /usr/bin/python3 bench/manager_bench.py                       # the figures in docs/performance.md
  /usr/bin/python3 bench/manager_bench.py --short               # small and quick: run by scripts/test.sh
  /usr/bin/python3 bench/manager_bench.py --cached --tasks 1000  # the result cache: a cold run, then a warm one
  /usr/bin/python3 bench/manager_bench.py --prefetch             # ArtifactCache: 100 robots told, all holding

With --prefetch, an ArtifactCache selecting every robot (and then a second one), applied with kubectl; the fleet
(--answer-prefetch) heartbeats at once that it holds what it is told to keep: the time from `kubectl apply` to the
cache's status saying every robot holds it (available = robots), and the manager's and the bridge's API requests
for it. What is measured is the control plane (manager, bridge, broker), not downloads.

With --cached, --tasks tasks in Jobs of 100 task groups (the most a Job has) of one task each, every task asking for
caching and keyed apart (its own env); the fleet reports each dispatched task completed at once. Run 1 runs and
stores every task (--tasks TaskCacheEntries); run 2, the same Jobs under other names, completes every task from the
cache without a dispatch.
Exits non-zero when something did not work (a Task never running, placed on no robot); the timing goal
(1,000 tasks on 100 robots running within 5 s) is reported, never asserted.
"""
import argparse
import contextlib
import http.client
import json
import pathlib
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "integration"), str(REPO / "integration" / "bridge"),
                str(REPO / "integration" / "agent"), str(REPO / "integration" / "manager")]

from bridge_bench import Bench as BridgeBench, Lines, proc_figures  # noqa: E402
from bridge_support import BridgeProcess, apply_bridge_rbac, apply_rbac  # noqa: E402
from conftest import Broker, KubeSim, make_tls_files, wait_until  # noqa: E402
from manager_support import DEPLOY, ManagerProcess  # noqa: E402

MANAGER_USER = "system:serviceaccount:default:k8s4r-manager"
BRIDGE_USER = "system:serviceaccount:default:k8s4r-bridge"
TASKS = "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks"


class TaskWatch:
    """A watch of the Tasks of one Job, on a thread: when each was first seen, first placed and first running."""

    def __init__(self, sim, job_name):
        self.sim, self.selector = sim, urllib.parse.quote(f"job={job_name}")
        self.created, self.placed, self.running, self.completed = {}, {}, {}, {}
        self.cached = set()
        self.robot_of = {}
        self.lock = threading.Lock()
        self.stopped = False
        _, _, listed = sim.request("GET", f"{TASKS}?labelSelector={self.selector}")
        self.version = listed["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        host, port = urllib.parse.urlsplit(self.sim.url).netloc.rsplit(":", 1)
        connection = http.client.HTTPSConnection(host, int(port), context=self.sim.ssl_context(), timeout=600)
        connection.request("GET", f"{TASKS}?watch=1&allowWatchBookmarks=false&labelSelector={self.selector}"
                                  f"&resourceVersion={self.version}",
                           headers={"Authorization": f"Bearer {self.sim.token}"})
        response = connection.getresponse()
        for line in response:
            if self.stopped:
                break
            if not line.strip():
                continue
            event = json.loads(line)
            task = event["object"]
            uid, now = task["metadata"].get("uid"), time.monotonic()
            with self.lock:
                self.created.setdefault(uid, now)
                robot = task.get("spec", {}).get("targetRobot")
                if robot:
                    self.placed.setdefault(uid, now)
                    self.robot_of[uid] = robot
                if task.get("status", {}).get("state") == "running":
                    self.running.setdefault(uid, now)
                if task.get("status", {}).get("state") == "completed":
                    self.completed.setdefault(uid, now)
                    if task["status"].get("cachedFrom"):
                        self.cached.add(uid)
        connection.close()

    def counts(self):
        with self.lock:
            return len(self.created), len(self.placed), len(self.running)

    @staticmethod
    def merged(watches):
        """What several watches saw, as one (stopped)."""
        for each in watches:
            each.stop()
        into = watches[0]
        for each in watches[1:]:
            with each.lock:
                for field in ("created", "placed", "running", "completed", "robot_of"):
                    getattr(into, field).update(getattr(each, field))
                into.cached |= each.cached
        return into

    def stop(self):
        self.stopped = True


class Bench(BridgeBench):
    """The bridge benchmark's parts and their stopping, with the manager and a fleet that answers dispatches."""

    def __init__(self, args, workdir):
        super().__init__(args, workdir)
        self.results = {"robots": args.robots, "tasks": args.tasks, "runs": []}

    def start(self):
        tls = make_tls_files(self.workdir / "tls")
        self.sim = KubeSim(self.workdir / "sim", "--authorization-mode=RBAC", token="admin-token", tls=tls)
        self.stopping.append(self.sim.stop)
        self.sim.apply_crds()
        self.sim.bridge_kubeconfig = apply_bridge_rbac(self.sim)
        self.sim.manager_kubeconfig = apply_rbac(self.sim, DEPLOY, "k8s4r-manager")
        self.broker = Broker(self.workdir / "broker")
        self.stopping.append(self.broker.stop)
        self.bridge = BridgeProcess(self.workdir / "bridge", self.broker, self.sim, log_level="info",
                                    extra=["--dispatch-resend-after", "5s"])
        self.bridge.start()
        self.stopping.append(self.bridge.stop)
        # The simulated robots have no Secrets: approval is relaxed explicitly, the one setting for it; what is
        # measured is scheduling.
        self.manager = ManagerProcess(self.workdir / "manager", self.sim, ["--require-robot-token=false"],
                                      log_level="info", fast=False)
        self.manager.start()
        self.stopping.append(self.manager.stop)
        self.fleet = Lines([str(self.args.bin / "robot_fleet"), "--broker", f"127.0.0.1:{self.broker.port}",
                            "--robots", str(self.args.robots), "--register", "--answer-dispatch",
                            *(["--complete-dispatch"] if self.args.cached else []),
                            *(["--answer-prefetch"] if self.args.prefetch else [])], self.log)
        self.stopping.append(self.fleet.stop)
        ready = self.fleet.next_event(0, 300)
        assert ready["registered"] == self.args.robots, ready
        # Every robot heartbeats every 5 s from now on (listing the tasks it runs), as agents do; the fleet
        # answers dispatches meanwhile.
        self.fleet.send(f"heartbeat 86400 {self.args.robots / 5}")

        def online():
            robots = self.sim.request("GET", "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/robots")[2]["items"]
            return sum(r.get("status", {}).get("phase") == "Online" for r in robots) == self.args.robots
        wait_until(online, 60, "every robot to be Online")

    def manager_requests(self):
        return dict(self.sim.request("GET", "/_sim/stats")[2]["requests"].get(MANAGER_USER, {}))

    def run(self, index):
        name = f"bench-{index}"
        job = {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Job",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"name": name, "type": "batch", "robotSelector": {"zone": "bench"},
                        "taskGroups": [{"name": "g", "count": self.args.tasks,
                                        "tasks": [{"name": "work", "driver": "exec",
                                                   "config": {"execConfig": {"command": "/bin/sleep",
                                                                             "args": ["3600"]}}}]}]}}
        watch = TaskWatch(self.sim, name)
        requests0, figures0 = self.manager_requests(), proc_figures(self.manager.process.pid)
        started = time.monotonic()
        self.sim.kubectl("apply", "-f", "-", input=json.dumps(job))
        wait_until(lambda: watch.counts()[2] == self.args.tasks, 300, f"all {self.args.tasks} tasks running")
        figures1 = proc_figures(self.manager.process.pid)
        # The manager's own writes that follow (status rollups, Events) belong to this run too: wait until its
        # request count holds still for half a second.
        last = [None]

        def settled():
            time.sleep(0.5)  # the window a count must hold still over, not a wait for an outcome
            now = sum(self.manager_requests().values())
            done, last[0] = now == last[0], now
            return done
        wait_until(settled, 60, "the manager's requests to settle")
        requests1 = self.manager_requests()
        watch.stop()
        with watch.lock:
            created, placed, running = (max(watch.created.values()), max(watch.placed.values()),
                                        max(watch.running.values()))
            per_robot = {}
            for robot in watch.robot_of.values():
                per_robot[robot] = per_robot.get(robot, 0) + 1
        by_verb = {key: requests1.get(key, 0) - requests0.get(key, 0) for key in requests1}
        by_verb = {key: count for key, count in by_verb.items() if count}
        total = sum(by_verb.values())
        result = {
            "to_all_created_s": round(created - started, 2),
            "to_all_placed_s": round(placed - started, 2),
            "to_all_running_s": round(running - started, 2),
            "manager_requests": total,
            "manager_requests_per_task": round(total / self.args.tasks, 2),
            "manager_requests_by_verb": by_verb,
            "manager_cpu_s": round(figures1["cpu_s"] - figures0["cpu_s"], 2),
            "manager_rss_mib": round(figures1["rss_kib"] / 1024, 1),
            "manager_peak_rss_mib": round(figures1["hwm_kib"] / 1024, 1),
            "tasks_per_robot_min_max": [min(per_robot.values()), max(per_robot.values())],
            "robots_used": len(per_robot),
        }
        self.results["runs"].append(result)
        print(f"run {index}: {self.args.tasks} tasks on {self.args.robots} robots: all created "
              f"{result['to_all_created_s']} s, placed {result['to_all_placed_s']} s, running "
              f"{result['to_all_running_s']} s after kubectl apply; manager: {total} requests "
              f"({result['manager_requests_per_task']} per task: {by_verb}), CPU {result['manager_cpu_s']} s, RSS "
              f"{result['manager_rss_mib']} MiB (peak {result['manager_peak_rss_mib']}); tasks per robot "
              f"{result['tasks_per_robot_min_max'][0]}..{result['tasks_per_robot_min_max'][1]} on "
              f"{len(per_robot)} robots", flush=True)
        assert len(per_robot) == min(self.args.robots, self.args.tasks), per_robot
        # Delete it and wait until every Task is gone (the fleet confirms each stop), so runs do not add up.
        self.sim.kubectl("delete", "rjob", name, "--wait=false")

        def gone():
            listed = self.sim.request("GET", f"{TASKS}?labelSelector={urllib.parse.quote('job=' + name)}")[2]
            return not listed["items"]
        wait_until(gone, 300, f"the Tasks of {name} to be gone")


    def run_cached(self):
        """A cold run of cacheable tasks, then the same Job again: time to every Task completed, the manager's CPU
        and requests per task, and how many came from the cache."""
        groups = [{"name": f"p{i:05d}", "count": 1,
                   "tasks": [{"name": "work", "driver": "exec", "env": {"PART": str(i)},
                              "cache": {"maxStaleness": "24h"},
                              "config": {"execConfig": {"command": "/bin/true"}}}]} for i in range(self.args.tasks)]
        entries = "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/taskcacheentries"
        for index, label in ((1, "cold"), (2, "warm")):
            jobs = [{"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Job",
                     "metadata": {"name": f"cached-{index}-{n}", "namespace": "default"},
                     "spec": {"name": f"cached-{index}-{n}", "type": "batch", "taskGroups": groups[first:first + 100]}}
                    for n, first in enumerate(range(0, len(groups), 100))]
            watches = [TaskWatch(self.sim, job["metadata"]["name"]) for job in jobs]
            requests0, figures0 = self.manager_requests(), proc_figures(self.manager.process.pid)
            started = time.monotonic()
            self.sim.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs}))
            wait_until(lambda: sum(len(w.completed) for w in watches) == self.args.tasks, 600,
                       f"all {self.args.tasks} tasks completed")
            watch = TaskWatch.merged(watches)
            completed_s = max(watch.completed.values()) - started
            if label == "cold":
                wait_until(lambda: len(self.sim.request("GET", entries)[2]["items"]) == self.args.tasks, 300,
                           "every run to be stored")
            stored_s = time.monotonic() - started
            figures1 = proc_figures(self.manager.process.pid)
            watch.stop()
            requests1 = self.manager_requests()
            by_verb = {key: requests1.get(key, 0) - requests0.get(key, 0) for key in requests1}
            by_verb = {key: count for key, count in by_verb.items() if count}
            result = {"run": label, "to_all_completed_s": round(completed_s, 2),
                      "to_all_stored_s": round(stored_s, 2) if label == "cold" else None,
                      "from_cache": len(watch.cached), "dispatched": len(watch.placed),
                      "manager_cpu_s": round(figures1["cpu_s"] - figures0["cpu_s"], 2),
                      "manager_cpu_ms_per_task": round((figures1["cpu_s"] - figures0["cpu_s"]) * 1000 / self.args.tasks,
                                                       2),
                      "manager_requests_per_task": round(sum(by_verb.values()) / self.args.tasks, 2),
                      "manager_requests_by_verb": by_verb,
                      "manager_peak_rss_mib": round(figures1["hwm_kib"] / 1024, 1)}
            self.results["runs"].append(result)
            print(f"{label}: {self.args.tasks} cacheable tasks: all completed {result['to_all_completed_s']} s after "
                  f"kubectl apply ({result['from_cache']} from the cache, {result['dispatched']} dispatched)"
                  + (f", all stored {result['to_all_stored_s']} s" if label == "cold" else "")
                  + f"; manager CPU {result['manager_cpu_s']} s ({result['manager_cpu_ms_per_task']} ms per task), "
                  f"{result['manager_requests_per_task']} requests per task {by_verb}, peak RSS "
                  f"{result['manager_peak_rss_mib']} MiB", flush=True)
            expected = (0, self.args.tasks) if label == "cold" else (self.args.tasks, 0)
            assert (result["from_cache"], result["dispatched"]) == expected, result


    def bridge_requests(self):
        return dict(self.sim.request("GET", "/_sim/stats")[2]["requests"].get(BRIDGE_USER, {}))

    def run_prefetch(self):
        """ArtifactCaches selecting every robot, one after the other: the time from kubectl apply to every robot
        holding it, as the cache's status says, and what it cost the manager and the bridge in API requests."""
        caches = "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/artifactcaches"
        for index in range(1, self.args.repeats + 1):
            name = f"model-{index}"
            cache = {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "ArtifactCache",
                     "metadata": {"name": name, "namespace": "default"},
                     "spec": {"source": f"https://models.example/{name}.bin",
                              "checksum": "sha256:" + f"{index:064x}", "robotSelector": {"zone": "bench"}}}
            manager0, bridge0 = self.manager_requests(), self.bridge_requests()
            figures0 = proc_figures(self.manager.process.pid)
            started = time.monotonic()
            self.sim.kubectl("apply", "-f", "-", input=json.dumps(cache))

            def available():
                found = self.sim.request("GET", f"{caches}/{name}")[2]
                return found.get("status", {}).get("available") == self.args.robots
            wait_until(available, 300, f"every robot to hold {name}")
            took = time.monotonic() - started
            figures1 = proc_figures(self.manager.process.pid)
            manager1, bridge1 = self.manager_requests(), self.bridge_requests()
            manager = {k: manager1.get(k, 0) - manager0.get(k, 0) for k in manager1 if manager1.get(k, 0) != manager0.get(k, 0)}
            bridge = {k: bridge1.get(k, 0) - bridge0.get(k, 0) for k in bridge1 if bridge1.get(k, 0) != bridge0.get(k, 0)}
            result = {"cache": name, "robots": self.args.robots, "to_all_available_s": round(took, 2),
                      "manager_requests": manager, "bridge_requests": bridge,
                      "manager_cpu_s": round(figures1["cpu_s"] - figures0["cpu_s"], 2)}
            self.results["runs"].append(result)
            print(f"{name}: {self.args.robots} robots all holding it {result['to_all_available_s']} s after kubectl "
                  f"apply; manager requests {manager}, bridge requests {bridge}, manager CPU "
                  f"{result['manager_cpu_s']} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", type=pathlib.Path, default=REPO / "build" / "bench",
                        help="where robot_fleet is")
    parser.add_argument("--robots", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--short", action="store_true", help="20 robots, 100 tasks, one run")
    parser.add_argument("--json", type=pathlib.Path, help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) and say where")
    parser.add_argument("--cached", action="store_true", help="measure the result cache: a cold run, then a warm one")
    parser.add_argument("--prefetch", action="store_true",
                        help="measure ArtifactCache: --repeats caches, each selecting every robot")
    args = parser.parse_args()
    if args.short:
        args.robots, args.tasks, args.repeats = 20, 100, 1
    kept = tempfile.mkdtemp(prefix="k8s4r-manager-bench.") if args.keep else None
    if kept:
        print(f"work directory (kept): {kept}")
    with (contextlib.nullcontext(kept) if kept else tempfile.TemporaryDirectory(prefix="k8s4r-manager-bench.")) \
            as directory:
        bench = Bench(args, pathlib.Path(directory))
        try:
            bench.start()
            if args.cached:
                bench.run_cached()
                args.repeats = 0
            if args.prefetch:
                bench.run_prefetch()
                args.repeats = 0
            for index in range(1, args.repeats + 1):
                bench.run(index)
        except Exception:
            for name in ("manager", "bridge"):
                log = pathlib.Path(directory) / name / f"{name}.log"
                if log.exists():
                    print(f"---- {name} log (tail)\n" + "\n".join(log.read_text().splitlines()[-40:]), file=sys.stderr)
            raise
        finally:
            bench.stop()
    runs = bench.results["runs"]
    if args.cached or args.prefetch:
        if args.json:
            args.json.write_text(json.dumps(bench.results, indent=2))
        return
    median = {key: statistics.median(run[key] for run in runs)
              for key in ("to_all_created_s", "to_all_placed_s", "to_all_running_s", "manager_requests_per_task",
                          "manager_cpu_s", "manager_peak_rss_mib")}
    bench.results["median"] = median
    print(f"median of {len(runs)}: all running {median['to_all_running_s']} s after kubectl apply (goal < 5 s for "
          f"1,000 tasks on 100 robots), {median['manager_requests_per_task']} manager requests per task, manager CPU "
          f"{median['manager_cpu_s']} s, peak RSS {median['manager_peak_rss_mib']} MiB")
    if args.json:
        args.json.write_text(json.dumps(bench.results, indent=2))


if __name__ == "__main__":
    main()
