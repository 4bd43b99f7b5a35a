"""Helpers for the manager's end-to-end tests: the real k8s4r-manager, k8s4r-bridge and several k8s4r-agents against
a real Mosquitto and k8s4r-kube-sim (enforcing RBAC: each daemon runs as its own ServiceAccount under its deploy/
Role), judged with kubectl. The broker is set up as docs/security.md says (TLS only, a login per robot, the
per-robot ACL): the whole system end to end, over TLS."""
import json
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bridge"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "agent"))

from agent_support import AgentProcess, processes_marked  # noqa: E402,F401
from bridge_support import (BridgeProcess, DaemonProcess, apply_bridge_rbac, apply_rbac, create_robot_secret,  # noqa: E402,F401
                            get)
from conftest import SecureBroker, binary, free_port, make_tls_files, wait_until  # noqa: E402

DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "manager"
# Fast clocks for tests: a robot is Offline 3 s after its broker connection drops; a task whose robot is out of
# contact is stopped there after 4 s (the agents below say the same) and lost after 4 s + its killTimeout + 2 s.
FAST = ["--robot-offline-after", "8s", "--disconnect-grace", "3s", "--dispatch-timeout", "10s",
        "--disconnect-stop-after", "4s", "--disconnect-margin", "2s",
        "--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s",
        "--leader-election-retry-period", "500ms"]


@pytest.fixture
def sim(kube_sim, tls_files):
    started = kube_sim("--authorization-mode=RBAC", token="admin-token", tls=tls_files)
    started.apply_crds()
    started.bridge_kubeconfig = apply_bridge_rbac(started)
    started.manager_kubeconfig = apply_rbac(started, DEPLOY, "k8s4r-manager")
    return started


class ManagerProcess(DaemonProcess):
    def __init__(self, workdir, sim, extra=(), name="manager", log_level="debug", fast=True):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sim, self.extra, self.name, self.log_level = sim, list(extra), name, log_level
        self.timings = FAST if fast else []
        self.port = free_port()
        self.log_path = self.workdir / f"{name}.log"
        self.process = None

    def start(self, wait_ready=True):
        command = [binary("k8s4r-manager"), "--kubeconfig", str(self.sim.manager_kubeconfig), "--namespace",
                   "default", "--metrics-bind-address", f"127.0.0.1:{self.port}", "--log-level", self.log_level,
                   "--leader-election-identity", self.name, *self.timings, *self.extra]
        self.log = open(self.log_path, "a")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={"PATH": "/usr/bin:/bin"})
        if wait_ready:
            wait_until(self.ready, 20, f"{self.name} to be ready")
        return self

    def leading(self):
        return self.metric_sum("k8s4r_manager_leader") == 1


@pytest.fixture
def manager_factory(tmp_path, sim):
    made = []

    def make(extra=(), name="manager"):
        manager = ManagerProcess(tmp_path / name, sim, extra, name)
        made.append(manager)
        return manager
    yield make
    forbidden = 0
    for manager in made:
        if manager.process and manager.process.poll() is None:
            forbidden += manager.metric_sum("k8s4r_manager_kube_requests_total", code="403")
        manager.stop()
    # Under deploy/manager's Role, nothing the manager tried was forbidden.
    assert forbidden == 0, "\n".join(m.log_text()[-3000:] for m in made)


@pytest.fixture
def broker(tmp_path):
    """Mosquitto on TLS with a password file and deploy/mosquitto/k8s4r.acl; robots get their logins as they start."""
    started = SecureBroker(tmp_path / "broker", make_tls_files(tmp_path / "mqtt-tls"), {})
    yield started
    started.stop()


@pytest.fixture
def bridge(tmp_path, broker, sim):
    # Heartbeats acknowledged every half second: the agents below stop their tasks after 4 s without word.
    made = BridgeProcess(tmp_path / "bridge", broker, sim, ["--heartbeat-write-interval", "2s",
                                                           "--dispatch-resend-after", "2s",
                                                           "--heartbeat-ack-interval", "500ms"]).start()
    yield made
    made.stop()


@pytest.fixture
def robots(tmp_path, broker, bridge, sim):
    """Start agents: robots("robot-a", labels="zone=lab-a"); each is cleaned up, its processes with it. Each robot's
    Secret is made first, as an operator enrolls a robot (secret=False: the test makes it, or not)."""
    made = []

    def start(name, labels="", extra=(), secret=True):
        args = ["--token", f"token-{name}", "--disconnect-stop-after", "4s", *(["--labels", labels] if labels else []),
                *extra]
        broker.add_robot(name, f"token-{name}")
        if secret:
            create_robot_secret(sim, name, f"token-{name}")
        agent = AgentProcess(broker, tmp_path / f"work-{name}", name, args)
        agent.start()
        made.append(agent)
        wait_until(lambda: get(sim, "robot", name), 20, f"the Robot {name} to appear")
        return agent
    yield start
    for agent in made:
        agent.cleanup()


def apply(sim, document):
    sim.kubectl("apply", "-f", "-", input=json.dumps(document))


def job(name, groups, job_type="batch", **spec):
    return {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"name": name, "type": job_type, "taskGroups": groups, **spec}}


def group(name, count, script, constraints=(), **extra):
    return {"name": name, "count": count, **({"constraints": list(constraints)} if constraints else {}),
            "tasks": [{"name": "work", "driver": "exec",
                       "config": {"execConfig": {"command": "/bin/sh", "args": ["-c", script]}}}], **extra}


def zone_is(zone):
    """A TaskGroup's constraint, spelt as Go K8s4r's TaskGroup CRD spells it."""
    return {"lTarget": "${meta.zone}", "operand": "=", "rTarget": zone}


def items(sim, kind, selector=None):
    args = ["get", kind, "-o", "json"] + (["-l", selector] if selector else [])
    return json.loads(sim.kubectl(*args).stdout)["items"]


def tasks_of_job(sim, job_name):
    return items(sim, "rtask", f"job={job_name}")


def job_state(sim, name):
    found = get(sim, "rjob", name)
    return found and found.get("status", {}).get("state")


def wait_job(sim, name, state, timeout=60):
    wait_until(lambda: job_state(sim, name) == state, timeout, f"job {name} to be {state}")
    return get(sim, "rjob", name)


def robot_phase(sim, name):
    found = get(sim, "robot", name)
    return found and found.get("status", {}).get("phase")
