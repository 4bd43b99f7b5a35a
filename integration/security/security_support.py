"""Helpers for the security tests: a fleet as docs/security.md sets it up — Mosquitto on TLS only, one identity per
robot, deploy/mosquitto/k8s4r.acl — with the real bridge and agents, and clients that misbehave."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bridge"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "agent"))

from agent_support import AgentProcess  # noqa: E402
from bridge_support import BridgeProcess  # noqa: E402
from conftest import SecureBroker, make_tls_files  # noqa: E402

BRIDGE_PASSWORD = "bridge-password-7f3a"
OPERATOR_PASSWORD = "operator-password-91c2"
TOKENS = {"robot-1": "token-robot-1-5d8e", "robot-2": "token-robot-2-0b4c", "robot-3": "token-robot-3-e6a1"}


@pytest.fixture
def tls(tmp_path):
    return make_tls_files(tmp_path / "mqtt-tls")  # tmp_path/"tls" is the stand-in's


@pytest.fixture
def broker(tmp_path, tls):
    users = {"k8s4r-bridge": BRIDGE_PASSWORD, "k8s4r-operator": OPERATOR_PASSWORD, **TOKENS}
    started = SecureBroker(tmp_path / "broker", tls, users)
    yield started
    started.stop()


def secure_bridge(workdir, broker, sim, extra=()):
    """The bridge with its own identity: its password from a file, the broker checked against the test CA."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    password_file = workdir / "mqtt-password"
    password_file.write_text(BRIDGE_PASSWORD + "\n")
    password_file.chmod(0o600)
    return BridgeProcess(workdir, broker, sim, ["--mqtt-username", "k8s4r-bridge", "--mqtt-password-file",
                                                str(password_file), "--ca-file", broker.ca,
                                                "--heartbeat-write-interval", "3s", "--dispatch-resend-after", "2s",
                                                *extra])


def secure_agent(tmp_path, broker, robot, token=None, extra=()):
    """An agent that logs in as itself: its robot id and its token, read from a file as a mounted Secret would be."""
    token_file = tmp_path / f"token-{robot}"
    token_file.write_text((token if token is not None else TOKENS[robot]) + "\n")
    return AgentProcess(broker, tmp_path / f"work-{robot}", robot,
                        ["--token-file", str(token_file), "--ca-file", broker.ca, *extra])
