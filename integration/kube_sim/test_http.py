"""k8s4r-kube-sim over raw HTTP(S): TLS and tokens, bad bodies, faults, and
many watches at once."""
import http.client
import json
import threading
import time

import pytest
from kubernetes import client, config

from conftest import EXAMPLES

TASKS = "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks"


def example_task(name="t"):
    return {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task", "metadata": {"name": name},
            "spec": {"name": name, "driver": "exec", "config": {"execConfig": {"command": "/bin/true"}}}}


def open_watch(sim, query):
    host, port = sim.url.split("://")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", f"{TASKS}?watch=1&{query}")
    response = connection.getresponse()
    assert response.status == 200
    return connection, response


def test_tls_and_bearer_token_with_kubectl_and_python(kube_sim, tls_files):
    sim = kube_sim(token="s3cret", tls=tls_files)
    assert sim.url.startswith("https://127.0.0.1:")
    sim.apply_crds()
    sim.kubectl("apply", "-f", str(EXAMPLES / "robot.yaml"))
    assert "robot-001" in sim.kubectl("get", "rb").stdout

    api_client = config.new_client_from_config(config_file=str(sim.kubeconfig))
    try:
        robots = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            "robot.k8s4r.io", "v1alpha1", "default", "robots")
        assert [item["metadata"]["name"] for item in robots["items"]] == ["robot-001"]
    finally:
        api_client.close()

    status, _, body = sim.request("GET", "/api/v1/namespaces", token=False)
    assert status == 401 and body["reason"] == "Unauthorized"
    status, _, _ = sim.request("GET", "/api/v1/namespaces", headers={"Authorization": "Bearer wrong"}, token=False)
    assert status == 401
    wrong = sim.kubectl("get", "rb", "--token", "wrong", check=False)
    assert wrong.returncode != 0 and "Unauthorized" in wrong.stderr
    status, _, version = sim.request("GET", "/version", token=False)  # as the real server, /version is public
    assert status == 200 and version["major"] == "1"


def test_bad_bodies_change_nothing(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    status, _, body = sim.request("POST", TASKS, "{not json")
    assert status == 400 and body["reason"] == "BadRequest"

    missing_driver = example_task()
    del missing_driver["spec"]["driver"]
    status, _, body = sim.request("POST", TASKS, missing_driver)
    assert status == 422 and body["reason"] == "Invalid"
    assert {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.driver"} in body["details"]["causes"]

    wrong_type = example_task()
    wrong_type["spec"]["env"] = {"DEBUG": True}
    status, _, body = sim.request("POST", TASKS, wrong_type)
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.env.DEBUG"

    wrong_kind = example_task()
    wrong_kind["kind"] = "Robot"
    status, _, body = sim.request("POST", TASKS, wrong_kind)
    assert status == 400 and "does not match the expected kind" in body["message"]

    status, _, body = sim.request("GET", TASKS)
    assert body["items"] == []

    # Without fieldValidation=Strict an unknown field is dropped, with a warning.
    extra = example_task()
    extra["spec"]["bogus"] = 1
    status, headers, body = sim.request("POST", TASKS, extra)
    assert status == 201 and "bogus" not in body["spec"]
    assert headers["Warning"] == '299 - "unknown field \\"spec.bogus\\""'


def test_lists_page_with_continue_tokens(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    for index in range(5):
        assert sim.request("POST", TASKS, example_task(f"t{index}"))[0] == 201
    names, token = [], ""
    while True:
        status, _, page = sim.request("GET", f"{TASKS}?limit=2" + (f"&continue={token}" if token else ""))
        assert status == 200
        names += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert names == ["t0", "t1", "t2", "t3", "t4"]


def test_injected_errors_latency_and_pause(kube_sim):
    sim = kube_sim()
    sim.admin("faults", {"errorRate": 1.0, "errorCode": 429, "retryAfterSeconds": 3})
    status, headers, body = sim.request("GET", "/api/v1/namespaces")
    assert status == 429 and headers["Retry-After"] == "3" and body["reason"] == "TooManyRequests"
    sim.admin("faults", {"errorCode": 500})
    status, _, body = sim.request("GET", "/api/v1/namespaces")
    assert status == 500 and body["reason"] == "InternalError"
    sim.admin("faults", {"errorRate": 0, "latencyMs": 300})
    started = time.monotonic()
    assert sim.request("GET", "/api/v1/namespaces")[0] == 200
    assert time.monotonic() - started >= 0.3
    sim.admin("faults", {"latencyMs": 0, "paused": True})
    answered = []
    request = threading.Thread(target=lambda: answered.append(sim.request("GET", "/api/v1/namespaces")[0]))
    request.start()
    request.join(timeout=0.5)
    assert answered == []  # held while paused
    sim.admin("faults", {"paused": False})
    request.join(timeout=5)
    assert answered == [200]


def test_closing_watches_ends_every_stream(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    connection, response = open_watch(sim, "resourceVersion=0")
    assert sim.request("GET", "/_sim/stats")[2]["watchers"] == 1
    sim.admin("close-watches")
    assert response.read() == b""  # the stream ends cleanly
    connection.close()


def test_bookmarks_on_idle_watches(kube_sim):
    sim = kube_sim("--bookmark-interval", "0.2")
    sim.apply_crds()
    status, _, listed = sim.request("GET", TASKS)
    connection, response = open_watch(sim, f"resourceVersion={listed['metadata']['resourceVersion']}&allowWatchBookmarks=true")
    line = response.readline()
    event = json.loads(line)
    assert event["type"] == "BOOKMARK"
    assert event["object"]["kind"] == "Task"
    assert int(event["object"]["metadata"]["resourceVersion"]) >= int(listed["metadata"]["resourceVersion"])
    connection.close()


def test_two_hundred_watches_at_once(kube_sim):
    sim = kube_sim()
    sim.apply_crds()
    start = sim.request("GET", TASKS)[2]["metadata"]["resourceVersion"]
    watchers = [open_watch(sim, f"resourceVersion={start}&timeoutSeconds=60") for _ in range(200)]
    deadline = time.monotonic() + 10
    while sim.request("GET", "/_sim/stats")[2]["watchers"] < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sim.request("GET", "/_sim/stats")[2]["watchers"] == 200
    assert sim.request("POST", TASKS, example_task("fanout"))[0] == 201
    received = 0
    for connection, response in watchers:
        event = json.loads(response.readline())
        received += event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "fanout"
        connection.close()
    assert received == 200


def test_discovery_and_openapi_describe_the_crds(kube_sim):
    sim = kube_sim()
    status, _, groups = sim.request("GET", "/apis")
    assert "robot.k8s4r.io" not in [group["name"] for group in groups["groups"]]
    sim.apply_crds()
    groups = sim.request("GET", "/apis")[2]
    assert {"groupVersion": "robot.k8s4r.io/v1alpha1", "version": "v1alpha1"} in next(
        group for group in groups["groups"] if group["name"] == "robot.k8s4r.io")["versions"]
    resources = sim.request("GET", "/apis/robot.k8s4r.io/v1alpha1")[2]["resources"]
    tasks = next(resource for resource in resources if resource["name"] == "tasks")
    assert tasks["shortNames"] == ["rtask"] and tasks["categories"] == ["k8s4r"] and tasks["namespaced"]
    assert any(resource["name"] == "tasks/status" for resource in resources)

    root = sim.request("GET", "/openapi/v3")[2]
    assert "apis/robot.k8s4r.io/v1alpha1" in root["paths"]
    document = sim.request("GET", root["paths"]["apis/robot.k8s4r.io/v1alpha1"]["serverRelativeURL"])[2]
    patch = document["paths"]["/apis/robot.k8s4r.io/v1alpha1/namespaces/{namespace}/tasks/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "robot.k8s4r.io", "version": "v1alpha1", "kind": "Task"}
    assert "fieldValidation" in [parameter["name"] for parameter in patch["parameters"]]
    schema = document["components"]["schemas"]["io.k8s4r.robot.v1alpha1.Task"]
    assert schema["properties"]["spec"]["properties"]["driver"]["enum"] == ["exec", "raw_exec", "docker", "java"]


def test_stats_count_each_users_requests_by_verb_and_resource(kube_sim):
    sim = kube_sim(token="admin-token")
    before = sim.request("GET", "/_sim/stats")[2]["requests"].get("kubernetes-admin", {})
    sim.request("GET", "/api/v1/namespaces/default/configmaps")
    sim.request("GET", "/api/v1/namespaces/default/configmaps")
    sim.request("POST", "/api/v1/namespaces/default/configmaps",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "counted"}})
    sim.request("PATCH", "/api/v1/namespaces/default/configmaps/counted", {"data": {"a": "b"}},
                content_type="application/merge-patch+json")
    sim.request("GET", "/api/v1/namespaces/default/configmaps/counted")
    after = sim.request("GET", "/_sim/stats")[2]["requests"]["kubernetes-admin"]
    counted = {key: after[key] - before.get(key, 0) for key in after}
    assert {key: n for key, n in counted.items() if n} == {
        "list configmaps": 2, "create configmaps": 1, "patch configmaps": 1, "get configmaps": 1}
    # Requests without valid credentials are answered 401 and counted for nobody.
    assert sim.request("GET", "/api/v1/namespaces/default/configmaps", token=False)[0] == 401
    assert sim.request("GET", "/_sim/stats")[2]["requests"]["kubernetes-admin"] == after


def test_stats_stay_bounded_when_a_client_asks_for_made_up_resources(kube_sim):
    sim = kube_sim(token="admin-token")
    for n in range(1100):
        sim.request("GET", f"/api/v1/namespaces/default/made-up-{n}")
    counts = sim.request("GET", "/_sim/stats")[2]["requests"]
    assert sum(len(by_request) for by_request in counts.values()) <= 1001
    assert counts["kubernetes-admin"]["(other requests)"] >= 99
