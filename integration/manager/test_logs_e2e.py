"""kubectl k8s4r logs end to end: the plugin (tools/kubectl-k8s4r-logs) against the real bridge's logs endpoint (over
HTTPS, its caller checked by a TokenReview and a SubjectAccessReview at the stand-in, which enforces RBAC), the real
agents answering over the real broker (TLS, deploy/mosquitto/k8s4r.acl), tasks placed by the real manager. Judged by
what the plugin prints against what each task wrote."""
import http.client
import json
import pathlib
import signal
import ssl
import subprocess
import time

import pytest

from conftest import Observer
from manager_support import (BridgeProcess, apply, broker, free_port, get, group, job, manager_factory,  # noqa: F401
                             robot_phase, robots, sim, tasks_of_job, wait_job, wait_until)
from bridge_support import kubeconfig_of  # noqa: E402 (integration/bridge, on the path manager_support sets)

PLUGIN = pathlib.Path(__file__).resolve().parents[2] / "tools" / "kubectl-k8s4r-logs"
READER_ROLE = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "bridge" / "cluster-role.yaml"


@pytest.fixture
def bridge(tmp_path, broker, sim, tls_files):
    """The bridge of manager_support, serving logs over HTTPS with the test's server certificate."""
    port = free_port()
    made = BridgeProcess(tmp_path / "bridge", broker, sim, [
        "--heartbeat-write-interval", "2s", "--dispatch-resend-after", "2s", "--heartbeat-ack-interval", "500ms",
        "--logs-bind-address", f"127.0.0.1:{port}", "--logs-tls-cert-file", tls_files["cert"],
        "--logs-tls-key-file", tls_files["key"]]).start()
    made.logs_url = f"https://127.0.0.1:{port}"
    yield made
    made.stop()


def user_kubeconfig(sim, account, bind_reader):
    """A kubeconfig whose user is a new ServiceAccount, bound (or not) to deploy/bridge's k8s4r-task-log-reader."""
    sim.kubectl("create", "serviceaccount", account)
    if bind_reader:
        sim.kubectl("apply", "-f", str(READER_ROLE))
        sim.kubectl("create", "rolebinding", f"{account}-logs", "--clusterrole=k8s4r-task-log-reader",
                    f"--serviceaccount=default:{account}")
    return kubeconfig_of(sim, account)


def plugin(bridge, tls_files, kubeconfig, *args):
    command = ["/usr/bin/python3", str(PLUGIN), *args, f"--kubeconfig={kubeconfig}", "-n", "default",
               f"--logs-url={bridge.logs_url}", f"--logs-ca={tls_files['ca']}", "--reconnect-for=60s"]
    return command


def task_named(sim, job_name):
    wait_until(lambda: tasks_of_job(sim, job_name), 30, f"a Task of job {job_name}")
    return tasks_of_job(sim, job_name)[0]["metadata"]["name"]


def wait_running(sim, task_name):
    wait_until(lambda: (get(sim, "rtask", task_name) or {}).get("status", {}).get("state") == "running", 30,
               f"task {task_name} to run")


@pytest.fixture
def fleet(sim, robots, manager_factory):
    manager_factory().start()
    robots("robot-a")
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")


def test_following_a_task_gets_every_line_once_in_order_across_a_bridge_kill_and_returns_when_it_ends(
        sim, bridge, fleet, tls_files, tmp_path):
    # 10,000 lines over about 20 s: 50 lines, then a tenth of a second.
    apply(sim, job("chatty", [group("g", 1, "i=1; while [ $i -le 10000 ]; do echo \"line $i\"; "
                                           "[ $((i % 50)) -eq 0 ] && sleep 0.1; i=$((i+1)); done")]))
    name = task_named(sim, "chatty")
    wait_running(sim, name)
    reader = user_kubeconfig(sim, "operator", bind_reader=True)
    out_path, err_path = tmp_path / "followed.out", tmp_path / "followed.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        follower = subprocess.Popen(plugin(bridge, tls_files, reader, "-f", name), stdout=out, stderr=err)
        try:
            # Mid-stream: the bridge is killed and started again while the task writes.
            wait_until(lambda: out_path.read_bytes().count(b"\n") >= 2000, 30, "2,000 lines followed")
            bridge.process.send_signal(signal.SIGKILL)
            bridge.process.wait()
            lines_at_kill = out_path.read_bytes().count(b"\n")
            bridge.start()
            follower.wait(timeout=90)  # it returns by itself once the task has ended
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
    printed = out_path.read_bytes().decode().splitlines()
    assert follower.returncode == 0, err_path.read_text()
    assert lines_at_kill < 10000, "the bridge was killed after the task had written everything"
    assert printed == [f"line {i}" for i in range(1, 10001)], \
        f"{len(printed)} lines; first wrong: " + next((f"{i}: {line!r}" for i, line in enumerate(printed, 1)
                                                       if line != f"line {i}"), "none")
    assert get(sim, "rtask", name)["status"]["state"] == "completed"


def test_a_finished_task_reads_whole_by_tail_or_by_stream_and_strangers_are_refused(
        sim, bridge, fleet, tls_files):
    apply(sim, job("short", [group("g", 1, "for i in $(seq 1 100); do echo \"out $i\"; echo \"err $i\" >&2; done; "
                                           "printf 'no newline at the end'")]))
    name = task_named(sim, "short")
    wait_job(sim, "short", "completed", 60)
    reader = user_kubeconfig(sim, "operator", bind_reader=True)

    def read(*args, kubeconfig=reader):
        return subprocess.run(plugin(bridge, tls_files, kubeconfig, *args), capture_output=True, timeout=60)

    everything = read(name)
    assert everything.returncode == 0, everything.stderr
    expected = "".join(f"out {i}\n" for i in range(1, 101)) + "no newline at the end"
    assert everything.stdout.decode() == expected
    tail = read("--tail=3", name)
    assert tail.stdout.decode() == "out 99\nout 100\nno newline at the end", tail.stderr
    errors = read("--stderr", "--tail=2", name)
    assert errors.stdout.decode() == "err 99\nerr 100\n", errors.stderr
    # Followed once ended: everything, and it returns at once.
    followed = read("-f", "--tail=1", name)
    assert (followed.returncode, followed.stdout.decode()) == (0, "no newline at the end"), followed.stderr

    # A user who may not read task logs gets nothing but the reason; so does one with no valid token.
    stranger = user_kubeconfig(sim, "stranger", bind_reader=False)
    refused = read(name, kubeconfig=stranger)
    assert refused.returncode == 1 and refused.stdout == b""
    assert b'cannot get resource "tasks/log"' in refused.stderr, refused.stderr
    unknown = read(name, kubeconfig=kubeconfig_of(sim, "forged", token="not-a-token"))
    assert unknown.returncode == 1 and unknown.stdout == b"", unknown.stderr
    assert b"does not know this token" in unknown.stderr, unknown.stderr
    missing = read("no-such-task")
    assert missing.returncode == 1 and b"not found" in missing.stderr, missing.stderr


def test_logs_travel_over_mqtt_only_while_followed_and_since_starts_at_a_time(sim, bridge, broker, fleet,
                                                                               tls_files, tmp_path):
    # With the bridge's login: the operators' read-only one is denied tasks' logs (deploy/mosquitto/k8s4r.acl).
    observer = Observer(broker, topics=("k8s4r/robots/+/logs/#",), username="k8s4r-bridge",
                        password=broker.bridge_password)
    operator = Observer(broker, topics=("k8s4r/robots/+/logs/#",))
    try:
        apply(sim, job("paced", [group("g", 1, "echo early; sleep 4; echo late; "
                                               "while true; do echo tick; sleep 0.2; done")]))
        name = task_named(sim, "paced")
        wait_running(sim, name)
        uid = get(sim, "rtask", name)["metadata"]["uid"]
        written = tmp_path / "work-robot-a" / "tasks" / uid / "stdout.log"  # what the task wrote, on the robot
        reader = user_kubeconfig(sim, "operator", bind_reader=True)
        wait_until(lambda: written.exists() and b"tick" in written.read_bytes(), 30, "the task to tick")
        # Nobody follows: while the task writes ten more lines, nothing about its log is on the broker.
        for watching in (observer, operator):
            with watching.lock:
                watching.messages.clear()
        lines = written.read_bytes().count(b"\n")
        wait_until(lambda: written.read_bytes().count(b"\n") >= lines + 10, 20, "ten more lines")
        for watching in (observer, operator):
            with watching.lock:
                assert watching.messages == [], watching.messages[:3]
        # Since a time: from two seconds back, the ticks, not the lines before them (once "late" is 6 s old: the
        # robot notes its streams' sizes once a second, so a since may start up to a second early, never late).
        wait_until(lambda: written.read_bytes().count(b"tick") >= 30, 30, "30 ticks")
        since = subprocess.run(plugin(bridge, tls_files, reader, "--since=2s", name), capture_output=True, timeout=60)
        assert since.returncode == 0, since.stderr
        assert b"early" not in since.stdout and b"late" not in since.stdout and b"tick\n" in since.stdout, \
            since.stdout[:200]
        assert since.stdout.startswith(b"tick\n"), since.stdout[:50]  # from a line's start
        with observer.lock:
            seen = list(observer.messages)
        with operator.lock:
            seen_by_operator = list(operator.messages)
        # The bridge asked (the operators' login sees that), the robot answered (only the bridge's login sees that).
        assert any(topic.endswith("/logs/request") for topic, _, _ in seen_by_operator), seen_by_operator[:3]
        assert all(topic.endswith("/logs/request") for topic, _, _ in seen_by_operator), seen_by_operator[:3]
        assert any("/logs/chunks/" in topic for topic, _, _ in seen), seen[:3]
        # Every payload on the broker is readable JSON.
        for topic, payload, _ in seen + seen_by_operator:
            json.loads(payload)
    finally:
        observer.close()
        operator.close()


def test_a_reader_that_stops_reading_holds_the_robot_back_instead_of_swamping_the_link(
        sim, bridge, broker, robots, manager_factory, tls_files):
    """Flow control, judged by the link: while the reader takes nothing, the robot sends little more than what fills
    the reader's socket, far short of what the task wrote; once it reads again, it gets every byte, in order."""
    manager_factory().start()
    robots("robot-a", extra=["--max-log-bytes", "200000000"])  # no rotation in the middle
    wait_until(lambda: robot_phase(sim, "robot-a") == "Online", 20, "robot-a to be Online")
    # 30,000,000 bytes at once: lines of 98 zeros and a newline.
    apply(sim, job("flood", [group("g", 1, "yes \"$(printf '%098d' 0)\" | head -c 30000000; sleep 600")]))
    name = task_named(sim, "flood")
    wait_running(sim, name)
    user_kubeconfig(sim, "operator", bind_reader=True)
    token = sim.kubectl("create", "token", "operator").stdout.strip()
    link = Observer(broker, topics=("k8s4r/robots/+/logs/chunks/+",), username="k8s4r-bridge",
                    password=broker.bridge_password)
    try:
        host, port = bridge.logs_url.removeprefix("https://").split(":")
        connection = http.client.HTTPSConnection(host, int(port), timeout=60,
                                                 context=ssl.create_default_context(cafile=tls_files["ca"]))
        connection.request("GET", f"/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks/{name}/log?follow=true",
                           headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        assert response.status == 200, response.read()

        def carried():
            with link.lock:
                return sum(len(json.loads(payload).get("text", "")) for _, payload, _ in link.messages)
        # The reader takes nothing: what the robot sends stops growing (unchanged for two seconds).
        wait_until(lambda: carried() > 0, 20, "the first pieces")
        seen = {"bytes": -1, "since": time.monotonic()}

        def stalled():
            now = carried()
            if now != seen["bytes"]:
                seen.update(bytes=now, since=time.monotonic())
            return time.monotonic() - seen["since"] >= 2
        wait_until(stalled, 60, "the robot to stop sending to a reader that takes nothing")
        assert carried() < 12_000_000, f"{carried()} of 30,000,000 bytes sent to a reader that took none"
        # It reads again: every byte, once, in order (the task still runs: the stream goes on).
        taken = 0
        while taken < 30_000_000:
            record = json.loads(response.readline())
            if "text" in record:
                assert record["offset"] == taken, (record["offset"], taken)
                taken += len(record["text"])
        assert taken == 30_000_000
        connection.close()
    finally:
        link.close()


def test_following_a_task_not_yet_on_its_robot_waits_for_it(sim, bridge, broker, robots, manager_factory,
                                                             tls_files, tmp_path):
    """`kubectl apply` then `kubectl k8s4r logs -f` at once: the Task is not on its robot yet (here: no manager has sent
    it), the robot says it holds no such task, and the follow waits instead of failing; it prints the task's lines
    once it runs, and returns when it ends."""
    robots("robot-a")
    apply(sim, {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
                "metadata": {"name": "early", "namespace": "default"},
                "spec": {"name": "early", "driver": "exec", "targetRobot": "robot-a",
                         "config": {"execConfig": {"command": "/bin/sh", "args": ["-c", "echo one; echo two"]}}}})
    reader = user_kubeconfig(sim, "operator", bind_reader=True)
    answers = Observer(broker, topics=("k8s4r/robots/+/logs/chunks/+",), username="k8s4r-bridge",
                       password=broker.bridge_password)
    try:
        follower = subprocess.Popen(plugin(bridge, tls_files, reader, "-f", "early"), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)

        def not_found_answers():
            with answers.lock:
                return sum(json.loads(p).get("error") == "TaskNotFound" for _, p, _ in answers.messages)
        wait_until(lambda: not_found_answers() >= 2, 30, "the robot to say twice it holds no such task")
        assert follower.poll() is None, follower.communicate()  # still following
        manager_factory().start()  # approves the robot and sends the Task
        out, err = follower.communicate(timeout=60)
        assert (follower.returncode, out) == (0, b"one\ntwo\n"), err
    finally:
        answers.close()
        if follower.poll() is None:
            follower.kill()
            follower.wait()
