"""k8s4r-manager end to end: kubectl apply of Jobs, run by real agents through the real bridge and broker, the
manager deciding (robot approval and liveness, placement, rescheduling), judged with kubectl."""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import threading
import time
from datetime import datetime, timedelta, timezone

from conftest import Broker, FileServer, Observer
from manager_support import (BridgeProcess, apply, bridge, broker, create_robot_secret, get, group,  # noqa: F401
                             items, job, job_state, manager_factory, processes_marked,
                             robot_phase, robots, sim, tasks_of_job, wait_job, wait_until, zone_is)
from go_agent import GoK8s4rAgent  # noqa: E402 (integration/bridge, on the path manager_support sets)


def test_a_job_of_two_groups_runs_every_task_on_a_matching_robot(sim, robots, manager_factory):
    manager_factory().start()
    for name, zone in (("robot-a", "lab-a"), ("robot-b", "lab-a"), ("robot-c", "lab-b")):
        robots(name, f"zone={zone}")
    for name in ("robot-a", "robot-b", "robot-c"):
        wait_until(lambda: robot_phase(sim, name) == "Online", 20, f"{name} to be Online")
    apply(sim, job("two-groups", [
        group("left", 3, "echo left on $K8S4R_ROBOT_ID; sleep 1", [zone_is("lab-a")]),
        group("right", 2, "echo right; sleep 1", [zone_is("lab-b")]),
    ]))
    # What a script waits on, as for a Kubernetes Job: it returns once the Job is complete.
    waited = sim.kubectl("wait", "--for=condition=Complete", "rjob/two-groups", "--timeout=60s", timeout=70)
    assert "condition met" in waited.stdout, waited.stdout
    finished = wait_job(sim, "two-groups", "completed", 60)
    status = finished["status"]
    assert (status["totalTasks"], status["succeededTasks"], status["failedTasks"]) == (5, 5, 0), status
    tasks = tasks_of_job(sim, "two-groups")
    assert len(tasks) == 5
    for task in tasks:
        assert task["status"]["state"] == "completed", task["status"]
        robot = task["spec"]["targetRobot"]
        # Labelled with its robot's slot when placed: a bridge replica selects its Tasks by it.
        slot = json.loads(sim.kubectl("get", "robot", robot, "-o", "json").stdout)["metadata"]["labels"]
        assert task["metadata"]["labels"]["robot.k8s4r.io/slot"] == slot["robot.k8s4r.io/slot"], task["metadata"]
        if task["metadata"]["labels"]["taskgroup"] == "two-groups-left":
            assert robot in ("robot-a", "robot-b"), task["metadata"]["name"]
        else:
            assert robot == "robot-c", task["metadata"]["name"]
    # A group is spread over its robots: neither lab-a robot got all three.
    left = [t["spec"]["targetRobot"] for t in tasks if t["metadata"]["labels"]["taskgroup"] == "two-groups-left"]
    assert {left.count("robot-a"), left.count("robot-b")} == {1, 2}, left
    groups = {g["metadata"]["name"]: g["status"] for g in items(sim, "rtg")}
    assert groups["two-groups-left"]["state"] == "completed" and groups["two-groups-left"]["succeededTasks"] == 3
    assert groups["two-groups-right"]["state"] == "completed" and groups["two-groups-right"]["succeededTasks"] == 2
    # kubectl tells the story.
    described = sim.kubectl("describe", "rtask", tasks[0]["metadata"]["name"]).stdout
    assert "Scheduled" in described and "placed on robot" in described, described


def runs_in(directory):
    """What the tasks of a test wrote: one line per start and end, "<event> <task name> <robot> <ns since epoch>"."""
    lines = []
    for path in sorted(directory.glob("*.log")):
        lines += [line.split() for line in path.read_text().splitlines() if line.strip()]
    return lines


def recording(directory, seconds):
    return (f"echo start $K8S4R_TASK_NAME $K8S4R_ROBOT_ID $(date +%s%N) >> {directory}/$K8S4R_TASK_NAME.log; "
            f"sleep {seconds}; echo end $K8S4R_TASK_NAME $K8S4R_ROBOT_ID $(date +%s%N) >> {directory}/$K8S4R_TASK_NAME.log")


def test_a_robot_killed_mid_run_goes_offline_and_its_task_runs_elsewhere_once(sim, robots, manager_factory, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o777)
    manager = manager_factory().start()
    agents = {name: robots(name) for name in ("robot-a", "robot-b")}
    for name in agents:
        wait_until(lambda: robot_phase(sim, name) == "Online", 20, f"{name} to be Online")
    apply(sim, job("survivor", [group("g", 2, recording(runs, 6), reschedulePolicy={"delay": "1s"})]))
    wait_until(lambda: len([r for r in runs_in(runs) if r[0] == "start"]) == 2, 30, "both tasks to start")
    started = {r[1]: r[2] for r in runs_in(runs) if r[0] == "start"}
    assert sorted(started.values()) == ["robot-a", "robot-b"], started  # spread: one on each
    victim_task = next(name for name, robot in started.items() if robot == "robot-b")
    killed_at = time.time_ns()
    agents["robot-b"].cleanup()  # the agent and its task, as a robot losing power
    wait_until(lambda: robot_phase(sim, "robot-b") == "Offline", 20, "robot-b to go Offline")
    wait_until(lambda: get(sim, "rtask", victim_task)["status"].get("reason") == "Lost", 20, "the task to be lost")
    lost = get(sim, "rtask", victim_task)
    assert lost["status"]["state"] == "failed" and "robot-b" in lost["status"]["message"], lost["status"]
    finished = wait_job(sim, "survivor", "completed", 60)
    assert finished["status"]["succeededTasks"] == 2, finished["status"]
    replacement = get(sim, "rtask", victim_task + "-a1")
    assert replacement["spec"]["targetRobot"] == "robot-a"
    assert replacement["status"]["state"] == "completed"
    assert replacement["metadata"]["labels"]["robot.k8s4r.io/attempt"] == "1"
    # Once each: the victim started on robot-b and never ended; its replacement started only after the kill.
    events = runs_in(runs)
    assert [(e[0], e[2]) for e in events if e[1] == victim_task] == [("start", "robot-b")], events
    again = [e for e in events if e[1] == victim_task + "-a1"]
    assert [(e[0], e[2]) for e in again] == [("start", "robot-a"), ("end", "robot-a")], events
    assert int(again[0][3]) > killed_at
    assert manager.metric_sum("k8s4r_manager_lost_tasks_total") == 1
    assert "Rescheduled" in sim.kubectl("get", "events", "--field-selector",
                                        f"involvedObject.name={victim_task}").stdout


def test_an_agent_whose_work_dir_was_wiped_never_runs_its_running_task_a_second_time(
        sim, robots, manager_factory, tmp_path):
    """An operator reinstalls a robot's agent, its work dir with it, while a task runs under its shim. The new
    agent has no record of the task; when it registers the bridge sends the robot's running Task again, with the
    seq of the robot's last report on it, and the agent says its state was lost instead of starting a second copy:
    the Task fails StateLost, what the first run left is swept, and the replacement runs once."""
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o777)
    manager_factory().start()
    agent = robots("robot-w")
    wait_until(lambda: robot_phase(sim, "robot-w") == "Online", 20, "robot-w to be Online")
    line = f"$K8S4R_TASK_NAME $K8S4R_ROBOT_ID $(date +%s%N) >> {runs}/$K8S4R_TASK_NAME.log"
    script = f"case $K8S4R_TASK_NAME in *-a1) s=1;; *) s=300;; esac; echo start {line}; sleep $s; echo end {line}"
    apply(sim, job("wiped", [group("g", 1, script, reschedulePolicy={"delay": "1s"})]))
    wait_until(lambda: [r for r in runs_in(runs) if r[0] == "start"], 30, "the task to start")
    name = runs_in(runs)[0][1]
    wait_until(lambda: get(sim, "rtask", name)["status"].get("state") == "running", 20, "the Task to say running")
    agent.kill9()  # the agent only: the task runs on under its shim
    for entry in agent.work_dir.iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    agent.start()
    wait_until(lambda: get(sim, "rtask", name)["status"].get("reason") == "StateLost", 30, "the Task to be StateLost")
    lost = get(sim, "rtask", name)["status"]
    assert lost["state"] == "failed" and "state was lost" in lost["message"], lost
    wait_job(sim, "wiped", "completed", 60)
    events = runs_in(runs)
    assert [(e[0], e[2]) for e in events if e[1] == name] == [("start", "robot-w")], events
    assert [e[0] for e in events if e[1] == name + "-a1"] == ["start", "end"], events
    wait_until(lambda: not processes_marked(agent.work_dir), 20, "nothing of the first run to be left")


def test_a_task_that_always_fails_fails_its_job_after_its_attempts(sim, robots, manager_factory):
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    apply(sim, job("doomed", [group("g", 1, "echo trying; exit 3",
                                    restartPolicy={"attempts": 0, "mode": "fail"},
                                    reschedulePolicy={"attempts": 2, "interval": "1h", "delay": "1s"})]))
    waited = sim.kubectl("wait", "--for=condition=Failed", "rjob/doomed", "--timeout=60s", timeout=70)
    assert "condition met" in waited.stdout, waited.stdout
    failed = wait_job(sim, "doomed", "failed", 60)
    conditions = {c["type"]: c for c in failed["status"]["conditions"]}
    assert (conditions["Failed"]["status"], conditions["Complete"]["status"], conditions["Progressing"]["status"]) == \
        ("True", "False", "False"), conditions
    assert failed["status"]["observedGeneration"] == failed["metadata"]["generation"]
    group_conditions = {c["type"]: c["status"] for c in get(sim, "rtg", "doomed-g")["status"]["conditions"]}
    assert group_conditions == {"Progressing": "False", "Complete": "False", "Failed": "True"}, group_conditions
    tasks = sorted(tasks_of_job(sim, "doomed"), key=lambda t: t["metadata"]["name"])
    assert [t["metadata"]["name"] for t in tasks] == ["doomed-g-r0-work", "doomed-g-r0-work-a1", "doomed-g-r0-work-a2"]
    assert all(t["status"]["state"] == "failed" and t["status"].get("exitCode") == 3 for t in tasks), \
        [t["status"] for t in tasks]
    assert failed["status"]["failedTasks"] == 1 and failed["status"]["totalTasks"] == 1, failed["status"]
    events = sim.kubectl("get", "events", "--field-selector", "involvedObject.name=doomed-g-r0-work-a2").stdout
    assert "NotRescheduled" in events, events
    assert len(tasks_of_job(sim, "doomed")) == 3


def test_a_job_deleted_mid_run_leaves_no_task_group_or_process(sim, robots, manager_factory, tmp_path):
    manager_factory().start()
    agents = [robots("robot-a"), robots("robot-b")]
    for agent in agents:
        wait_until(lambda: robot_phase(sim, agent.robot) == "Online", 20, f"{agent.robot} to be Online")
    apply(sim, job("doomed-by-delete", [group("g", 3, "sleep 300")]))
    wait_until(lambda: [t.get("status", {}).get("state") for t in tasks_of_job(sim, "doomed-by-delete")]
               == ["running"] * 3, 30, "three tasks running")
    assert sum(len(processes_marked(a.work_dir)) for a in agents) >= 3
    sim.kubectl("delete", "rjob", "doomed-by-delete", "--wait=false")
    wait_until(lambda: not tasks_of_job(sim, "doomed-by-delete") and not items(sim, "rtg"), 30,
               "every TaskGroup and Task to be gone")
    wait_until(lambda: not any(processes_marked(a.work_dir) for a in agents), 20, "every task process to end")


def test_a_system_job_lands_on_each_matching_robot_including_one_that_joins_later(sim, robots, manager_factory):
    manager_factory().start()
    robots("robot-a", "zone=lab-a")
    robots("robot-b", "zone=lab-b")
    for name in ("robot-a", "robot-b"):
        wait_until(lambda: robot_phase(sim, name) == "Online", 20, f"{name} to be Online")
    apply(sim, job("everywhere", [group("g", 1, "sleep 300")], job_type="system", robotSelector={"zone": "lab-a"}))

    def placed():
        return sorted(t["spec"].get("targetRobot", "") for t in tasks_of_job(sim, "everywhere")
                      if t.get("status", {}).get("state") == "running")
    wait_until(lambda: placed() == ["robot-a"], 30, "the task on robot-a alone")
    robots("robot-c", "zone=lab-a")
    wait_until(lambda: placed() == ["robot-a", "robot-c"], 30, "a task on robot-c, which joined later")
    assert all(t["spec"]["targetRobot"] != "robot-b" for t in tasks_of_job(sim, "everywhere"))
    names = sorted(t["metadata"]["name"] for t in tasks_of_job(sim, "everywhere"))
    assert names == ["everywhere-g-robot-a-work", "everywhere-g-robot-c-work"], names


def test_an_unapproved_robot_gets_nothing(sim, robots, manager_factory):
    manager_factory().start()  # robots are approved by their Secrets' tokens by default
    for name, token in (("robot-a", "token-robot-a"), ("robot-c", "not-the-token")):
        sim.kubectl("create", "secret", "generic", f"k8s4r-robot-{name}", f"--from-literal=token={token}")
        sim.kubectl("label", "secret", f"k8s4r-robot-{name}", f"robot.k8s4r.io/robot-id={name}")
    for name in ("robot-a", "robot-b", "robot-c"):
        robots(name, secret=False)
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be approved")
    wait_until(lambda: robot_phase(sim, "robot-b") == "Pending", 20, "robot-b to wait for its Secret")
    wait_until(lambda: robot_phase(sim, "robot-c") == "Rejected", 20, "robot-c to be rejected")
    assert "k8s4r-robot-robot-b" in get(sim, "robot", "robot-b")["status"]["message"]
    apply(sim, job("only-approved", [group("g", 3, "sleep 1")]))
    wait_job(sim, "only-approved", "completed", 60)
    assert {t["spec"]["targetRobot"] for t in tasks_of_job(sim, "only-approved")} == {"robot-a"}
    # Approving robot-b later is one kubectl away.
    sim.kubectl("create", "secret", "generic", "k8s4r-robot-robot-b", "--from-literal=token=token-robot-b")
    sim.kubectl("label", "secret", "k8s4r-robot-robot-b", "robot.k8s4r.io/robot-id=robot-b")
    wait_until(lambda: robot_phase(sim, "robot-b") == "Online", 20, "robot-b to be approved")


def test_two_managers_never_both_act_and_killing_the_leader_hands_over(sim, robots, manager_factory):
    first = manager_factory(name="manager-1").start()
    wait_until(first.leading, 20, "manager-1 to lead")
    second = manager_factory(name="manager-2").start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    apply(sim, job("first", [group("g", 2, "sleep 1")]))
    wait_job(sim, "first", "completed", 60)
    assert not second.leading()
    assert second.metric_sum("k8s4r_manager_kube_requests_total") == 0  # the follower wrote nothing
    assert second.metric_sum("k8s4r_manager_reconciles_total") == 0
    lease = get(sim, "lease", "k8s4r-manager")
    assert lease["spec"]["holderIdentity"] == "manager-1"
    first.kill9()
    killed = time.monotonic()
    wait_until(second.leading, 20, "manager-2 to take over")
    assert time.monotonic() - killed < 4 + 2, "the follower took longer than a lease duration and a retry"
    assert get(sim, "lease", "k8s4r-manager")["spec"]["holderIdentity"] == "manager-2"
    apply(sim, job("second", [group("g", 2, "sleep 1")]))
    wait_job(sim, "second", "completed", 60)
    # A clean stop gives the Lease up at once.
    assert second.stop() == 0
    assert get(sim, "lease", "k8s4r-manager")["spec"]["holderIdentity"] == ""


def test_a_task_its_robot_stops_listing_is_lost_replaced_and_stopped_there(sim, broker, bridge, manager_factory):
    """A robot that forgets a running task (its disk wiped, say) says so only by leaving it out of its heartbeats:
    after --disconnect-grace of them the manager marks the Task lost and replaces it, and the bridge tells the
    robot to stop the old one. The robot is scripted on the wire, as k8s4r-agent speaks, so it can forget."""
    manager_factory().start()
    broker.add_robot("robot-s", "t")
    create_robot_secret(sim, "robot-s", "t")
    robot = Observer(broker, topics=("k8s4r/robots/robot-s/#",), client_id="robot-s", username="robot-s",
                     password="t")
    running = []  # what the scripted robot lists in its heartbeats
    stop = threading.Event()

    def heartbeats():
        while not stop.wait(0.3):
            robot.publish("k8s4r/robots/robot-s/heartbeat",
                          {"robotId": "robot-s", "token": "t", "runningTasks": list(running)})
    try:
        robot.publish("k8s4r/robots/robot-s/register", {"robotId": "robot-s", "token": "t",
                                                        "agentVersion": "scripted", "runningTasks": []})
        robot.wait_for("k8s4r/robots/robot-s/response", lambda m: m["success"])
        beating = threading.Thread(target=heartbeats, daemon=True)
        beating.start()
        wait_until(lambda: robot_phase(sim, "robot-s") == "Online", 20, "robot-s to be Online")
        apply(sim, job("forgotten", [group("g", 1, "sleep 300", reschedulePolicy={"delay": "1s"})]))
        dispatch_topic = "k8s4r/robots/robot-s/tasks/dispatch"
        sent = robot.wait_for(dispatch_topic, lambda m: m["action"] == "create", 30)
        uid, name = sent["task"]["metadata"]["uid"], sent["task"]["metadata"]["name"]
        robot.publish(f"k8s4r/robots/robot-s/tasks/{uid}/status",
                      {"taskUid": uid, "robotId": "robot-s", "state": "running", "event": "Started", "seq": 1,
                       "startedAt": "2026-11-26T00:00:00Z", "restartCount": 0})
        running.append(uid)
        wait_until(lambda: get(sim, "rtask", name)["status"].get("state") == "running", 20, "the task to run")
        running.clear()  # forgotten
        forgot_at = time.monotonic()
        wait_until(lambda: get(sim, "rtask", name)["status"].get("reason") == "Lost", 30, "the task to be lost")
        # Not before --disconnect-grace (3 s) of heartbeats without it, as their times (to the second) tell.
        assert time.monotonic() - forgot_at >= 2
        lost = get(sim, "rtask", name)["status"]
        assert lost["state"] == "failed" and "no longer runs it" in lost["message"], lost
        # The bridge tells the robot to stop it, should it still run it; the replacement is dispatched.
        robot.wait_for(dispatch_topic, lambda m: m["action"] == "delete" and m["task"]["metadata"]["uid"] == uid, 20)
        again = robot.wait_for(dispatch_topic, lambda m: m["action"] == "create" and
                               m["task"]["metadata"]["name"] == name + "-a1", 30)
        assert again["task"]["metadata"]["uid"] != uid
    finally:
        stop.set()
        robot.close()


class ScriptedRobot:
    """A robot scripted on the wire, as k8s4r-agent speaks, heartbeating every 0.3 s whatever `beat` holds: the
    heartbeat it would have made at some moment, which the test may keep stale, as a broker's queue or a stalled
    bridge delivers heartbeats made long before."""

    def __init__(self, sim, broker, name):
        broker.add_robot(name, "t")
        create_robot_secret(sim, name, "t")
        self.name = name
        self.wire = Observer(broker, topics=(f"k8s4r/robots/{name}/#",), client_id=name, username=name, password="t")
        self.beat = {"robotId": name, "runningTasks": [], "reportSeq": 0}
        self.echo_dispatches = False  # echo the newest dispatch taken, as k8s4r-agent does
        self._stop = threading.Event()
        self.wire.publish(f"k8s4r/robots/{name}/register", {"robotId": name, "token": "t", "agentVersion": "scripted",
                                                            "runningTasks": [], "reportSeq": 0})
        self.wire.wait_for(f"k8s4r/robots/{name}/response", lambda m: m["success"])
        self._thread = threading.Thread(target=self._heartbeats, daemon=True)
        self._thread.start()
        wait_until(lambda: robot_phase(sim, name) == "Online", 20, f"{name} to be Online")

    def _heartbeats(self):
        while not self._stop.wait(0.3):
            beat = dict(self.beat)
            if self.echo_dispatches:
                # Those that carry a time (a delete, say, may not): one without must not end this thread,
                # which would silently stop the robot's heartbeats.
                sent = [m["timestamp"] for m in self.wire.json_on(f"k8s4r/robots/{self.name}/tasks/dispatch")
                        if "timestamp" in m]
                if sent:
                    beat["newestDispatch"] = max(sent, key=instant)
            self.wire.publish(f"k8s4r/robots/{self.name}/heartbeat", beat)

    def next_create(self, timeout=30):
        return self.wire.wait_for(f"k8s4r/robots/{self.name}/tasks/dispatch", lambda m: m["action"] == "create",
                                  timeout)

    def report_running(self, uid, seq):
        self.wire.publish(f"k8s4r/robots/{self.name}/tasks/{uid}/status",
                          {"taskUid": uid, "robotId": self.name, "state": "running", "event": "Started", "seq": seq,
                           "startedAt": "2026-11-26T00:00:00Z", "restartCount": 0})

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.wire.close()


def instant(rfc3339):
    """An RFC 3339 time as a datetime, whatever its fraction's digits."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))


def still_for(seconds, condition):
    """Whether `condition` holds at every look for `seconds` (the side-effect check of a thing that must not
    happen: here, a manager taking a task for lost)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not condition():
            return False
        time.sleep(0.2)
    return True


def test_a_heartbeat_made_before_a_task_started_never_makes_it_lost_however_late_it_arrives(
        sim, broker, bridge, manager_factory):
    """A heartbeat can reach the API long after its robot made it (held in the broker, or in a stopped bridge),
    after the report that a task started: judged by when it was written it leaves the task out, and the task ran
    twice (the chaos suite caught it). The robot says what it had seen (reportSeq), so such a heartbeat says
    nothing of the task, for three times --disconnect-grace; one made after the start that leaves it out does."""
    manager_factory().start()
    robot = ScriptedRobot(sim, broker, "robot-l")
    try:
        apply(sim, job("late", [group("g", 1, "sleep 300", reschedulePolicy={"delay": "1s"})]))
        sent = robot.next_create()
        uid, name = sent["task"]["metadata"]["uid"], sent["task"]["metadata"]["name"]
        robot.report_running(uid, seq=1)
        wait_until(lambda: get(sim, "rtask", name)["status"].get("state") == "running", 20, "the task to run")
        # Heartbeats made before the start keep arriving: reportSeq 0 < the running report's 1.
        assert still_for(9, lambda: get(sim, "rtask", name)["status"].get("state") == "running"), \
            get(sim, "rtask", name)["status"]
        assert [t["metadata"]["name"] for t in tasks_of_job(sim, "late")] == [name], "no replacement"
        # One made after it, without it: the robot has lost it.
        robot.beat = {"robotId": "robot-l", "runningTasks": [], "reportSeq": 1}
        wait_until(lambda: get(sim, "rtask", name)["status"].get("reason") == "Lost", 20, "the task to be lost")
    finally:
        robot.close()


def test_a_dispatch_is_lost_only_by_a_heartbeat_made_once_the_robot_had_it(sim, broker, bridge, manager_factory):
    """A dispatched Task never reported is lost after --dispatch-timeout only when its robot has shown it does not
    have it: by a heartbeat that echoes that dispatch's timestamp (newestDispatch), not by one merely written later.
    """
    manager_factory().start()
    robot = ScriptedRobot(sim, broker, "robot-d")
    try:
        # The newest dispatch it took was stamped by a clock ahead of this bridge's (another replica, or this
        # one before its clock stepped back): this dispatch is stamped above it all the same.
        # An hour ahead (the bridge follows a claim up to a day ahead; further is a wrong clock or a lie).
        ahead = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        robot.beat["newestDispatch"] = ahead
        wait_until(lambda: get(sim, "robot", "robot-d")["status"].get("newestDispatch") == ahead,
                   20, "the Robot to hold the robot's newest dispatch")
        apply(sim, job("unheard", [group("g", 1, "sleep 300", reschedulePolicy={"delay": "1s"})]))
        sent = robot.next_create()
        name = sent["task"]["metadata"]["name"]
        assert instant(sent["timestamp"]) > instant(ahead), (sent["timestamp"], ahead)
        # Each send (the bridge here resends every 2 s) carries its time, which the Task records.
        wait_until(lambda: instant(get(sim, "rtask", name)["status"].get("dispatchedAt", "1970-01-01T00:00:00Z"))
                   == instant(sent["timestamp"]), 10, "dispatchedAt to be the first send's timestamp")
        # Past the 10 s dispatch timeout, heartbeats made before the dispatch came say nothing.
        assert still_for(13, lambda: get(sim, "rtask", name)["status"].get("state") == "dispatching"), \
            get(sim, "rtask", name)["status"]
        robot.echo_dispatches = True  # made once it had taken it, and without it
        wait_until(lambda: get(sim, "rtask", name)["status"].get("reason") == "Lost", 20, "the task to be lost")
        assert "did not start it" in get(sim, "rtask", name)["status"]["message"]
    finally:
        robot.close()


def test_a_go_k8s4r_robot_runs_a_jobs_tasks_and_is_never_taken_for_losing_them(sim, tmp_path, manager_factory):
    """A robot running the Go K8s4r agent (go_agent.py: no presence, `runningTasks: null`, final state only from its
    5 s monitor) runs a Go K8s4r-style Job through the manager. Its heartbeats say nothing of its tasks, which must
    read as "not said", never "none": its tasks outlive --disconnect-grace and are not lost. The Go agent logs in to
    no broker and knows no TLS: a plain broker, as its fleets run today."""
    manager_factory().start()
    plain = Broker(tmp_path / "plain-broker")
    bridge = BridgeProcess(tmp_path / "plain-bridge", plain, sim, ["--legacy-topics", "--heartbeat-write-interval", "2s",
                                                                  "--dispatch-resend-after", "2s"]).start()
    create_robot_secret(sim, "go-robot", "legacy-token")
    go = GoK8s4rAgent(plain, "go-robot", "legacy-token").start()
    try:
        wait_until(lambda: robot_phase(sim, "go-robot") == "Online", 20, "the Go robot to be Online")
        apply(sim, job("legacy", [group("g", 2, "sleep 6", [{"lTarget": "${robot.name}", "operand": "=",
                                                              "rTarget": "go-robot"}])]))
        finished = wait_job(sim, "legacy", "completed", 60)
        assert finished["status"]["succeededTasks"] == 2
        tasks = tasks_of_job(sim, "legacy")
        assert sorted(t["metadata"]["name"] for t in tasks) == ["legacy-g-r0-work", "legacy-g-r1-work"]
        assert all(go.starts(t["metadata"]["uid"]) == 1 for t in tasks)
        assert "runningTasks" not in get(sim, "robot", "go-robot")["status"]
    finally:
        go.stop()
        bridge.stop()
        plain.stop()


def test_a_task_no_robot_fits_waits_pending_saying_why_and_runs_once_one_does(sim, robots, manager_factory):
    manager_factory().start()
    robots("robot-a", "zone=lab-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    apply(sim, job("patient", [group("g", 1, "echo at last", [zone_is("lab-z")])]))

    def status():
        tasks = tasks_of_job(sim, "patient")
        return tasks[0].get("status", {}) if tasks else {}
    wait_until(lambda: status().get("state") == "pending", 20, "the task to wait")
    assert status()["message"] == "no robot fits: 1 robot: 1 does not satisfy ${meta.zone} = lab-z", status()
    events = sim.kubectl("get", "events", "--field-selector", "involvedObject.name=patient-g-r0-work").stdout
    assert "FailedScheduling" in events, events
    robots("robot-z", "zone=lab-z")  # a robot that fits joins
    finished = wait_job(sim, "patient", "completed", 60)
    assert finished["status"]["succeededTasks"] == 1
    assert tasks_of_job(sim, "patient")[0]["spec"]["targetRobot"] == "robot-z"


TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"


def kubectl_k8s4r(sim, *args):
    """`kubectl k8s4r ...` as an operator runs it: kubectl finds the plugin (tools/kubectl-k8s4r) on PATH."""
    env = dict(os.environ, PATH=f"{TOOLS}:{os.environ['PATH']}", KUBECONFIG=str(sim.kubeconfig))
    result = subprocess.run(["kubectl", "k8s4r", *args], env=env, capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def test_a_cordoned_robot_gets_no_new_task_while_its_running_one_completes(sim, robots, manager_factory, tmp_path):
    """kubectl k8s4r cordon: the robot's running tasks go on to their end, a system Job's among them (its replica
    on the robot is kept, not deleted); a new Job's task waits, saying the only robot is cordoned, and runs on a
    robot that joins; uncordoned, the robot takes work again. Judged by what each task wrote."""
    ran = tmp_path / "ran"
    ran.mkdir(mode=0o777)
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    apply(sim, job("before", [group("g", 1, recording(ran, 3))]))
    apply(sim, job("watch", [group("g", 1, recording(ran, 4))], job_type="system"))
    wait_until(lambda: len(runs_in(ran)) == 2, 30, "the first tasks to start")
    assert kubectl_k8s4r(sim, "cordon", "robot-a").strip() == "robot.robot.k8s4r.io/robot-a cordoned"
    header, row = sim.kubectl("get", "rb", "robot-a").stdout.splitlines()
    assert row[header.index("CORDONED"):].split()[0] == "true", (header, row)  # kubectl aligns the columns

    apply(sim, job("after", [group("g", 1, recording(ran, 0))]))

    def waiting():
        tasks = tasks_of_job(sim, "after")
        return tasks and tasks[0].get("status", {}).get("message")
    assert wait_until(waiting, 20, "the new task to wait") == \
        "no robot fits: 1 robot: 1 is cordoned (spec.unschedulable)"
    # The Job says why too, in its Progressing condition (what `kubectl wait` and dashboards read).
    def job_says():
        conditions = ((get(sim, "rjob", "after") or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Progressing" and c["reason"] == "Unschedulable"), None)
    progressing = wait_until(job_says, 20, "the Job to say why its task waits")
    assert progressing["message"].endswith(
        "task group g: 1 waiting to be placed: no robot fits: 1 robot: 1 is cordoned (spec.unschedulable)"), progressing
    wait_job(sim, "before", "completed", 30)
    assert tasks_of_job(sim, "after")[0]["status"]["state"] == "pending"
    robots("robot-b")
    wait_job(sim, "after", "completed", 60)
    wait_until(lambda: ((get(sim, "rtask", "watch-g-robot-a-work") or {}).get("status") or {}).get("state") ==
               "completed", 30, "the system Job's task on the cordoned robot to complete (kept, not deleted)")
    runs = [(event, task, robot) for event, task, robot, _ in runs_in(ran)]
    assert [run for run in runs if not run[1].startswith("watch-g-robot-b")] == [
        ("start", "after-g-r0-work", "robot-b"), ("end", "after-g-r0-work", "robot-b"),
        ("start", "before-g-r0-work", "robot-a"), ("end", "before-g-r0-work", "robot-a"),
        ("start", "watch-g-robot-a-work", "robot-a"), ("end", "watch-g-robot-a-work", "robot-a")]

    assert get(sim, "robot", "robot-a")["status"]["cordonedAt"]  # since when, with an Event
    assert [e["reason"] for e in events_of(sim, "robot-a") if e["reason"] in ("Cordoned", "Uncordoned")] == \
        ["Cordoned"]
    assert kubectl_k8s4r(sim, "uncordon", "robot-a").strip() == "robot.robot.k8s4r.io/robot-a uncordoned"
    assert "unschedulable" not in get(sim, "robot", "robot-a")["spec"]
    wait_until(lambda: "cordonedAt" not in get(sim, "robot", "robot-a")["status"], 20, "cordonedAt to go")
    assert "Uncordoned" in [e["reason"] for e in events_of(sim, "robot-a")]
    apply(sim, job("again", [group("g", 2, recording(ran, 0))]))
    wait_job(sim, "again", "completed", 60)
    assert sorted(t["spec"]["targetRobot"] for t in tasks_of_job(sim, "again")) == ["robot-a", "robot-b"]


def stoppable(directory, on_a, elsewhere, linger=0):
    """A task that records its start, its end and a SIGTERM (as "stop"), sleeping `on_a` seconds on robot-a and
    `elsewhere` on any other robot, and `linger` seconds after a SIGTERM before it exits."""
    log = f"{directory}/$K8S4R_TASK_NAME.log"
    stamp = "$K8S4R_TASK_NAME $K8S4R_ROBOT_ID $(date +%s%N)"
    return (f"echo start {stamp} >> {log}; trap 'echo stop {stamp} >> {log}; sleep {linger}; exit 143' TERM; "
            f"if [ $K8S4R_ROBOT_ID = robot-a ]; then s={on_a}; else s={elsewhere}; fi; "
            f"sleep $s & wait $!; echo end {stamp} >> {log}")


def test_a_drained_robot_ends_with_no_task_and_its_work_elsewhere(sim, robots, manager_factory, tmp_path):
    """kubectl k8s4r drain, judged by what each task wrote: a service's task is stopped at once and runs again on
    the other robot only after it stopped; a batch task that ends before the deadline ends there; one still running
    at the deadline is stopped then and runs elsewhere; a system job's task stops last. The plugin returns once the
    robot is drained, and the Robot, its Events and the Tasks say what happened."""
    ran = tmp_path / "ran"
    ran.mkdir(mode=0o777)
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    apply(sim, job("svc", [group("g", 1, stoppable(ran, 600, 600))], job_type="service"))
    apply(sim, job("short", [group("g", 1, stoppable(ran, 4, 1))]))
    apply(sim, job("long", [group("g", 1, stoppable(ran, 600, 1, linger=2))]))
    apply(sim, job("sys", [group("g", 1, stoppable(ran, 600, 600))], job_type="system"))
    wait_until(lambda: len(runs_in(ran)) == 4, 30, "the four tasks to start on robot-a")
    robots("robot-b")
    wait_until(lambda: robot_phase(sim, "robot-b") == "Online", 20, "robot-b to be Online")

    drained_from = time.time_ns()
    out = kubectl_k8s4r(sim, "drain", "robot-a", "--deadline=8s", "--timeout=90s")
    lines = out.splitlines()
    assert lines[0] == "robot.robot.k8s4r.io/robot-a cordoned" and lines[-1] == "robot.robot.k8s4r.io/robot-a drained", out
    assert "left:" in lines[1], out  # it said what it waited for

    robot = get(sim, "robot", "robot-a")
    assert robot["status"]["drain"]["state"] == "Drained" and robot["status"]["drain"]["remaining"] == 0, robot
    on_a = [t for t in items(sim, "rtask") if t["spec"].get("targetRobot") == "robot-a"]
    assert all(t["status"]["state"] in ("completed", "failed") for t in on_a), [t["status"] for t in on_a]
    header, row = sim.kubectl("get", "rb", "robot-a").stdout.splitlines()
    assert row[header.index("DRAIN"):].split()[0] == "Drained", (header, row)
    reasons = [e["reason"] for e in events_of(sim, "robot-a")]
    assert "Draining" in reasons and "Drained" in reasons, reasons

    runs = {}  # (task, robot) -> {event: time}
    for event, task, robot_id, at in runs_in(ran):
        assert event not in runs.setdefault((task, robot_id), {}), f"{task} on {robot_id}: {event} twice"
        runs[(task, robot_id)][event] = int(at)
    # The service: stopped at once (no deadline), and started on robot-b only after it stopped on robot-a.
    svc_a = runs[("svc-g-r0-work", "robot-a")]
    assert "stop" in svc_a and svc_a["stop"] - drained_from < 6e9, svc_a
    wait_until(lambda: ("svc-g-r0-work-a1", "robot-b") in {(r[1], r[2]) for r in runs_in(ran)}, 30,
               "the service to run on robot-b")
    svc_b = [int(r[3]) for r in runs_in(ran) if r[:3] == ["start", "svc-g-r0-work-a1", "robot-b"]]
    # Moved at once (a service's reschedulePolicy would wait 30s), and never two at a time.
    assert 0 < svc_b[0] - svc_a["stop"] < 10e9, (svc_b, svc_a)
    # The short batch task ended on robot-a, before the deadline, and was not run again.
    assert set(runs[("short-g-r0-work", "robot-a")]) == {"start", "end"}
    assert not [key for key in runs if key[0].startswith("short-") and key[1] != "robot-a"], runs
    wait_job(sim, "short", "completed", 10)
    # The long one was stopped at the deadline, then ran on robot-b.
    long_a = runs[("long-g-r0-work", "robot-a")]
    assert set(long_a) == {"start", "stop"} and long_a["stop"] - drained_from >= 7e9, long_a
    wait_job(sim, "long", "completed", 30)
    long_b = [(t["spec"]["targetRobot"], t["status"]["state"]) for t in tasks_of_job(sim, "long")]
    assert sorted(long_b) == [("robot-a", "failed"), ("robot-b", "completed")], long_b
    # The system job's task on robot-a stopped last: once the long one had exited, 2 s after its SIGTERM.
    sys_a = runs[("sys-g-robot-a-work", "robot-a")]
    assert set(sys_a) == {"start", "stop"} and sys_a["stop"] - long_a["stop"] >= 2e9, (sys_a, long_a)

    # What kubectl says is what happened: a Task stopped on robot-a is failed, names why, and nothing else failed.
    for task in items(sim, "rtask"):
        name, robot_id = task["metadata"]["name"], task["spec"].get("targetRobot")
        stopped = "stop" in runs.get((name, robot_id), {})
        assert (task["status"]["state"] == "failed") == stopped, (name, task["status"])
        condition = [c for c in task["status"].get("conditions", []) if c["type"] == "DisruptionTarget"]
        assert bool(condition) == stopped, (name, condition)
        if stopped:
            assert condition[0]["reason"] == "Drained" and "robot-a" in condition[0]["message"], condition

    # Uncordoned, the drain ends and the robot takes its system job's task again.
    assert kubectl_k8s4r(sim, "uncordon", "robot-a").strip() == "robot.robot.k8s4r.io/robot-a uncordoned"
    wait_until(lambda: "drain" not in (get(sim, "robot", "robot-a").get("status") or {}), 20,
               "status.drain to be removed")
    wait_until(lambda: ("sys-g-robot-a-work-a1", "robot-a") in {(r[1], r[2]) for r in runs_in(ran)}, 30,
               "the system job's task to run on robot-a again")


def test_a_drain_through_a_bridge_and_a_manager_killed_runs_nothing_twice(sim, robots, bridge, manager_factory,
                                                                        tmp_path):
    """kill -9 of the bridge while a drain is being asked, and of the manager before its deadline: the drain still
    empties the robot, the service's task starts on robot-b only after it stopped on robot-a, the batch task is
    stopped no sooner than the deadline counted from when the first manager saw the drain, and every Task that
    says failed is one that was stopped (judged by what each task wrote)."""
    ran = tmp_path / "ran"
    ran.mkdir(mode=0o777)
    manager = manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    apply(sim, job("svc", [group("g", 1, stoppable(ran, 600, 600))], job_type="service"))
    apply(sim, job("long", [group("g", 1, stoppable(ran, 600, 1))]))
    wait_until(lambda: len(runs_in(ran)) == 2, 30, "both tasks to start on robot-a")
    robots("robot-b")
    wait_until(lambda: robot_phase(sim, "robot-b") == "Online", 20, "robot-b to be Online")

    bridge.kill9()
    kubectl_k8s4r(sim, "drain", "robot-a", "--deadline=8s", "--no-wait")

    def asked(name):
        conditions = (get(sim, "rtask", name).get("status") or {}).get("conditions") or []
        return any(c["type"] == "DisruptionTarget" for c in conditions)
    wait_until(lambda: asked("svc-g-r0-work"), 20, "the manager to ask the service's task to stop")
    bridge.start()  # within the agents' 4 s without word
    started = get(sim, "robot", "robot-a")["status"]["drain"]["startedAt"]
    manager.kill9()
    manager_factory(name="manager-2").start()
    out = kubectl_k8s4r(sim, "drain", "robot-a", "--deadline=8s", "--timeout=90s")  # the same drain: waits for it
    assert out.splitlines()[-1] == "robot.robot.k8s4r.io/robot-a drained", out
    assert get(sim, "robot", "robot-a")["status"]["drain"]["startedAt"] == started  # kept across the restart

    runs = {}
    for event, task, robot_id, at in runs_in(ran):
        assert event not in runs.setdefault((task, robot_id), {}), f"{task} on {robot_id}: {event} twice"
        runs[(task, robot_id)][event] = int(at)
    svc_a = runs[("svc-g-r0-work", "robot-a")]
    wait_until(lambda: ("svc-g-r0-work-a1", "robot-b") in {(r[1], r[2]) for r in runs_in(ran)}, 30,
               "the service to run on robot-b")
    svc_b = [int(r[3]) for r in runs_in(ran) if r[:3] == ["start", "svc-g-r0-work-a1", "robot-b"]]
    assert "stop" in svc_a and svc_b[0] > svc_a["stop"], (svc_a, svc_b)
    deadline_ns = (datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() + 8) * 1e9
    long_a = runs[("long-g-r0-work", "robot-a")]
    assert set(long_a) == {"start", "stop"} and long_a["stop"] >= deadline_ns - 0.5e9, (long_a, started)
    wait_job(sim, "long", "completed", 30)
    for task in items(sim, "rtask"):
        name, robot_id = task["metadata"]["name"], task["spec"].get("targetRobot")
        stopped = "stop" in runs.get((name, robot_id), {})
        assert (task["status"]["state"] == "failed") == stopped, (name, task["status"])


def intervals(directory):
    """(task, robot, start ns, end ns) of each run that ended, from what the tasks wrote."""
    started, out = {}, []
    for event, task, robot_id, at in runs_in(directory):
        if event == "start":
            started[(task, robot_id)] = int(at)
        elif event == "end":
            out.append((task, robot_id, started[(task, robot_id)], int(at)))
    return out


def most_at_once(spans):
    """The most spans (start, end) open at one time."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1]))
    most = open_now = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def test_a_rollout_never_has_more_in_flight_than_it_allows_nor_more_per_site(sim, robots, manager_factory, tmp_path):
    """A Job of 20 tasks rolled out at most 2 at a time and at most 1 per site, over two sites of two robots each:
    judged by what each task wrote (when it started and ended, where), never more than 2 ran at once, never 2 in
    one site, and all 20 ran once."""
    ran = tmp_path / "ran"
    ran.mkdir(mode=0o777)
    manager_factory().start()
    sites = {"robot-a": "north", "robot-b": "north", "robot-c": "south", "robot-d": "south"}
    for name, site in sites.items():
        robots(name, f"site={site}")
    for name in sites:
        wait_until(lambda: robot_phase(sim, name) == "Online", 20, f"{name} to be Online")
    apply(sim, job("wave", [group("g", 20, recording(ran, 1))],
                   rollout={"maxInFlight": 2, "perLabel": {"label": "site", "maxInFlight": 1}}))
    wait_until(lambda: "rollout:" in ((get(sim, "rtg", "wave-g") or {}).get("status") or {}).get(
        "statusDescription", ""), 30, "the group to say its rollout holds tasks back")
    wait_job(sim, "wave", "completed", 180)
    spans = intervals(ran)
    assert sorted(task for task, _, _, _ in spans) == sorted(f"wave-g-r{i}-work" for i in range(20)), spans
    assert most_at_once([(start, end) for _, _, start, end in spans]) == 2, spans  # the limit, reached
    for site in ("north", "south"):
        in_site = [(start, end) for _, robot_id, start, end in spans if sites[robot_id] == site]
        assert in_site and most_at_once(in_site) == 1, (site, spans)


def test_a_failing_rollout_aborts_at_its_threshold_and_the_rest_never_runs(sim, robots, manager_factory, tmp_path):
    """Tasks that fail, rolled out one at a time, abort the rollout once 3 ran and at least half failed: exactly 3
    ran (judged by what they wrote), the Job fails saying why (condition Failed, reason RolloutAborted), an Event
    says so, and no other Task is ever made."""
    ran = tmp_path / "ran"
    ran.mkdir(mode=0o777)
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    failing = f"echo ran $K8S4R_TASK_NAME >> {ran}/runs; exit 1"
    apply(sim, job("risky", [group("g", 10, failing, reschedulePolicy={"attempts": 0})],
                   rollout={"maxInFlight": 1,
                            "abortCriteria": [{"failureType": "Any", "thresholdPercentage": 50, "minExecuted": 3}]}))
    finished = wait_job(sim, "risky", "failed", 90)
    assert (ran / "runs").read_text().splitlines() == [f"ran risky-g-r{i}-work" for i in range(3)]
    failed = next(c for c in finished["status"]["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "RolloutAborted", failed
    assert "rollout aborted: 3 of 3 executed failed, at least 50% of at least 3" in failed["message"], failed
    assert len(tasks_of_job(sim, "risky")) == 3
    reasons = [e["reason"] for e in events_of(sim, "risky-g")]
    assert "RolloutAborted" in reasons, reasons
    rollout = get(sim, "rtg", "risky-g")["status"]["rollout"]
    assert rollout["state"] == "Aborted" and rollout["executed"] == 3, rollout


def test_a_rollout_paused_starts_nothing_resumed_goes_on_and_aborted_cancels_what_waits(sim, robots, manager_factory,
                                                                                      tmp_path):
    """kubectl k8s4r rollout pause|resume|abort: paused, the task running ends and nothing starts after it;
    resumed, the next starts; aborted, the Task made and not yet started is cancelled (it never runs), none is made
    after it, and the Job fails saying it was aborted by hand."""
    ran = tmp_path / "ran"
    ran.mkdir(mode=0o777)
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    gate = tmp_path / "gate"  # the second task waits for it, so it is still running when the rollout is aborted
    script = (f"echo start $K8S4R_TASK_NAME >> {ran}/runs; "
              f"case $K8S4R_TASK_NAME in *-r1-*) while [ ! -e {gate} ]; do sleep 0.1; done;; *) sleep 1;; esac; "
              f"echo end $K8S4R_TASK_NAME >> {ran}/runs")
    apply(sim, job("slow", [group("g", 6, script)], rollout={"maxInFlight": 1}))
    wait_until(lambda: (ran / "runs").exists(), 30, "the first task to start")
    assert kubectl_k8s4r(sim, "rollout", "pause", "slow").strip() == "job.robot.k8s4r.io/slow rollout paused"

    def group_says():
        return ((get(sim, "rtg", "slow-g") or {}).get("status") or {}).get("statusDescription", "")
    wait_until(lambda: group_says() == "1 succeeded of 1 task; rollout paused: 5 waiting", 30,
               "the paused group to have its first task done and the rest waiting")
    assert len(tasks_of_job(sim, "slow")) == 1  # nothing made while paused
    paused = next(c for c in get(sim, "rjob", "slow")["status"]["conditions"] if c["type"] == "Progressing")
    assert paused["reason"] == "RolloutPaused", paused

    assert kubectl_k8s4r(sim, "rollout", "resume", "slow").strip() == "job.robot.k8s4r.io/slow rollout resumed"
    wait_until(lambda: "start slow-g-r1-work" in (ran / "runs").read_text(), 30, "the second task to start")
    apply(sim, job("slow", [group("g", 6, script)], rollout={"maxInFlight": 2}))  # room for a third, made now
    wait_until(lambda: len(tasks_of_job(sim, "slow")) == 3, 30, "a third Task to be made")
    assert kubectl_k8s4r(sim, "rollout", "abort", "slow").strip() == "job.robot.k8s4r.io/slow rollout aborted"
    gate.touch()
    finished = wait_job(sim, "slow", "failed", 60)
    runs = (ran / "runs").read_text().splitlines()
    assert "end slow-g-r1-work" in runs  # the running one went on to its end
    third = get(sim, "rtask", "slow-g-r2-work")
    started_third = "start slow-g-r2-work" in runs
    # The third was cancelled, or, had it started before the abort reached it, ran to its end: what its Task
    # says is what happened either way.
    assert (third["status"]["state"] == "completed") == started_third, (third["status"], runs)
    assert len(tasks_of_job(sim, "slow")) == 3 and len(runs) <= 6, runs
    failed = next(c for c in finished["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "RolloutAborted" and "aborted by hand" in failed["message"], failed


def standalone_task(name, robot, script):
    return {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"name": name, "driver": "exec", "targetRobot": robot,
                     "config": {"execConfig": {"command": "/bin/sh", "args": ["-c", script]}}}}


def events_of(sim, name):
    return [e for e in items(sim, "events") if e["involvedObject"].get("name") == name]


def test_a_task_of_its_own_waits_for_its_robot_saying_so_and_runs_once_it_comes(sim, robots, manager_factory,
                                                                               tmp_path):
    """kubectl apply of a Task pinned to a robot (examples/task.yaml) runs it there; one pinned to a robot that does
    not exist waits pending, naming the robot, with a Warning Event, and runs once that robot joins."""
    ran = tmp_path / "ran"
    ran.mkdir(mode=0o777)
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    apply(sim, standalone_task("pinned", "robot-a", f"echo once >> {ran}/pinned"))
    wait_until(lambda: get(sim, "rtask", "pinned")["status"].get("state") == "completed", 30, "the pinned task to run")
    # Labelled with its robot's slot, as a placed Task is.
    assert get(sim, "rtask", "pinned")["metadata"]["labels"]["robot.k8s4r.io/slot"] == \
        get(sim, "robot", "robot-a")["metadata"]["labels"]["robot.k8s4r.io/slot"]
    apply(sim, standalone_task("early", "robot-late", f"echo once >> {ran}/early"))
    wait_until(lambda: get(sim, "rtask", "early")["status"].get("message") == "robot robot-late does not exist", 20,
               "the task to say its robot does not exist")
    assert get(sim, "rtask", "early")["status"]["state"] == "pending"
    warned = [e for e in events_of(sim, "early") if e["reason"] == "RobotNotFound"]
    assert warned and warned[0]["type"] == "Warning" and "robot-late" in warned[0]["message"], warned
    robots("robot-late")
    wait_until(lambda: get(sim, "rtask", "early")["status"].get("state") == "completed", 40,
               "the task to run once its robot came")
    assert (ran / "pinned").read_text() == "once\n" and (ran / "early").read_text() == "once\n"


def test_a_task_waiting_for_a_drained_robot_ends_without_being_sent(sim, manager_factory, tmp_path):
    """A Task of its own pinned to a robot that is not Online waits; drained, the robot's waiting Task ends failed,
    reason Drained, and never ran; the drain finishes (the manager ends what was never sent)."""
    manager_factory().start()
    apply(sim, {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Robot",
                "metadata": {"name": "robot-z", "namespace": "default"}, "spec": {"robotId": "robot-z"}})
    ran = tmp_path / "ran"
    apply(sim, standalone_task("pinned-z", "robot-z", f"echo ran > {ran}"))
    wait_until(lambda: "to be Online" in (get(sim, "rtask", "pinned-z").get("status") or {}).get("message", ""), 20,
               "the task to wait for its robot")
    out = kubectl_k8s4r(sim, "drain", "robot-z", "--timeout=60s")
    assert out.splitlines()[-1] == "robot.robot.k8s4r.io/robot-z drained", out
    status = get(sim, "rtask", "pinned-z")["status"]
    assert status["state"] == "failed" and status["reason"] == "Drained", status
    assert status["message"].startswith("stopped before it was sent to robot robot-z"), status
    assert not ran.exists()


def test_a_robot_deleted_while_its_agent_runs_is_told_and_registers_again(sim, robots, manager_factory):
    manager_factory().start()
    agent = robots("robot-d")
    wait_until(lambda: robot_phase(sim, "robot-d") == "Online", 20, "robot-d to be Online")
    first_uid = get(sim, "robot", "robot-d")["metadata"]["uid"]
    sim.kubectl("delete", "robot", "robot-d")
    wait_until(lambda: (r := get(sim, "robot", "robot-d")) and r["metadata"]["uid"] != first_uid, 30,
               "the agent to register again (a new Robot)")
    wait_until(lambda: robot_phase(sim, "robot-d") == "Online", 20, "robot-d to be Online again")
    assert "register again" in agent.log_text()


def cached_group(name, count, script, cache=None, **extra):
    spec = group(name, count, script, **extra)
    spec["tasks"][0]["cache"] = {"maxStaleness": "24h", **(cache or {})}
    return spec


def test_a_cached_task_runs_once_across_identical_jobs_and_what_changes_its_result_runs_it_again(
        sim, robots, manager_factory, tmp_path):
    """The result cache, judged by what the tasks did: each run appends a line to a file. A Job whose tasks ask for
    caching runs; an identical Job completes without a dispatch, its Tasks saying whose result they reuse; a bumped
    salt, a stale entry and a failed run each make it run again."""
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    runs = tmp_path / "runs"
    script = f"echo ran $K8S4R_TASK_NAME >> {runs}; echo map built"

    def ran():
        return runs.read_text().split("\n")[:-1] if runs.exists() else []

    def entries():
        return items(sim, "rtcache")

    apply(sim, job("maps-1", [cached_group("g", 1, script)]))
    wait_job(sim, "maps-1", "completed", 60)
    assert ran() == ["ran maps-1-g-r0-work"]
    wait_until(lambda: len(entries()) == 1, 20, "the run to be stored")
    entry = entries()[0]
    first = tasks_of_job(sim, "maps-1")[0]
    assert entry["spec"]["task"] == {"name": "maps-1-g-r0-work", "uid": first["metadata"]["uid"]}, entry
    assert entry["spec"]["key"] == first["status"]["cacheKey"]
    assert entry["metadata"]["name"] == entry["spec"]["key"].replace(":", "-")
    assert "map built" in entry["spec"]["logs"]

    # The same work again: completed from the cache, never dispatched, and says so.
    apply(sim, job("maps-2", [cached_group("g", 1, script)]))
    wait_job(sim, "maps-2", "completed", 60)
    reused = tasks_of_job(sim, "maps-2")[0]
    assert reused["status"]["cachedFrom"]["task"] == "maps-1-g-r0-work", reused["status"]
    assert reused["status"]["exitCode"] == 0 and "map built" in reused["status"]["logs"]
    assert "targetRobot" not in reused["spec"] and "dispatchedAt" not in reused["status"]
    assert any(e["reason"] == "CacheHit" for e in events_of(sim, reused["metadata"]["name"]))
    assert ran() == ["ran maps-1-g-r0-work"]  # nothing ran

    # A new salt is a new key: it runs.
    apply(sim, job("maps-3", [cached_group("g", 1, script, {"salt": "v2"})]))
    wait_job(sim, "maps-3", "completed", 60)
    assert ran()[-1] == "ran maps-3-g-r0-work"
    wait_until(lambda: len(entries()) == 2, 20, "the salted run to be stored")

    # An entry older than a Task's maxStaleness is not used: it runs, and its newer run replaces the entry.
    name = entry["metadata"]["name"]
    stale = (datetime.now(timezone.utc) - timedelta(hours=25)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sim.kubectl("patch", "rtcache", name, "--type=merge", "-p", json.dumps({"spec": {"completedAt": stale}}))
    apply(sim, job("maps-4", [cached_group("g", 1, script)]))
    wait_job(sim, "maps-4", "completed", 60)
    assert ran()[-1] == "ran maps-4-g-r0-work"
    wait_until(lambda: get(sim, "rtcache", name)["spec"]["task"]["name"] == "maps-4-g-r0-work", 20,
               "the newer run to replace the stale entry")

    # A failed run is never stored, so the same work runs again.
    failing = f"echo ran $K8S4R_TASK_NAME >> {runs}; exit 3"
    for n in (5, 6):
        apply(sim, job(f"broken-{n}", [cached_group("g", 1, failing, {"salt": "broken"},
                                                    restartPolicy={"attempts": 0, "mode": "fail"},
                                                    reschedulePolicy={"attempts": 0, "interval": "1h", "delay": "1s"})]))
        wait_job(sim, f"broken-{n}", "failed", 60)
    assert {"ran broken-5-g-r0-work", "ran broken-6-g-r0-work"} <= set(ran())
    assert len(entries()) == 2

    # A system job's work is on each robot: never answered from the cache, and it says so.
    apply(sim, job("everywhere", [cached_group("g", 1, script)], job_type="system"))
    wait_until(lambda: any(r.startswith("ran everywhere") for r in ran()), 30, "the system job's task to run")
    wait_until(lambda: any(e["reason"] == "NotCacheable" for t in tasks_of_job(sim, "everywhere")
                           for e in events_of(sim, t["metadata"]["name"])), 20, "a NotCacheable Event")


def test_a_group_that_uses_another_groups_outputs_runs_after_it_with_its_values_also_from_the_cache(
        sim, robots, manager_factory, tmp_path):
    """Declared outputs, judged by what the tasks did: `build` writes a JSON object to $K8S4R_OUTPUTS_FILE and it is
    its Task's status.outputs; `publish` uses two of its values through $(groups.build.tasks.work.outputs.KEY) and
    runs only after build completed, with them. A second identical Job takes build's result and outputs from the
    cache (build does not run) and publish runs again with the same values. Outputs that are not an object fail
    build (InvalidOutputs), and publish never runs and says why."""
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    runs = tmp_path / "runs"

    def ran():
        return runs.read_text().split("\n")[:-1] if runs.exists() else []

    def maps_job(name, declared):
        build = cached_group("build", 1, f"echo ran $K8S4R_TASK_NAME >> {runs}; "
                                         f"printf '%s' '{declared}' > \"$K8S4R_OUTPUTS_FILE\"",
                             restartPolicy={"attempts": 0, "mode": "fail"},
                             reschedulePolicy={"attempts": 0, "interval": "1h", "delay": "1s"})
        publish = group("publish", 1, f"echo ran $K8S4R_TASK_NAME digest=$DIGEST cells=$CELLS >> {runs}")
        publish["tasks"][0]["env"] = {"DIGEST": "$(groups.build.tasks.work.outputs.digest)",
                                      "CELLS": "$(groups.build.tasks.work.outputs.cells)"}
        # publish is listed first: the order comes from the reference, not the list.
        return job(name, [publish, build])

    declared = '{"digest": "sha256:9f2c", "cells": 1412, "draft": null}'
    apply(sim, maps_job("maps-o1", declared))
    wait_job(sim, "maps-o1", "completed", 60)
    assert ran() == ["ran maps-o1-build-r0-work", "ran maps-o1-publish-r0-work digest=sha256:9f2c cells=1412"]
    build = get(sim, "rtask", "maps-o1-build-r0-work")
    assert build["status"]["outputs"] == {"digest": "sha256:9f2c", "cells": 1412}, build["status"]
    publish = get(sim, "rtask", "maps-o1-publish-r0-work")
    assert publish["spec"]["env"] == {"DIGEST": "sha256:9f2c", "CELLS": "1412"}
    wait_until(lambda: len(items(sim, "rtcache")) == 1, 20, "build's run to be stored")
    assert items(sim, "rtcache")[0]["spec"]["outputs"] == {"digest": "sha256:9f2c", "cells": 1412}

    apply(sim, maps_job("maps-o2", declared))
    wait_job(sim, "maps-o2", "completed", 60)
    reused = get(sim, "rtask", "maps-o2-build-r0-work")
    assert reused["status"]["cachedFrom"]["task"] == "maps-o1-build-r0-work", reused["status"]
    assert reused["status"]["outputs"] == {"digest": "sha256:9f2c", "cells": 1412}
    assert ran()[2:] == ["ran maps-o2-publish-r0-work digest=sha256:9f2c cells=1412"]  # build did not run

    apply(sim, maps_job("maps-o3", '["not", "an object"]'))
    wait_job(sim, "maps-o3", "failed", 60)
    broken = get(sim, "rtask", "maps-o3-build-r0-work")
    assert broken["status"]["reason"] == "InvalidOutputs" and broken["status"]["exitCode"] == 0, broken["status"]
    assert "outputs.json must be a JSON object" in broken["status"]["message"]
    assert ran()[-1] == "ran maps-o3-build-r0-work"  # publish never ran
    assert [t["metadata"]["name"] for t in tasks_of_job(sim, "maps-o3")] == ["maps-o3-build-r0-work"]
    wait_until(lambda: any(e["reason"] == "OutputsUnavailable" for e in events_of(sim, "maps-o3-publish")), 20,
               "an OutputsUnavailable Event on the publish group")
    assert "group build failed" in get(sim, "rtg", "maps-o3-publish")["status"]["statusDescription"]


def test_a_task_goes_to_the_robot_that_holds_its_artifact_and_the_robot_says_what_it_holds(
        sim, robots, manager_factory, tmp_path):
    """The scheduler's artifact score, judged by where the work ran and what the server was asked for: robot-b ran
    a task with a checksummed artifact (its Robot then lists the checksum in status.artifacts); a later Job with the
    same artifact and no constraint goes to robot-b, not to robot-a that the tie would pick, fetches nothing, and its
    Scheduled Event says why."""
    server = FileServer(tmp_path / "served")
    content = b"#!/bin/sh\necho calibrated\n"
    (server.root / "calibrate.sh").write_bytes(content)
    checksum = "sha256:" + hashlib.sha256(content).hexdigest()
    try:
        manager_factory().start()
        robots("robot-a")
        robots("robot-b")
        for name in ("robot-a", "robot-b"):
            wait_until(lambda name=name: robot_phase(sim, name) == "Online", 20, f"{name} to be Online")
        ran = tmp_path / "ran"

        def calibration(name, constraints=()):
            spec = group("g", 1, f"echo $K8S4R_ROBOT_ID $(sh local/calibrate.sh) >> {ran}", constraints=constraints)
            spec["tasks"][0]["artifacts"] = [{"getterSource": f"{server.url}/calibrate.sh",
                                              "relativeDest": "local/", "getterOptions": {"checksum": checksum}}]
            return job(name, [spec])

        apply(sim, calibration("warm", [{"lTarget": "${robot.name}", "operand": "=", "rTarget": "robot-b"}]))
        wait_job(sim, "warm", "completed", 60)
        wait_until(lambda: checksum in ((get(sim, "robot", "robot-b").get("status", {}).get("artifacts") or {})
                                        .get("held") or []), 20, "robot-b to list the artifact it holds")
        held = get(sim, "robot", "robot-b")["status"]["artifacts"]
        assert held["count"] == 1 and held["bytes"] == len(content), held

        apply(sim, calibration("again"))
        wait_job(sim, "again", "completed", 60)
        task = tasks_of_job(sim, "again")[0]
        assert task["spec"]["targetRobot"] == "robot-b"
        assert ran.read_text().splitlines() == ["robot-b calibrated", "robot-b calibrated"]
        assert server.asked == ["/calibrate.sh"]  # the second run took the robot's copy
        scheduled = [e["message"] for e in events_of(sim, task["metadata"]["name"]) if e["reason"] == "Scheduled"]
        assert scheduled == ["placed on robot robot-b, which holds 1 of the 1 artifact(s) of its replica"], scheduled
    finally:
        server.close()


def cache_state(sim, name):
    found = get(sim, "racache", name)
    return (found or {}).get("status", {})


def test_an_artifact_cache_has_the_robots_it_selects_fetch_ahead_of_need_and_says_how_each_stands(
        sim, robots, manager_factory, tmp_path):
    """An ArtifactCache (after KServe's LocalModelCache), judged by what the server was asked for and what is in each
    robot's store: the robot its selector matches fetches the artifact before any task needs it and the cache says
    Downloaded for it; the other robot fetches nothing; a task naming the artifact then starts from the robot's copy;
    a source that fails is Failed with the reason; a robot labelled into the selector later fetches it too."""
    server = FileServer(tmp_path / "served")
    content = b"#!/bin/sh\necho navigating with model v7\n"
    (server.root / "model.sh").write_bytes(content)
    checksum = "sha256:" + hashlib.sha256(content).hexdigest()
    try:
        manager_factory().start()
        agent_a = robots("robot-a", labels="site=s4")
        agent_b = robots("robot-b", labels="site=s9")
        for name in ("robot-a", "robot-b"):
            wait_until(lambda name=name: robot_phase(sim, name) == "Online", 20, f"{name} to be Online")
        entry = checksum.replace(":", "-")

        def artifact_cache(name, source, digest=checksum):
            return {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "ArtifactCache",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"source": source, "checksum": digest, "robotSelector": {"site": "s4"}}}

        apply(sim, artifact_cache("nav-model", f"{server.url}/model.sh"))
        wait_until(lambda: cache_state(sim, "nav-model").get("available") == 1, 30, "robot-a to hold the model")
        status = cache_state(sim, "nav-model")
        assert status["total"] == 1 and status["robots"] == [{"name": "robot-a", "state": "Downloaded"}], status
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"]), status
        assert server.asked == ["/model.sh"]
        assert (agent_a.work_dir / "artifacts" / entry).read_bytes() == content
        assert not (agent_b.work_dir / "artifacts" / entry).exists()

        # A task that needs it starts from robot-a's copy: nothing more is fetched.
        ran = tmp_path / "ran"
        work = group("g", 1, f"echo $K8S4R_ROBOT_ID $(sh local/model.sh) >> {ran}")
        work["tasks"][0]["artifacts"] = [{"getterSource": f"{server.url}/model.sh", "relativeDest": "local/",
                                          "getterOptions": {"checksum": checksum}}]
        apply(sim, job("navigate", [work]))
        wait_job(sim, "navigate", "completed", 60)
        assert ran.read_text().splitlines() == ["robot-a navigating with model v7"]
        assert server.asked == ["/model.sh"]

        # A source that fails says so for the robot, with the reason.
        missing = "sha256:" + hashlib.sha256(b"not served").hexdigest()
        apply(sim, artifact_cache("gone", f"{server.url}/gone.bin", missing))
        wait_until(lambda: cache_state(sim, "gone").get("failed") == 1, 30, "the missing artifact to fail on robot-a")
        failed = cache_state(sim, "gone")["robots"][0]
        assert failed["name"] == "robot-a" and failed["reason"] == "DownloadFailed", failed
        assert "404" in failed["message"], failed

        # robot-b labelled into the selector: it fetches the model too.
        sim.kubectl("patch", "robot", "robot-b", "--type=merge", "-p", json.dumps({"spec": {"labels": {"site": "s4"}}}))
        wait_until(lambda: cache_state(sim, "nav-model").get("available") == 2, 30, "robot-b to hold the model too")
        assert (agent_b.work_dir / "artifacts" / entry).read_bytes() == content
        assert server.asked.count("/model.sh") == 2
    finally:
        server.close()


def test_a_cached_task_whose_artifact_changes_runs_again(sim, robots, manager_factory, tmp_path):
    """The cache is keyed by the artifact's content: the same Job again is answered from the cache; the same Job
    naming new content behind the same URL (another checksum) runs, and reads the new content. Judged by the lines
    the tasks wrote."""
    server = FileServer(tmp_path / "served")
    try:
        manager_factory().start()
        robots("robot-a")
        wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
        runs = tmp_path / "runs"

        def calibrate(name, data):
            (server.root / "table.txt").write_bytes(data)
            spec = cached_group("g", 1, f"echo $K8S4R_TASK_NAME $(cat local/table.txt) >> {runs}")
            spec["tasks"][0]["artifacts"] = [{"getterSource": f"{server.url}/table.txt", "relativeDest": "local/",
                                              "getterOptions": {"checksum": "sha256:" + hashlib.sha256(data).hexdigest()}}]
            apply(sim, job(name, [spec]))
            wait_job(sim, name, "completed", 60)

        calibrate("cal-1", b"table-v1")
        calibrate("cal-2", b"table-v1")
        assert get(sim, "rtask", "cal-2-g-r0-work")["status"]["cachedFrom"]["task"] == "cal-1-g-r0-work"
        calibrate("cal-3", b"table-v2")
        assert runs.read_text().splitlines() == ["cal-1-g-r0-work table-v1", "cal-3-g-r0-work table-v2"]
        assert "cachedFrom" not in get(sim, "rtask", "cal-3-g-r0-work")["status"]
    finally:
        server.close()
