"""The chaos suite (issue 28): the whole system under a broker, a daemon, a robot or a clock that misbehaves, judged
by what each task did (chaos_support.Cluster.judge): every slot's work completed exactly once, never two copies at
once, every recorded outcome true.

The short form runs in ./scripts/test.sh: one round of each scenario, a dozen short tasks. The long form, by hand:
  K8S4R_CHAOS_ROUNDS=3 K8S4R_CHAOS_TASKS=30 /usr/bin/python3 -m pytest -q integration/chaos
(figures in docs/performance.md)."""
import os
import re
import shutil
import signal
import time

import pytest

from chaos_support import Cluster, wait_until

ROUNDS = int(os.environ.get("K8S4R_CHAOS_ROUNDS", "1"))
TASKS = int(os.environ.get("K8S4R_CHAOS_TASKS", "12"))
SECONDS = 4  # each task's work


@pytest.fixture
def cluster_factory(tmp_path, kube_sim, tls_files):
    made = []

    def make(**options):
        cluster = Cluster(tmp_path / f"round{len(made)}", kube_sim, tls_files, **options)
        made.append(cluster)
        return cluster
    yield make
    for cluster in made:
        cluster.close()


def is_replacement(task_name):
    """A Task made to replace another: the manager names attempt N ...-aN."""
    return re.search(r"-a[0-9]+$", task_name) is not None


def assert_stopped_for_want_of_contact(cluster, job, uids):
    """Each of these Tasks failed, and the truth is that its robot stopped it for want of contact, whichever came
    first: its own report (Disconnected), or Lost with its end beside it."""
    for task in cluster.tasks(job):
        if task["metadata"]["uid"] in uids:
            status = task["status"]
            truth = status.get("reason") if status.get("reason") == "Disconnected" else \
                (status.get("endOnRobot") or {}).get("reason")
            assert status["state"] == "failed" and truth == "Disconnected", status


def until_half_started(cluster, total):
    wait_until(lambda: len({line["name"] for line in cluster.started()}) >= total // 2, 60,
               "half the tasks to start")


def verdict(cluster, job):
    cluster.wait_job(job, 180)
    problems = cluster.judge(job)
    assert not problems, "\n".join(problems) + "\n\nbridge log tail:\n" + cluster.bridge.log_text()[-3000:]
    assert cluster.job_state(job) == "completed", cluster.job_state(job)


@pytest.mark.parametrize("persistence", [False, True], ids=["no-persistence", "persistence"])
def test_a_broker_killed_with_the_agents_back_before_the_bridge_loses_and_doubles_nothing(cluster_factory,
                                                                                           persistence):
    """The outside run that found 30 of 30 tasks run twice and recorded failed: the broker killed (-9) mid-run and
    started again, the agents reconnecting at once, the bridge only 8 s later (stopped meanwhile). Reports the
    broker acknowledged and dropped are sent again until the bridge confirms them; heartbeats say the robot holds
    their ends meanwhile, so the manager takes nothing for lost."""
    for round in range(ROUNDS):
        cluster = cluster_factory(persistence=persistence)
        job = f"broker-{round}"
        cluster.run_job(job, TASKS, SECONDS)
        until_half_started(cluster, TASKS)
        cluster.bridge.process.send_signal(signal.SIGSTOP)
        cluster.broker.process.kill()
        cluster.broker.process.wait()
        restarted = time.time_ns()
        cluster.broker.start()
        # The bridge stays away until every agent is back on the new broker and some task has ended meanwhile:
        # its final report went to a broker that acknowledged it and had nobody to give it to.
        wait_until(lambda: all(agent.log_text().count("connected to") >= 2 for agent in cluster.agents.values()),
                   60, "every agent to reconnect")
        wait_until(lambda: any(line["event"] == "end" and line["at"] > restarted for line in cluster.lines()), 60,
                   "a task to end while the bridge is away")
        cluster.bridge.process.send_signal(signal.SIGCONT)
        verdict(cluster, job)
        cluster.close()


@pytest.mark.parametrize("daemon", ["bridge", "manager", "agent"])
def test_a_daemon_killed_mid_run_loses_and_doubles_nothing(cluster_factory, daemon):
    cluster = cluster_factory()
    job = f"kill-{daemon}"
    cluster.run_job(job, TASKS, SECONDS)
    until_half_started(cluster, TASKS)
    if daemon == "agent":
        victim = cluster.agents["robot-a"]
        victim.kill9()
        victim.start()
    else:
        process = getattr(cluster, daemon)
        process.process.kill()
        process.process.wait()
        process.start()
    verdict(cluster, job)


@pytest.mark.parametrize("how", ["stopped", "blackholed"])
def test_a_robot_cut_off_never_runs_a_task_beside_its_replacement(cluster_factory, how):
    """A robot cut off longer than its tasks' stop window: its agent stopped (SIGSTOP: nothing of it runs but its
    tasks and their shims), or its link dropping every packet. Its tasks' shims stop them after 4 s without word
    from the bridge; the manager replaces them only after that; when the robot is back, the originals' true ends
    are recorded, and no slot ever ran twice at the same time."""
    cluster = cluster_factory()
    job = f"cut-{how}"
    cluster.run_job(job, 4, 20, stop_after="4s")  # lost after 4 s + killTimeout 1 s + margin 2 s
    wait_until(lambda: len({line["name"] for line in cluster.started()}) == 4, 60, "every task to start")
    victim = next(line["robot"] for line in cluster.started())
    victim_uids = {line["uid"] for line in cluster.started() if line["robot"] == victim}
    if how == "stopped":
        cluster.agents[victim].process.send_signal(signal.SIGSTOP)
    else:
        cluster.proxies[victim].blackhole()
    # Its tasks stopped by their shims, and replaced elsewhere.
    wait_until(lambda: victim_uids <= {line["uid"] for line in cluster.lines() if line["event"] == "stopped"}, 30,
               "the cut-off robot's tasks to be stopped there")
    # (A replacement is never placed on a robot silent for the task's lostAfter, though still Online.)
    wait_until(lambda: any(line["robot"] != victim and is_replacement(line["name"]) for line in cluster.started()), 60,
               "a replacement to start elsewhere")
    if how == "stopped":
        cluster.agents[victim].process.send_signal(signal.SIGCONT)
    else:
        cluster.proxies[victim].heal()
    cluster.wait_job(job, 180)
    problems = cluster.judge(job, expect_once=False)  # a stopped run and its replacement: two starts, one end
    assert not problems, "\n".join(problems)
    assert_stopped_for_want_of_contact(cluster, job, victim_uids)
    assert cluster.job_state(job) == "completed"


def test_a_dispatch_that_waited_out_a_cut_never_runs_beside_its_replacement(cluster_factory):
    """The case an outside run found, made certain: a robot cut off (every packet dropped both ways) just as its
    task is dispatched to it. The manager takes the task for lost after its lostAfter and runs it elsewhere (never
    on the silent robot); when the link heals, the dispatch that waited in the network arrives, with the delete
    sent when the task was marked lost behind it. The agent, out of contact for longer than the task's window,
    holds it until the bridge answers a heartbeat made after it came: it never starts."""
    cluster = cluster_factory()
    job = "cut-at-dispatch"
    victim = "robot-a"
    cluster.proxies[victim].blackhole()
    cluster.run_job(job, 4, 20, stop_after="4s")
    placed = wait_until(lambda: [t for t in cluster.tasks(job) if t.get("spec", {}).get("targetRobot") == victim],
                        30, "a task to be placed on the cut-off robot")
    uid = placed[0]["metadata"]["uid"]
    wait_until(lambda: any(is_replacement(line["name"]) for line in cluster.started()), 60, "a replacement to start")
    assert all(line["robot"] != victim for line in cluster.started())
    cluster.proxies[victim].heal()
    agent = cluster.agents[victim]
    wait_until(lambda: uid in agent.log_text(), 30, "the dispatch that waited to arrive")
    cluster.wait_job(job, 180)
    problems = cluster.judge(job)
    assert not problems, "\n".join(problems)
    assert not [line for line in cluster.lines() if line["robot"] == victim], "the dispatch that waited ran"
    assert f"task {uid}: started" not in agent.log_text()  # held, or cancelled before it could be
    assert cluster.job_state(job) == "completed"


def test_a_robot_the_bridge_cannot_hear_stops_its_tasks_in_their_window_though_it_hears_the_bridge(cluster_factory):
    """A link cut one way: the robot still receives (the bridge's resends of a dispatch it has not heard answered),
    but nothing it sends arrives. Only an answered heartbeat is contact, so its task stops by its own window,
    before the manager takes it for lost, and is recorded Disconnected."""
    cluster = cluster_factory()
    job = "one-way"
    victim = "robot-a"
    # In contact first (the bridge has answered a heartbeat): a task that arrives before that waits for it.
    contact = cluster.agents[victim].work_dir / "contact"
    wait_until(lambda: contact.exists() and contact.stat().st_size > 0, 30, "the robot to be in contact")
    cluster.proxies[victim].blackhole(up=True, down=False)
    cluster.run_job(job, 4, 20, stop_after="4s")
    wait_until(lambda: any(line["robot"] == victim for line in cluster.started()), 30,
               "a task to start on the robot the bridge cannot hear")
    victim_uids = {line["uid"] for line in cluster.started() if line["robot"] == victim}
    wait_until(lambda: any(is_replacement(line["name"]) for line in cluster.started()), 60, "a replacement to start")
    cluster.proxies[victim].heal()
    cluster.wait_job(job, 180)
    problems = cluster.judge(job, expect_once=False)
    assert not problems, "\n".join(problems)
    assert_stopped_for_want_of_contact(cluster, job, victim_uids)
    assert cluster.job_state(job) == "completed"


@pytest.mark.skipif(shutil.which("faketime") is None, reason="Debian's faketime is not installed")
def test_robots_whose_clocks_are_ten_minutes_fast_and_slow_run_each_task_once(cluster_factory):
    """Robots without a battery-backed clock, or with one set wrong: their wall clocks 10 minutes off either way
    (libfaketime preloaded into their agents; the system's monotonic clock, which every timeout and window uses,
    is not theirs to change). Nothing is judged by a robot's wall clock."""
    library = next(p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                               "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1") if os.path.exists(p))
    skewed = {"robot-a": {"LD_PRELOAD": library, "FAKETIME": "+10m", "DONT_FAKE_MONOTONIC": "1"},
              "robot-b": {"LD_PRELOAD": library, "FAKETIME": "-10m", "DONT_FAKE_MONOTONIC": "1"}}
    cluster = cluster_factory(agent_env=skewed)
    job = "clocks"
    cluster.run_job(job, TASKS, SECONDS)
    verdict(cluster, job)
    robots = {line["robot"] for line in cluster.started()}
    assert {"robot-a", "robot-b"} <= robots, robots  # the skewed robots did run tasks
