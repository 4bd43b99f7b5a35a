"""Helpers for the bridge's end-to-end tests: the real k8s4r-bridge and k8s4r-agent against a real Mosquitto and
k8s4r-kube-sim, judged with kubectl and raw HTTP."""
import hashlib
import json
import pathlib
import subprocess
import sys
import urllib.request

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "agent"))

from agent_support import AgentProcess, processes_marked  # noqa: E402,F401
from conftest import binary, free_port, terminate, wait_until  # noqa: E402

TOKEN = "s3cret-robot-1"
SLOTS = 1024
_M64 = (1 << 64) - 1


def _fnv1a(text):
    h = 0xcbf29ce484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001b3) & _M64
    return h


def _mix(x):
    x ^= x >> 33
    x = (x * 0xff51afd7ed558ccd) & _M64
    x ^= x >> 33
    x = (x * 0xc4ceb9fe1a85ec53) & _M64
    x ^= x >> 33
    return x


def slot_of(robot):
    """common/slots.h's slot_of (pinned there, and by a test here: robot-1 -> 303)."""
    return _mix(_fnv1a(robot)) % SLOTS


def owner_among(slot, members):
    """common/slots.h's rendezvous owner of a slot among bridge replicas."""
    return max(sorted(members), key=lambda m: _mix(_fnv1a(m) ^ ((0x9e3779b97f4a7c15 * (slot + 1)) & _M64)))
DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "bridge"
DEPLOY_REPLICAS = DEPLOY.parent / "bridge-replicas"
BRIDGE_USER = "system:serviceaccount:default:k8s4r-bridge"


def apply_rbac(sim, directory, account):
    """The ServiceAccount, Roles and RoleBindings of a deploy/ directory, as kustomize renders them (the stand-in has
    no Deployments or StatefulSets, so those are left out), and a kubeconfig with a token of that ServiceAccount."""
    rendered = subprocess.run(["kubectl", "kustomize", str(directory)], check=True, capture_output=True,
                              text=True).stdout
    documents = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] not in ("Deployment", "StatefulSet")]
    assert {d["kind"] for d in documents} - {"ClusterRole", "ClusterRoleBinding"} == {"ServiceAccount", "Role",
                                                                                     "RoleBinding"}
    sim.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}))
    return kubeconfig_of(sim, account)


def kubeconfig_of(sim, account, token=None):
    """A kubeconfig of the stand-in whose user is the ServiceAccount `account` (a token from `kubectl create
    token`), or holds `token`."""
    token = token or sim.kubectl("create", "token", account).stdout.strip()
    config = yaml.safe_load(sim.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path = sim.workdir / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def apply_bridge_rbac(sim, replicas=False):
    """deploy/bridge's RBAC, or deploy/bridge-replicas' (its Role and the replicas' own)."""
    return apply_rbac(sim, DEPLOY_REPLICAS if replicas else DEPLOY, "k8s4r-bridge")


@pytest.fixture
def sim(kube_sim, tls_files):
    """A stand-in that enforces RBAC (over TLS, as tokens need), with the CRDs applied; tests act as its admin with
    kubectl, and the bridge runs as its own ServiceAccount under deploy/bridge's Role."""
    started = kube_sim("--authorization-mode=RBAC", token="admin-token", tls=tls_files)
    started.apply_crds()
    started.bridge_kubeconfig = apply_bridge_rbac(started)
    return started


class DaemonProcess:
    """A daemon of ours under test: its /metrics, /healthz and /readyz, its log, and ways to stop it."""
    name = "daemon"

    def http(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            if self.process.poll() is not None:
                raise AssertionError(f"the {self.name} exited: " + self.log_text()[-3000:])
            return None, ""

    def ready(self):
        return self.http("/readyz")[0] == 200

    def metric(self, name, **labels):
        """The value of one series, 0 when absent."""
        _, text = self.http("/metrics")
        wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.split()[-1])
        return 0.0

    def metric_sum(self, name, **labels):
        """The sum of every series of `name` that has these labels (and any others)."""
        _, text = self.http("/metrics")
        wanted = [f'{k}="{v}"' for k, v in labels.items()]
        total = 0.0
        for line in text.splitlines():
            if (line.startswith(name + "{") or line.startswith(name + " ")) and \
                    all(w in line.split("}")[0] for w in wanted):
                total += float(line.split()[-1])
        return total

    def log_text(self):
        return self.log_path.read_text() if self.log_path.exists() else ""

    def kill9(self):
        self.process.kill()
        self.process.wait()
        self.log.close()

    def stop(self):
        if self.process and self.process.poll() is None:
            code = terminate(self.process)
            self.log.close()
            return code
        return self.process.returncode if self.process else None


class BridgeProcess(DaemonProcess):
    name = "bridge"

    def __init__(self, workdir, broker, sim, extra=(), log_level="debug"):
        self.workdir = pathlib.Path(workdir)
        self.log_level = log_level
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.broker, self.sim, self.extra = broker, sim, list(extra)
        self.port = free_port()
        self.log_path = self.workdir / "bridge.log"
        self.process = None

    def start(self, ready_within=20):
        """Starts it and waits until it says it is ready (a fleet of 100,000 Secrets takes longer than the 20 s
        default to list)."""
        kubeconfig = getattr(self.sim, "bridge_kubeconfig", self.sim.kubeconfig)
        command = [binary("k8s4r-bridge"), "--broker-url", self.broker.url, "--kubeconfig", str(kubeconfig),
                   "--metrics-bind-address", f"127.0.0.1:{self.port}", "--log-level", self.log_level, *self.extra]
        if getattr(self.broker, "bridge_password", None) and "--mqtt-username" not in command:
            # A SecureBroker: the bridge logs in as itself, its password from a file, the broker checked.
            password_file = self.workdir / "mqtt-password"
            password_file.write_text(self.broker.bridge_password + "\n")
            password_file.chmod(0o600)
            command += ["--mqtt-username", "k8s4r-bridge", "--mqtt-password-file", str(password_file),
                        "--ca-file", self.broker.ca]
        self.log = open(self.log_path, "a")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={"PATH": "/usr/bin:/bin"})
        wait_until(lambda: self.ready(), ready_within, "the bridge to be ready")
        return self


@pytest.fixture
def bridge(tmp_path, broker, sim):
    made = BridgeProcess(tmp_path / "bridge", broker, sim, ["--heartbeat-write-interval", "3s",
                                                           "--dispatch-resend-after", "2s"]).start()
    yield made
    # Under deploy/bridge's Role, nothing the bridge tried was forbidden.
    alive = made.process.poll() is None
    forbidden = made.metric_sum("k8s4r_bridge_kube_writes_total", code="403") if alive else 0
    made.stop()
    assert forbidden == 0, made.log_text()[-3000:]


@pytest.fixture
def robot(tmp_path, broker, bridge, sim):
    """A real agent registered through the bridge: its Robot exists."""
    agent = AgentProcess(broker, tmp_path / "work-robot-1", "robot-1", ["--token", TOKEN, "--labels", "zone=lab-a"])
    agent.start()
    wait_until(lambda: get(sim, "robot", "robot-1"), 20, "the Robot to appear")
    yield agent
    agent.cleanup()


def create_robot_secret(sim, robot, token):
    """A robot's identity as docs/security.md makes it: the Secret k8s4r-robot-<id>, labelled with the robot's id,
    its key `token`. With it the manager (--require-robot-token, its default) approves the robot."""
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": f"k8s4r-robot-{robot}", "labels": {"robot.k8s4r.io/robot-id": robot}},
              "stringData": {"token": token}}
    sim.kubectl("apply", "-f", "-", input=json.dumps(secret))


def get(sim, kind, name):
    result = sim.kubectl("get", kind, name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def create_task(sim, name, command_args, robot="robot-1", **spec):
    task = {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"name": name, "driver": "exec", "targetRobot": robot,
                     "config": {"execConfig": {"command": "/bin/sh", "args": ["-c", command_args]}}, **spec}}
    sim.kubectl("apply", "-f", "-", input=json.dumps(task))
    return get(sim, "rtask", name)


def dispatch(sim, name):
    sim.kubectl("patch", "rtask", name, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"state": "dispatching"}}))


def state_of(sim, name):
    task = get(sim, "rtask", name)
    return task and task.get("status", {}).get("state")


def wait_state(sim, name, state, timeout=20):
    wait_until(lambda: state_of(sim, name) == state, timeout, f"task {name} to be {state}")
    return get(sim, "rtask", name)


def digest(token):
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def slot_table(sim):
    """The ConfigMap k8s4r-bridge-slots as an operator reads it: {slot: (owner, epoch, next)}, and its members."""
    found = get(sim, "configmap", "k8s4r-bridge-slots")
    if not found:
        return {}, []
    table = {}
    for line in found["data"]["slots"].splitlines():
        parts = line.split()
        table[int(parts[0])] = (parts[1], int(parts[2]), parts[4] if len(parts) == 5 else "")
    return table, [m for m in found["data"].get("members", "").split(",") if m]


def settled(sim, members):
    """Every slot owned by one of `members`, as rendezvous hashing over them says, none being handed over."""
    table, listed = slot_table(sim)
    return (sorted(listed) == sorted(members) and len(table) == SLOTS and
            all(owner == owner_among(slot, members) and not nxt for slot, (owner, _, nxt) in table.items()))
