"""Server-side apply and metadata.managedFields as kubectl 1.32, the Python
client and curl meet them: `kubectl apply --server-side`, field managers,
409 conflicts unless forced, pruning, the status subresource, the request
checks, and the ownership every other write records. Each assertion holds
against a real kube-apiserver 1.32."""
import json

import pytest
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

APPLY = "application/apply-patch+yaml"
CONFIG_MAPS = "/api/v1/namespaces/default/configmaps"
TASKS = "/apis/robot.k8s4r.io/v1alpha1/namespaces/default/tasks"


def config_map(name, data, labels=None):
    metadata = {"name": name, "namespace": "default"}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def task(name, **spec):
    return {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task", "metadata": {"name": name, "namespace": "default"},
            "spec": {"name": name, "driver": "exec", "config": {"execConfig": {"command": "/bin/true"}}, **spec}}


def get_json(sim, *args):
    return json.loads(sim.kubectl("get", *args, "-o", "json", "--show-managed-fields").stdout)


def entries(obj):
    return {(entry["manager"], entry["operation"], entry.get("subresource", "")): entry
            for entry in obj["metadata"].get("managedFields", [])}


def test_kubectl_server_side_apply_creates_records_its_fields_and_a_repeat_changes_nothing(sim, tmp_path):
    manifest = tmp_path / "cm.json"
    manifest.write_text(json.dumps(config_map("settings", {"mode": "fast", "level": "3"}, {"app": "robot"})))
    assert sim.kubectl("apply", "--server-side", "-f", str(manifest)).stdout.strip() == \
        "configmap/settings serverside-applied"
    created = get_json(sim, "configmap", "settings")
    entry = entries(created)[("kubectl", "Apply", "")]
    assert entry["apiVersion"] == "v1" and entry["fieldsType"] == "FieldsV1" and entry["time"]
    # The shape the Kubernetes docs show: leaves and map keys, no name, no ".".
    assert entry["fieldsV1"] == {"f:data": {"f:level": {}, "f:mode": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}
    assert "managedFields" not in json.loads(sim.kubectl("get", "configmap", "settings", "-o", "json").stdout)[
        "metadata"], "kubectl hides managedFields unless asked"

    sim.kubectl("apply", "--server-side", "-f", str(manifest))
    again = get_json(sim, "configmap", "settings")
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == created["metadata"]["managedFields"]


def test_a_field_another_manager_set_conflicts_until_forced(sim, tmp_path):
    manifest = tmp_path / "cm.json"
    manifest.write_text(json.dumps(config_map("settings", {"mode": "fast", "level": "3"})))
    sim.kubectl("apply", "--server-side", "-f", str(manifest))
    sim.kubectl("patch", "configmap", "settings", "--type=merge", "-p", '{"data":{"mode":"slow"}}',
                "--field-manager=operator")
    patched = entries(get_json(sim, "configmap", "settings"))
    assert patched[("operator", "Update", "")]["fieldsV1"] == {"f:data": {"f:mode": {}}}
    assert patched[("kubectl", "Apply", "")]["fieldsV1"] == {"f:data": {"f:level": {}}}

    refused = sim.kubectl("apply", "--server-side", "-f", str(manifest), check=False)
    assert refused.returncode == 1
    assert 'Apply failed with 1 conflict: conflict with "operator" using v1: .data.mode' in refused.stderr
    assert get_json(sim, "configmap", "settings")["data"]["mode"] == "slow"

    sim.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    forced = get_json(sim, "configmap", "settings")
    assert forced["data"]["mode"] == "fast"
    assert ("operator", "Update", "") not in entries(forced), "the operator owned nothing else"
    assert entries(forced)[("kubectl", "Apply", "")]["fieldsV1"] == {"f:data": {"f:level": {}, "f:mode": {}}}


def test_the_409_status_and_several_conflicts_as_clients_read_them(sim):
    sim.request("PATCH", CONFIG_MAPS + "/settings?fieldManager=installer", config_map("settings", {"a": "1", "b": "2"}),
                content_type=APPLY)
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/settings?fieldManager=tuner&force=false",
                                  config_map("settings", {"a": "9", "b": "9"}), content_type=APPLY)
    assert status == 409
    assert body["reason"] == "Conflict" and body["code"] == 409
    assert body["message"] == ('Apply failed with 2 conflicts: conflicts with "installer":\n- .data.a\n- .data.b')
    assert sorted(body["details"]["causes"], key=lambda cause: cause["field"]) == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "installer"', "field": ".data.a"},
        {"reason": "FieldManagerConflict", "message": 'conflict with "installer"', "field": ".data.b"}]
    assert set(body["details"]) == {"causes"}

    # The same value is no conflict: both own it, and either may let go.
    status, _, shared = sim.request("PATCH", CONFIG_MAPS + "/settings?fieldManager=tuner",
                                    config_map("settings", {"a": "1"}), content_type=APPLY)
    assert status == 200
    assert entries(shared)[("tuner", "Apply", "")]["fieldsV1"] == {"f:data": {"f:a": {}}}
    assert entries(shared)[("installer", "Apply", "")]["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}}


def test_fields_an_applier_drops_are_removed_unless_another_manager_holds_them(sim, tmp_path):
    manifest = tmp_path / "cm.json"
    manifest.write_text(json.dumps(config_map("settings", {"a": "1", "b": "2"}, {"app": "robot", "tier": "edge"})))
    sim.kubectl("apply", "--server-side", "-f", str(manifest))
    sim.kubectl("label", "configmap", "settings", "owner=ops")
    sim.kubectl("patch", "configmap", "settings", "--type=merge", "-p", '{"data":{"b":"2","c":"3"}}',
                "--field-manager=operator")  # takes nothing: b keeps its value; c is new

    manifest.write_text(json.dumps(config_map("settings", {"a": "1"}, {"app": "robot"})))
    sim.kubectl("apply", "--server-side", "-f", str(manifest))
    applied = get_json(sim, "configmap", "settings")
    assert applied["metadata"]["labels"] == {"app": "robot", "owner": "ops"}
    assert applied["data"] == {"a": "1", "c": "3"}, "b was kubectl's alone (same-value writes take nothing)"


def test_custom_resources_apply_by_schema_and_status_goes_through_its_subresource(sim, tmp_path):
    manifest = tmp_path / "task.json"
    body = task("t1", targetRobot="robot-001", env={"A": "1"})
    body["status"] = {"state": "completed"}
    manifest.write_text(json.dumps(body))
    sim.kubectl("apply", "--server-side", "-f", str(manifest))
    created = get_json(sim, "rtask", "t1")
    assert "status" not in created or created["status"].get("state") != "completed", \
        "status is not set through the main resource"
    fields = entries(created)[("kubectl", "Apply", "")]["fieldsV1"]
    assert "f:status" not in fields
    assert fields["f:spec"]["f:config"] == {"f:execConfig": {"f:command": {}}}
    assert fields["f:spec"]["f:env"] == {"f:A": {}}

    status_config = {"apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task", "metadata": {"name": "t1"},
                     "status": {"state": "running", "exitCode": 0}}
    status, _, reported = sim.request("PATCH", TASKS + "/t1/status?fieldManager=k8s4r-bridge&force=true",
                                      status_config, content_type=APPLY)
    assert status == 200, reported
    assert reported["status"]["state"] == "running"
    bridge = entries(reported)[("k8s4r-bridge", "Apply", "status")]
    assert bridge["fieldsV1"] == {"f:status": {"f:exitCode": {}, "f:state": {}}}
    assert entries(reported)[("kubectl", "Apply", "")]["fieldsV1"] == fields

    # An unknown field is refused (1.32 answers 500; nothing is stored).
    status, _, refused = sim.request("PATCH", TASKS + "/t1?fieldManager=kubectl",
                                     task("t1", colour="red"), content_type=APPLY)
    assert status == 500
    assert refused["message"].endswith("): .spec.colour: field not declared in schema")
    assert "colour" not in get_json(sim, "rtask", "t1")["spec"]


def test_the_python_client_applies_and_sees_conflicts(api_client):
    dyn = dynamic.DynamicClient(api_client)
    path = dyn.resources.get(api_version="v1", kind="ConfigMap").path(name="py", namespace="default")

    # python3-kubernetes 22.6 (Debian 12) sends an apply body only when it is
    # already serialised; later clients' server_side_apply sends the same.
    def apply(data, manager, force=None):
        return dyn.request("patch", path, body=json.dumps(config_map("py", data)), content_type=APPLY,
                           field_manager=manager, force_conflicts=force)

    created = apply({"k": "v"}, "robot-operator")
    assert created.data.k == "v"
    assert created.metadata.managedFields[0].manager == "robot-operator"
    with pytest.raises(ApiException) as conflict:
        apply({"k": "other"}, "someone-else", force=False)
    assert conflict.value.status == 409
    assert json.loads(conflict.value.body)["details"]["causes"][0]["field"] == ".data.k"
    assert apply({"k": "other"}, "someone-else", force=True).data.k == "other"

    # Typed clients record their writes under the User-Agent's product.
    v1 = client.CoreV1Api(api_client)
    v1.patch_namespaced_config_map("py", "default", {"data": {"extra": "1"}})
    managers = {entry.manager: entry for entry in v1.read_namespaced_config_map("py", "default").metadata.managed_fields}
    assert managers["OpenAPI-Generator"].operation == "Update"
    assert managers["OpenAPI-Generator"].fields_v1 == {"f:data": {"f:extra": {}}}


def test_apply_requests_are_checked_as_kube_apiserver_checks_them(sim):
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x", config_map("x", {}), content_type=APPLY)
    assert status == 422
    assert body["message"] == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required '
                               'for apply patch')
    assert body["details"]["causes"] == [{"reason": "FieldValueRequired", "message": "Required value: is required "
                                          "for apply patch", "field": "fieldManager"}]
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?force=false", {"data": {}},
                                  content_type="application/merge-patch+json")
    assert status == 422
    assert body["message"] == ('PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for '
                               'non-apply patch')
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=" + "m" * 129, config_map("x", {}),
                                  content_type=APPLY)
    assert status == 422 and "fieldManager: Too long: may not be more than 128 bytes" in body["message"]

    with_managed = config_map("x", {})
    with_managed["metadata"]["managedFields"] = []
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m", with_managed, content_type=APPLY)
    assert (status, body["message"]) == (400, "metadata.managedFields must be nil")
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m",
                                  {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}, content_type=APPLY)
    assert (status, body["message"]) == (400, "invalid object type: /v1, Kind=Secret")
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m", config_map("y", {}), content_type=APPLY)
    assert (status, body["message"]) == (400, "the name of the object (y) does not match the name on the URL (x)")
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m", "data: [unclosed", content_type=APPLY)
    assert status == 400 and body["message"].startswith("error decoding YAML: ")
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m&dryRun=All", config_map("x", {"k": "v"}),
                                  content_type=APPLY)
    assert status == 201 and body["data"] == {"k": "v"}
    assert sim.request("GET", CONFIG_MAPS + "/x")[0] == 404, "a dry run stores nothing"

    # YAML aliases that refer to themselves or multiply: 400, and the server lives on.
    cyclic = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: &d {k: *d}\n"
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m", cyclic, content_type=APPLY)
    assert status == 400 and body["message"].startswith("error decoding YAML: ")
    laughs = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6))
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m", laughs, content_type=APPLY)
    assert status == 400 and "excessive aliasing" in body["message"]
    assert sim.request("GET", CONFIG_MAPS)[0] == 200

    # YAML is accepted as well as JSON; a create answers 201, an update 200.
    yaml_body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  count: '3'\n  flag: 'true'\n"
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m", yaml_body, content_type=APPLY)
    assert (status, body["data"]) == (201, {"count": "3", "flag": "true"})
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/x?fieldManager=m", yaml_body, content_type=APPLY)
    assert status == 200


def test_every_write_records_its_manager_and_cleared_managed_fields_stay_cleared(sim):
    sim.kubectl("create", "configmap", "made", "--from-literal=k=v")
    made = get_json(sim, "configmap", "made")
    assert entries(made)[("kubectl-create", "Update", "")]["fieldsV1"] == {"f:data": {".": {}, "f:k": {}}}

    status, _, _ = sim.request("PATCH", CONFIG_MAPS + "/made", {"data": {"k": "w"}},
                               content_type="application/merge-patch+json", headers={"User-Agent": "curl/8.5.0"})
    assert status == 200
    curl_made = get_json(sim, "configmap", "made")
    assert entries(curl_made)[("curl", "Update", "")]["fieldsV1"] == {"f:data": {"f:k": {}}}
    assert entries(curl_made)[("kubectl-create", "Update", "")]["fieldsV1"] == {"f:data": {}}

    # A time that is not RFC 3339 fails the decode (400), as metav1.Time does;
    # entries that do not make sense give way to the stored ones.
    stored = get_json(sim, "configmap", "made")["metadata"]["managedFields"]
    bad_time = [dict(stored[0], time="yesterday")]
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/made", {"metadata": {"managedFields": bad_time}},
                                  content_type="application/merge-patch+json")
    assert status == 422 and 'parsing time "yesterday"' in body["message"]
    nonsense = [dict(stored[0], operation="Patch")]
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/made", {"metadata": {"managedFields": nonsense}},
                                  content_type="application/merge-patch+json")
    assert status == 200 and body["metadata"]["managedFields"] == stored

    # [{}] clears them; later updates record nothing, as on a real server.
    status, _, cleared = sim.request("PATCH", CONFIG_MAPS + "/made", {"metadata": {"managedFields": [{}]}},
                                     content_type="application/merge-patch+json")
    assert status == 200 and "managedFields" not in cleared["metadata"]
    sim.request("PATCH", CONFIG_MAPS + "/made", {"data": {"k": "x"}}, content_type="application/merge-patch+json")
    assert "managedFields" not in get_json(sim, "configmap", "made")["metadata"]

    # The first apply records what was there as "before-first-apply".
    status, _, body = sim.request("PATCH", CONFIG_MAPS + "/made?fieldManager=applier",
                                  config_map("made", {"k": "changed"}), content_type=APPLY)
    assert status == 409
    assert body["message"] == ('Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.k')


def test_moving_from_client_side_apply_takes_over_kubectls_fields(sim, tmp_path):
    manifest = tmp_path / "cm.json"
    manifest.write_text(json.dumps(config_map("moved", {"k": "v1"})))
    sim.kubectl("apply", "-f", str(manifest))
    manifest.write_text(json.dumps(config_map("moved", {"k": "v2"})))
    result = sim.kubectl("apply", "--server-side", "-f", str(manifest), check=False)
    assert result.returncode == 0, result.stderr
    moved = get_json(sim, "configmap", "moved")
    assert moved["data"] == {"k": "v2"}
    last_applied = json.loads(moved["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last_applied["data"] == {"k": "v2"}, "the client-side record follows, so a later client-side apply works"
    assert entries(moved)[("kubectl", "Apply", "")]["fieldsV1"]["f:data"] == {"f:k": {}}
