"""k8s4r-kube-sim driven by the real kubectl, as a user would."""
import json
import queue
import threading
import time

from conftest import CRDS, EXAMPLES


def test_applies_crds_and_examples_with_server_side_validation(kube_sim):
    sim = kube_sim()
    applied = sim.kubectl("apply", "-f", str(CRDS))
    assert "customresourcedefinition.apiextensions.k8s.io/tasks.robot.k8s4r.io created" in applied.stdout
    # kubectl validates against the served OpenAPI (no --validate=false).
    created = sim.kubectl("apply", "-f", str(EXAMPLES))
    assert "task.robot.k8s4r.io/hello created" in created.stdout
    assert "job.robot.k8s4r.io/hello-batch created" in created.stdout
    assert "robot.robot.k8s4r.io/robot-001 created" in created.stdout
    assert "artifactcache.robot.k8s4r.io/nav-model-v7 created" in created.stdout
    assert "unchanged" in sim.kubectl("apply", "-f", str(EXAMPLES / "task.yaml")).stdout

    names = sim.kubectl("get", "k8s4r", "-o", "name").stdout.split()
    assert sorted(names) == ["artifactcache.robot.k8s4r.io/nav-model-v7", "job.robot.k8s4r.io/hello-batch",
                             "robot.robot.k8s4r.io/robot-001", "task.robot.k8s4r.io/hello"]


def test_printer_columns_in_kubectl_get(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    sim.kubectl("apply", "-f", str(EXAMPLES))
    sim.kubectl("patch", "rtask", "hello", "--subresource=status", "--type=merge",
                "-p", '{"status":{"state":"completed","exitCode":0,"restartCount":1}}')
    sim.kubectl("patch", "rb", "robot-001", "--subresource=status", "--type=merge",
                "-p", '{"status":{"phase":"Online","connected":true,"lastHeartbeatTime":"2026-01-01T00:00:00Z"}}')

    tasks = sim.kubectl("get", "rtask").stdout.splitlines()
    assert tasks[0].split() == ["NAME", "ROBOT", "STATE", "REASON", "EXIT", "CODE", "RESTARTS", "ENDED", "ON", "ROBOT",
                                "AGE"]
    assert tasks[1].split()[:5] == ["hello", "robot-001", "completed", "0", "1"]  # no reason, no end on robot
    # A Task the manager marked Lost whose true end came later says both.
    sim.kubectl("patch", "rtask", "hello", "--subresource=status", "--type=merge",
                "-p", '{"status":{"state":"failed","reason":"Lost","endOnRobot":{"state":"completed","exitCode":0}}}')
    lost = sim.kubectl("get", "rtask").stdout.splitlines()[1].split()
    assert lost[:6] == ["hello", "robot-001", "failed", "Lost", "0", "1"] and lost[6] == "completed", lost

    robots = sim.kubectl("get", "rb").stdout.splitlines()
    assert robots[0].split()[:6] == ["NAME", "ROBOT", "ID", "PHASE", "CONNECTED", "LAST"]
    row = robots[1].split()
    assert row[:4] == ["robot-001", "robot-001", "Online", "true"]
    assert row[4].endswith("d") or row[4].endswith("y")  # last heartbeat long ago, as an age

    wide = sim.kubectl("get", "rtask", "-o", "wide").stdout.splitlines()
    assert "DRIVER" in wide[0] and "exec" in wide[1]


def test_apply_rejects_unknown_fields_and_invalid_values(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    task = (EXAMPLES / "task.yaml").read_text()

    unknown = sim.kubectl("apply", "-f", "-", input=task.replace("driver: exec", "driver: exec\n  bogus: 1"), check=False)
    assert unknown.returncode != 0
    assert 'unknown field "spec.bogus"' in unknown.stderr

    bad_enum = sim.kubectl("apply", "-f", "-", input=task.replace("driver: exec", "driver: podman"), check=False)
    assert bad_enum.returncode != 0
    assert 'The Task "hello" is invalid: spec.driver: Unsupported value: "podman"' in bad_enum.stderr

    bad_type = sim.kubectl("create", "-f", "-", input=task.replace("attempts: 2", "attempts: two"), check=False)
    assert "spec.restartPolicy.attempts: Invalid value" in bad_type.stderr
    assert "must be of type integer" in bad_type.stderr
    assert sim.kubectl("get", "rtask", "-o", "name").stdout == ""  # nothing was stored


def test_status_subresource_is_separate_from_the_main_resource(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    sim.kubectl("apply", "-f", str(EXAMPLES / "task.yaml"))

    sim.kubectl("patch", "rtask", "hello", "--subresource=status", "--type=merge",
                "-p", '{"status":{"state":"running"},"spec":{"targetRobot":"other"}}')
    task = json.loads(sim.kubectl("get", "rtask", "hello", "-o", "json").stdout)
    assert task["status"]["state"] == "running"
    assert task["spec"]["targetRobot"] == "robot-001"
    assert task["metadata"]["generation"] == 1

    sim.kubectl("patch", "rtask", "hello", "--type=merge", "-p", '{"status":{"state":"failed"},"spec":{"user":"robot"}}')
    task = json.loads(sim.kubectl("get", "rtask", "hello", "-o", "json").stdout)
    assert task["status"]["state"] == "running"
    assert task["spec"]["user"] == "robot"
    assert task["metadata"]["generation"] == 2


def test_replace_with_a_stale_resource_version_conflicts(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    sim.kubectl("apply", "-f", str(EXAMPLES / "task.yaml"))
    stale = json.loads(sim.kubectl("get", "rtask", "hello", "-o", "json").stdout)
    sim.kubectl("label", "rtask", "hello", "moved=yes")
    stale["spec"]["user"] = "late"
    result = sim.kubectl("replace", "-f", "-", input=json.dumps(stale), check=False)
    assert result.returncode != 0
    assert "Conflict" in result.stderr and "the object has been modified" in result.stderr
    assert "user" not in json.loads(sim.kubectl("get", "rtask", "hello", "-o", "json").stdout)["spec"]


def test_finalizers_hold_deletion_until_removed(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    sim.kubectl("apply", "-f", str(EXAMPLES / "task.yaml"))
    sim.kubectl("patch", "rtask", "hello", "--type=merge", "-p", '{"metadata":{"finalizers":["k8s4r.io/cleanup"]}}')
    sim.kubectl("delete", "rtask", "hello", "--wait=false")
    held = json.loads(sim.kubectl("get", "rtask", "hello", "-o", "json").stdout)
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["finalizers"] == ["k8s4r.io/cleanup"]

    sim.kubectl("patch", "rtask", "hello", "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
    gone = sim.kubectl("get", "rtask", "hello", check=False)
    assert 'tasks.robot.k8s4r.io "hello" not found' in gone.stderr


def test_delete_waits_for_the_object_to_go(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    sim.kubectl("apply", "-f", str(EXAMPLES / "task.yaml"))
    assert 'task.robot.k8s4r.io "hello" deleted' in sim.kubectl("delete", "rtask", "hello", timeout=20).stdout
    assert sim.kubectl("get", "rtask", "-o", "name").stdout == ""


def test_get_watch_prints_each_change(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    sim.kubectl("apply", "-f", str(EXAMPLES / "task.yaml"))
    watcher = sim.kubectl_popen("get", "rtask", "-w")
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watcher.stdout], daemon=True).start()
    seen = []

    def read_until(text):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(line)
            if text in line:
                return
        raise AssertionError(f"kubectl get -w never printed {text!r}: {seen}")

    try:
        read_until("hello")
        sim.kubectl("patch", "rtask", "hello", "--subresource=status", "--type=merge", "-p", '{"status":{"state":"running"}}')
        read_until("running")
        sim.kubectl("patch", "rtask", "hello", "--subresource=status", "--type=merge",
                    "-p", '{"status":{"state":"completed","exitCode":0}}')
        read_until("completed")
        assert seen[0].split()[0] == "NAME"  # the header, once
        assert sum(1 for line in seen if line.startswith("NAME")) == 1
    finally:
        watcher.kill()
        watcher.wait()


def test_describe_and_yaml_show_the_object_and_its_events(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    sim.kubectl("apply", "-f", str(EXAMPLES / "task.yaml"))
    task = json.loads(sim.kubectl("get", "rtask", "hello", "-o", "json").stdout)
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "hello.1", "namespace": "default"},
             "involvedObject": {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task", "name": "hello",
                                "namespace": "default", "uid": task["metadata"]["uid"]},
             "reason": "Dispatched", "message": "sent to robot-001", "type": "Normal",
             "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1,
             "source": {"component": "k8s4r-bridge"}}
    sim.kubectl("create", "-f", "-", input=json.dumps(event))
    described = sim.kubectl("describe", "rtask", "hello").stdout
    assert "Target Robot:  robot-001" in described
    assert "Dispatched" in described and "sent to robot-001" in described

    as_yaml = sim.kubectl("get", "rtask", "hello", "-o", "yaml").stdout
    assert f"uid: {task['metadata']['uid']}" in as_yaml
    assert "resourceVersion:" in as_yaml and "creationTimestamp:" in as_yaml


def test_namespaces_and_leases(kube_sim):
    sim = kube_sim()
    assert set(sim.kubectl("get", "ns", "-o", "name").stdout.split()) >= {"namespace/default", "namespace/kube-system"}
    sim.kubectl("create", "namespace", "robots")
    sim.apply_crds()
    sim.kubectl("apply", "-n", "robots", "-f", "-", input=(EXAMPLES / "robot.yaml").read_text().replace("namespace: default", "namespace: robots"))
    assert sim.kubectl("get", "rb", "-n", "robots", "-o", "name").stdout.strip() == "robot.robot.k8s4r.io/robot-001"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "k8s4r-manager"},
             "spec": {"holderIdentity": "manager-0", "leaseDurationSeconds": 15}}
    sim.kubectl("create", "-f", "-", input=json.dumps(lease))
    assert "manager-0" in sim.kubectl("get", "lease", "k8s4r-manager").stdout
    sim.kubectl("delete", "namespace", "robots", timeout=20)
    missing = sim.kubectl("get", "rb", "-n", "robots", "-o", "name", check=False)
    assert missing.stdout.strip() == ""
