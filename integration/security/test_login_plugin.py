"""Robot logins at fleet scale: a real Mosquitto loading build/lib/k8s4r_auth.so (broker-plugin/), fed by the bridge
(--login-plugin) from each robot's Secret k8s4r-robot-<id>. A robot gets in with its token under its own id only, and
touches only its own topics; a deleted Secret disconnects it within 2 s and keeps it out; the broker remembers the
logins across its own restart without any bridge; a restarted bridge disconnects nobody. Judged by what the agents,
plain MQTT clients and the plugin's file show."""
import json
import os
import pathlib
import subprocess

import pytest

from security_support import (PLUGIN, TOKENS, LoginPluginBroker, connected, create_robot_secret,  # noqa: F401
                              log_times, revoke, robots_at_work, runs, secure_agent, secure_bridge, sim, tls,
                              wait_ready)
from bridge_support import (DEPLOY_REPLICAS, BridgeProcess, apply_rbac, owner_among, settled, slot_of,  # noqa: E402
                            slot_table)
from conftest import Observer, wait_until  # noqa: E402

LEASE_SECONDS = 4
REPLICA = ["--replica-lease-duration", f"{LEASE_SECONDS}s", "--replica-renew-deadline", "3s",
           "--replica-retry-period", "500ms"]

@pytest.fixture
def mode():
    return "login-plugin"  # the stand-in gets deploy/bridge-login-plugin's Roles: reading robot Secrets


@pytest.fixture
def broker(tmp_path, tls):
    if not PLUGIN.exists():
        pytest.fail(f"{PLUGIN} is not built")
    started = LoginPluginBroker(tmp_path / "broker", tls)
    yield started
    started.stop()


def plugin_bridge(workdir, broker, sim):
    return wait_ready(secure_bridge(workdir, broker, sim, ["--login-plugin", "true"]).start())


@pytest.fixture
def bridge(tmp_path, broker, sim):
    started = plugin_bridge(tmp_path / "bridge", broker, sim)
    yield started
    started.stop()




def connect_rc(broker, username, password, client_id):
    """The CONNACK code a plain client gets: 0 in, 5 not authorised."""
    client = Observer(broker, topics=(), client_id=client_id, username=username, password=password)
    try:
        return client.connect_rc
    finally:
        client.close()


def login_records(broker):
    """The plugin's file, without its epoch records: the logins it was told, in order."""
    return [line for line in broker.state_file.read_text().splitlines()[1:] if not line.startswith("epoch ")]


def test_each_robot_logs_in_with_its_secret_and_a_deleted_secret_shuts_it_out_within_2s(tmp_path, sim, broker,
                                                                                         bridge):
    wait_until(lambda: bridge.metric("k8s4r_bridge_broker_logins") == len(TOKENS), 20, "a login per Secret")
    # The file holds digests, never a token; nor does the bridge's log.
    saved = broker.state_file.read_text()
    assert all(token not in saved and token not in bridge.log_text() for token in TOKENS.values())
    assert len(login_records(broker)) == len(TOKENS)
    with robots_at_work(tmp_path, sim, broker) as agents:
        runs(sim, "before", "echo ran")
        revoke(sim, agents[0], "robot-1")
        assert login_records(broker)[-1] == "del robot-1"
        assert connected(sim, "robot-2") is True
        runs(sim, "after", "echo still", robot="robot-2")

        # Made again, with a new token: the agent that kept trying with the old one stays out.
        create_robot_secret(sim, "robot-1", "new-token-robot-1-77aa")
        wait_until(lambda: bridge.metric("k8s4r_bridge_broker_logins") == len(TOKENS), 20, "robot-1's login back")
        assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-1") == 5
        assert connect_rc(broker, "robot-1", "new-token-robot-1-77aa", "robot-1") == 0


def test_a_robot_gets_in_only_as_itself_and_touches_only_its_own_topics(sim, broker, bridge):
    wait_until(lambda: bridge.metric("k8s4r_bridge_broker_logins") == len(TOKENS), 20, "a login per Secret")
    assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-1") == 0
    assert connect_rc(broker, "robot-1", "guessed", "robot-1") == 5
    assert connect_rc(broker, "robot-1", TOKENS["robot-2"], "robot-1") == 5  # another robot's token
    # Its own token under another robot's client id would take that robot's session over.
    assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-2") == 5
    assert connect_rc(broker, "robot-9", "anything", "robot-9") == 5  # no Secret, no login
    assert connect_rc(broker, "", None, "robot-1") == 5  # anonymous

    # A logged-in robot (a stolen one, say): its own topics only, and never the plugin's.
    robot_2 = Observer(broker, topics=("k8s4r/robots/robot-2/tasks/dispatch", "k8s4r/robots/robot-1/tasks/dispatch",
                                       "k8s4r/#", "$CONTROL/#"),
                       client_id="robot-2", username="robot-2", password=TOKENS["robot-2"])
    try:
        assert robot_2.connect_rc == 0
        assert robot_2.granted["k8s4r/robots/robot-2/tasks/dispatch"] == 1
        for refused in ("k8s4r/robots/robot-1/tasks/dispatch", "k8s4r/#", "$CONTROL/#"):
            assert robot_2.granted[refused] == 128, (refused, robot_2.granted)
        # A forged batch that would remove robot-1's login changes nothing.
        # Its PUBACK back means the broker has handled it.
        robot_2.publish("$CONTROL/k8s4r-logins/v1", "k8s4r-logins 1 forged\nslot 303 18446744073709551615 replace\n",
                        qos=1)
        assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-1") == 0
        assert "18446744073709551615" not in broker.state_file.read_text()  # its epoch never taken
    finally:
        robot_2.close()
    # Nor can the operator, who may read every robot's topics.
    operator = Observer(broker, topics=("k8s4r/#",))
    try:
        assert operator.connect_rc == 0 and operator.granted["k8s4r/#"] == 1
        operator.publish("$CONTROL/k8s4r-logins/v1", "k8s4r-logins 1 operator\nslot 303 18446744073709551615 "
                         "replace\n", qos=1)
        assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-1") == 0
    finally:
        operator.close()

    # A reload (SIGHUP, as logrotate sends daily) keeps the bridge's standing; a Secret whose robot id no login
    # can have is left out, and the batches around it still go through: a revocation after both takes effect.
    broker.reload()
    create_robot_secret(sim, "robot.9", "token-with-a-dot")
    sim.kubectl("delete", "secret", "k8s4r-robot-robot-3")
    wait_until(lambda: connect_rc(broker, "robot-3", TOKENS["robot-3"], "robot-3") == 5, 15,
               "robot-3 revoked after a reload, beside a Secret of an unusable id")
    assert connect_rc(broker, "k8s4r-operator", broker.operator_password, "operator") == 0
    assert bridge.metric("k8s4r_bridge_broker_login_batches_total", result="error") == 0
    assert "InvalidRobotId" in bridge.log_text()


def test_a_restarted_broker_lets_robots_in_without_the_bridge_and_a_revoked_one_stays_out(tmp_path, sim, broker):
    bridge = plugin_bridge(tmp_path / "bridge", broker, sim)
    try:
        wait_until(lambda: bridge.metric("k8s4r_bridge_broker_logins") == len(TOKENS), 20, "a login per Secret")
        sim.kubectl("delete", "secret", "k8s4r-robot-robot-3")
        wait_until(lambda: bridge.metric("k8s4r_bridge_broker_logins") == len(TOKENS) - 1, 20, "robot-3 revoked")
    finally:
        bridge.stop()
    broker.restart()  # no bridge anywhere
    assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-1") == 0
    assert connect_rc(broker, "robot-3", TOKENS["robot-3"], "robot-3") == 5

    # A file the plugin cannot read lets nobody in (fail closed) until a bridge sends the logins again.
    broker.stop()
    text = broker.state_file.read_text()
    broker.state_file.write_text(text.replace("set robot-2 ", "sot robot-2 "))
    broker.start()
    assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-1") == 5
    assert pathlib.Path(str(broker.state_file) + ".corrupt").exists()
    bridge = plugin_bridge(tmp_path / "bridge-again", broker, sim)
    try:
        assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-1") == 0  # ready: the logins are in
        assert connect_rc(broker, "robot-3", TOKENS["robot-3"], "robot-3") == 5
    finally:
        bridge.stop()


def test_a_restarted_bridge_disconnects_nobody_and_changes_no_login(tmp_path, sim, broker):
    bridge = plugin_bridge(tmp_path / "bridge", broker, sim)
    robot = secure_agent(tmp_path, broker, "robot-1").start()
    try:
        wait_until(lambda: connected(sim, "robot-1"), 30, "robot-1 connected")
        before = login_records(broker)
        bridge.stop()
        bridge = plugin_bridge(tmp_path / "bridge-again", broker, sim)
        assert bridge.metric("k8s4r_bridge_broker_logins") == len(TOKENS)
        assert login_records(broker) == before  # only the new epochs were written
        assert not log_times(robot, "reason code"), robot.log_text()[-2000:]
    finally:
        robot.cleanup()
        bridge.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs for the plugin's state file")
def test_a_full_disk_still_revokes_and_the_revocation_is_saved_once_there_is_room(tmp_path, tls, sim):
    disk = tmp_path / "small-disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    broker = LoginPluginBroker(tmp_path / "broker", tls, state_dir=disk)
    bridge = None
    try:
        bridge = plugin_bridge(tmp_path / "bridge", broker, sim)
        wait_until(lambda: bridge.metric("k8s4r_bridge_broker_logins") == len(TOKENS), 20, "a login per Secret")
        subprocess.run(["dd", "if=/dev/zero", f"of={disk}/filler", "bs=4k"], capture_output=True)  # until ENOSPC
        # More logins than the file's last page has room for (8 KiB of records): the disk is full for it now.
        sim.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": f"k8s4r-robot-extra-{i}", "labels": {"robot.k8s4r.io/robot-id": f"extra-{i}"}},
             "stringData": {"token": f"token-extra-{i}"}} for i in range(100)]}))
        wait_until(lambda: bridge.metric("k8s4r_bridge_broker_login_batches_total", result="not_durable"), 20,
                   "the plugin to say it could not save")

        sim.kubectl("delete", "secret", "k8s4r-robot-robot-3")
        wait_until(lambda: connect_rc(broker, "robot-3", TOKENS["robot-3"], "robot-3") == 5, 10,
                   "robot-3 revoked all the same")
        assert "set robot-3 " in broker.state_file.read_text()  # not on disk yet
        assert "could not save them" in bridge.log_text()

        (disk / "filler").unlink()
        wait_until(lambda: "robot-3" not in broker.state_file.read_text(), 30, "the revocation saved")
        assert "set extra-99 " in broker.state_file.read_text()
        bridge.stop()
        broker.restart()  # no bridge: what the broker remembers is what is on disk
        assert connect_rc(broker, "robot-3", TOKENS["robot-3"], "robot-3") == 5
        assert connect_rc(broker, "robot-1", TOKENS["robot-1"], "robot-1") == 0
        assert connect_rc(broker, "extra-99", "token-extra-99", "extra-99") == 0
    finally:
        if bridge:
            bridge.stop()
        broker.stop()
        subprocess.run(["umount", str(disk)], check=False)


def test_replicas_each_send_their_own_slots_and_a_deposed_writers_batch_is_refused(tmp_path, sim, broker):
    """Two bridge replicas with --login-plugin: each sends the logins of its own slots under their epochs; a batch
    replayed with an older epoch (what a deposed replica would send) is refused and changes nothing; when a replica
    is killed, the other takes its slots and a revocation there works."""
    sim.bridge_kubeconfig = apply_rbac(sim, DEPLOY_REPLICAS, "k8s4r-bridge")  # the Leases and the slot table too
    members = ["bridge-a", "bridge-b"]
    robots = {}
    for n in range(1, 1000):
        robot = f"robot-{n}"
        robots.setdefault(owner_among(slot_of(robot), members), robot)
        if len(robots) == 2:
            break
    for robot in robots.values():
        create_robot_secret(sim, robot, f"token-{robot}")
    made = {}
    try:
        for name in members:
            made[name] = BridgeProcess(tmp_path / name, broker, sim, ["--replica-id", name, "--login-plugin", "true",
                                                                     *REPLICA]).start(ready_within=30)
        wait_until(lambda: settled(sim, members), 20, "the slot table to share the slots between the two")
        for robot in robots.values():
            wait_until(lambda: connect_rc(broker, robot, f"token-{robot}", robot) == 0, 20, f"{robot} logs in")
        # Every slot's logins were last sent under its owner's epoch from the slot table.
        def epochs_in_file():
            held = {}
            for line in broker.state_file.read_text().splitlines():
                if line.startswith("epoch "):
                    _, slot, epoch = line.split()
                    held[int(slot)] = int(epoch)
            return held
        wait_until(lambda: epochs_in_file() == {slot: epoch for slot, (_, epoch, _) in slot_table(sim)[0].items()},
                   10, "each slot's logins under its owner's epoch")

        # A batch under an older epoch than the slot's (a deposed replica's, replayed): refused, nothing changed.
        robot_a = robots["bridge-a"]
        forger = Observer(broker, topics=("$CONTROL/k8s4r-logins/v1/response",), client_id="replayer",
                          username="k8s4r-bridge", password=broker.bridge_password)
        try:
            forger.publish("$CONTROL/k8s4r-logins/v1", f"k8s4r-logins 1 replay\nslot {slot_of(robot_a)} 0\n"
                           f"del {robot_a}\n")
            answer = wait_until(lambda: forger.on("$CONTROL/k8s4r-logins/v1/response"), 10, "the plugin's answer")
            assert f"\nstale {slot_of(robot_a)} " in answer[0].decode(), answer
            assert " changed=0 " in answer[0].decode(), answer
        finally:
            forger.close()
        assert connect_rc(broker, robot_a, f"token-{robot_a}", robot_a) == 0

        # bridge-a dies; bridge-b takes its slots (and their epochs), and a revocation there takes effect.
        made["bridge-a"].kill9()
        wait_until(lambda: settled(sim, ["bridge-b"]), LEASE_SECONDS + 15, "bridge-b to own every slot")
        sim.kubectl("delete", "secret", f"k8s4r-robot-{robot_a}")
        wait_until(lambda: connect_rc(broker, robot_a, f"token-{robot_a}", robot_a) == 5, 15,
                   f"{robot_a} revoked by the replica that took its slot over")
        assert connect_rc(broker, robots["bridge-b"], f"token-{robots['bridge-b']}", robots["bridge-b"]) == 0
    finally:
        for bridge in made.values():
            bridge.stop()
