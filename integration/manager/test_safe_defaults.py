"""What an anonymous client can do against the daemons' defaults (issue 29), on a broker that lets anyone in, as the
demo's does: the real broker, bridge, manager and agents, judged by what each task wrote and by the Robots.

With no approval or topic flag given, the manager approves a robot only by its Secret's token and the bridge takes
no register or heartbeat on Go K8s4r's shared topics: a flood of made-up robots gets no work, and a forged register
naming an approved robot changes nothing on it and disconnects nobody."""
import hashlib
import json

from conftest import Broker, Observer
from manager_support import (AgentProcess, BridgeProcess, apply, create_robot_secret, get, group, items,  # noqa: F401
                             job, manager_factory, robot_phase, sim, tasks_of_job, wait_job, wait_until)

FLOOD = 3000


def test_an_anonymous_flood_and_forged_registers_change_nothing_an_honest_job_needs(tmp_path, sim, manager_factory):
    plain = Broker(tmp_path / "anonymous-broker")
    bridge = BridgeProcess(tmp_path / "bridge", plain, sim, ["--heartbeat-write-interval", "2s",
                                                            "--dispatch-resend-after", "2s",
                                                            "--heartbeat-ack-interval", "500ms"]).start()
    manager_factory().start()
    agents, attacker = [], None
    try:
        for name in ("robot-a", "robot-b"):
            create_robot_secret(sim, name, f"token-{name}")
            agent = AgentProcess(plain, tmp_path / f"work-{name}", name,
                                 ["--token", f"token-{name}", "--disconnect-stop-after", "4s"])
            agents.append(agent.start())
        for name in ("robot-a", "robot-b"):
            wait_until(lambda: robot_phase(sim, name) == "Online", 30, f"{name} to be approved")
        before = get(sim, "robot", "robot-a")["status"]
        assert "neither a user name nor a certificate" in bridge.log_text()  # the anonymous broker, said

        # The honest Job is dispatched while the flood arrives: its dispatches must not wait behind it.
        apply(sim, job("honest", [group("g", 6, f"sleep 1; echo \"$K8S4R_TASK_NAME\" >> {tmp_path}/ran")]))
        attacker = Observer(plain, topics=("k8s4r/robots/robot-a/response",))
        for i in range(FLOOD):
            attacker.client.publish(f"k8s4r/robots/flood-{i}/register",
                                    json.dumps({"robotId": f"flood-{i}", "token": "guess", "runningTasks": []}), qos=0)
        # One message each, naming the approved robot-a: on the shared topic (legacy-topics is off), and on its
        # own topic with a token that is not its own (this broker checks no login).
        forged = {"robotId": "robot-a", "token": "not-robot-a", "runningTasks": [], "agentVersion": "forged",
                  "deviceInfo": {"hostname": "forged", "platform": {"os": "linux", "arch": "amd64"}}}
        attacker.publish("k8s4r/register", forged)
        attacker.publish("k8s4r/robots/robot-a/register", forged)
        attacker.publish("k8s4r/heartbeat", {"robotId": "robot-a", "token": "not-robot-a", "runningTasks": []})
        wait_until(lambda: bridge.metric("k8s4r_bridge_messages_refused_total", reason="TokenMismatch") >= 1, 30,
                   "the forged register on robot-a's own topic refused")
        # (The shared topics' messages do not even reach it: a bridge with legacy-topics off does not subscribe.)
        assert bridge.metric("k8s4r_bridge_messages_total", topic="heartbeat") > 0

        finished = wait_job(sim, "honest", "completed", 90)
        assert finished["status"]["succeededTasks"] == 6
        ran = (tmp_path / "ran").read_text().split()
        assert sorted(ran) == sorted(set(ran)) and len(ran) == 6, ran  # each task once
        assert {t["spec"]["targetRobot"] for t in tasks_of_job(sim, "honest")} <= {"robot-a", "robot-b"}

        robots = items(sim, "robot")
        approved = sorted(r["metadata"]["name"] for r in robots if r.get("status", {}).get("phase") == "Online")
        assert approved == ["robot-a", "robot-b"], approved
        after = get(sim, "robot", "robot-a")["status"]
        assert after["tokenDigest"] == before["tokenDigest"] == "sha256:" + hashlib.sha256(b"token-robot-a").hexdigest()
        assert after["deviceInfo"]["hostname"] == before["deviceInfo"]["hostname"] != "forged"
        assert after["agentVersion"] == before["agentVersion"] != "forged"
        assert after["phase"] == "Online"
        # Nobody was disconnected: each agent connected once.
        assert all(agent.log_text().count("connected to") == 1 for agent in agents)
        # Refusals are counted one by one and logged as summaries, not one line each.
        assert bridge.log_text().count("refused a register") < 50
    finally:
        if attacker:
            attacker.close()
        for agent in agents:
            agent.cleanup()
        bridge.stop()
        plain.stop()


def test_kubectl_refuses_a_job_the_manager_could_never_run_saying_why(sim):
    """What the manager would refuse anyway is refused where it enters, by the CRD, with the reason kubectl shows:
    a group of 100,000 tasks, two tasks of one name in a group (their Tasks would share a name), two groups of one
    name. Nothing is created."""
    def refused(document):
        result = sim.kubectl("apply", "-f", "-", input=json.dumps(document), check=False)
        assert result.returncode != 0, result.stdout
        return result.stderr

    huge = job("huge", [group("g", 100000, "true")])
    assert "spec.taskGroups[0].count" in refused(huge) and "10000" in refused(huge)
    twice = job("twice", [group("g", 1, "true")])
    twice["spec"]["taskGroups"][0]["tasks"].append(dict(twice["spec"]["taskGroups"][0]["tasks"][0]))
    message = refused(twice)
    assert "spec.taskGroups[0].tasks[1]" in message and 'Duplicate value: map[string]interface {}{"name":"work"}' \
        in message, message
    groups = job("groups", [group("g", 1, "true"), group("g", 2, "true")])
    assert 'spec.taskGroups[1]: Duplicate value: map[string]interface {}{"name":"g"}' in refused(groups)
    assert items(sim, "rjob") == []


def test_a_constraint_only_the_manager_can_judge_is_refused_on_the_jobs_own_status_and_event(sim, manager_factory):
    """A regexp that does not compile reaches the API (no schema can tell); the manager refuses the group, and the
    Job says so itself, not `failed: no tasks yet` with the reason only on its TaskGroup."""
    manager_factory().start()
    apply(sim, job("bad-regexp", [group("g", 1, "true", [{"lTarget": "${robot.name}", "operand": "regexp",
                                                          "rTarget": "(["}])]))
    failed = wait_job(sim, "bad-regexp", "failed", 30)
    description = failed["status"]["statusDescription"]
    assert description.startswith("task group g: invalid") and "not a regular expression" in description, description
    events = sim.kubectl("get", "events", "--field-selector", "involvedObject.name=bad-regexp", "-o", "json").stdout
    assert any(e["reason"] == "Failed" and "task group g: invalid" in e["message"]
               for e in json.loads(events)["items"]), events
