"""Robots running the Go K8s4r v1alpha1 agent keep working through the bridge, habits and all (go_agent.py says
which), judged with kubectl."""
import json

import pytest

from bridge_support import BridgeProcess, create_task, digest, dispatch, get, sim, state_of, wait_state, wait_until  # noqa: F401
from go_agent import GoK8s4rAgent

GO_TOKEN = "legacy-token"


@pytest.fixture
def bridge(tmp_path, broker, sim):
    """A bridge for a fleet with Go K8s4r agents: --legacy-topics, the one setting that opens the shared topics."""
    made = BridgeProcess(tmp_path / "bridge", broker, sim, ["--legacy-topics", "--heartbeat-write-interval", "3s",
                                                           "--dispatch-resend-after", "2s"]).start()
    yield made
    made.stop()


@pytest.fixture
def go_robot(broker, bridge, sim):
    agent = GoK8s4rAgent(broker, "go-robot", GO_TOKEN).start()  # fails unless the registration was answered
    yield agent
    agent.stop()


def test_a_go_agent_registers_and_heartbeats_and_its_robot_shows_it(sim, bridge, go_robot):
    robot = wait_until(lambda: get(sim, "robot", "go-robot"), 10, "the Robot")
    assert go_robot.responses[0]["success"] is True and go_robot.responses[0]["phase"] == "Pending"
    status = robot["status"]
    assert status["phase"] == "Pending" and status["tokenDigest"] == digest(GO_TOKEN)
    assert status["deviceInfo"]["cpu"]["modelName"] == "Cortex-A72"
    # It sends no presence: its heartbeats make it connected, and they are coalesced although every one of them
    # carries new usage figures (the bridge's write interval is 3 s, a beat comes every second).
    wait_until(lambda: get(sim, "robot", "go-robot")["status"].get("connected") is True, 10, "connected")
    first = get(sim, "robot", "go-robot")["status"]["lastHeartbeatTime"]
    wait_until(lambda: get(sim, "robot", "go-robot")["status"]["lastHeartbeatTime"] != first, 10,
               "lastHeartbeatTime to move")
    wait_until(lambda: bridge.metric("k8s4r_bridge_heartbeats_coalesced_total") >= 3, 10, "coalesced heartbeats")
    assert bridge.metric("k8s4r_bridge_messages_refused_total") == 0, bridge.log_text()[-3000:]


def test_a_go_agents_tasks_end_in_their_real_state_whatever_it_sends_after(sim, bridge, go_robot):
    create_task(sim, "go-ok", "echo fine", robot="go-robot")
    create_task(sim, "go-fails", "exit 3", robot="go-robot")
    dispatch(sim, "go-ok")
    dispatch(sim, "go-fails")
    ok = wait_state(sim, "go-ok", "completed", timeout=30)  # from the 5 s monitor
    failed = wait_state(sim, "go-fails", "failed", timeout=30)
    assert ok["status"]["exitCode"] == 0 and failed["status"]["exitCode"] == 3
    assert go_robot.process(ok["metadata"]["uid"]).returncode == 0
    # After its final report the agent still sends a driver event with state running; with no seq to go by,
    # the bridge must not move a finished Task back.
    for task in (ok, failed):
        uid = task["metadata"]["uid"]
        wait_until(lambda: [r["state"] for r in go_robot.reports(uid)][-2:] == ["exited", "running"], 20,
                   "the late driver event")
    sent = sum(len(go_robot.reports(t["metadata"]["uid"])) for t in (ok, failed))
    wait_until(lambda: bridge.metric("k8s4r_bridge_messages_total", topic="task_status") >= sent, 10,
               "every report handled")
    assert state_of(sim, "go-ok") == "completed" and state_of(sim, "go-fails") == "failed"
    # The Go agent runs a task again if it is dispatched again after it ended: the bridge never does that.
    assert [go_robot.starts(t["metadata"]["uid"]) for t in (ok, failed)] == [1, 1]
    described = sim.kubectl("describe", "rtask", "go-fails").stdout
    assert "Failed" in described, described
    for name in ("go-ok", "go-fails"):
        sim.kubectl("delete", "rtask", name, "--timeout=20s")


def test_deleting_a_go_agents_running_task_kills_it_though_the_agent_never_confirms(sim, bridge, go_robot):
    task = create_task(sim, "go-long", "sleep 120", robot="go-robot")
    dispatch(sim, "go-long")
    wait_state(sim, "go-long", "running", timeout=20)
    process = go_robot.process(task["metadata"]["uid"])
    assert process.poll() is None
    # The Go agent reports nothing when it stops a task: the bridge sends delete three times, --dispatch-resend-after
    # (2 s here) apart, and then lets the Task go.
    sim.kubectl("delete", "rtask", "go-long", "--wait=false")
    wait_until(lambda: process.poll() is not None, 10, "the task's process to be killed")
    wait_until(lambda: get(sim, "rtask", "go-long") is None, 30, "the Task to go")
    assert bridge.metric("k8s4r_bridge_dispatches_total", action="delete") >= 1
    assert bridge.metric("k8s4r_bridge_dispatches_total", action="create") == 1
    assert go_robot.starts(task["metadata"]["uid"]) == 1


def test_a_go_agents_task_asked_to_stop_is_stopped_and_ends_though_the_agent_never_confirms(sim, bridge, go_robot):
    """A drain (the DisruptionTarget condition) on a Go K8s4r robot: the bridge sends delete three times, then takes
    the task as stopped and says so, so the drain finishes and the task is placed elsewhere."""
    task = create_task(sim, "go-drained", "sleep 120", robot="go-robot")
    dispatch(sim, "go-drained")
    wait_state(sim, "go-drained", "running", timeout=20)
    process = go_robot.process(task["metadata"]["uid"])
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "Drained",
                 "message": "robot go-robot is drained", "lastTransitionTime": "2026-11-22T01:30:00Z"}
    sim.kubectl("patch", "rtask", "go-drained", "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"conditions": [condition]}}))
    wait_until(lambda: process.poll() is not None, 10, "the task's process to be killed")
    ended = wait_state(sim, "go-drained", "failed", timeout=30)
    assert ended["status"]["reason"] == "Drained", ended["status"]
    assert "did not confirm the stop after 3 delete messages" in ended["status"]["message"], ended["status"]
    assert bridge.metric("k8s4r_bridge_dispatches_total", action="delete") == 3
    assert go_robot.starts(task["metadata"]["uid"]) == 1


def test_with_legacy_topics_off_a_go_agent_is_refused_even_through_an_old_session(tmp_path, broker, sim):
    """The bridge's session outlives it at the broker, subscriptions and all: one started with legacy topics on and
    restarted with its defaults (legacy topics off) still receives k8s4r/register. It must refuse it, count it, and
    write nothing."""
    first = BridgeProcess(tmp_path / "bridge-legacy", broker, sim, ["--legacy-topics"]).start()
    first.stop()
    strict = BridgeProcess(tmp_path / "bridge-strict", broker, sim).start()
    go = GoK8s4rAgent(broker, "go-robot", GO_TOKEN)
    try:
        with pytest.raises(AssertionError, match="registration timeout"):
            go.start()
        wait_until(lambda: strict.metric("k8s4r_bridge_messages_refused_total", reason="LegacyTopic") >= 1, 10,
                   "the legacy register refused and counted")
        assert get(sim, "robot", "go-robot") is None
        assert "legacy-topics is off" in strict.log_text()
    finally:
        go.stop()
        strict.stop()


def test_a_task_sent_before_a_go_agent_subscribed_goes_again_at_its_first_heartbeat(tmp_path, broker, sim):
    """The Go agent subscribes to its dispatches after it registered: a Task dispatched meanwhile is sent again at
    its first heartbeat, not only at the next resend (60 s here)."""
    slow_resend = BridgeProcess(tmp_path / "bridge", broker, sim, ["--legacy-topics", "--dispatch-resend-after", "60s"]).start()
    try:
        create_task(sim, "go-early", "echo early", robot="go-late")
        dispatch(sim, "go-early")
        wait_until(lambda: (get(sim, "rtask", "go-early").get("status") or {}).get("dispatchedAt"), 10,
                   "the first dispatch, to nobody")
        agent = GoK8s4rAgent(broker, "go-late", GO_TOKEN, subscribe_after=2.0).start()
        try:
            task = wait_state(sim, "go-early", "completed", timeout=25)  # the Go agent's 5 s monitor included
            assert agent.starts(task["metadata"]["uid"]) == 1
            assert "sending task go-early" in slow_resend.log_text()
        finally:
            agent.stop()
    finally:
        slow_resend.stop()
