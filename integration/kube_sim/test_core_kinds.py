"""Secrets, ConfigMaps, ServiceAccounts and Events as kubectl and the Python
client use them: kubectl's typed create commands (which send protobuf),
stringData, base64, keys, immutability, events.k8s.io/v1 beside core/v1
Events, and `kubectl events`."""
import base64
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException



@pytest.fixture
def core(api_client):
    return client.CoreV1Api(api_client), client.EventsV1Api(api_client)


def b64(text):
    return base64.b64encode(text.encode()).decode()


def test_secrets_from_kubectl_and_python(sim, core):
    v1, _ = core
    sim.kubectl("create", "secret", "generic", "robot-001", "--from-literal=token=hunter2", "--from-literal=ca=x")
    secret = json.loads(sim.kubectl("get", "secret", "robot-001", "-o", "json").stdout)
    assert secret["data"] == {"token": b64("hunter2"), "ca": b64("x")} and secret["type"] == "Opaque"
    assert "generation" not in secret["metadata"]
    table = sim.kubectl("get", "secret", "robot-001").stdout.split("\n")
    assert table[0].split() == ["NAME", "TYPE", "DATA", "AGE"] and table[1].split()[:3] == ["robot-001", "Opaque", "2"]

    # stringData is folded into data on every write and never stored.
    created = v1.create_namespaced_secret("default", client.V1Secret(
        metadata=client.V1ObjectMeta(name="robot-002"), string_data={"token": "s3cret"}, data={"keep": b64("k")}))
    assert created.data == {"token": b64("s3cret"), "keep": b64("k")} and created.string_data is None
    patched = v1.patch_namespaced_secret("robot-002", "default", {"stringData": {"token": "rotated"}})
    assert patched.data["token"] == b64("rotated")
    assert v1.read_namespaced_secret("robot-002", "default").data["token"] == b64("rotated")

    with pytest.raises(ApiException) as bad_key:
        v1.create_namespaced_secret("default", {"metadata": {"name": "bad"}, "data": {"no spaces": b64("x")}})
    body = json.loads(bad_key.value.body)
    assert bad_key.value.status == 422 and body["details"]["causes"][0]["field"] == "data[no spaces]"
    assert "a valid config key must consist of alphanumeric characters" in body["message"]
    status, _, body = sim.request("POST", "/api/v1/namespaces/default/secrets",
                                  {"metadata": {"name": "bad"}, "data": {"token": "not base64!"}})
    assert status == 400
    assert body["message"] == ('Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input '
                               'byte 3')
    with pytest.raises(ApiException) as missing:
        v1.read_namespaced_secret("bad", "default")
    assert missing.value.status == 404


def test_immutable_secrets_and_config_maps_refuse_changes(core):
    v1, _ = core
    v1.create_namespaced_config_map("default", {"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": True})
    with pytest.raises(ApiException) as refused:
        v1.patch_namespaced_config_map("frozen", "default", {"data": {"a": "2"}})
    assert refused.value.status == 422
    assert "data: Forbidden: field is immutable when `immutable` is set" in json.loads(refused.value.body)["message"]
    assert v1.read_namespaced_config_map("frozen", "default").data == {"a": "1"}


def test_config_maps_and_service_accounts_from_kubectl(sim, core):
    v1, _ = core
    sim.kubectl("create", "configmap", "settings", "--from-literal=interval=30s", "--from-literal=mode=fast")
    assert v1.read_namespaced_config_map("settings", "default").data == {"interval": "30s", "mode": "fast"}
    assert sim.kubectl("get", "cm", "settings").stdout.split("\n")[1].split()[:2] == ["settings", "2"]
    overlap = sim.request("POST", "/api/v1/namespaces/default/configmaps",
                          {"metadata": {"name": "o"}, "data": {"k": "v"}, "binaryData": {"k": b64("v")}})
    assert overlap[0] == 422 and "duplicate of key present in binaryData" in overlap[2]["message"]

    sim.kubectl("create", "serviceaccount", "manager")
    account = v1.read_namespaced_service_account("manager", "default")
    assert account.metadata.uid
    assert sim.kubectl("get", "sa", "manager").stdout.split("\n")[0].split() == ["NAME", "SECRETS", "AGE"]
    # A ServiceAccount's DELETE answers with the object, a ConfigMap's with a Status.
    status, _, deleted = sim.request("DELETE", "/api/v1/namespaces/default/serviceaccounts/manager")
    assert status == 200 and deleted["kind"] == "ServiceAccount"
    status, _, deleted = sim.request("DELETE", "/api/v1/namespaces/default/configmaps/settings")
    assert status == 200 and deleted["kind"] == "Status" and deleted["status"] == "Success"
    assert deleted["details"]["name"] == "settings" and deleted["details"]["kind"] == "configmaps"


def test_events_in_both_groups_and_kubectl_events(sim, core):
    v1, events = core
    task = {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task", "name": "t-1", "namespace": "default",
            "uid": "0c3c6d1a-0000-4000-8000-000000000001"}
    events.create_namespaced_event("default", {
        "metadata": {"name": "t-1.started"}, "eventTime": "2026-11-23T10:00:00.000000Z",
        "reportingController": "k8s4r.io/bridge", "reportingInstance": "bridge-0", "action": "Run",
        "reason": "Started", "regarding": task, "note": "started on robot-001", "type": "Normal"})
    # The same object through core/v1, fields mapped as kube-apiserver maps them.
    core_event = v1.read_namespaced_event("t-1.started", "default")
    assert core_event.involved_object.name == "t-1" and core_event.message == "started on robot-001"
    assert core_event.reporting_component == "k8s4r.io/bridge"
    v1.create_namespaced_event("default", {
        "metadata": {"name": "t-1.failed"}, "involvedObject": task, "reason": "Failed", "message": "exit code 3",
        "type": "Warning", "source": {"component": "k8s4r-bridge"},
        "firstTimestamp": "2026-11-23T10:00:05Z", "lastTimestamp": "2026-11-23T10:00:05Z", "count": 1})
    # (Read raw: an old-style Event has eventTime null, which the Python model refuses, as with a real server.)
    status, _, again = sim.request("GET", "/apis/events.k8s.io/v1/namespaces/default/events/t-1.failed")
    assert status == 200 and again["eventTime"] is None
    assert again["regarding"]["name"] == "t-1" and again["note"] == "exit code 3" and again["deprecatedCount"] == 1

    listed = sim.kubectl("events", "--for", "task.robot.k8s4r.io/t-1").stdout
    assert "Started" in listed and "Failed" in listed and "exit code 3" in listed

    # An old-style Event must be in its object's namespace.
    with pytest.raises(ApiException) as elsewhere:
        v1.create_namespaced_event("default", {"metadata": {"name": "x"}, "involvedObject": {**task, "namespace": "other"},
                                               "reason": "R", "message": "m"})
    assert elsewhere.value.status == 422
    assert ('involvedObject.namespace: Invalid value: "other": does not match event.namespace'
            in json.loads(elsewhere.value.body)["message"])
    # events.k8s.io/v1 is strict about what a new-style Event carries.
    with pytest.raises(ApiException) as strict:
        events.create_namespaced_event("default", {"metadata": {"name": "y"}, "regarding": task, "reason": "R",
                                                   "note": "n", "type": "Normal"})
    fields = {cause["field"] for cause in json.loads(strict.value.body)["details"]["causes"]}
    assert "eventTime" in fields
