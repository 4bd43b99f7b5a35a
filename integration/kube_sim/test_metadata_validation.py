"""metadata as kube-apiserver checks it: names per kind, labels, annotations,
finalizers, owner references, and wrong JSON types; a refused write stores
nothing. Messages are kube-apiserver's, word for word."""
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

GROUP, VERSION = "robot.k8s4r.io", "v1alpha1"
TASKS = f"/apis/{GROUP}/{VERSION}/namespaces/default/tasks"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
NAME_PART = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
             "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
             "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


def task(name, **metadata):
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task", "metadata": {"name": name, **metadata},
            "spec": {"name": name, "driver": "exec", "config": {"execConfig": {"command": "/bin/true"}}}}



@pytest.fixture
def custom(api_client):
    return client.CustomObjectsApi(api_client)


def refused(call):
    with pytest.raises(ApiException) as error:
        call()
    return error.value.status, json.loads(error.value.body)


def test_labels_and_annotations(sim, custom):
    status, body = refused(lambda: custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "tasks", task("t", labels={"-bad": "ok", "app": "no spaces"})))
    assert status == 422 and body["reason"] == "Invalid"
    assert body["details"]["name"] == "t" and body["details"]["group"] == GROUP and body["details"]["kind"] == "Task"
    assert f'metadata.labels: Invalid value: "-bad": {NAME_PART}' in body["message"]
    assert 'metadata.labels: Invalid value: "no spaces": a valid label must be an empty string' in body["message"]
    assert {cause["field"] for cause in body["details"]["causes"]} == {"metadata.labels"}

    status, body = refused(lambda: custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "tasks", task("t", annotations={"big": "x" * (256 * 1024)})))
    assert status == 422
    assert body["message"] == 'Task.robot.k8s4r.io "t" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes'
    assert refused(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, "default", "tasks", "t"))[0] == 404

    created = custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "tasks", task("t", labels={"example.com/robot": "robot-001", "empty": ""}))
    assert created["metadata"]["labels"] == {"example.com/robot": "robot-001", "empty": ""}
    status, body = refused(lambda: custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "tasks", "t", {"metadata": {"labels": {"a/b/c": "x"}}}))
    assert status == 422 and "a qualified name must consist of" in body["message"]


def test_names_by_kind(sim):
    status, _, body = sim.request("POST", CONFIGMAPS, {"metadata": {"name": "Bad_Name"}})
    assert status == 422 and body["message"].startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain')
    status, _, body = sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": "a.b"}})
    assert status == 422 and body["message"] == 'Namespace "a.b" is invalid: metadata.name: Invalid value: "a.b": must not contain dots'
    status, _, body = sim.request("POST", CONFIGMAPS, {"metadata": {}})
    assert status == 422 and body["message"] == 'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required'
    # RBAC names only refuse path-breaking ones; colons are fine (system:foo).
    status, _, _ = sim.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                               {"metadata": {"name": "k8s4r:manager"}, "rules": []})
    assert status == 201
    status, _, body = sim.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                                  {"metadata": {"name": "a%b"}, "rules": []})
    assert status == 422 and "may not contain '%'" in body["message"]
    status, _, created = sim.request("POST", CONFIGMAPS, {"metadata": {"generateName": "x" * 70}})
    assert status == 201 and len(created["metadata"]["name"]) == 63


def test_finalizers(sim, custom):
    status, _, body = sim.request("POST", CONFIGMAPS, {"metadata": {"name": "c", "finalizers": ["foo"]}})
    assert status == 422 and body["message"] == ('ConfigMap "c" is invalid: metadata.finalizers[0]: Invalid value: "foo": '
                                                 'name is neither a standard finalizer name nor is it fully qualified')
    status, _, body = sim.request("POST", CONFIGMAPS, {"metadata": {"name": "c", "finalizers": ["orphan", "foregroundDeletion"]}})
    assert status == 422 and "finalizer orphan and foregroundDeletion cannot be both set" in body["message"]
    # A custom resource only warns about an unqualified finalizer.
    status, headers, _ = sim.request("POST", TASKS, task("t", finalizers=["cleanup"]))
    assert status == 201
    assert 'metadata.finalizers: \\"cleanup\\": prefer a domain-qualified finalizer name' in headers.get("Warning", "")


def test_owner_references(sim):
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "6f9b3e1a-0000-4000-8000-000000000001"}
    status, _, body = sim.request("POST", CONFIGMAPS, {"metadata": {"name": "d", "ownerReferences": [{**owner, "uid": ""}]}})
    assert status == 422
    assert body["message"] == 'ConfigMap "d" is invalid: metadata.ownerReferences.uid: Invalid value: "": uid must not be empty'
    two = [{**owner, "controller": True}, {**owner, "name": "p", "uid": "6f9b3e1a-0000-4000-8000-000000000002", "controller": True}]
    status, _, body = sim.request("POST", CONFIGMAPS, {"metadata": {"name": "d", "ownerReferences": two}})
    assert status == 422
    assert 'Only one reference can have Controller set to true. Found "true" in references for ConfigMap/o and ConfigMap/p' in body["message"]
    assert sim.request("GET", CONFIGMAPS + "/d")[0] == 404


def test_wrong_types_in_metadata_are_400_and_store_nothing(sim):
    status, _, body = sim.request("POST", CONFIGMAPS, {"metadata": {"name": "c", "labels": ["a"]}})
    assert status == 400 and body["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal array into Go struct field '
        'ObjectMeta.metadata.labels of type map[string]string')
    status, _, body = sim.request("POST", TASKS, {**task("t"), "metadata": {"name": "t", "labels": {"a": 1}}})
    assert status == 400 and body["message"] == (
        'Task in version "v1alpha1" cannot be handled as a Task: json: cannot unmarshal number into Go struct field '
        'ObjectMeta.labels of type string')
    status, _, body = sim.request("POST", TASKS, {**task("t"), "metadata": "t"})
    assert status == 400 and "cannot unmarshal string into Go value of type v1.ObjectMeta" in body["message"]
    assert sim.request("GET", TASKS + "/t")[0] == 404 and sim.request("GET", CONFIGMAPS + "/c")[0] == 404
    # A patch whose result has a wrong type is a 422 naming the patch.
    assert sim.request("POST", CONFIGMAPS, {"metadata": {"name": "c"}})[0] == 201
    status, _, body = sim.request("PATCH", CONFIGMAPS + "/c", {"metadata": {"finalizers": "x"}},
                                  content_type="application/merge-patch+json")
    assert status == 422 and body["details"]["causes"][0]["field"] == "patch"
    assert "json.exception" not in body["message"]


def test_wrong_types_in_built_in_kinds_are_400(sim):
    status, _, body = sim.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
                                  {"metadata": {"name": "r"}, "rules": [{"verbs": [1], "apiGroups": [""], "resources": ["pods"]}]})
    assert status == 400 and body["message"] == (
        'Role in version "v1" cannot be handled as a Role: json: cannot unmarshal number into Go struct field '
        'PolicyRule.rules.verbs of type string')
    status, _, body = sim.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                                  {"metadata": {"name": "b"}, "roleRef": {"kind": 5, "name": "x"}})
    assert status == 400 and "Go struct field RoleRef.roleRef.kind of type string" in body["message"]
    status, _, body = sim.request("POST", "/api/v1/namespaces/default/events",
                                  {"metadata": {"name": "e"}, "involvedObject": {"name": "x", "namespace": "default"},
                                   "count": "many"})
    assert status == 400 and "Go struct field Event.count of type int32" in body["message"]
    status, _, body = sim.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                                  {"spec": {"resourceAttributes": {"verb": ["get"]}}})
    assert status == 400 and "Go struct field ResourceAttributes.spec.resourceAttributes.verb of type string" in body["message"]
    for path in ("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/r",
                 "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/b", "/api/v1/namespaces/default/events/e"):
        assert sim.request("GET", path)[0] == 404
