"""The chaos suite's harness: the whole system (k8s4r-kube-sim under RBAC, a real Mosquitto, k8s4r-bridge,
k8s4r-manager, several k8s4r-agents, each reaching the broker through a TCP proxy the test can blackhole) and a
judge that reads what the tasks did, not what the statuses say.

Every task of a chaos Job appends to RUNS/<task name>.log: "start <name> <uid> <robot> <ns>" when it starts,
"end ..." when it completes, and "stopped ..." when it is signalled. The judge then checks, per slot (a replica's
task), that its work completed exactly once (`once`), that two copies of it never ran at the same time (`overlap`)
and that each Task's recorded outcome is what its run did (`truth`)."""
import os
import pathlib
import select
import socket
import sys
import threading

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "manager"))
sys.path.insert(0, str(HERE.parent / "bridge"))
sys.path.insert(0, str(HERE.parent / "agent"))

from agent_support import AgentProcess  # noqa: E402
from bridge_support import BridgeProcess, apply_bridge_rbac, apply_rbac, create_robot_secret, get  # noqa: E402
from conftest import Broker, binary, free_port, terminate, wait_until  # noqa: E402,F401
from manager_support import DEPLOY, FAST, ManagerProcess, apply, items  # noqa: E402,F401

# What the agents and the manager assume for a task that says nothing (FAST says the same to the manager); the
# chaos Jobs say their own.
STOP_AFTER = "4s"


class Proxy:
    """A TCP proxy from a free loopback port to the broker. blackhole() stops forwarding, in both directions or in
    one, and keeps the connections open, as a link that drops every packet does (neither side is told); heal()
    forwards again. Connections made while the robot's side is blackholed are held, unanswered."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.up = True    # robot -> broker
        self.down = True  # broker -> robot
        self.changed = threading.Condition()
        self.stopping = False
        self.pairs = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                client.close()  # the broker is down: refused, as it would be
                continue
            with self.lock:
                self.pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client, upstream):
        try:
            while not self.stopping:
                # What arrives in a blackholed direction stays unread: nothing goes through.
                with self.changed:
                    sources = [s for s, open_ in ((client, self.up), (upstream, self.down)) if open_]
                    if not sources:
                        self.changed.wait(0.2)
                        continue
                readable, _, _ = select.select(sources, [], [], 0.2)
                for source in readable:
                    if (source is client and not self.up) or (source is upstream and not self.down):
                        continue
                    data = source.recv(65536)
                    if not data:
                        return
                    (upstream if source is client else client).sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                s.close()

    def blackhole(self, up=True, down=True):
        """Drops what the robot sends (`up`), what it is sent (`down`), or both."""
        with self.changed:
            self.up, self.down = not up and self.up, not down and self.down
            self.changed.notify_all()

    def heal(self):
        with self.changed:
            self.up = self.down = True
            self.changed.notify_all()

    def close(self):
        self.stopping = True
        self.heal()
        self.listener.close()
        with self.lock:
            for pair in self.pairs:
                for s in pair:
                    try:
                        s.close()
                    except OSError:
                        pass


def recording_script(runs, seconds):
    """Appends start, alive every half second while it works, then end (or stopped, when signalled), each with the
    task's name, uid, robot and the time: a run killed outright (SIGKILL) is known to have died after its last
    line, however it died."""
    line = "$K8S4R_TASK_NAME $K8S4R_TASK_UID $K8S4R_ROBOT_ID $(date +%s%N)"
    log = f"{runs}/$K8S4R_TASK_NAME.log"
    return (f"trap 'echo stopped {line} >> {log}; exit 143' TERM; echo start {line} >> {log}; "
            f"i=0; while [ $i -lt {seconds * 2} ]; do sleep 0.5; echo alive {line} >> {log}; i=$((i+1)); done; "
            f"echo end {line} >> {log}")


class Cluster:
    def __init__(self, tmp_path, kube_sim, tls_files, robots=("robot-a", "robot-b", "robot-c", "robot-d"),
                 persistence=True, agent_env=None):
        self.tmp = pathlib.Path(tmp_path)
        self.runs = self.tmp / "runs"
        self.runs.mkdir(parents=True)
        self.runs.chmod(0o777)  # tasks may run as another user
        self.sim = kube_sim("--authorization-mode=RBAC", token="admin-token", tls=tls_files)
        self.sim.apply_crds()
        self.sim.bridge_kubeconfig = apply_bridge_rbac(self.sim)
        self.sim.manager_kubeconfig = apply_rbac(self.sim, DEPLOY, "k8s4r-manager")
        config = "allow_anonymous true\n"
        if persistence:
            # Default autosave (every 30 min and at a clean stop): what a kill -9 loses is what a real one would.
            # Started as root, Mosquitto drops to its own user: it could not write its file in our directory.
            config += f"persistence true\npersistence_location {self.tmp / 'broker'}/\n"
            if os.geteuid() == 0:
                config += "user root\n"
        else:
            config += "persistence false\n"
        self.broker = Broker(self.tmp / "broker", config)
        self.bridge = BridgeProcess(self.tmp / "bridge", self.broker, self.sim,
                                    ["--heartbeat-write-interval", "2s", "--dispatch-resend-after", "3s",
                                     "--heartbeat-ack-interval", "500ms"])
        self.bridge.start()
        self.manager = ManagerProcess(self.tmp / "manager", self.sim).start()
        self.proxies, self.agents = {}, {}
        for name in robots:
            proxy = Proxy(self.broker.port)
            self.proxies[name] = proxy
            create_robot_secret(self.sim, name, f"token-{name}")
            extra = ["--disconnect-stop-after", STOP_AFTER, "--token", f"token-{name}"]
            agent = AgentProcess(proxy, self.tmp / f"work-{name}", name, extra, (agent_env or {}).get(name))
            self.agents[name] = agent
            agent.start()
        for name in robots:
            wait_until(lambda: (get(self.sim, "robot", name) or {}).get("status", {}).get("phase") == "Online", 30,
                       f"{name} to be Online")

    def run_job(self, name, count, seconds, stop_after="60s", **spec):
        """A batch Job of `count` tasks of `seconds` each; `stop_after` is their disconnect.stopOnRobotAfter (long
        by default: a daemon's or the broker's absence for a few seconds must not stop them)."""
        group = {"name": "g", "count": count, "reschedulePolicy": {"attempts": 3, "interval": "1h", "delay": "1s"},
                 "disconnect": {"stopOnRobotAfter": stop_after},
                 "tasks": [{"name": "work", "driver": "exec", "killTimeout": "1s",
                            "config": {"execConfig": {"command": "/bin/sh",
                                                      "args": ["-c", recording_script(self.runs, seconds)]}}}]}
        group.update(spec.pop("group", {}))
        apply(self.sim, {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Job",
                         "metadata": {"name": name, "namespace": "default"},
                         "spec": {"name": name, "type": "batch", "taskGroups": [group], **spec}})

    def lines(self):
        out = []
        for path in sorted(self.runs.glob("*.log")):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 5:
                    out.append({"event": parts[0], "name": parts[1], "uid": parts[2], "robot": parts[3],
                                "at": int(parts[4])})
        return out

    def started(self):
        return [line for line in self.lines() if line["event"] == "start"]

    def tasks(self, job):
        return items(self.sim, "rtask", f"job={job}")

    def job_state(self, job):
        found = get(self.sim, "rjob", job)
        return found and found.get("status", {}).get("state")

    def wait_job(self, job, timeout=120):
        wait_until(lambda: self.job_state(job) in ("completed", "failed"), timeout, f"job {job} to end")
        # What the bridge still has to write of reports it confirmed, and the tasks' last lines.
        wait_until(lambda: all(t.get("status", {}).get("state") in ("completed", "failed")
                               for t in self.tasks(job)), 30, "every Task of the job to end")

    def judge(self, job, expect_once=True):
        """What went wrong, by the tasks' own records: a list of sentences, empty when all is well."""
        lines = self.lines()
        tasks = self.tasks(job)
        by_uid = {t["metadata"]["uid"]: t for t in tasks}
        slots = {}
        for task in tasks:
            labels = task["metadata"]["labels"]
            slots.setdefault((labels["replica"], labels["task"]), []).append(task)
        problems = []
        runs_of = {}
        for line in lines:
            runs_of.setdefault(line["uid"], []).append(line)
        for slot, attempts in sorted(slots.items()):
            uids = {t["metadata"]["uid"] for t in attempts}
            slot_lines = [line for line in lines if line["uid"] in uids]
            starts = [line for line in slot_lines if line["event"] == "start"]
            ends = [line for line in slot_lines if line["event"] == "end"]
            if len(ends) != 1 and expect_once:
                problems.append(f"slot {slot}: completed {len(ends)} times ({len(starts)} starts) "
                                f"{[(line['name'], line['robot']) for line in starts]}")
            if expect_once and len(starts) > 1:
                problems.append(f"slot {slot}: started {len(starts)} times {[line['name'] for line in starts]}")
            # Never two copies at once: each run from its start to its last line (end, stopped, or its last sign of
            # life when it was killed outright). Restarts of one Task by its restart policy count as one run.
            intervals = []
            for uid in uids:
                own = sorted(runs_of.get(uid, []), key=lambda line: line["at"])
                begin, last = None, None
                for line in own:
                    if line["event"] == "start" and begin is None:
                        begin = line["at"]
                    last = line["at"]
                if begin is not None:
                    intervals.append((begin, last, uid))
            intervals.sort()
            latest = None  # the run that ends last among those started so far
            for begin, last, uid in intervals:
                if latest and begin < latest[0]:
                    problems.append(f"slot {slot}: two copies at once ({latest[1]} and {uid}, "
                                    f"{(min(latest[0], last) - begin) / 1e9:.3f} s)")
                if not latest or last > latest[0]:
                    latest = (last, uid)
        for uid, task in by_uid.items():
            own = runs_of.get(uid, [])
            status = task.get("status", {})
            state, reason = status.get("state"), status.get("reason")
            ended = any(line["event"] == "end" for line in own)
            stopped = any(line["event"] == "stopped" for line in own)
            name = task["metadata"]["name"]
            if state == "completed" and not ended:
                problems.append(f"{name}: recorded completed, but it never completed")
            if ended and state != "completed":
                true_end = (status.get("endOnRobot") or {}).get("state")
                if not (state == "failed" and reason == "Lost" and true_end == "completed"):
                    problems.append(f"{name}: completed on its robot, recorded {state} ({reason}: "
                                    f"{status.get('message')}), end on robot {true_end}")
            if stopped and state == "completed":
                problems.append(f"{name}: stopped on its robot, recorded completed")
        return problems

    def close(self):
        for name, agent in self.agents.items():
            agent.cleanup()
        for proxy in self.proxies.values():
            proxy.close()
        self.manager.stop()
        self.bridge.stop()
        self.broker.stop()
