"""k8s4r-agent, black box: the real binary, a real Mosquitto, real child
processes and signals. A Python MQTT client plays the bridge and reads every
topic as an operator's mosquitto_sub would."""
import hashlib
import http.server
import json
import os
import pathlib
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import types

import pytest

from agent_support import (ROBOT, AgentProcess, Bridge, agent, agent_factory, alive, bridge, count_lines, create, delete,
                           dispatch_topic, heartbeat_topic, processes_marked, register_topic, status_topic,
                           task_cgroup_parent, wait_for_file)
from conftest import FileServer, Observer, binary, wait_until

PRESENCE = f"k8s4r/robots/{ROBOT}/presence"
REGISTER = register_topic(ROBOT)
HEARTBEAT = heartbeat_topic(ROBOT)


# ---- connection, registration, heartbeats -------------------------------------------

def test_help_version_and_config_errors():
    help_text = subprocess.run([binary("k8s4r-agent"), "--help"], capture_output=True, text=True)
    assert help_text.returncode == 0 and "--broker-url" in help_text.stdout and "--robot-id" in help_text.stdout
    version = subprocess.run([binary("k8s4r-agent"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("k8s4r-agent ")
    # Every error at once, and nothing started.
    bad = subprocess.run([binary("k8s4r-agent"), "--robot-id", "Robot+1", "--heartbeat-interval", "soon"],
                         capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert bad.returncode == 2
    assert "broker-url" in bad.stderr and "robot-id" in bad.stderr and "heartbeat-interval" in bad.stderr


def test_registers_heartbeats_and_says_online(broker, bridge, agent):
    register = bridge.wait_for(REGISTER)
    assert register["robotId"] == ROBOT and register["agentVersion"]
    assert register["deviceInfo"]["hostname"] and register["deviceInfo"]["platform"]["os"] == "linux"
    assert register["deviceInfo"]["memory"]["total"] > 0
    assert register["runningTasks"] == []
    beat = bridge.wait_for(HEARTBEAT)
    assert beat["robotId"] == ROBOT and beat["runningTasks"] == [] and "deviceInfo" not in beat

    # Presence is retained: a bridge that starts later learns it at once.
    late = Observer(broker, topics=(PRESENCE,))
    try:
        assert late.wait_for(PRESENCE)["online"] is True
    finally:
        late.close()

    # Unanswered, it registers again; answered, it stops.
    wait_until(lambda: len(bridge.on(REGISTER)) >= 2, 10, "a second register")
    bridge.publish(f"k8s4r/robots/{ROBOT}/response", {"success": True, "robotId": ROBOT, "phase": "Online"})
    time.sleep(0.5)
    count = len(bridge.on(REGISTER))
    time.sleep(5)
    assert len(bridge.on(REGISTER)) == count
    # Heartbeats keep coming on the 1s interval.
    beats = len(bridge.on(HEARTBEAT))
    time.sleep(2.5)
    assert len(bridge.on(HEARTBEAT)) >= beats + 2


def test_legacy_topics_register_and_heartbeat_on_the_shared_topics(bridge, agent_factory):
    # For a Go K8s4r server, which listens on k8s4r/register and k8s4r/heartbeat only.
    agent_factory(extra=("--legacy-topics", "true")).start()
    assert bridge.wait_for("k8s4r/register")["robotId"] == ROBOT
    assert bridge.wait_for("k8s4r/heartbeat")["robotId"] == ROBOT
    assert bridge.on(REGISTER) == [] and bridge.on(HEARTBEAT) == []


def test_refused_registration_is_retried_with_backoff(bridge, agent):
    bridge.wait_for(REGISTER)
    bridge.publish(f"k8s4r/robots/{ROBOT}/response", {"success": False, "message": "robot not approved"})
    wait_until(lambda: "robot not approved" in agent.log_text(), 10, "the refusal in the agent's log")
    wait_until(lambda: len(bridge.on(REGISTER)) >= 3, 20, "two more registers")
    registers = [m["timestamp"] for m in bridge.json_on(REGISTER)]
    assert len(registers) >= 3 and agent.running()


def test_last_will_says_offline_when_the_agent_dies(bridge, agent):
    agent.kill9()
    offline = bridge.wait_for(PRESENCE, lambda m: m["online"] is False)
    assert offline["robotId"] == ROBOT


def test_clean_shutdown_says_offline_and_exits_zero(bridge, agent):
    assert agent.stop() == 0
    assert bridge.wait_for(PRESENCE, lambda m: m["online"] is False)["robotId"] == ROBOT
    assert "disconnected" in agent.log_text()


def test_sigterm_while_a_tls_handshake_hangs_ends_the_agent_cleanly(tmp_path):
    # The adversarial run: SIGABRT (an uncaught mqtt::exception) in 3 of 3 tries. A "broker" that
    # accepts TCP and never answers the TLS handshake keeps Paho's connect in progress.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    silent.settimeout(0.2)
    held, done = [], threading.Event()

    def accept():
        while not done.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        for attempt in range(3):
            agent = AgentProcess(types.SimpleNamespace(url=f"ssl://127.0.0.1:{silent.getsockname()[1]}"),
                                 tmp_path / f"work-{attempt}")
            before = len(held)
            agent.start()
            try:
                wait_until(lambda: len(held) > before, 10, "the agent's TCP connection")
                code = agent.stop()
                assert code == 0, f"exit {code}: {agent.log_text()[-1500:]}"
                assert "shutting down" in agent.log_text()
            finally:
                agent.cleanup()
    finally:
        done.set()
        thread.join()
        for connection in held:
            connection.close()
        silent.close()


# ---- tasks -------------------------------------------------------------------------

def test_dispatch_runs_the_command_and_reports_each_state(bridge, agent, tmp_path):
    script = "echo \"in $PWD as $GREETING\"; echo oops >&2; echo \"$1\""
    bridge.send(create("t-ok", "/bin/sh", ["-c", script, "sh", "first arg; not a shell"], env={"GREETING": "hello"}))
    final = bridge.final("t-ok")
    reports = bridge.statuses("t-ok")
    # Its first `running` is not sent when its end is already queued behind it (a task this short, on a busy
    # machine): the end carries startedAt, and the bridge records the Started event from it.
    assert [r["state"] for r in reports] in (["running", "completed"], ["completed"]), reports
    assert reports[-1]["seq"] == 2
    if len(reports) == 2:
        assert reports[0]["seq"] == 1 and reports[0]["startedAt"] and reports[0]["event"] == "Started"
    assert final["startedAt"]
    assert final["exitCode"] == 0 and final["finishedAt"] and final["taskUid"] == "t-ok" and final["robotId"] == ROBOT
    task_dir = agent.work_dir / "tasks" / "t-ok"
    assert final["logsTail"] == f"in {task_dir} as hello\nfirst arg; not a shell\noops\n"
    assert (task_dir / "stdout.log").read_text().startswith("in ")


def test_failure_reports_exit_code_and_a_missing_command_is_start_failed(bridge, agent):
    bridge.send(create("t-exit3", "/bin/sh", ["-c", "exit 3"]))
    failed = bridge.final("t-exit3")
    assert failed["state"] == "failed" and failed["exitCode"] == 3 and failed["reason"] == "Error"
    bridge.send(create("t-nocmd", "/no/such/command"))
    missing = bridge.final("t-nocmd")
    assert missing["state"] == "failed" and missing["reason"] == "StartFailed"
    assert "/no/such/command" in missing["message"]
    assert [r["state"] for r in bridge.statuses("t-nocmd")] == ["failed"]


def test_duplicate_dispatch_never_starts_a_second_process(bridge, agent, tmp_path):
    runs = tmp_path / "runs"
    message = create("t-dup", "/bin/sh", ["-c", f"echo run >> {runs}; sleep 1.5"])
    bridge.send(message)
    bridge.wait_for(status_topic("t-dup"), lambda m: m["state"] == "running")
    bridge.send(message)  # a resend while it runs
    wait_until(lambda: len(bridge.statuses("t-dup")) >= 2, 5, "a re-report")
    assert bridge.statuses("t-dup")[1]["state"] == "running"
    bridge.final("t-dup")
    bridge.send(message)  # and after it finished
    wait_until(lambda: len(bridge.statuses("t-dup")) >= 4, 5, "a re-report of the final state")
    reports = bridge.statuses("t-dup")
    assert reports[-1]["state"] == "completed"
    seqs = [r["seq"] for r in reports]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    time.sleep(0.5)
    assert count_lines(runs) == 1


def test_delete_stops_the_whole_process_tree(bridge, agent, tmp_path):
    child_pid_file = tmp_path / "child.pid"
    bridge.send(create("t-tree", "bash", ["-c", f"sleep 1000 & echo $! > {child_pid_file}; wait"], killTimeout="2s"))
    child = int(wait_for_file(child_pid_file))
    assert alive(child)
    started = time.monotonic()
    bridge.send(delete("t-tree"))
    final = bridge.final("t-tree")
    assert final["state"] == "failed" and final["reason"] == "Cancelled"
    assert final["exitCode"] == 143 and final["signal"] == 15
    assert time.monotonic() - started < 2  # SIGTERM was enough; no wait for the kill timeout
    wait_until(lambda: not alive(child), 5, "the grandchild to be gone")
    assert processes_marked(agent.work_dir) == []


def test_timeout_sigterm_then_sigkill_for_a_task_that_ignores_sigterm(bridge, agent):
    # trap '' TERM is inherited by sleep, so the whole group ignores SIGTERM.
    bridge.send(create("t-stubborn", "/bin/sh", ["-c", "trap '' TERM; echo ignoring; sleep 100"],
                       timeout="1s", killTimeout="1s"))
    running = bridge.wait_for(status_topic("t-stubborn"), lambda m: m["state"] == "running")
    final = bridge.final("t-stubborn")
    assert final["state"] == "failed" and final["reason"] == "Timeout"
    assert final["exitCode"] == 137 and final["signal"] == 9 and final["event"] == "Killed"
    assert "1s" in final["message"] and "ignoring" in final["logsTail"]
    assert "SIGTERM" in agent.log_text() and "SIGKILL" in agent.log_text()
    assert processes_marked(agent.work_dir) == []


def test_timeout_of_a_task_that_stops_on_sigterm(bridge, agent):
    bridge.send(create("t-slow", "sleep", ["100"], timeout="500ms", killTimeout="10s"))
    final = bridge.final("t-slow")
    assert final["reason"] == "Timeout" and final["exitCode"] == 143 and final["signal"] == 15


def test_restart_policy_is_applied_locally(bridge, agent, tmp_path):
    runs = tmp_path / "runs"
    bridge.send(create("t-retry", "/bin/sh", ["-c", f"echo run >> {runs}; exit 1"],
                       restartPolicy={"attempts": 2, "interval": "1m", "delay": "200ms", "mode": "fail"}))
    final = bridge.final("t-retry")
    assert final["state"] == "failed" and final["restartCount"] == 2 and final["exitCode"] == 1
    assert count_lines(runs) == 3
    events = [r["event"] for r in bridge.statuses("t-retry")]
    # Its first `running` is not sent when its restart was queued before it went out (docs/agent.md#reports-are-not-lost).
    assert events in (["Started", "Restarting", "Started", "Restarting", "Started", "Exited"],
                      ["Restarting", "Started", "Restarting", "Started", "Exited"]), events
    # A task that succeeds after a restart completes.
    marker = tmp_path / "second-time"
    bridge.send(create("t-retry-ok", "/bin/sh", ["-c", f"test -e {marker} || {{ touch {marker}; exit 7; }}"],
                       restartPolicy={"attempts": 3, "delay": "100ms"}))
    ok = bridge.final("t-retry-ok")
    assert ok["state"] == "completed" and ok["restartCount"] == 1


def test_unsupported_driver_and_wrong_robot_are_refused(bridge, agent, tmp_path):
    docker = create("t-docker", "ignored")
    docker["task"]["spec"]["driver"] = "docker"
    docker["task"]["spec"]["config"] = {"dockerConfig": {"image": "busybox"}}
    bridge.send(docker)
    assert bridge.final("t-docker")["reason"] == "UnsupportedDriver"
    elsewhere = create("t-elsewhere", "/bin/true", targetRobot="robot-2")
    bridge.send(elsewhere)
    assert bridge.final("t-elsewhere")["reason"] == "NotRunnableHere"


# ---- artifacts ------------------------------------------------------------------------

@pytest.fixture
def http_files(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **kw)
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_artifacts_with_good_and_bad_checksums(bridge, agent, tmp_path, http_files):
    root, url = http_files
    content = b"#!/bin/sh\necho artifact ran\n"
    (root / "tool.sh").write_bytes(content)
    digest = hashlib.sha256(content).hexdigest()
    local = tmp_path / "config.txt"
    local.write_text("from a file URL\n")

    good = create("t-art", "/bin/sh", ["-c", "sh local/tool.sh; cat conf/settings.txt"],
                  artifacts=[{"getterSource": f"{url}/tool.sh", "relativeDest": "local/",
                              "getterOptions": {"checksum": f"sha256:{digest}"}},
                             {"getterSource": f"file://{local}", "relativeDest": "conf/settings.txt",
                              "getterMode": "file"}])
    bridge.send(good)
    final = bridge.final("t-art")
    assert final["state"] == "completed", final
    assert final["logsTail"] == "artifact ran\nfrom a file URL\n"

    ran = tmp_path / "ran"
    bad = create("t-art-bad", "/bin/sh", ["-c", f"touch {ran}"],
                 artifacts=[{"getterSource": f"{url}/tool.sh", "relativeDest": "local/",
                             "getterOptions": {"checksum": "sha256:" + "0" * 64}}])
    bridge.send(bad)
    failed = bridge.final("t-art-bad")
    assert failed["state"] == "failed" and failed["reason"] == "DownloadFailed"
    assert "checksum mismatch" in failed["message"]
    assert [r["state"] for r in bridge.statuses("t-art-bad")] == ["failed"]
    assert not ran.exists()
    assert not (agent.work_dir / "tasks" / "t-art-bad" / "local" / "tool.sh").exists()

    missing = create("t-art-404", "/bin/true", artifacts=[{"getterSource": f"{url}/nope.bin"}])
    bridge.send(missing)
    assert bridge.final("t-art-404")["reason"] == "DownloadFailed"
    escape = create("t-art-escape", "/bin/true",
                    artifacts=[{"getterSource": f"{url}/tool.sh", "relativeDest": "../../outside"}])
    bridge.send(escape)
    assert "leaves the task directory" in bridge.final("t-art-escape")["message"]


@pytest.fixture
def counted_http(tmp_path):
    server = FileServer(tmp_path / "counted")
    yield server.root, server.url, server.asked
    server.close()


def test_an_artifact_is_downloaded_once_kept_by_its_checksum_and_a_corrupt_copy_is_fetched_again(
        bridge, agent_factory, observer, tmp_path, counted_http):
    """The robot's artifact store, judged by what the server was asked for and what each task read: the first task
    downloads; a second naming the same URL and checksum gets it from the store, also across an agent killed with -9
    and started again; another URL with the same checksum is fetched once (knowing a checksum is not being allowed
    the content), then served too; a store entry changed on disk is dropped and the artifact downloaded again; an
    artifact without a checksum is never kept."""
    root, url, asked = counted_http
    content = b"#!/bin/sh\necho model v7\n"
    (root / "model.sh").write_bytes(content)
    (root / "mirror").mkdir()
    (root / "mirror" / "model.sh").write_bytes(content)
    checksum = "sha256:" + hashlib.sha256(content).hexdigest()
    agent = agent_factory().start()
    observer.wait_for(f"k8s4r/robots/{ROBOT}/presence", lambda m: m["online"])
    read = tmp_path / "read"

    def run(uid, source, with_checksum=True):
        options = {"getterOptions": {"checksum": checksum}} if with_checksum else {}
        bridge.send(create(uid, "/bin/sh", ["-c", f"echo {uid} $(sh local/model.sh) >> {read}"],
                           artifacts=[{"getterSource": source, "relativeDest": "local/", **options}]))
        final = bridge.final(uid)
        assert final["state"] == "completed", final

    run("t-store-1", f"{url}/model.sh")
    assert asked == ["/model.sh"]
    entry = agent.work_dir / "artifacts" / checksum.replace(":", "-")
    assert entry.read_bytes() == content
    assert oct(entry.parent.stat().st_mode & 0o777) == "0o700"

    run("t-store-2", f"{url}/model.sh")
    assert asked == ["/model.sh"]  # not asked again: the store had it
    assert "from the robot's store" in agent.log_text()
    # Knowing the checksum is not enough: a URL the entry never came from is fetched (and then served too).
    run("t-store-2m", f"{url}/mirror/model.sh")
    assert asked == ["/model.sh", "/mirror/model.sh"]
    run("t-store-2n", f"{url}/mirror/model.sh")
    assert asked == ["/model.sh", "/mirror/model.sh"]

    agent.kill9()
    agent.start()
    observer.wait_for(f"k8s4r/robots/{ROBOT}/presence", lambda m: m["online"])
    run("t-store-3", f"{url}/model.sh")
    assert asked == ["/model.sh", "/mirror/model.sh"]

    entry.write_bytes(b"#!/bin/sh\necho tampered\n")
    run("t-store-4", f"{url}/model.sh")
    assert asked == ["/model.sh", "/mirror/model.sh", "/model.sh"]  # dropped, downloaded again
    assert entry.read_bytes() == content
    assert "did not match it; dropped, downloading again" in agent.log_text()

    run("t-store-5", f"{url}/mirror/model.sh", with_checksum=False)
    assert asked[-1] == "/mirror/model.sh"
    assert sorted(p.name for p in entry.parent.iterdir()) == [entry.name, entry.name + ".sources"]
    assert read.read_text().splitlines() == [f"t-store-{n} model v7" for n in ["1", "2", "2m", "2n", "3", "4", "5"]]


@pytest.mark.skipif(os.geteuid() != 0, reason="runs tasks as another user")
def test_a_task_run_as_another_user_gets_only_what_that_user_may_read(broker, bridge, agent_factory):
    # The adversarial run: artifacts were fetched as root and handed to the task's user (a file URL
    # read any file), and task directories were readable by every local user.
    place = pathlib.Path(tempfile.mkdtemp(prefix="k8s4r-runas-"))
    agent = None
    try:
        place.chmod(0o755)  # pytest's tmp_path is root's alone; nobody must reach the files and its work dir
        secret, public = place / "secret.txt", place / "public.txt"
        secret.write_text("root only\n")
        secret.chmod(0o600)
        public.write_text("for anyone\n")
        public.chmod(0o644)
        agent = agent_factory(work_dir=place / "work").start()
        bridge.wait_for(PRESENCE, lambda m: m["online"])
        assert oct(os.stat(place / "work" / "tasks").st_mode & 0o777) == "0o711"

        def artifact(path):
            return [{"getterSource": f"file://{path}", "relativeDest": "conf/file.txt", "getterMode": "file"}]
        script = 'cat conf/file.txt; id -un; stat -c %a:%U "$PWD"'
        bridge.send(create("t-as-nobody", "/bin/sh", ["-c", script], user="nobody", artifacts=artifact(public)))
        final = bridge.final("t-as-nobody")
        assert final["state"] == "completed", final
        assert final["logsTail"] == "for anyone\nnobody\n700:nobody\n"

        bridge.send(create("t-steal", "/bin/sh", ["-c", f"touch {place}/ran"], user="nobody",
                           artifacts=artifact(secret)))
        stolen = bridge.final("t-steal")
        assert stolen["state"] == "failed" and stolen["reason"] == "DownloadFailed", stolen
        assert "not readable by the task's user" in stolen["message"] and "Permission denied" in stolen["message"]
        assert "root only" not in json.dumps(bridge.statuses("t-steal"))
        assert not (place / "ran").exists()
        assert not list((agent.work_dir / "tasks" / "t-steal").rglob("file.txt*"))

        # Root reads a task's logs (their tail travels in its status) never through a link the task put in their
        # place, and never blocks on a FIFO there.
        bridge.send(create("t-peek", "/bin/sh", ["-c", f"ln -sf {secret} stdout.log; rm stderr.log; mkfifo stderr.log"],
                           user="nobody"))
        peeked = bridge.final("t-peek")
        assert peeked["state"] == "completed", peeked
        assert "root only" not in json.dumps(bridge.statuses("t-peek"))

        # Nor writes through one: a task that replaced its log with a link (to /etc/passwd, say) must not get root,
        # which opens the logs, to write its output through it when it restarts: the restart is refused.
        precious = place / "precious"
        precious.write_text("root's\n")
        precious.chmod(0o644)
        bridge.send(create("t-link", "/bin/sh", ["-c", f'echo "evil::0:0::/:/bin/sh"; ln -sf {precious} stdout.log; '
                                                       'exit 1'], user="nobody",
                           restartPolicy={"attempts": 1, "delay": "100ms", "mode": "fail"}))
        linked = bridge.final("t-link")
        assert precious.read_text() == "root's\n"
        assert linked["state"] == "failed" and linked["reason"] == "StartFailed", linked
        assert "stdout" in linked["message"] and "symbolic links" in linked["message"], linked

        # Nothing the task puts in its environment reaches a process running as root: an LD_PRELOAD
        # library of the task's records every uid it is loaded as, and only nobody's may appear.
        source, library, loads = place / "preload.c", place / "preload.so", place / "loads"
        loads.touch()
        loads.chmod(0o666)
        source.write_text('#include <stdio.h>\n#include <unistd.h>\n'
                          '__attribute__((constructor)) static void mark(void) {\n'
                          f'  FILE* f = fopen("{loads}", "a"); if (f) {{ fprintf(f, "%d\\n", (int)getuid()); fclose(f); }}\n'
                          '}\n')
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
        library.chmod(0o755)
        bridge.send(create("t-preload", "/bin/true", [], user="nobody", env={"LD_PRELOAD": str(library)}))
        assert bridge.final("t-preload")["state"] == "completed"
        uids = set(loads.read_text().split())
        assert uids == {str(pwd.getpwnam("nobody").pw_uid)}, f"loaded as uids {uids}"

        # The agent's own tasks read with the agent's permissions, as before; their directory is private too.
        bridge.send(create("t-as-agent", "/bin/sh", ["-c", 'cat conf/file.txt; stat -c %a "$PWD"'],
                           artifacts=artifact(secret)))
        assert bridge.final("t-as-agent")["logsTail"] == "root only\n700\n"
        assert agent.stop() == 0

        # Where the config says so, nothing runs as root: tasks without spec.user run as task-user,
        # and a task that asks for root is refused.
        agent = agent_factory(work_dir=place / "work", extra=["--task-user", "nobody",
                                                               "--allow-root-tasks", "false"]).start()
        bridge.send(create("t-default-user", "/bin/sh", ["-c", "id -un; echo $USER"]))
        assert bridge.final("t-default-user")["logsTail"] == "nobody\nnobody\n"
        bridge.send(create("t-root", "/bin/sh", ["-c", f"touch {place}/ran-as-root"], user="root"))
        refused = bridge.final("t-root")
        assert refused["reason"] == "NotRunnableHere" and "allow-root-tasks is false" in refused["message"], refused
        assert not (place / "ran-as-root").exists()
    finally:
        if agent:
            agent.stop()
        shutil.rmtree(place, ignore_errors=True)


# ---- bad input -------------------------------------------------------------------------

def test_bad_dispatches_are_refused_and_the_agent_keeps_running(bridge, agent):
    bridge.publish(dispatch_topic(), "this is not json")
    nospec = create("t-nospec", "/bin/true")
    del nospec["task"]["spec"]
    bridge.publish(dispatch_topic(), json.dumps(nospec))
    bridge.publish(dispatch_topic(), json.dumps(create("Bad+Uid/#", "/bin/true")))
    bridge.publish(dispatch_topic(), json.dumps({"action": "explode", "task": {"metadata": {"uid": "t-action"}}}))
    wrong_type = create("t-type", "/bin/true")
    wrong_type["task"]["spec"]["timeout"] = 30
    bridge.publish(dispatch_topic(), json.dumps(wrong_type))
    # Durations at Go's limit would wrap a deadline and take effect at once.
    bridge.publish(dispatch_topic(), json.dumps(create("t-forever", "sleep", ["100"], timeout="2562047h47m16.854775807s")))
    bridge.publish(dispatch_topic(), json.dumps(create("t-delay", "/bin/false", [],
                                                       restartPolicy={"attempts": 1, "delay": "9223372036854775807ns"})))
    huge = create("t-huge", "/bin/true", env={"BIG": "x" * (10 * 1024 * 1024)})
    bridge.publish(dispatch_topic(), json.dumps(huge))
    # About 200 KB nested inside the spec, under the size limit: this crashed the agent.
    deep = json.dumps(create("t-deep", "/bin/true")).replace('"driver"', '"future": ' + "[" * 100000 + "]" * 100000
                                                             + ', "driver"', 1)
    bridge.publish(dispatch_topic(), deep)

    nospec = bridge.final("t-nospec")
    assert nospec["state"] == "failed" and nospec["reason"] == "InvalidTask" and "spec" in nospec["message"]
    assert bridge.final("t-action")["reason"] == "InvalidTask"
    deep = bridge.final("t-deep")
    assert deep["reason"] == "InvalidTask" and "nests deeper than 64 levels" in deep["message"]
    typed = bridge.final("t-type")
    assert typed["reason"] == "InvalidTask" and "timeout" in typed["message"]
    for uid, field in (("t-forever", "timeout"), ("t-delay", "restartPolicy.delay")):
        refused = bridge.final(uid)
        assert refused["reason"] == "InvalidTask" and field in refused["message"], refused
        assert "longer than the maximum of 87600h0m0s" in refused["message"]
        assert [r["state"] for r in bridge.statuses(uid)] == ["failed"]  # never started
    wait_until(lambda: "refused a dispatch: payload is not valid JSON" in agent.log_text(), 5, "a logged refusal")
    wait_until(lambda: "over the limit of 262144" in agent.log_text(), 5, "the oversized payload logged")
    assert "must not contain '+', '#' or '/'" in agent.log_text()
    # No topic was built from the bad uid, and nothing ran.
    assert not any("Bad" in topic for topic, _, _ in bridge.messages)
    assert bridge.on(status_topic("t-huge")) == []
    # Still working.
    bridge.send(create("t-after", "/bin/true"))
    assert bridge.final("t-after")["state"] == "completed"
    assert agent.running()


def test_messages_for_another_robot_are_not_acted_on(broker, bridge, agent_factory, tmp_path):
    one = agent_factory("robot-1").start()
    two = agent_factory("robot-2").start()
    for robot in ("robot-1", "robot-2"):
        bridge.wait_for(f"k8s4r/robots/{robot}/presence", lambda m: m["online"])
    marker = tmp_path / "ran"
    bridge.send(create("t-mine", "/bin/sh", ["-c", f"echo $K8S4R_ROBOT_ID >> {marker}"]))
    assert bridge.final("t-mine")["state"] == "completed"
    assert marker.read_text() == "robot-1\n"
    assert bridge.on(status_topic("t-mine", "robot-2")) == []


# ---- resilience ---------------------------------------------------------------------------

def test_broker_restart_while_tasks_run_loses_no_status(broker, agent_factory, tmp_path):
    agent = agent_factory().start()
    bridge = Bridge(broker)
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    uids = [f"t-outage-{i}" for i in range(5)]
    for uid in uids:
        bridge.send(create(uid, "sleep", ["1.5"]))
    running_seq = {uid: bridge.wait_for(status_topic(uid), lambda m: m["state"] == "running")["seq"] for uid in uids}
    bridge.close()
    broker.stop()
    time.sleep(3)  # every task ends while the broker is down
    assert "lost the broker" in agent.log_text()
    broker.start()
    bridge = Bridge(broker)
    try:
        for uid in uids:
            final = bridge.final(uid, timeout=60)
            assert final["state"] == "completed"
            assert final["seq"] > running_seq[uid]  # what was reported before the outage stays older
        # It came back: presence online again.
        bridge.wait_for(PRESENCE, lambda m: m["online"])
        # Each acknowledged report left the on-disk queue.
        wait_until(lambda: agent.queued_reports() == set(), 5, "an empty report queue")
    finally:
        bridge.close()


def final_reports(bridge):
    """Every task's final report so far, from one pass over what the bridge received."""
    with bridge.lock:
        received = [(topic, payload) for topic, payload, _ in bridge.messages if topic.endswith("/status")]
    finals = {}
    for _, payload in received:
        report = json.loads(payload)
        if report["state"] in ("completed", "failed"):
            finals[report["taskUid"]] = report
    return finals


def test_a_burst_of_a_thousand_dispatches_runs_each_once_and_heartbeats_go_on(bridge, agent, tmp_path):
    # The adversarial run: 1,000 dispatches at once took 155 s, and heartbeats stopped for 77 s
    # listing finished tasks as running. Group commit makes the burst a few syncs.
    ran = tmp_path / "ran"
    ran.mkdir()
    uids = [f"t-burst-{i}" for i in range(1000)]
    first_beat = len(bridge.on(HEARTBEAT))
    started = time.monotonic()
    for uid in uids:
        bridge.send(create(uid, "/bin/sh", ["-c", f"echo once >> {ran}/{uid}"]))
    finals = wait_until(lambda: (f := final_reports(bridge)) and len(f) == len(uids) and f, 300,
                        "every task of the burst finished")
    took = time.monotonic() - started
    assert all(finals[uid]["state"] == "completed" for uid in uids)
    assert all((ran / uid).read_text() == "once\n" for uid in uids)  # each ran exactly once
    with bridge.lock:
        seqs = {}
        for topic, payload, _ in bridge.messages:
            if topic.endswith("/status"):
                report = json.loads(payload)
                seqs.setdefault(report["taskUid"], set()).add(report["seq"])
    # A `running` report and the final one, or the final one alone when it was queued before `running` went out
    # (docs/agent.md#reports-are-not-lost): never a third, and the final one is the newest. One counter serves every task,
    # so no seq appears for two tasks.
    assert all(len(seqs[uid]) in (1, 2) and max(seqs[uid]) == finals[uid]["seq"] for uid in uids), \
        {uid: sorted(seqs.get(uid, ())) for uid in uids if len(seqs.get(uid, ())) not in (1, 2)}
    assert len(set().union(*seqs.values())) == sum(len(s) for s in seqs.values())
    # Heartbeats (every 1 s) went on through the burst: no gap near the 77 s seen before. Counted from
    # the last heartbeat before it to the first after it.
    done_at = len(bridge.on(HEARTBEAT))
    wait_until(lambda: len(bridge.on(HEARTBEAT)) > done_at, 10, "a heartbeat after the burst")
    beats = bridge.arrival_times(HEARTBEAT)[max(first_beat - 1, 0):]
    gaps = [later - earlier for earlier, later in zip(beats, beats[1:])]
    print(f"burst of {len(uids)}: {took:.1f} s; longest heartbeat gaps {[round(g, 2) for g in sorted(gaps)[-3:]]} s")
    assert gaps and max(gaps) < 10, f"heartbeat gaps {sorted(gaps)[-3:]} s during a {took:.1f} s burst"
    # And the next ones no longer list tasks that ended.
    wait_until(lambda: any(not beat.get("runningTasks") for beat in bridge.json_on(HEARTBEAT)[done_at:]),
               10, "a heartbeat after the burst with no running tasks")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs as the agent's work dir")
def test_a_full_disk_starts_nothing_loses_no_report_and_recovers(broker, bridge, agent_factory, tmp_path):
    work = tmp_path / "small-disk"
    work.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(work)], check=True)
    marks = tmp_path / "marks"
    marks.mkdir()
    agent = agent_factory(work_dir=work)  # its log is beside the mount, not on it
    # A dispatch whose acceptance record is larger than what a page of state.log has to spare.
    bulky = {"env": {"PADDING": "x" * 8192}}
    try:
        agent.start()
        bridge.wait_for(PRESENCE, lambda m: m["online"])
        bridge.send(create("t-before", "/bin/sh", ["-c", f"echo run >> {marks}/t-before; sleep 2"]))
        started = bridge.wait_for(status_topic("t-before"), lambda m: m["state"] == "running")
        subprocess.run(["dd", "if=/dev/zero", f"of={work}/filler", "bs=64k"], capture_output=True)  # until ENOSPC

        bridge.send(create("t-full", "/bin/sh", ["-c", f"echo run >> {marks}/t-full"], **bulky))
        refused = bridge.final("t-full")
        assert refused["state"] == "failed" and refused["reason"] == "StorageFull", refused
        assert "cannot store its state" in refused["message"]
        assert not (marks / "t-full").exists()  # not started
        # A task that was running ends while the disk is full: its report still arrives.
        done = bridge.final("t-before", timeout=15)
        assert done["state"] == "completed" and done["seq"] > started["seq"]
        assert "no new task starts and reports go out from memory" in agent.log_text()
        # Said at once, not only in the log: in a heartbeat (the bridge writes the Robot's
        # StorageReady condition from it) and in the retained presence.
        beat = bridge.wait_for(HEARTBEAT, lambda m: "storageError" in m, timeout=5)
        assert beat["storageError"]["reason"] == "StorageFull"
        assert "No space left on device" in beat["storageError"]["message"]
        said = bridge.wait_for(PRESENCE, lambda m: "storageError" in m, timeout=5)
        assert said["online"] and said["storageError"] == beat["storageError"]

        (work / "filler").unlink()
        wait_until(lambda: "everything held in memory is stored" in agent.log_text(), 15, "the agent to store its state")
        beats = len(bridge.on(HEARTBEAT))
        wait_until(lambda: any("storageError" not in m for m in bridge.json_on(HEARTBEAT)[beats:]), 5,
                   "a heartbeat without storageError")
        presences = len(bridge.on(PRESENCE))
        wait_until(lambda: any("storageError" not in m for m in bridge.json_on(PRESENCE)[presences - 1:]), 5,
                   "a presence without storageError")
        bridge.send(create("t-after", "/bin/sh", ["-c", f"echo run >> {marks}/t-after"], **bulky))
        assert bridge.final("t-after")["state"] == "completed"

        # What was held in memory is on disk now: after a restart, a resend of each task is
        # answered with its final state (seq going on), and none runs again.
        assert agent.stop() == 0
        agent.start()
        bridge.wait_for(PRESENCE, lambda m: m["online"])
        for uid, final in (("t-full", refused), ("t-before", done)):
            bridge.send(create(uid, "/bin/sh", ["-c", f"echo run >> {marks}/{uid}"]))
            again = bridge.wait_for(status_topic(uid), lambda m, s=final["seq"]: m["seq"] > s)
            assert again["state"] == final["state"] and again.get("reason") == final.get("reason")
        assert not (marks / "t-full").exists()
        assert (marks / "t-before").read_text() == "run\n" and (marks / "t-after").read_text() == "run\n"
    finally:
        agent.cleanup()
        subprocess.run(["umount", "-l", str(work)], check=False)


def test_a_finished_task_is_remembered_past_hundreds_of_others_and_a_restart(broker, bridge, agent_factory, tmp_path):
    # Only the last 256 finished tasks were remembered: a dispatch re-sent later ran again from seq 1.
    agent = agent_factory().start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    marks = tmp_path / "marks"
    first = create("t-first", "/bin/sh", ["-c", f"echo run >> {marks}; echo bye"])
    bridge.send(first)
    final = bridge.final("t-first")
    assert final["state"] == "completed" and final["logsTail"] == "bye\n"
    others = [f"t-other-{i}" for i in range(300)]
    for uid in others:
        bridge.send(create(uid, "/bin/true"))
    wait_until(lambda: others[-1] in final_reports(bridge) and len(final_reports(bridge)) == 301, 120,
               "300 more tasks finished")
    assert agent.stop() == 0
    agent.start()
    register = bridge.wait_for(REGISTER, lambda m: any(t["taskUid"] == others[-1] for t in m["runningTasks"]))
    assert len(register["runningTasks"]) <= 256  # register lists the recent ones, not all it remembers
    assert not (agent.work_dir / "tasks" / "t-first").exists()  # logs kept for the recent ones only

    bridge.send(first)
    again = bridge.wait_for(status_topic("t-first"), lambda m: m["seq"] > final["seq"])
    for field in ("state", "exitCode", "event", "message", "startedAt", "finishedAt"):
        assert again[field] == final[field], field
    assert "logsTail" not in again  # sent with the first final report; not kept for 24 h
    assert count_lines(marks) == 1  # a second run would have reported running before this


def test_after_its_retention_a_finished_task_is_forgotten_and_its_seq_never_reused(broker, bridge, agent_factory,
                                                                                  tmp_path):
    agent = agent_factory(extra=["--finished-task-retention", "1s"]).start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    marks = tmp_path / "marks"
    task = create("t-brief", "/bin/sh", ["-c", f"echo run >> {marks}"])
    bridge.send(task)
    final = bridge.final("t-brief")
    wait_until(lambda: "forgot 1 task(s) finished more than 1s ago" in agent.log_text(), 10, "t-brief forgotten")
    bridge.send(task)  # now it is new work
    wait_until(lambda: count_lines(marks) == 2, 10, "t-brief run again")
    # The task writes its mark before its reports need reach us: wait for the rerun's final one.
    wait_until(lambda: any(r["state"] == "completed" and r["seq"] > final["seq"] for r in bridge.statuses("t-brief")),
               10, "t-brief's second run reported")
    # Each run reports `running` then `completed`, or `completed` alone when it ended before its `running` left.
    statuses = bridge.statuses("t-brief")
    rerun = statuses[statuses.index(final) + 1:]
    assert [r["state"] for r in rerun][-1:] == ["completed"]
    assert all(r["seq"] > final["seq"] for r in rerun)


def test_a_second_agent_on_the_same_work_dir_exits_at_once_with_a_clear_error(broker, bridge, agent_factory, tmp_path):
    work = tmp_path / "shared"
    first = agent_factory(work_dir=work).start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    second = agent_factory(robot="robot-two", work_dir=work).start()
    assert second.process.wait(timeout=10) == 1
    assert f"work dir {work} is in use by another agent (pid {first.process.pid})" in second.log_text()
    assert first.running()
    assert first.stop() == 0

    # Two started at the same moment: exactly one runs.
    pair = [agent_factory(robot=name, work_dir=work) for name in ("robot-a", "robot-b")]
    for each in pair:
        each.start()
    exited = wait_until(lambda: [each for each in pair if not each.running()] or None, 10, "one of the two to exit")
    assert len(exited) == 1 and exited[0].process.returncode == 1
    survivor = next(each for each in pair if each is not exited[0])
    bridge.wait_for(f"k8s4r/robots/{survivor.robot}/presence", lambda m: m["online"])
    assert survivor.running()


def test_dispatch_sent_while_the_agent_is_away_still_arrives(broker, bridge, agent_factory):
    agent = agent_factory().start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    time.sleep(0.3)  # its subscriptions are in place
    assert agent.stop() == 0
    bridge.send(create("t-queued", "/bin/true"))  # held by the broker in the agent's session
    agent.start()
    assert bridge.final("t-queued")["state"] == "completed"


def shims_of(parent):
    """{pid: number of children} of the k8s4r-task-shim processes whose parent is `parent`."""
    stats = {}
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                stats[int(entry.name)] = (fields[0], int(fields[1]), (entry / "comm").read_text().strip())
        except OSError:
            pass
    shims = {pid: 0 for pid, (state, ppid, comm) in stats.items()
             if ppid == parent and comm == "k8s4r-task-shim" and state != "Z"}
    for state, ppid, _ in stats.values():
        if ppid in shims:
            shims[ppid] += 1
    return shims


def test_the_agent_keeps_one_task_shim_ready_and_never_leaves_one_behind(bridge, agent_factory):
    """A task starts in a shim the agent started ahead of it (so its start does not wait for the shim's exec); the
    spare leaves with its agent, even one killed with -9, while the shims of running tasks stay with their tasks."""
    agent = agent_factory().start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    wait_until(lambda: len(shims_of(agent.process.pid)) == 1, 10, "a spare shim")
    [spare] = shims_of(agent.process.pid)
    bridge.send(create("t-in-spare", "sleep", ["100"]))
    bridge.wait_for(status_topic("t-in-spare"), lambda m: m["state"] == "running")
    # The spare took the task, and another is made ready.
    wait_until(lambda: len(shims_of(agent.process.pid)) == 2, 10, "a new spare")
    shims = shims_of(agent.process.pid)
    assert shims[spare] == 1, shims
    [new_spare] = [pid for pid, children in shims.items() if children == 0]
    agent.kill9()
    wait_until(lambda: not alive(new_spare), 5, "the spare to leave with its agent")
    assert alive(spare)  # the task's shim stays with its task
    agent.start()
    wait_until(lambda: "still runs under its shim" in agent.log_text(), 10, "the task adopted")
    wait_until(lambda: len(shims_of(agent.process.pid)) == 1, 10, "a spare of the new agent")
    bridge.send(delete("t-in-spare"))
    assert bridge.final("t-in-spare")["state"] == "failed"
    wait_until(lambda: not alive(spare), 5, "the task's shim to end with its task")
    [last_spare] = shims_of(agent.process.pid)
    assert agent.stop() == 0
    assert not alive(last_spare)


def test_agent_kill9_and_restart_runs_nothing_twice_and_tasks_end_with_their_true_exit_codes(
        broker, bridge, agent_factory, tmp_path):
    agent = agent_factory().start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    runs = tmp_path / "runs"
    # One that outlives the restart, and three that end while the agent is down:
    # a success, a failure and a signal. The agent is not their parent any more;
    # each one's shim is, and keeps how it ended.
    bridge.send(create("t-survivor", "/bin/sh", ["-c", f"echo survivor >> {runs}; sleep 3; echo done"]))
    bridge.send(create("t-gone", "/bin/sh", ["-c", f"echo gone >> {runs}; sleep 0.5"]))
    bridge.send(create("t-gone-failed", "/bin/sh", ["-c", f"echo failed >> {runs}; sleep 0.5; exit 3"]))
    bridge.send(create("t-gone-killed", "/bin/sh", ["-c", f"echo killed >> {runs}; sleep 0.5; kill -TERM $$"]))
    uids = ("t-survivor", "t-gone", "t-gone-failed", "t-gone-killed")
    running = {uid: bridge.wait_for(status_topic(uid), lambda m: m["state"] == "running") for uid in uids}
    agent.kill9()
    wait_until(lambda: count_lines(runs) == 4, 10, "every task to have run")
    time.sleep(1)  # the three short ones end while no agent runs
    survivor_pids = processes_marked(agent.work_dir)
    assert survivor_pids  # the survivor and its shim
    agent.start()

    after = max(r["seq"] for r in running.values())  # seq goes on across the restart
    gone = bridge.final("t-gone")
    assert (gone["state"], gone.get("exitCode"), gone["seq"] > after) == ("completed", 0, True), gone
    failed = bridge.final("t-gone-failed")
    assert (failed["state"], failed["reason"], failed["exitCode"]) == ("failed", "Error", 3), failed
    killed = bridge.final("t-gone-killed")
    assert (killed["state"], killed["exitCode"], killed["signal"]) == ("failed", 143, 15), killed
    wait_until(lambda: "still runs under its shim" in agent.log_text(), 10, "the survivor adopted")
    survivor = bridge.final("t-survivor", timeout=15)
    assert survivor["seq"] > after and survivor["state"] == "completed" and survivor["exitCode"] == 0, survivor
    assert "done" in survivor["logsTail"]  # it ran to its end, not killed
    wait_until(lambda: not any(alive(pid) for pid in survivor_pids), 5, "the survivor and its shim to be gone")
    assert sorted(pathlib.Path(runs).read_text().split()) == ["failed", "gone", "killed", "survivor"]
    # The re-register tells the bridge what the agent holds.
    register = bridge.wait_for(REGISTER, lambda m: any(t["taskUid"] == "t-gone" for t in m["runningTasks"]))
    assert {t["taskUid"] for t in register["runningTasks"]} >= {"t-gone", "t-survivor"}
    # A resend after the restart is answered with the final report, not run.
    bridge.send(create("t-gone", "/bin/sh", ["-c", f"echo gone >> {runs}"]))
    again = bridge.wait_for(status_topic("t-gone"), lambda m: m["seq"] > gone["seq"])
    assert again["state"] == "completed" and again["exitCode"] == 0
    assert sorted(pathlib.Path(runs).read_text().split()) == ["failed", "gone", "killed", "survivor"]
    # The shims' records were read and removed once state.log held the ends.
    wait_until(lambda: not list((agent.work_dir / "exits").iterdir()), 5, "the exit records to be removed")


def cgroup_v2_writable():
    """Whether this test process could make a cgroup v2 (as the agent would, in its own cgroup)."""
    mounts = [line.split(" - ")[0].split()[4] for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()
              if " - cgroup2 " in line]
    own = next((line[3:] for line in pathlib.Path("/proc/self/cgroup").read_text().splitlines()
                if line.startswith("0::")), None)
    if not mounts or own is None:
        return False
    probe = pathlib.Path(mounts[0] + own.rstrip("/")) / f"k8s4r-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def test_a_failed_task_that_ended_while_the_agent_was_down_follows_its_restart_policy(
        broker, bridge, agent_factory, tmp_path):
    agent = agent_factory().start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    runs = tmp_path / "runs"
    bridge.send(create("t-retry", "/bin/sh", ["-c", f"echo run >> {runs}; sleep 0.5; exit 1"],
                       restartPolicy={"attempts": 1, "delay": "100ms", "mode": "fail"}))
    bridge.wait_for(status_topic("t-retry"), lambda m: m["state"] == "running")
    agent.kill9()
    record = agent.work_dir / "exits" / "t-retry.0.json"  # written by the shim when the first run ends
    wait_until(lambda: record.exists() and '"exitCode":1' in record.read_text(errors="replace"), 10,
               "the first run's end")
    agent.start()
    final = bridge.final("t-retry", timeout=15)
    assert (final["state"], final["reason"], final["exitCode"], final["restartCount"]) == ("failed", "Error", 1, 1), final
    assert count_lines(runs) == 2  # restarted once, as its policy says, then failed


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_what_a_task_starts_in_a_new_session_ends_with_it(bridge, agent_factory, tmp_path, cgroups):
    """A child that calls setsid, or double-forks, is not in the task's process group; it must not outlive the
    task, with cgroups (killed by cgroup) and without (the shim, a subreaper, kills the task's orphans)."""
    if cgroups == "auto" and not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 on this machine")
    agent = agent_factory(extra=["--task-cgroups", cgroups]).start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    if cgroups == "auto":
        assert task_cgroup_parent(agent.log_text()) is not None, "cgroup v2 is usable here; the agent must use it"
    pid_file = tmp_path / "escaped.pid"
    double_fork = tmp_path / "double.pid"
    script = (f"setsid sleep 1000 & echo $! > {pid_file}; "
              f"(sh -c 'sleep 1000 & echo $! > {double_fork}' &); "
              f"while [ ! -s {double_fork} ]; do sleep 0.01; done; exit 0")
    bridge.send(create("t-escape", "/bin/sh", ["-c", script]))
    final = bridge.final("t-escape")
    assert final["state"] == "completed"
    for path in (pid_file, double_fork):
        pid = int(wait_for_file(path))
        wait_until(lambda: not alive(pid), 5, f"{path.name} ({pid}) to be gone")
    # The agent says what it cleaned up.
    wait_until(lambda: "process(es) it left behind were killed" in agent.log_text(), 5, "the agent to say so")


def test_a_task_hiding_from_the_restart_sweep_is_found_by_its_cgroup(bridge, agent_factory, tmp_path):
    """kill -9 of the agent and of the task's shim: the restarted agent finds what the task left by its cgroup,
    although it cleared its environment (the mark the fallback sweep looks for) and left its process group."""
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 on this machine")
    agent = agent_factory().start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    parent = task_cgroup_parent(agent.log_text())
    assert parent is not None
    pid_file = tmp_path / "hidden.pid"
    bridge.send(create("t-hide", "/bin/sh", ["-c", f"env -i setsid sleep 1000 & echo $! > {pid_file}; sleep 1000"]))
    bridge.wait_for(status_topic("t-hide"), lambda m: m["state"] == "running")
    hidden = int(wait_for_file(pid_file))
    assert (parent / "t-hide").is_dir()
    agent.kill9()
    # The shim first (were the task's main process to die first, the shim would record its end and kill
    # the rest itself), then the task's main process; the hidden one carries no mark.
    # (The shim carries no mark: it was started as a spare, before its task was known; it is its task's parent.)
    marked = processes_marked(agent.work_dir)
    parents = {int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in marked}
    shims = [pid for pid in parents if pathlib.Path(f"/proc/{pid}/comm").read_text().strip() == "k8s4r-task-shim"]
    assert len(shims) == 1
    for pid in shims + marked:
        os.kill(pid, signal.SIGKILL)
    assert alive(hidden) and hidden not in processes_marked(agent.work_dir)
    agent.start()
    final = bridge.final("t-hide")
    assert final["state"] == "failed" and final["reason"] == "ExitUnknown", final
    assert "without recording it" in final["message"]
    wait_until(lambda: not alive(hidden), 5, "the hidden process to be gone")
    wait_until(lambda: not (parent / "t-hide").exists(), 5, "the task's cgroup to be removed")


def test_timeout_still_enforced_after_an_agent_restart(broker, bridge, agent_factory):
    agent = agent_factory().start()
    bridge.wait_for(PRESENCE, lambda m: m["online"])
    bridge.send(create("t-adopted-timeout", "sleep", ["100"], timeout="3s", killTimeout="1s"))
    bridge.wait_for(status_topic("t-adopted-timeout"), lambda m: m["state"] == "running")
    agent.kill9()
    agent.start()
    started = time.monotonic()
    final = bridge.final("t-adopted-timeout", timeout=15)
    assert final["reason"] == "Timeout" and time.monotonic() - started < 6
    assert processes_marked(agent.work_dir) == []


def test_sigterm_stops_running_tasks_and_reports_them(bridge, agent):
    bridge.send(create("t-long", "sleep", ["100"], killTimeout="2s"))
    bridge.wait_for(status_topic("t-long"), lambda m: m["state"] == "running")
    assert agent.stop() == 0
    final = bridge.final("t-long")
    assert final["state"] == "failed" and final["reason"] == "AgentShutdown" and final["exitCode"] == 143
    assert processes_marked(agent.work_dir) == []
    # Its final report went out before the agent said offline.
    order = [topic for topic, _, _ in bridge.messages if topic in (PRESENCE, status_topic("t-long"))]
    assert order[-1] == PRESENCE


def test_a_cancelled_task_is_not_restarted_and_leaves_no_background_child(bridge, agent, tmp_path):
    runs = tmp_path / "runs"
    bridge.send(create("t-cancel-retry", "/bin/sh", ["-c", f"echo run >> {runs}; sleep 100"],
                       restartPolicy={"attempts": 3, "delay": "100ms", "mode": "fail"}))
    bridge.wait_for(status_topic("t-cancel-retry"), lambda m: m["state"] == "running")
    bridge.send(delete("t-cancel-retry"))
    final = bridge.final("t-cancel-retry")
    assert final["reason"] == "Cancelled" and final["restartCount"] == 0
    time.sleep(0.5)
    assert count_lines(runs) == 1

    # A leader that exits on its own takes its background children with it.
    child_pid_file = tmp_path / "bg.pid"
    bridge.send(create("t-bg", "/bin/sh", ["-c", f"sleep 1000 & echo $! > {child_pid_file}; exit 0"]))
    assert bridge.final("t-bg")["state"] == "completed"
    child = int(wait_for_file(child_pid_file))
    wait_until(lambda: not alive(child), 5, "the background child to be gone")


def test_the_store_keeps_to_its_quota_by_letting_the_least_recently_used_go(bridge, agent_factory, observer, tmp_path,
                                                                            counted_http):
    """The store's quota, judged by what the server was asked for and what the store directory holds: with room for
    two artifacts of three, the one used least recently goes when the third comes, and only it is fetched again."""
    root, url, asked = counted_http
    content = {name: f"#!/bin/sh\necho {name}{'.' * 30}\n".encode() for name in ("a", "b", "c")}
    for name, data in content.items():
        (root / f"{name}.sh").write_bytes(data)
    agent = agent_factory(extra=["--artifact-store-bytes", str(2 * len(content["a"]) + 10)]).start()
    observer.wait_for(f"k8s4r/robots/{ROBOT}/presence", lambda m: m["online"])

    def run(uid, name):
        checksum = "sha256:" + hashlib.sha256(content[name]).hexdigest()
        bridge.send(create(uid, "/bin/sh", ["-c", f"sh local/{name}.sh"],
                           artifacts=[{"getterSource": f"{url}/{name}.sh", "relativeDest": "local/",
                                       "getterOptions": {"checksum": checksum}}]))
        final = bridge.final(uid)
        assert final["state"] == "completed" and final["logsTail"].startswith(name), final

    def held():
        store = agent.work_dir / "artifacts"
        return sorted(content_name for content_name, data in content.items()
                      if (store / ("sha256-" + hashlib.sha256(data).hexdigest())).exists())

    run("t-q1", "a")
    run("t-q2", "b")
    run("t-q3", "a")  # from the store: a is now the most recently used
    assert asked == ["/a.sh", "/b.sh"]
    run("t-q4", "c")  # no room for three: b, the least recently used, goes
    assert held() == ["a", "c"]
    run("t-q5", "a")
    assert asked == ["/a.sh", "/b.sh", "/c.sh"]  # a was kept
    run("t-q6", "b")
    assert asked == ["/a.sh", "/b.sh", "/c.sh", "/b.sh"]  # b was not
