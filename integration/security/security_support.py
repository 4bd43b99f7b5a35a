"""Helpers for the security tests: a fleet as docs/security.md sets it up — Mosquitto on TLS only, one identity per
robot — with the real bridge and agents, and clients that misbehave. The broker confines robots one of the two ways
the docs give, and every test using the `broker` fixture runs under both:

- "acl-file": a password file (robot id and token per robot) and deploy/mosquitto/k8s4r.acl;
- "dynamic-security": Mosquitto's dynamic-security plugin, prepared by deploy/mosquitto/dynsec-bootstrap.sh, with
  the bridge (--dynamic-security, under deploy/bridge-dynamic-security's Role) making each robot's login from its
  Secret k8s4r-robot-<id>."""
import contextlib
import datetime
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bridge"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "agent"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "manager"))

from agent_support import AgentProcess  # noqa: E402
from bridge_support import (BridgeProcess, apply_rbac, create_robot_secret, create_task, dispatch, get,  # noqa: E402,F401
                            wait_state)
from conftest import SecureBroker, make_tls_files, wait_until  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
BRIDGE_PASSWORD = SecureBroker.bridge_password
OPERATOR_PASSWORD = SecureBroker.operator_password
ADMIN_PASSWORD = "admin-password-44d0"
TOKENS = {"robot-1": "token-robot-1-5d8e", "robot-2": "token-robot-2-0b4c", "robot-3": "token-robot-3-e6a1"}
MODES = ("acl-file", "dynamic-security")


class DynsecBroker(SecureBroker):
    """Mosquitto on TLS with the dynamic-security plugin, prepared as docs/security.md says: `mosquitto_ctrl dynsec
    init` makes the admin, deploy/mosquitto/dynsec-bootstrap.sh the bridge's and the operator's roles and logins.
    Robots have no login until the bridge makes one."""

    def __init__(self, workdir, tls):
        workdir = pathlib.Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.dynsec_file = workdir / "dynamic-security.json"
        subprocess.run(["mosquitto_ctrl", "dynsec", "init", str(self.dynsec_file), "admin", ADMIN_PASSWORD],
                       check=True, capture_output=True)
        super().__init__(workdir, tls)
        (workdir / "bridge-password").write_text(BRIDGE_PASSWORD + "\n")
        (workdir / "operator-password").write_text(OPERATOR_PASSWORD + "\n")
        subprocess.run([str(REPO / "deploy" / "mosquitto" / "dynsec-bootstrap.sh"), str(workdir / "bridge-password"),
                        str(workdir / "operator-password"), "--", *self.ctrl_options()],
                       check=True, capture_output=True, timeout=60)

    def listener_config(self):
        return (f"cafile {self.tls['ca']}\ncertfile {self.tls['cert']}\nkeyfile {self.tls['key']}\n"
                "allow_anonymous false\nplugin /usr/lib/x86_64-linux-gnu/mosquitto_dynamic_security.so\n"
                f"plugin_opt_config_file {self.dynsec_file}\n")

    def ctrl_options(self):
        return ["-h", "127.0.0.1", "-p", str(self.port), "--cafile", self.ca, "-u", "admin", "-P", ADMIN_PASSWORD]

    def ctrl(self, *args):
        """mosquitto_ctrl as the plugin's admin: what an operator would run to look."""
        return subprocess.run(["mosquitto_ctrl", *self.ctrl_options(), "dynsec", *args], capture_output=True,
                              text=True, timeout=30)


# The k8s4r-auth broker plugin of the build under test: build/lib beside build/bin.
PLUGIN = pathlib.Path(os.environ.get("K8S4R_BIN_DIR", pathlib.Path(__file__).resolve().parents[2] / "build" / "bin")
                      ).parent / "lib" / "k8s4r_auth.so"


class LoginPluginBroker(SecureBroker):
    """Mosquitto on TLS as docs/security.md sets it up for a large fleet: the k8s4r-auth plugin decides every robot;
    the password and ACL files hold only the bridge and the operator (deploy/mosquitto/k8s4r.acl's lines for them
    apply; its robot lines are never reached)."""

    def __init__(self, workdir, tls, state_dir=None):
        self.state_file = pathlib.Path(state_dir or workdir) / "k8s4r-auth.db"
        super().__init__(workdir, tls, users={})

    def listener_config(self):
        return (super().listener_config() + f"plugin {PLUGIN}\nplugin_opt_state_file {self.state_file}\n"
                "plugin_opt_bridge_users k8s4r-bridge\nplugin_opt_defer_users k8s4r-operator\n")

    def restart(self):
        self.stop()
        self.start()


@pytest.fixture
def tls(tmp_path):
    return make_tls_files(tmp_path / "mqtt-tls")  # tmp_path/"tls" is the stand-in's


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def broker(tmp_path, tls, mode):
    if mode == "acl-file":
        started = SecureBroker(tmp_path / "broker", tls, TOKENS)
    else:
        started = DynsecBroker(tmp_path / "broker", tls)
    started.mode = mode
    yield started
    started.stop()


@pytest.fixture
def sim(kube_sim, tls_files, mode):
    """The stand-in enforcing RBAC, with the CRDs, every robot's Secret, and the bridge's kubeconfig for its Role:
    deploy/bridge's, with dynamic security deploy/bridge-dynamic-security's and with the login plugin
    deploy/bridge-login-plugin's (both reading robot Secrets)."""
    started = kube_sim("--authorization-mode=RBAC", token="admin-token", tls=tls_files)
    started.apply_crds()
    directory = REPO / "deploy" / {"acl-file": "bridge", "dynamic-security": "bridge-dynamic-security",
                                   "login-plugin": "bridge-login-plugin"}[mode]
    started.bridge_kubeconfig = apply_rbac(started, directory, "k8s4r-bridge")
    started.manager_kubeconfig = apply_rbac(started, REPO / "deploy" / "manager", "k8s4r-manager")
    for robot, token in TOKENS.items():
        create_robot_secret(started, robot, token)
    return started


def secure_bridge(workdir, broker, sim, extra=()):
    """The bridge with its own identity (BridgeProcess logs in to a SecureBroker as k8s4r-bridge, its password from
    a file); with dynamic security, managing the robots' logins."""
    dynamic = ["--dynamic-security", "true"] if getattr(broker, "mode", "") == "dynamic-security" else []
    return BridgeProcess(workdir, broker, sim, ["--heartbeat-write-interval", "3s", "--dispatch-resend-after", "2s",
                                                *dynamic, *extra])


def wait_ready(bridge, timeout=30):
    """Ready: informers synced, connected, and (with dynamic security) the broker's robot logins listed."""
    wait_until(bridge.ready, timeout, "the bridge to be ready")
    return bridge


def secure_agent(tmp_path, broker, robot, token=None, extra=()):
    """An agent that logs in as itself: its robot id and its token, read from a file as a mounted Secret would be."""
    token_file = tmp_path / f"token-{robot}"
    token_file.write_text((token if token is not None else TOKENS[robot]) + "\n")
    return AgentProcess(broker, tmp_path / f"work-{robot}", robot, ["--token-file", str(token_file), *extra])


@contextlib.contextmanager
def robots_at_work(tmp_path, sim, broker, robots=("robot-1", "robot-2")):
    """Agents for `robots`, each once connected through its own login; cleaned up on leaving."""
    agents = [secure_agent(tmp_path, broker, robot).start() for robot in robots]
    try:
        for robot in robots:
            wait_until(lambda: connected(sim, robot), 30, f"{robot} connected through its own login")
        yield agents
    finally:
        for agent in agents:
            agent.cleanup()


def runs(sim, name, script, robot="robot-1"):
    """A Task on `robot`, dispatched, completes."""
    create_task(sim, name, script, robot=robot)
    dispatch(sim, name)
    wait_state(sim, name, "completed", timeout=30)


def log_times(agent, text):
    """When the agent logged lines holding `text` (its log's wall-clock timestamps)."""
    return [datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
            for line in agent.log_text().splitlines() if text in line]


def connected(sim, robot):
    return (get(sim, "robot", robot) or {}).get("status", {}).get("connected")


def revoke(sim, agent, robot):
    """Deletes a connected robot's Secret, as an operator revokes it, and checks what the robot and the operator
    see: the broker disconnects it within 2 s (reason code 152) and refuses it when it tries again (135, twice), and
    its Robot shows it disconnected (the broker skips the will of a client it removes; whoever removed it says it
    offline for it)."""
    revoked_at = datetime.datetime.now().timestamp()
    sim.kubectl("delete", "secret", f"k8s4r-robot-{robot}")
    kicked = wait_until(lambda: log_times(agent, "reason code 152"), 10, f"{robot} disconnected by the broker")
    assert kicked[0] - revoked_at < 2.0, (kicked[0] - revoked_at, agent.log_text()[-2000:])
    wait_until(lambda: len(log_times(agent, "reason code 135 (not authorized)")) >= 2, 30,
               f"{robot} refused twice when it tries again")
    wait_until(lambda: connected(sim, robot) is False, 10, f"{robot} shown disconnected")
