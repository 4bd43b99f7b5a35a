"""Helpers and fixtures for the agent tests: the real k8s4r-agent against a real Mosquitto, observed and driven with a
Python MQTT client playing the bridge."""
import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from conftest import Observer, binary, terminate, wait_until

ROBOT = "robot-1"


def status_topic(uid, robot=ROBOT):
    return f"k8s4r/robots/{robot}/tasks/{uid}/status"


def register_topic(robot=ROBOT):
    return f"k8s4r/robots/{robot}/register"


def heartbeat_topic(robot=ROBOT):
    return f"k8s4r/robots/{robot}/heartbeat"


def dispatch_topic(robot=ROBOT):
    return f"k8s4r/robots/{robot}/tasks/dispatch"


def create(uid, command, args=(), **spec):
    task_spec = {"name": "work", "driver": "exec", "targetRobot": ROBOT,
                 "config": {"execConfig": {"command": command, "args": list(args)}}}
    task_spec.update(spec)
    return {"action": "create",
            "task": {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
                     "metadata": {"name": f"task-{uid}", "namespace": "default", "uid": uid, "generation": 1},
                     "spec": task_spec}}


def delete(uid):
    return {"action": "delete", "task": {"metadata": {"uid": uid}}}


def processes_marked(work_dir):
    """Pids of processes started by an agent with this work dir."""
    mark = f"K8S4R_AGENT_WORK_DIR={work_dir}".encode()
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            pass
    return pids


CGROUP_LINE = "each task runs in a cgroup of its own in "


def task_cgroup_parent(log_text):
    """The cgroup directory the agent keeps its tasks' cgroups in, as its start line names it (None: no cgroups)."""
    for line in log_text.splitlines():
        if CGROUP_LINE in line:
            return pathlib.Path(line.split(CGROUP_LINE, 1)[1].strip())
    return None


def remove_cgroup_tree(path):
    """Kills what is left in a cgroup directory and removes it, deepest first (a killed agent leaves its tasks')."""
    if path is None or not path.exists():
        return
    # The kernel removes a task's cgroup as its shim cleans up, maybe while this walks: a directory gone
    # meanwhile is skipped, never an error (os.walk's onerror).
    def walk():
        found = []
        for root, directories, _ in os.walk(path, onerror=lambda error: None):
            found += [pathlib.Path(root) / d for d in directories]
        return found
    for directory in [path] + walk():
        try:
            (directory / "cgroup.kill").write_text("1")
        except OSError:
            pass
    directories = sorted(walk(), key=lambda d: len(d.parts), reverse=True)
    for directory in directories + [path]:
        wait_until(lambda: _rmdir(directory), 5, f"{directory} to be empty")


def _rmdir(directory):
    try:
        directory.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class AgentProcess:
    def __init__(self, broker, work_dir, robot=ROBOT, extra=(), env=None, binary_path=None):
        self.broker = broker
        self.binary_path = binary_path  # another k8s4r-agent than K8S4R_BIN_DIR's (a benchmark's comparison)
        self.env = dict(env or {})  # more environment: LD_PRELOAD of faketime, say
        self.work_dir = pathlib.Path(work_dir)
        self.robot = robot
        self.extra = list(extra)
        self.process = None
        self.log_path = self.work_dir.parent / f"agent-{robot}.log"

    def start(self, *more):
        env = {k: v for k, v in os.environ.items() if not k.startswith("K8S4R_")}
        env.update(self.env)
        command = [self.binary_path or binary("k8s4r-agent"), "--broker-url", self.broker.url, "--robot-id", self.robot,
                   "--work-dir", str(self.work_dir), "--heartbeat-interval", "1s", "--log-level", "debug",
                   *self.extra, *more]
        if getattr(self.broker, "ca", None) and "--ca-file" not in command:
            command += ["--ca-file", self.broker.ca]  # a SecureBroker: its certificate checked against the test CA
        self.log = open(self.log_path, "a")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        return self

    def log_text(self):
        return self.log_path.read_text() if self.log_path.exists() else ""

    def queued_reports(self):
        """Reports held durably for the broker, read from state.log as an operator would
        (`cut -f2 state.log | jq`): queued ids less acknowledged ones."""
        path = self.work_dir / "state.log"
        queued = set()
        for line in path.read_text().splitlines() if path.exists() else []:
            record = json.loads(line.split("\t", 1)[1])
            if record["op"] == "ack":
                queued.discard(record["id"])
            elif "id" in record:
                queued.add(record["id"])
        return queued

    def running(self):
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout=30):
        """SIGTERM, as systemd stops it; returns the exit code."""
        if not self.running():
            return self.process.returncode if self.process else None
        code = terminate(self.process, timeout)
        self.log.close()
        return code

    def kill9(self):
        self.process.kill()
        self.process.wait()
        self.log.close()

    def cleanup(self):
        if self.running():
            self.process.kill()
            self.process.wait()
            self.log.close()
        for pid in processes_marked(self.work_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        remove_cgroup_tree(task_cgroup_parent(self.log_text()))


@pytest.fixture
def agent_factory(broker, tmp_path):
    made = []

    def make(robot=ROBOT, extra=(), work_dir=None):
        agent = AgentProcess(broker, work_dir or tmp_path / f"work-{robot}", robot, extra)
        made.append(agent)
        return agent
    yield make
    for agent in made:
        agent.cleanup()


@pytest.fixture
def agent(agent_factory, observer):
    """A started agent that the observer saw come online."""
    started = agent_factory().start()
    observer.wait_for(f"k8s4r/robots/{ROBOT}/presence", lambda m: m["online"])
    return started


class Bridge(Observer):
    """The bridge's side of the protocol, enough to drive an agent. As the real bridge does once Kubernetes has a
    report, it confirms every status report on the robot's acks topic (docs/protocol.md#ack), and acknowledges
    heartbeats, unless `confirming` is cleared (a bridge that is away, or stopped listening)."""

    def __init__(self, broker, **kwargs):
        super().__init__(broker, **kwargs)
        self.confirming = True
        recorded = self.client.on_message

        def on_message(client, userdata, message):
            recorded(client, userdata, message)
            if not self.confirming or not message.topic.startswith("k8s4r/robots/"):
                return
            levels = message.topic.split("/")
            robot = levels[2]
            status = len(levels) == 6 and levels[5] == "status"
            heartbeat = len(levels) == 4 and levels[3] == "heartbeat"
            if not (status or heartbeat):
                return  # what the test itself publishes (dispatches, some built to break a parser) is not read
            try:
                payload = json.loads(message.payload)
            except (ValueError, RecursionError):
                return
            ack = None
            if status and payload.get("seq"):
                ack = {"robotId": robot, "reports": [{"taskUid": levels[4], "seq": payload["seq"],
                                                     "result": "recorded"}]}
            elif heartbeat:
                ack = {"robotId": robot, "heartbeat": payload.get("timestamp")}
            if ack:
                client.publish(f"k8s4r/robots/{robot}/acks", json.dumps(ack), qos=1)
        self.client.on_message = on_message

    def accept_registration(self, robot=ROBOT):
        self.wait_for(register_topic(robot), lambda m: m["robotId"] == robot)
        self.publish(f"k8s4r/robots/{robot}/response",
                     {"success": True, "robotId": robot, "message": "registered", "phase": "Online"})

    def send(self, message, robot=ROBOT):
        self.publish(dispatch_topic(robot), message)

    def statuses(self, uid, robot=ROBOT):
        return self.json_on(status_topic(uid, robot))

    def final(self, uid, timeout=20.0, robot=ROBOT):
        return self.wait_for(status_topic(uid, robot), lambda m: m["state"] in ("completed", "failed"), timeout)


@pytest.fixture
def bridge(broker):
    client = Bridge(broker)
    yield client
    client.close()


def count_lines(path):
    path = pathlib.Path(path)
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for_file(path, timeout=10.0):
    return wait_until(lambda: pathlib.Path(path).exists() and pathlib.Path(path).read_text().strip(), timeout,
                      f"{path} to be written")
