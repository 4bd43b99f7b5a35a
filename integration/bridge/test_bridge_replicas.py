"""Bridge replicas sharing the fleet (docs/bridge.md#replicas): three real k8s4r-bridge processes with --replica-id,
real agents, a real Mosquitto and the stand-in enforcing deploy/bridge-replicas' Role. Judged by side effects: each
task appends a line to its own file, so a task run twice shows as two lines whatever the statuses say."""
import json
import re
import time

import pytest

from bridge_support import (SLOTS, AgentProcess, BridgeProcess, apply_bridge_rbac, create_task, digest, dispatch,
                            get, owner_among, settled, slot_of, slot_table)
from conftest import Observer, wait_until

LEASE_SECONDS = 4
OWN = ["--replica-own-subscriptions=true"]  # the default, said
EVERY_ROBOT = ["--replica-own-subscriptions=false"]
REPLICA = ["--replica-lease-duration", f"{LEASE_SECONDS}s", "--replica-renew-deadline", "3s",
           "--replica-retry-period", "500ms", "--heartbeat-write-interval", "3s", "--dispatch-resend-after", "2s",
           "--heartbeat-ack-interval", "500ms"]


def test_python_hash_is_the_bridges():
    assert [slot_of(r) for r in ("robot-1", "robot-001", "warehouse-7-amr-42")] == [303, 330, 415]


@pytest.fixture
def sim(kube_sim, tls_files):
    started = kube_sim("--authorization-mode=RBAC", token="admin-token", tls=tls_files)
    started.apply_crds()
    started.bridge_kubeconfig = apply_bridge_rbac(started, replicas=True)
    return started


@pytest.fixture
def replicas(tmp_path, broker, sim):
    made = {}

    def start(name, extra=()):
        made[name] = BridgeProcess(tmp_path / name, broker, sim, ["--replica-id", name, *REPLICA, *extra]).start()
        return made[name]
    yield start, made
    for replica in made.values():
        replica.stop()
    # Under deploy/bridge-replicas' Roles, nothing a replica tried was forbidden.
    for name, replica in made.items():
        assert "Forbidden" not in replica.log_text(), name


@pytest.fixture
def agents(tmp_path, broker):
    made = []

    def start(robot):
        agent = AgentProcess(broker, tmp_path / f"work-{robot}", robot, ["--token", f"token-{robot}"]).start()
        made.append(agent)
        return agent
    yield start
    for agent in made:
        agent.cleanup()


def robots_per_owner(members, count, owners=None):
    """`count` robot ids for each replica of `owners` (default: all), by where their slots fall among `members`."""
    wanted = {m: [] for m in (owners or members)}
    for n in range(1, 10_000):
        robot = f"robot-{n}"
        owner = owner_among(slot_of(robot), members)
        if owner in wanted and len(wanted[owner]) < count:
            wanted[owner].append(robot)
        if all(len(r) == count for r in wanted.values()):
            return wanted
    raise AssertionError("not enough robots")


def start_robots(sim, agents, members, per_owner):
    """Agents for `per_owner` robots of each replica of `members`, once each has its Robot: ({replica: robots},
    every robot, {robot: its agent})."""
    chosen = robots_per_owner(members, per_owner)
    robots = [r for group in chosen.values() for r in group]
    started = {robot: agents(robot) for robot in robots}
    wait_until(lambda: all(get(sim, "robot", r) for r in robots), 20, "every Robot to appear")
    return chosen, robots, started


def create_placed_task(sim, name, script, robot):
    """A Task as the manager leaves it once placed: spec.targetRobot and its robot's slot label, then dispatching."""
    sim.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
        "metadata": {"name": name, "namespace": "default", "labels": {"robot.k8s4r.io/slot": str(slot_of(robot))}},
        "spec": {"name": name, "driver": "exec", "targetRobot": robot,
                 "config": {"execConfig": {"command": "/bin/sh", "args": ["-c", script]}}}}))
    dispatch(sim, name)


def start_tasks(sim, tmp_path, robots, per_robot, seconds):
    """Tasks that each append their name to their own file, after `seconds`; returns {task: file}."""
    made = {}
    for robot in robots:
        for n in range(per_robot):
            name = f"{robot}-t{n}"
            out = tmp_path / "ran" / name
            out.parent.mkdir(exist_ok=True)
            create_placed_task(sim, name, f"sleep {seconds}; echo {name} >> {out}", robot)
            made[name] = out
    return made


def all_completed(sim, names):
    listed = json.loads(sim.kubectl("get", "rtask", "-o", "json").stdout)["items"]
    states = {t["metadata"]["name"]: t.get("status", {}).get("state") for t in listed}
    return all(states.get(name) == "completed" for name in names)


def assert_each_ran_once(sim, tasks):
    for name, out in tasks.items():
        assert out.exists(), f"task {name} never ran"
        assert out.read_text().splitlines() == [name], f"task {name} ran {len(out.read_text().splitlines())} times"
        task = get(sim, "rtask", name)
        assert task["status"]["state"] == "completed" and task["status"].get("exitCode") == 0, task["status"]


@pytest.mark.parametrize("own_subscriptions", [True, False], ids=["own-subscriptions", "every-robot"])
def test_three_replicas_share_the_slots_and_each_serves_only_its_robots(tmp_path, sim, replicas, agents,
                                                                         own_subscriptions):
    start, made = replicas
    members = ["bridge-0", "bridge-1", "bridge-2"]
    for name in members:
        start(name, OWN if own_subscriptions else EVERY_ROBOT)
    wait_until(lambda: settled(sim, members), 20, "the slot table to share every slot among the three")
    served = {}

    def serving():  # each replica serves what the table gives it (within a poll of the table)
        served.update({name: made[name].metric("k8s4r_bridge_slots_served") for name in members})
        return sum(served.values()) == SLOTS
    wait_until(serving, 5, "each replica to serve its share")
    assert all(250 < n < 450 for n in served.values()), served

    chosen, robots, _ = start_robots(sim, agents, members, 2)
    tasks = start_tasks(sim, tmp_path, robots, 3, 0)
    wait_until(lambda: all_completed(sim, tasks), 40, "every task to complete")
    assert_each_ran_once(sim, tasks)
    # Each replica dispatched its own robots' tasks, and only those.
    for name in members:
        assert made[name].metric("k8s4r_bridge_dispatches_total", action="create") >= 6, name
        log = made[name].log_text()
        for robot in robots:
            dispatched = re.search(rf"to robot {robot}$", log, re.M) is not None
            assert dispatched == (robot in chosen[name]), (name, robot)
    # Each caches only its own robots' Robots and Tasks (a label selector on its slots).
    for name in members:
        assert made[name].metric("k8s4r_bridge_informer_objects", resource="robots") == 2, name
        assert made[name].metric("k8s4r_bridge_informer_objects", resource="tasks") == 6, name
    # The broker sends each robot's heartbeats and reports to its owner alone (registers and presences reach
    # every replica); by default to every replica, the others dropping them unread.
    # Judged over the next heartbeats (one a second from each of the six robots).
    before = {name: (made[name].metric("k8s4r_bridge_messages_not_served_total", topic="heartbeat"),
                     made[name].metric("k8s4r_bridge_messages_total", topic="heartbeat")) for name in members}
    wait_until(lambda: all(made[name].metric("k8s4r_bridge_messages_total", topic="heartbeat") >=
                           before[name][1] + 6 for name in members), 20, "each replica to get its robots' heartbeats")
    for name in members:
        not_served = made[name].metric("k8s4r_bridge_messages_not_served_total", topic="heartbeat") - before[name][0]
        subscribed = made[name].metric("k8s4r_bridge_robots_subscribed")
        if own_subscriptions:
            assert (not_served, subscribed) == (0, 2), name
        else:
            assert not_served >= 6 and subscribed == 0, name


@pytest.mark.parametrize("own_subscriptions", [True, False], ids=["own-subscriptions", "every-robot"])
def test_a_replica_killed_under_load_is_taken_over_and_its_stale_dispatches_are_refused(tmp_path, sim, replicas,
                                                                                           agents, broker,
                                                                                           own_subscriptions):
    start, made = replicas
    members = ["bridge-0", "bridge-1", "bridge-2"]
    for name in members:
        start(name, OWN if own_subscriptions else EVERY_ROBOT)
    wait_until(lambda: settled(sim, members), 20, "the slot table to settle")
    watcher = Observer(broker, ("k8s4r/robots/+/tasks/dispatch", "k8s4r/robots/+/acks"))
    try:
        chosen, robots, started = start_robots(sim, agents, members, 2)
        tasks = start_tasks(sim, tmp_path, robots, 4, 2)
        victim, victim_robot = "bridge-1", chosen["bridge-1"][0]
        stale = watcher.wait_for(f"k8s4r/robots/{victim_robot}/tasks/dispatch",
                                 lambda m: m["action"] == "create", 20)
        old_epoch = stale["epoch"]

        # kill -9 while its robots' tasks are dispatched and running.
        made[victim].kill9()
        killed_at = time.monotonic()
        survivors = ["bridge-0", "bridge-2"]
        wait_until(lambda: settled(sim, survivors), LEASE_SECONDS + 6, "the survivors to take its slots over")
        took = time.monotonic() - killed_at
        assert took < LEASE_SECONDS + 4, took
        if own_subscriptions:
            # The survivors follow the dead one's robots' topics now: between them, every robot's.
            wait_until(lambda: sum(made[n].metric("k8s4r_bridge_robots_subscribed") for n in survivors) ==
                       len(robots), 5, "the survivors to follow every robot")
        table, _ = slot_table(sim)
        new_epoch = table[slot_of(victim_robot)][1]
        assert new_epoch > old_epoch

        wait_until(lambda: all_completed(sim, tasks), 60, "every task to complete")
        assert_each_ran_once(sim, tasks)

        # The robot heard of its slot's new owner (an Ack carries the epoch) ...
        watcher.wait_for(f"k8s4r/robots/{victim_robot}/acks", lambda m: m.get("epoch", 0) >= new_epoch, 10)
        # ... and keeps it (its state file says so) ...
        def epoch_kept():
            state = started[victim_robot].work_dir / "state.log"
            records = [json.loads(line.split("\t", 1)[1]) for line in state.read_text().splitlines()]
            return any(r.get("epoch", 0) >= new_epoch for r in records)
        wait_until(epoch_kept, 10, "the agent to keep the new epoch")
        # ... so what the dead replica sent, replayed, changes nothing: a task it never had is not started ...
        marker = tmp_path / "stale-ran"
        stale["task"]["metadata"]["uid"] = "0a0a0a0a-0000-4000-8000-00000000beef"
        stale["task"]["spec"]["config"]["execConfig"]["args"] = ["-c", f"touch {marker}"]
        watcher.publish(f"k8s4r/robots/{victim_robot}/tasks/dispatch", json.dumps(stale))
        wait_until(lambda: "refused a create of task 0a0a0a0a-0000-4000-8000-00000000beef" in
                   started[victim_robot].log_text(), 10, "the agent to refuse the stale dispatch")
        # ... while the same message under the new owner's epoch runs (the replay itself reaches the robot).
        fresh = dict(stale, epoch=new_epoch)
        fresh["task"] = json.loads(json.dumps(stale["task"]))
        fresh["task"]["metadata"]["uid"] = "0a0a0a0a-0000-4000-8000-00000000f00d"
        fresh_marker = tmp_path / "fresh-ran"
        fresh["task"]["spec"]["config"]["execConfig"]["args"] = ["-c", f"touch {fresh_marker}"]
        watcher.publish(f"k8s4r/robots/{victim_robot}/tasks/dispatch", json.dumps(fresh))
        wait_until(fresh_marker.exists, 10, "the current owner's dispatch to run")
        assert not marker.exists()
    finally:
        watcher.close()


def test_a_replica_added_later_takes_a_share_without_a_task_running_twice(tmp_path, sim, replicas, agents):
    start, made = replicas
    for name in ("bridge-0", "bridge-1"):
        start(name)
    wait_until(lambda: settled(sim, ["bridge-0", "bridge-1"]), 20, "the slot table to settle on two")
    members = ["bridge-0", "bridge-1", "bridge-2"]
    # Two robots whose slots will move to the newcomer, and two of each other replica's that stay.
    chosen, robots, _ = start_robots(sim, agents, members, 2)
    tasks = start_tasks(sim, tmp_path, robots, 3, 2)
    # While they run, and some are still being dispatched, a third replica joins.
    start("bridge-2")
    wait_until(lambda: settled(sim, members), 20, "the newcomer to take its share")
    wait_until(lambda: made["bridge-2"].metric("k8s4r_bridge_slots_served") > 250, 5, "the newcomer to serve them")
    # Work that comes after goes out from the newcomer for its robots, and from nobody else.
    later = {}
    for robot in robots:
        name = f"{robot}-later"
        later[name] = tmp_path / "ran" / name
        create_placed_task(sim, name, f"echo {name} >> {later[name]}", robot)
    wait_until(lambda: all_completed(sim, {**tasks, **later}), 60, "every task to complete")
    assert_each_ran_once(sim, {**tasks, **later})
    for robot in robots:
        senders = [n for n in members if f"dispatching task {robot}-later " in made[n].log_text()]
        assert senders == [owner_among(slot_of(robot), members)], (robot, senders)


def test_robots_and_tasks_made_before_slot_labels_are_labelled_and_served(tmp_path, sim, replicas, agents):
    """An older bridge made Robots and the manager Tasks without the slot label, which replicas select their
    caches by. A register of such a robot is not taken for a new robot's (which would skip its token check and
    reset its phase): its owner labels the Robot and judges the next register against it; and the replica serving
    slot 0 labels the rest."""
    start, made = replicas
    members = ["bridge-0", "bridge-1"]
    for name in members:
        start(name)
    wait_until(lambda: settled(sim, members), 20, "the slot table to settle")
    robot = "robot-1"
    approved_digest = digest("the-token-it-was-approved-with")
    sim.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Robot",
        "metadata": {"name": robot, "namespace": "default"}, "spec": {"robotId": robot}}))
    sim.kubectl("patch", "robot", robot, "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": {"phase": "Online", "tokenDigest": approved_digest}}))
    out = tmp_path / "ran-old"
    create_task(sim, "old", f"echo old >> {out}", robot=robot)
    dispatch(sim, "old")
    # It registers with another token than the one it was approved with.
    agents(robot)
    owner = made[owner_among(slot_of(robot), members)]
    wait_until(lambda: "TokenMismatch" in owner.log_text(), 30, "the register judged against the Robot")
    status = get(sim, "robot", robot)["status"]
    assert (status["phase"], status["tokenDigest"]) == ("Online", approved_digest)
    assert get(sim, "robot", robot)["metadata"]["labels"]["robot.k8s4r.io/slot"] == "303"
    # The Task made without the label is labelled, then sent (the bridge sends whatever the Robot's phase).
    wait_until(lambda: all_completed(sim, ["old"]), 40, "the old Task to complete")
    assert out.read_text().splitlines() == ["old"]
    assert get(sim, "rtask", "old")["metadata"]["labels"]["robot.k8s4r.io/slot"] == "303"


def test_a_replica_that_received_every_robot_lets_those_subscriptions_go_when_it_follows_its_own(tmp_path, sim,
                                                                                                 replicas, agents):
    """An upgrade: the replica's persistent session at the broker still holds the shared filters its earlier run
    (replica-own-subscriptions off, or a version before it) subscribed to. Once it follows its own robots, the
    broker sends it no other robot's messages."""
    start, made = replicas
    members = ["bridge-0", "bridge-1"]
    for name in members:
        start(name, EVERY_ROBOT)
    wait_until(lambda: settled(sim, members), 20, "the slot table to settle")
    start_robots(sim, agents, members, 1)
    wait_until(lambda: made["bridge-0"].metric("k8s4r_bridge_messages_not_served_total", topic="heartbeat") > 0, 10,
               "bridge-0 to receive the other replica's robot")
    made["bridge-0"].stop()
    start("bridge-0")  # the default
    wait_until(lambda: settled(sim, members), 20, "the slot table to settle again")
    wait_until(lambda: made["bridge-0"].metric("k8s4r_bridge_robots_subscribed") == 1, 10,
               "bridge-0 to follow its own robot")
    before = made["bridge-0"].metric("k8s4r_bridge_messages_not_served_total", topic="heartbeat")
    heartbeats = made["bridge-0"].metric("k8s4r_bridge_messages_total", topic="heartbeat")
    wait_until(lambda: made["bridge-0"].metric("k8s4r_bridge_messages_total", topic="heartbeat") >= heartbeats + 3,
               10, "bridge-0 to get its own robot's heartbeats")
    assert made["bridge-0"].metric("k8s4r_bridge_messages_not_served_total", topic="heartbeat") == before


def two_replicas_following_their_own(sim, replicas, agents):
    """bridge-0 and bridge-1 with replica-own-subscriptions, a robot of each running and followed by its owner:
    ({name: replica}, {name: [its robot]}, {robot: its agent})."""
    start, made = replicas
    members = ["bridge-0", "bridge-1"]
    for name in members:
        start(name, OWN)
    wait_until(lambda: settled(sim, members), 20, "the slot table to settle")
    chosen, _, started = start_robots(sim, agents, members, 1)
    for name in members:
        wait_until(lambda: made[name].metric("k8s4r_bridge_robots_subscribed") == 1, 10, f"{name} to follow its robot")
    return made, chosen, started


def assert_made_again(sim, robot, first_uid, agent, timeout):
    """The agent was told to register again and did: its Robot is a new one."""
    wait_until(lambda: (r := get(sim, "robot", robot)) and r["metadata"]["uid"] != first_uid, timeout,
               "the agent to register again (a new Robot)")
    assert "register again" in agent.log_text()


def test_a_robot_deleted_while_its_agent_runs_is_told_to_register_again_by_a_replica_following_its_own(
        sim, replicas, agents):
    """Its owner stops following a robot whose Robot is deleted only after a grace, so the robot's next heartbeat
    still reaches it and is answered "register again", as one bridge answers it."""
    made, chosen, started = two_replicas_following_their_own(sim, replicas, agents)
    robot = chosen["bridge-0"][0]
    owner = made["bridge-0"]
    first_uid = get(sim, "robot", robot)["metadata"]["uid"]
    sim.kubectl("delete", "robot", robot)
    assert_made_again(sim, robot, first_uid, started[robot], 30)
    wait_until(lambda: owner.metric("k8s4r_bridge_robots_subscribed") == 1, 10, "its owner to follow it again")


def test_a_robot_whose_robot_went_while_its_slot_had_no_owner_is_found_by_its_presence(sim, replicas, agents):
    """Its owner killed, its Robot deleted before another replica took the slot over: the new owner never saw the
    Robot, so it does not follow the robot, whose heartbeats reach nobody. Gaining the slot, it asks for every
    robot's retained presence again, finds this one online with no Robot, and tells it to register again."""
    made, chosen, started = two_replicas_following_their_own(sim, replicas, agents)
    victim = "bridge-1"
    robot = chosen[victim][0]
    first_uid = get(sim, "robot", robot)["metadata"]["uid"]
    made[victim].kill9()
    sim.kubectl("delete", "robot", robot)
    wait_until(lambda: settled(sim, ["bridge-0"]), LEASE_SECONDS + 6, "bridge-0 to take the slots over")
    assert_made_again(sim, robot, first_uid, started[robot], 40)
    wait_until(lambda: made["bridge-0"].metric("k8s4r_bridge_robots_subscribed") == 2, 10,
               "bridge-0 to follow it")


@pytest.mark.parametrize("label", ["another-replicas-slot", "not-a-slot"])
def test_a_robot_relabelled_by_hand_is_labelled_back_and_followed_again(sim, replicas, agents, label):
    """An operator (or a tool) changes a running robot's slot label: its Robot leaves its owner's cache, as if
    deleted. Whichever replica holds it then labels it back; if none does (a value no replica's selection takes),
    its owner, still following the robot for the grace, answers its next heartbeat "register again", and the
    register labels the existing Robot. Either way its owner follows it again, and the Robot is the same one."""
    made, chosen, _ = two_replicas_following_their_own(sim, replicas, agents)
    robot = chosen["bridge-0"][0]
    owner = made["bridge-0"]
    first_uid = get(sim, "robot", robot)["metadata"]["uid"]
    wrong = str(slot_of(chosen["bridge-1"][0])) if label == "another-replicas-slot" else "not-a-slot"
    sim.kubectl("label", "robot", robot, f"robot.k8s4r.io/slot={wrong}", "--overwrite")
    if label == "another-replicas-slot":
        wait_until(lambda: made["bridge-1"].metric("k8s4r_bridge_slot_labels_corrected_total") >= 1, 10,
                   "bridge-1, now holding it, to label it back")
    wait_until(lambda: get(sim, "robot", robot)["metadata"]["labels"].get("robot.k8s4r.io/slot") ==
               str(slot_of(robot)), 30, "the Robot labelled with its own slot again")
    assert get(sim, "robot", robot)["metadata"]["uid"] == first_uid
    wait_until(lambda: owner.metric("k8s4r_bridge_informer_objects", resource="robots") == 1, 10,
               "its owner to cache it again")
    wait_until(lambda: owner.metric("k8s4r_bridge_robots_subscribed") == 1, 10, "its owner to follow it again")


def test_a_sent_task_relabelled_by_hand_is_not_taken_for_deleted(tmp_path, sim, replicas, agents, broker):
    """A Task sent to its robot (which is away: the broker holds the dispatch) has its slot label changed by hand
    to another replica's slot. It leaves its owner's cache as a Task deleted by force would, which its owner would
    stop on the robot; but it still carries the bridge's finalizer, so it was not deleted, and nothing is sent.
    The replica now holding it labels it back, and once the robot is back the task runs once, completed."""
    made, chosen, started = two_replicas_following_their_own(sim, replicas, agents)
    robot = chosen["bridge-0"][0]
    started[robot].stop()
    watcher = Observer(broker, (f"k8s4r/robots/{robot}/tasks/dispatch",))
    try:
        tasks = start_tasks(sim, tmp_path, [robot], 1, 0)
        name = next(iter(tasks))
        wait_until(lambda: "robot.k8s4r.io/bridge" in str(get(sim, "rtask", name)["metadata"].get("finalizers")),
                   20, "the dispatch to be with the broker (the finalizer on)")
        sim.kubectl("label", "rtask", name, f"robot.k8s4r.io/slot={slot_of(chosen['bridge-1'][0])}", "--overwrite")
        wait_until(lambda: made["bridge-1"].metric("k8s4r_bridge_slot_labels_corrected_total") >= 1, 10,
                   "bridge-1, now holding it, to label it back")
        wait_until(lambda: get(sim, "rtask", name)["metadata"]["labels"]["robot.k8s4r.io/slot"] ==
                   str(slot_of(robot)), 10, "the Task labelled with its robot's slot again")
        started[robot].start()
        wait_until(lambda: all_completed(sim, [name]), 30, "the task to complete")
        assert_each_ran_once(sim, tasks)
        sent = [m["action"] for m in watcher.json_on(f"k8s4r/robots/{robot}/tasks/dispatch")]
        assert "create" in sent and "delete" not in sent, sent
    finally:
        watcher.close()
