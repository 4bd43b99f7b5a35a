"""Owner references and deletion as kube-apiserver and kube-controller-manager's
garbage collector and namespace controller handle them: background, foreground
(waiting for blocking dependents, their finalizers included) and orphan
propagation, dangling and recreated owners, and namespaces that terminate.
Every wait has a deadline: on a real cluster these controllers run apart
from the request."""
import json

import pytest

from conftest import wait_until

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
GROUP, VERSION = "robot.k8s4r.io", "v1alpha1"



def make(sim, name, owners=(), finalizers=(), namespace="default"):
    metadata = {"name": name}
    if owners:
        metadata["ownerReferences"] = list(owners)
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    status, _, body = sim.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": metadata})
    assert status == 201, body
    return body


def ref(owner, block=None):
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
                 "uid": owner["metadata"]["uid"]}
    if block is not None:
        reference["blockOwnerDeletion"] = block
    return reference


def get(sim, name, namespace="default"):
    status, _, body = sim.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    return body if status == 200 else None


def gone(sim, name, namespace="default"):
    return lambda: get(sim, name, namespace) is None


def test_background_deletion_takes_dependents(sim):
    owner = make(sim, "owner")
    make(sim, "child", [ref(owner)])
    make(sim, "grandchild", [ref(get(sim, "child"))])
    status, _, body = sim.request("DELETE", CONFIGMAPS + "/owner")
    assert status == 200 and body["status"] == "Success"
    wait_until(gone(sim, "child"), what="the dependent to be collected")
    wait_until(gone(sim, "grandchild"), what="the dependent's dependent to be collected")


def test_foreground_waits_for_blocking_dependents_and_their_finalizers(sim):
    owner = make(sim, "owner")
    make(sim, "blocking", [ref(owner, block=True)], finalizers=["example.com/hold"])
    make(sim, "loose", [ref(owner)])
    status, _, body = sim.request("DELETE", CONFIGMAPS + "/owner", {"propagationPolicy": "Foreground"})
    assert status == 200 and body["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert body["metadata"]["deletionTimestamp"]
    wait_until(gone(sim, "loose"), what="the non-blocking dependent to go")
    wait_until(lambda: "deletionTimestamp" in get(sim, "blocking")["metadata"], what="the blocking dependent to be deleted")
    # Held by the dependent's own finalizer, the owner stays with its deletionTimestamp.
    assert get(sim, "owner")["metadata"]["finalizers"] == ["foregroundDeletion"]
    sim.kubectl("patch", "configmap", "blocking", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    wait_until(gone(sim, "blocking"), what="the released dependent to go")
    wait_until(gone(sim, "owner"), what="the owner to go once nothing blocks it")


def test_kubectl_cascade_orphan_keeps_dependents_without_the_reference(sim):
    owner = make(sim, "owner")
    other = make(sim, "other")
    make(sim, "child", [ref(owner), ref(other)])
    make(sim, "only-child", [ref(owner)])
    sim.kubectl("delete", "configmap", "owner", "--cascade=orphan")
    wait_until(gone(sim, "owner"), what="the owner to go")
    assert [item["name"] for item in get(sim, "child")["metadata"]["ownerReferences"]] == ["other"]
    assert "ownerReferences" not in get(sim, "only-child")["metadata"]


def test_dangling_and_recreated_owners_are_collected(sim):
    make(sim, "orphaned", [{"apiVersion": "v1", "kind": "ConfigMap", "name": "never",
                           "uid": "11111111-0000-4000-8000-000000000000"}])
    wait_until(gone(sim, "orphaned"), what="a dependent of an owner that never existed to go")
    # An owner recreated under the same name is another object: references to the old uid dangle.
    old = make(sim, "owner")
    sim.request("DELETE", CONFIGMAPS + "/owner", {"propagationPolicy": "Orphan"})
    wait_until(gone(sim, "owner"), what="the old owner to go")
    make(sim, "owner")
    make(sim, "stale", [ref(old)])
    wait_until(gone(sim, "stale"), what="a dependent of the old uid to go")
    # With one owner left alive, only the dangling reference is dropped.
    alive = get(sim, "owner")
    make(sim, "shared", [ref(alive), ref(old)])
    wait_until(lambda: len(get(sim, "shared")["metadata"]["ownerReferences"]) == 1, what="the dangling reference to go")
    assert get(sim, "shared")["metadata"]["ownerReferences"][0]["uid"] == alive["metadata"]["uid"]


def test_custom_resources_cascade_job_to_tasks(sim):
    job = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"name": "j", "taskGroups": [{"name": "g", "count": 1, "tasks": [{"name": "t", "driver": "exec",
                                                                       "config": {"execConfig": {"command": "/bin/true"}}}]}]}}
    status, _, created = sim.request("POST", f"/apis/{GROUP}/{VERSION}/namespaces/default/jobs", job)
    assert status == 201, created
    task = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task",
            "metadata": {"name": "j-g-t", "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job",
                                                               "name": "j", "uid": created["metadata"]["uid"],
                                                               "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"name": "t", "driver": "exec", "config": {"execConfig": {"command": "/bin/true"}}}}
    assert sim.request("POST", f"/apis/{GROUP}/{VERSION}/namespaces/default/tasks", task)[0] == 201
    sim.kubectl("delete", "rjob", "j", "--cascade=foreground")
    assert "No resources found" in sim.kubectl("get", "rtask").stderr


def test_namespace_terminates_until_its_content_is_gone(sim):
    sim.kubectl("create", "namespace", "fleet-a")
    make(sim, "held", finalizers=["example.com/hold"], namespace="fleet-a")
    make(sim, "free", namespace="fleet-a")
    status, _, body = sim.request("DELETE", "/api/v1/namespaces/fleet-a")
    assert status == 200 and body["status"]["phase"] == "Terminating"
    wait_until(gone(sim, "free", "fleet-a"), what="unheld content to go")
    namespace = json.loads(sim.kubectl("get", "namespace", "fleet-a", "-o", "json").stdout)
    conditions = {item["type"]: item for item in namespace["status"]["conditions"]}
    assert conditions["NamespaceContentRemaining"]["status"] == "True"
    assert conditions["NamespaceContentRemaining"]["message"] == "Some resources are remaining: configmaps. has 1 resource instances"
    assert conditions["NamespaceFinalizersRemaining"]["message"] == (
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances")
    assert conditions["NamespaceDeletionContentFailure"]["status"] == "False"
    assert "Terminating" in sim.kubectl("get", "namespace", "fleet-a").stdout

    status, _, body = sim.request("POST", "/api/v1/namespaces/fleet-a/configmaps", {"metadata": {"name": "late"}})
    assert status == 403 and body["message"] == ('configmaps "late" is forbidden: unable to create new content in '
                                                 'namespace fleet-a because it is being terminated')
    assert body["details"]["causes"] == [{"reason": "NamespaceTerminating", "message": "namespace fleet-a is being terminated",
                                          "field": "metadata.namespace"}]
    # Objects already there can still be changed: here, released.
    sim.kubectl("patch", "configmap", "held", "-n", "fleet-a", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    wait_until(lambda: sim.request("GET", "/api/v1/namespaces/fleet-a")[0] == 404, what="the namespace to go")

    status, _, body = sim.request("DELETE", "/api/v1/namespaces/kube-system")
    assert status == 403 and body["message"] == 'namespaces "kube-system" is forbidden: this namespace may not be deleted'


def test_namespace_finalizers_hold_it_until_finalize(sim):
    sim.request("POST", "/api/v1/namespaces", {"metadata": {"name": "held"}, "spec": {"finalizers": ["example.com/ns"]}})
    sim.request("DELETE", "/api/v1/namespaces/held")
    namespace = json.loads(sim.kubectl("get", "namespace", "held", "-o", "json").stdout)
    assert namespace["spec"]["finalizers"] == ["example.com/ns"] and namespace["status"]["phase"] == "Terminating"
    status, _, _ = sim.request("PUT", "/api/v1/namespaces/held/finalize",
                               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "held"}, "spec": {"finalizers": []}})
    assert status == 200
    wait_until(lambda: sim.request("GET", "/api/v1/namespaces/held")[0] == 404, what="the finalized namespace to go")
