"""k8s4r-kube-sim driven by the official Python client (python3-kubernetes)."""
import threading

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "robot.k8s4r.io", "v1alpha1", "tasks"


def task(name, labels=None, robot="robot-001"):
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Task",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"name": name, "driver": "exec", "targetRobot": robot,
                     "config": {"execConfig": {"command": "/bin/true"}}}}


@pytest.fixture
def api(kube_sim):
    sim = kube_sim("--history", "20")
    sim.apply_crds()
    api_client = config.new_client_from_config(config_file=str(sim.kubeconfig))
    yield sim, client.CustomObjectsApi(api_client), api_client
    api_client.close()


def test_create_get_list_patch_delete(api):
    sim, custom, _ = api
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, task("a"))
    assert created["metadata"]["uid"] and created["metadata"]["generation"] == 1
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a")["spec"]["driver"] == "exec"

    with pytest.raises(ApiException) as duplicate:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, task("a"))
    assert duplicate.value.status == 409 and '"reason":"AlreadyExists"' in duplicate.value.body

    patched = custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "a",
                                                            {"status": {"state": "running"}})
    assert patched["status"]["state"] == "running"

    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a")
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a")
    assert missing.value.status == 404


def test_label_and_field_selectors(api):
    _, custom, _ = api
    for name, labels in [("a", {"env": "dev", "zone": "1"}), ("b", {"env": "prod"}), ("c", {})]:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, task(name, labels))

    def names(**selectors):
        listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, **selectors)
        return sorted(item["metadata"]["name"] for item in listed["items"])

    assert names(label_selector="env=dev") == ["a"]
    assert names(label_selector="env!=dev") == ["b", "c"]
    assert names(label_selector="env in (dev,prod)") == ["a", "b"]
    assert names(label_selector="env notin (dev)") == ["b", "c"]
    assert names(label_selector="zone") == ["a"]
    assert names(label_selector="!zone") == ["b", "c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.namespace=default,metadata.name!=b") == ["a", "c"]
    with pytest.raises(ApiException) as unsupported:
        names(field_selector="spec.targetRobot=robot-001")
    assert unsupported.value.status == 400 and "field label not supported" in unsupported.value.body


def test_watch_streams_adds_modifications_and_deletes(api):
    _, custom, _ = api
    start = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["metadata"]["resourceVersion"]
    seen = []
    ready = threading.Event()

    def consume():
        stream = watch.Watch()
        for event in stream.stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                   resource_version=start, timeout_seconds=10):
            seen.append((event["type"], event["object"]["metadata"]["name"],
                         event["object"].get("status", {}).get("state")))
            if event["type"] == "DELETED":
                stream.stop()

    consumer = threading.Thread(target=consume)
    consumer.start()
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, task("w"))
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "w", {"status": {"state": "running"}})
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "w")
    consumer.join(timeout=15)
    assert not consumer.is_alive()
    assert seen == [("ADDED", "w", None), ("MODIFIED", "w", "running"), ("DELETED", "w", "running")]


def test_watch_from_an_expired_resource_version_gets_410(api):
    sim, custom, _ = api
    old = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, task("x"))["metadata"]["resourceVersion"]
    for i in range(25):  # more than --history 20
        custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "x", {"spec": {"user": f"u{i}"}})
    with pytest.raises(ApiException) as expired:
        for _ in watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                                      resource_version=old):
            pass
    assert expired.value.status == 410
    assert "Expired: too old resource version" in expired.value.reason

    # After a compaction every earlier version is gone, as after etcd compaction.
    current = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["metadata"]["resourceVersion"]
    sim.admin("compact")
    with pytest.raises(ApiException) as compacted:
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, resource_version=str(int(current) - 1),
                                             resource_version_match="Exact")
    assert compacted.value.status == 410


def test_leases_and_events_through_typed_clients(api):
    _, _, api_client = api
    leases = client.CoordinationV1Api(api_client)
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="k8s4r-manager"),
                           spec=client.V1LeaseSpec(holder_identity="manager-0", lease_duration_seconds=15))
    created = leases.create_namespaced_lease("default", lease)
    created.spec.holder_identity = "manager-1"
    replaced = leases.replace_namespaced_lease("k8s4r-manager", "default", created)
    assert replaced.spec.holder_identity == "manager-1"
    created.spec.holder_identity = "manager-2"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as stale:
        leases.replace_namespaced_lease("k8s4r-manager", "default", created)
    assert stale.value.status == 409

    core = client.CoreV1Api(api_client)
    event = client.CoreV1Event(metadata=client.V1ObjectMeta(name="t.1"), reason="Dispatched", message="sent",
                               involved_object=client.V1ObjectReference(kind="Task", name="t", namespace="default"))
    core.create_namespaced_event("default", event)
    found = core.list_namespaced_event("default", field_selector="involvedObject.name=t,involvedObject.kind=Task")
    assert [item.reason for item in found.items] == ["Dispatched"]
