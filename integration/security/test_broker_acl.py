"""One identity per robot, confined by the broker to its own topics, over TLS: the real bridge and agents against
Mosquitto as docs/security.md sets it up (each test runs with the ACL file and with the dynamic-security plugin), and a
client holding one robot's credentials that tries to act for another. Each attempt must be refused by the broker (its
log says so) or dropped and counted by the bridge, and change nothing a user would see."""
import pytest

from security_support import (OPERATOR_PASSWORD, TOKENS, broker, mode, secure_agent, secure_bridge, sim, tls,  # noqa: F401
                               wait_ready)
from bridge_support import create_task, dispatch, get, state_of, wait_state  # noqa: E402 (path set above)
from agent_support import AgentProcess  # noqa: E402
from conftest import Observer, wait_until  # noqa: E402


@pytest.fixture
def fleet(tmp_path, broker, sim):
    """The bridge and two agents, every one of them logged in as itself over TLS."""
    bridge = wait_ready(secure_bridge(tmp_path / "bridge", broker, sim).start())
    agents = [secure_agent(tmp_path, broker, robot).start() for robot in ("robot-1", "robot-2")]
    try:
        for robot in ("robot-1", "robot-2"):
            wait_until(lambda: (get(sim, "robot", robot) or {}).get("status", {}).get("connected"), 30,
                       f"{robot} registered through the bridge")
        yield bridge, agents
    finally:
        for agent in agents:
            agent.cleanup()
        bridge.stop()


def rogue(broker, robot="robot-3", topics=()):
    """A client holding robot-3's credentials (a stolen robot, say), not running k8s4r-agent."""
    client = Observer(broker, topics=topics, client_id=f"rogue-{robot}", username=robot, password=TOKENS[robot])
    assert client.connect_rc == 0
    return client


def test_robots_and_the_bridge_work_over_tls_each_as_itself(sim, broker, fleet):
    bridge, agents = fleet
    operator = Observer(broker, username="k8s4r-operator", password=OPERATOR_PASSWORD)
    try:
        create_task(sim, "over-tls", "echo secured")
        dispatch(sim, "over-tls")
        task = wait_state(sim, "over-tls", "completed", timeout=30)
        assert "secured" in task["status"]["logs"]
        # The operator's read-only identity sees the traffic, as `mosquitto_sub -v -t 'k8s4r/#'` would.
        operator.wait_for("k8s4r/robots/robot-1/tasks/dispatch")
        operator.wait_for(f"k8s4r/robots/robot-1/tasks/{task['metadata']['uid']}/status",
                          lambda m: m["state"] == "completed")
        assert bridge.metric("k8s4r_bridge_messages_refused_total") == 0, bridge.log_text()[-3000:]
        # Registrations carry the robot's token, its login: the operator never sees one, nor any token, while it
        # sees the rest (a heartbeat, once a second).
        operator.wait_for("k8s4r/robots/robot-1/heartbeat")
        # The bridge's confirmations reach the robot (the broker lets the bridge publish them): without them its
        # reports would never leave its queue and its tasks would be stopped for want of contact.
        operator.wait_for("k8s4r/robots/robot-1/acks", lambda m: any(r["taskUid"] == task["metadata"]["uid"]
                                                                     for r in m.get("reports", [])))
        again = Observer(broker, topics=(), client_id="robot-1-again", username="robot-1", password=TOKENS["robot-1"])
        answers = len(operator.on("k8s4r/robots/robot-1/response"))
        again.publish("k8s4r/robots/robot-1/register", {"robotId": "robot-1", "token": TOKENS["robot-1"],
                                                        "runningTasks": []})
        wait_until(lambda: len(operator.on("k8s4r/robots/robot-1/response")) > answers, 10, "the bridge's answer")
        again.close()
        assert not [t for t, _, _ in operator.messages if t.endswith("/register")], operator.messages
        assert not [p for _, p, _ in operator.messages if any(token.encode() in p for token in TOKENS.values())]
        # Nothing went in clear: the broker has one listener, and it speaks TLS.
        assert broker.url.startswith("ssl://") and all(a.broker.url == broker.url for a in agents)
    finally:
        operator.close()


def test_a_robot_cannot_act_for_another(sim, broker, fleet):
    bridge, _ = fleet
    uid = create_task(sim, "victim", "sleep 8; echo real")["metadata"]["uid"]
    dispatch(sim, "victim")
    wait_state(sim, "victim", "running", timeout=20)
    thief = rogue(broker, topics=("k8s4r/#", "k8s4r/robots/robot-1/tasks/dispatch", "k8s4r/robots/robot-1/response"))
    try:
        forged = {"taskUid": uid, "robotId": "robot-1", "state": "failed", "event": "Terminated", "seq": 1000,
                  "message": "forged", "exitCode": 1, "timestamp": "2026-11-26T06:00:00Z"}
        # On robot-1's topics: the broker refuses every one.
        thief.publish(f"k8s4r/robots/robot-1/tasks/{uid}/status", forged)
        thief.publish("k8s4r/robots/robot-1/register", {"robotId": "robot-1", "token": "x", "runningTasks": []})
        thief.publish("k8s4r/robots/robot-1/heartbeat", {"robotId": "robot-1", "runningTasks": []})
        thief.publish("k8s4r/robots/robot-1/presence", {"robotId": "robot-1", "online": False,
                                                        "timestamp": "2026-11-26T06:00:00Z"}, retain=True)
        # On the shared legacy topics, naming any robot: refused too (no legacy lines in the ACL).
        thief.publish("k8s4r/register", {"robotId": "robot-9", "token": "x", "runningTasks": []})
        thief.publish("k8s4r/heartbeat", {"robotId": "robot-1", "runningTasks": []})
        # On its own topics, naming robot-1: the broker lets them through, the bridge refuses and counts them.
        thief.publish("k8s4r/robots/robot-3/register", {"robotId": "robot-1", "token": "x", "runningTasks": []})
        thief.publish("k8s4r/robots/robot-3/heartbeat", {"robotId": "robot-1", "runningTasks": []})
        thief.publish(f"k8s4r/robots/robot-3/tasks/{uid}/status", {**forged, "robotId": "robot-3"})
        # The same client's messages reach the bridge in order: once the last is counted, the others were judged.
        # robot-3 has no Robot, so its heartbeat is refused by its topic alone, unread (UnknownRobot).
        wait_until(lambda: bridge.metric("k8s4r_bridge_messages_refused_total", reason="TopicMismatch") >= 1
                   and bridge.metric("k8s4r_bridge_messages_refused_total", reason="UnknownRobot") >= 1
                   and bridge.metric("k8s4r_bridge_messages_refused_total", reason="WrongRobot") >= 1, 10,
                   "the bridge's refusals")
        denied = [line for line in broker.log_text().splitlines() if "Denied PUBLISH from rogue-robot-3" in line]
        for topic in (f"k8s4r/robots/robot-1/tasks/{uid}/status", "k8s4r/robots/robot-1/register",
                      "k8s4r/robots/robot-1/heartbeat", "k8s4r/robots/robot-1/presence", "k8s4r/register",
                      "k8s4r/heartbeat"):
            assert any(f"'{topic}'" in line for line in denied), (topic, denied)
        # Nothing a user sees moved: the Task runs on and ends as robot-1 says; no robot-9; robot-1 stays connected.
        assert state_of(sim, "victim") == "running"
        assert get(sim, "robot", "robot-9") is None
        assert get(sim, "robot", "robot-1")["status"]["connected"] is True
        task = wait_state(sim, "victim", "completed", timeout=40)
        assert "real" in task["status"]["logs"] and task["status"].get("exitCode") == 0

        # Reading: robot-1's dispatches and answers never reach the thief, whatever it subscribed to.
        create_task(sim, "private", "echo mine")
        dispatch(sim, "private")
        wait_state(sim, "private", "completed", timeout=30)
        assert not [t for t, _, _ in thief.messages if t.startswith("k8s4r/robots/robot-1/")], thief.messages
        assert not [t for t, _, _ in thief.messages if t.startswith("k8s4r/robots/robot-2/")]
    finally:
        thief.close()


def test_a_client_without_a_robots_password_cannot_connect(broker):
    for username, password in (("robot-1", "guessed"), ("", None), ("robot-4", "unknown-user")):
        client = Observer(broker, topics=(), username=username, password=password)
        try:
            assert client.connect_rc == 5, (username, client.connect_rc)  # not authorised
        finally:
            client.close()


def test_an_agent_with_a_wrong_token_or_none_is_refused_and_says_so(tmp_path, broker):
    wrong = secure_agent(tmp_path, broker, "robot-3", token="not-its-token")
    anonymous = AgentProcess(broker, tmp_path / "work-robot-4", "robot-4")  # no credential at all
    for agent in (wrong, anonymous):
        agent.start()
        try:
            wait_until(lambda: agent.log_text().count("refused by the broker, reason code 13") >= 2, 30,
                       f"{agent.robot} refused twice")
            assert "bad user name or password" in agent.log_text() or "not authorized" in agent.log_text()
            assert agent.running()  # refused, retrying with backoff, not dead
        finally:
            agent.cleanup()
