"""Kubernetes as the one place robot identities live: with --dynamic-security the bridge makes each robot's broker
login from its Secret k8s4r-robot-<id> (Mosquitto's dynamic-security plugin, over TLS), changes it when the token
changes, and removes it — disconnecting the robot at once, for good — when the Secret goes, and only then.
Real Mosquitto, real agents, the bridge under deploy/bridge-dynamic-security's Role; judged by what the robot and
the operator see."""
import datetime
import json
import threading

import pytest

from security_support import (DynsecBroker, TOKENS, connected, create_robot_secret, log_times, revoke,  # noqa: F401
                              robots_at_work, runs, secure_agent, secure_bridge, sim, tls, wait_ready)
from conftest import Observer, wait_until  # noqa: E402
from manager_support import ManagerProcess, apply, group, job, robot_phase, wait_job  # noqa: E402


@pytest.fixture
def mode():
    return "dynamic-security"


@pytest.fixture
def broker(tmp_path, tls):
    started = DynsecBroker(tmp_path / "broker", tls)
    started.mode = "dynamic-security"
    yield started
    started.stop()


@pytest.fixture
def bridge(tmp_path, broker, sim):
    started = wait_ready(secure_bridge(tmp_path / "bridge", broker, sim).start())
    yield started
    started.stop()




def test_each_robot_gets_a_login_from_its_secret_and_loses_it_within_2s_when_the_secret_goes(tmp_path, sim, broker,
                                                                                              bridge):
    wait_until(lambda: bridge.metric("k8s4r_bridge_broker_identities") == len(TOKENS), 20, "a login per Secret")
    # What an operator sees in the broker: a client and a role per robot, the token only as its digest.
    shown = broker.ctrl("getClient", "robot-1").stdout
    assert "k8s4r-robot-robot-1" in shown and TOKENS["robot-1"] not in shown, shown
    assert TOKENS["robot-1"] not in bridge.log_text()
    with robots_at_work(tmp_path, sim, broker) as agents:
        runs(sim, "before", "echo ran")
        # Revoked: the Secret is deleted. The broker disconnects robot-1 within 2 s and refuses it from then on.
        revoke(sim, agents[0], "robot-1")
        assert bridge.metric("k8s4r_bridge_broker_identity_changes_total", action="remove") == 1
        # robot-2 is untouched: still connected, still runs work.
        assert connected(sim, "robot-2") is True
        runs(sim, "after", "echo still", robot="robot-2")

        # Made again: robot-1 logs in once more (its agent kept trying), with nothing done on the robot.
        create_robot_secret(sim, "robot-1", TOKENS["robot-1"])
        wait_until(lambda: connected(sim, "robot-1"), 60, "robot-1 back with its login")


def test_a_new_token_replaces_the_old_at_once_and_a_rejected_robot_is_shut_out(tmp_path, sim, broker, bridge):
    robot = secure_agent(tmp_path, broker, "robot-1").start()
    try:
        wait_until(lambda: connected(sim, "robot-1"), 30, "robot-1 connected")
        # Rotation: the Secret's token changes; the robot holding the old one is disconnected and refused.
        sim.kubectl("patch", "secret", "k8s4r-robot-robot-1", "--type=merge",
                    "-p", json.dumps({"stringData": {"token": "rotated-token-9c1f"}}))
        wait_until(lambda: log_times(robot, "reason code 135 (not authorized)"), 20, "the old token refused")
        assert bridge.metric("k8s4r_bridge_broker_identity_changes_total", action="rotate") == 1
        robot.cleanup()
        rotated = secure_agent(tmp_path, broker, "robot-1", token="rotated-token-9c1f").start()
        try:
            wait_until(lambda: log_times(rotated, "connected to ssl://"), 30, "the new token taken")
        finally:
            rotated.cleanup()

        # A robot that logs in as itself but registers with a token that is not its Secret's (a certificate login
        # would check no password at all) is Rejected, and gets no work, but keeps its login: only its Secret
        # removes that, so no message that gets a Robot Rejected can shut a robot out of the broker.
        robot_2 = Observer(broker, topics=("k8s4r/robots/robot-2/response",), client_id="robot-2",
                           username="robot-2", password=TOKENS["robot-2"])
        lost = threading.Event()
        robot_2.client.on_disconnect = lambda *args: lost.set()
        try:
            robot_2.publish("k8s4r/robots/robot-2/register", {"robotId": "robot-2", "token": "not-its-token",
                                                              "runningTasks": []})
            robot_2.wait_for("k8s4r/robots/robot-2/response")
            sim.kubectl("patch", "robot", "robot-2", "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"phase": "Rejected"}}))  # as the manager judges it
            assert not lost.wait(3), "robot-2 disconnected for being Rejected"
            assert "robot-2" in broker.ctrl("listClients").stdout
            sim.kubectl("delete", "secret", "k8s4r-robot-robot-2")
            assert lost.wait(10), "robot-2 not disconnected once its Secret went"
            wait_until(lambda: "robot-2" not in broker.ctrl("listClients").stdout, 10, "robot-2's login removed")
        finally:
            robot_2.close()
    finally:
        robot.cleanup()


def test_a_restarted_bridge_disconnects_nobody_and_a_client_it_did_not_make_is_left_alone(tmp_path, sim, broker,
                                                                                           bridge):
    robot = secure_agent(tmp_path, broker, "robot-1").start()
    try:
        wait_until(lambda: connected(sim, "robot-1"), 30, "robot-1 connected")
        # An admin's own client that happens to bear a robot's name, and no Secret for robot-9.
        assert broker.ctrl("createClient", "robot-9", "-p", "admins-own").returncode == 0
        bridge.stop()
        again = wait_ready(secure_bridge(tmp_path / "bridge-again", broker, sim).start())
        try:
            wait_until(lambda: again.metric("k8s4r_bridge_broker_identities") == len(TOKENS), 20, "logins listed")
            assert again.metric("k8s4r_bridge_broker_identity_changes_total") == 0  # the broker already held them
            assert not log_times(robot, "reason code 152")  # robot-1 was never disconnected
            assert "robot-9" in broker.ctrl("listClients").stdout
        finally:
            again.stop()
    finally:
        robot.cleanup()


def test_with_the_manager_a_rotation_is_the_secret_and_a_restart_and_a_revocation_is_the_secret_alone(tmp_path, sim,
                                                                                                     broker, bridge):
    """The whole system: the manager approving robots by their Secrets (--require-robot-token), the bridge making
    their logins from the same Secrets. A rotated Secret makes the manager reject the robot still registered with the
    old token; the bridge keeps the login, with the new token, so the robot comes back once it has it."""
    manager = ManagerProcess(tmp_path / "manager", sim, ["--require-robot-token", "true"]).start()
    robot = secure_agent(tmp_path, broker, "robot-1").start()
    try:
        wait_until(lambda: robot_phase(sim, "robot-1") == "Online", 30, "robot-1 approved")
        apply(sim, job("secured", [group("g", 2, "echo done")]))
        wait_job(sim, "secured", "completed", 60)

        sim.kubectl("patch", "secret", "k8s4r-robot-robot-1", "--type=merge",
                    "-p", json.dumps({"stringData": {"token": "rotated-token-51be"}}))
        wait_until(lambda: log_times(robot, "reason code 135 (not authorized)"), 20, "the old token refused")
        wait_until(lambda: robot_phase(sim, "robot-1") == "Rejected", 20, "the manager to reject the old token")
        assert bridge.metric("k8s4r_bridge_broker_identity_changes_total", action="rotate") == 1
        assert bridge.metric("k8s4r_bridge_broker_identity_changes_total", action="remove") == 0
        robot.cleanup()
        robot = secure_agent(tmp_path, broker, "robot-1", token="rotated-token-51be").start()
        wait_until(lambda: robot_phase(sim, "robot-1") == "Online", 30, "robot-1 approved with its new token")

        revoked_at = datetime.datetime.now().timestamp()
        sim.kubectl("delete", "secret", "k8s4r-robot-robot-1")
        kicked = wait_until(lambda: log_times(robot, "reason code 152"), 10, "robot-1 disconnected by the broker")
        assert kicked[0] - revoked_at < 2.0
        wait_until(lambda: robot_phase(sim, "robot-1") == "Pending", 20, "robot-1 no longer approved")
        # The tokens went to the broker and nowhere else: no log (at debug), metric, status or Event holds one.
        seen = [bridge.log_text(), manager.log_text(), robot.log_text(), bridge.http("/metrics")[1],
                manager.http("/metrics")[1], sim.kubectl("get", "robots,events", "-o", "json").stdout]
        for token in (TOKENS["robot-1"], "rotated-token-51be"):
            assert not [text for text in seen if token in text], token
    finally:
        robot.cleanup()
        manager.stop()
