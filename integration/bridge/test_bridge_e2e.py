"""End to end through the bridge: a real agent, a real Mosquitto, k8s4r-kube-sim, judged with kubectl."""
import json
import os
import signal
import time

from bridge_support import (TOKEN, BridgeProcess, bridge, create_task, digest, dispatch, get,  # noqa: F401
                            processes_marked, robot, state_of, wait_state, wait_until)


def test_a_robot_registers_and_its_robot_shows_it(sim, observer, robot):
    found = wait_until(lambda: (r := get(sim, "robot", "robot-1")) and r.get("status", {}).get("deviceInfo") and r,
                       20, "device info")
    assert found["spec"]["robotId"] == "robot-1"
    assert found["spec"]["labels"] == {"zone": "lab-a"}
    status = found["status"]
    assert status["phase"] == "Pending"  # the manager approves
    assert status["connected"] is True
    assert status["tokenDigest"] == digest(TOKEN)
    assert TOKEN not in json.dumps(found)  # only the digest, never the token
    assert any(c["type"] == "Connected" and c["status"] == "True" for c in status["conditions"])
    answer = observer.wait_for("k8s4r/robots/robot-1/response", lambda m: m["success"], timeout=10)
    assert answer["phase"] == "Pending"
    # Heartbeats every second, written at most every 3 s: the time moves.
    first = found["status"]["lastHeartbeatTime"]
    wait_until(lambda: get(sim, "robot", "robot-1")["status"]["lastHeartbeatTime"] != first, 10,
               "lastHeartbeatTime to move")


def test_heartbeats_are_coalesced_to_the_write_interval(sim, robot, bridge):
    wait_until(lambda: bridge.metric("k8s4r_bridge_heartbeats_coalesced_total") >= 4, 20, "coalesced heartbeats")
    received = bridge.metric("k8s4r_bridge_messages_total", topic="heartbeat")
    written = sum(bridge.metric("k8s4r_bridge_heartbeat_writes_total", reason=r) for r in ("first", "changed", "interval"))
    assert written < received, (written, received)


def test_a_task_runs_to_completion_and_describe_tells_the_story(sim, robot, bridge):
    create_task(sim, "hello", 'echo "hello from k8s4r"')
    dispatch(sim, "hello")
    task = wait_state(sim, "hello", "completed")
    status = task["status"]
    assert status["exitCode"] == 0
    assert status["startedAt"] and status["finishedAt"] and status["dispatchedAt"]
    assert "hello from k8s4r" in status["logs"]
    assert status["statusSeq"] >= 2
    assert "robot.k8s4r.io/bridge" in task["metadata"]["finalizers"]
    described = sim.kubectl("describe", "rtask", "hello").stdout
    assert "Started" in described and "Completed" in described, described
    # Finished: deleting it does not wait on anyone.
    sim.kubectl("delete", "rtask", "hello", "--timeout=20s")
    assert get(sim, "rtask", "hello") is None
    assert bridge.metric("k8s4r_bridge_dispatches_total", action="create") == 1


def test_a_timeout_ends_failed_with_reason_timeout(sim, robot):
    create_task(sim, "slow", "sleep 30", timeout="1s", killTimeout="1s")
    dispatch(sim, "slow")
    task = wait_state(sim, "slow", "failed")
    assert task["status"]["reason"] == "Timeout"
    wait_until(lambda: "Timeout" in sim.kubectl("describe", "rtask", "slow").stdout, 10, "a Timeout event")


def test_deleting_a_running_task_kills_its_process_and_the_task_goes(sim, robot):
    create_task(sim, "sleeper", "sleep 60")
    dispatch(sim, "sleeper")
    wait_state(sim, "sleeper", "running")
    assert processes_marked(robot.work_dir), "the task's process should be running"
    sim.kubectl("delete", "rtask", "sleeper", "--timeout=20s")
    assert get(sim, "rtask", "sleeper") is None
    wait_until(lambda: not processes_marked(robot.work_dir), 10, "the task's process to be gone")


def test_deleting_a_task_whose_robot_died_does_not_hang(sim, robot):
    create_task(sim, "orphan", "sleep 60")
    dispatch(sim, "orphan")
    wait_state(sim, "orphan", "running")
    robot.kill9()  # the broker publishes its will: disconnected
    wait_until(lambda: get(sim, "robot", "robot-1")["status"].get("connected") is False, 20, "connected: false")
    started = time.monotonic()
    sim.kubectl("delete", "rtask", "orphan", "--timeout=20s")
    assert get(sim, "rtask", "orphan") is None
    assert time.monotonic() - started < 15
    for pid in processes_marked(robot.work_dir):
        os.kill(pid, signal.SIGKILL)


def test_a_status_from_the_wrong_robot_changes_nothing(sim, robot, bridge, observer):
    create_task(sim, "mine", "sleep 30")
    dispatch(sim, "mine")
    task = wait_state(sim, "mine", "running")
    uid = task["metadata"]["uid"]
    forged = {"taskUid": uid, "robotId": "robot-2", "state": "completed", "exitCode": 0, "seq": 99}
    observer.publish(f"k8s4r/robots/robot-2/tasks/{uid}/status", forged)
    wait_until(lambda: bridge.metric("k8s4r_bridge_messages_refused_total", reason="WrongRobot") == 1, 10,
               "the refusal to be counted")
    assert state_of(sim, "mine") == "running"
    assert get(sim, "rtask", "mine")["status"]["statusSeq"] < 99


def test_bad_input_is_refused_counted_and_survived(sim, robot, bridge, observer):
    observer.publish("k8s4r/register", b"not json")
    observer.publish("k8s4r/heartbeat", {"robotId": "Robot/1#"})
    observer.publish("k8s4r/heartbeat", "[" * 100000 + "]" * 100000)
    observer.publish("k8s4r/robots/robot-1/tasks/0000/status", {"taskUid": "0000", "robotId": "robot-1",
                                                                "state": "running"})
    observer.publish("k8s4r/robots/robot-1/presence", {"robotId": "robot-9", "online": True,
                                                      "timestamp": "2026-11-23T10:00:00Z"})
    wait_until(lambda: bridge.metric("k8s4r_bridge_messages_refused_total", reason="InvalidPayload") >= 3
               and bridge.metric("k8s4r_bridge_messages_refused_total", reason="UnknownTask") >= 1
               and bridge.metric("k8s4r_bridge_messages_refused_total", reason="TopicMismatch") >= 1, 10,
               "every refusal counted")
    assert bridge.ready()
    assert get(sim, "robot", "robot-9") is None


def test_the_bridge_killed_mid_task_loses_nothing_and_runs_nothing_twice(sim, robot, bridge, tmp_path):
    create_task(sim, "survivor", "sleep 3; echo done")
    dispatch(sim, "survivor")
    wait_state(sim, "survivor", "running")
    bridge.kill9()
    time.sleep(0.5)  # the task ends while the bridge is down: its report waits in the broker
    restarted = BridgeProcess(tmp_path / "bridge2", bridge.broker, sim,
                              ["--heartbeat-write-interval", "3s", "--dispatch-resend-after", "2s"]).start()
    try:
        task = wait_state(sim, "survivor", "completed", timeout=30)
        assert "done" in task["status"]["logs"]
        starts = robot.log_text().count("started pid")
        assert starts == 1, robot.log_text()
    finally:
        restarted.stop()
