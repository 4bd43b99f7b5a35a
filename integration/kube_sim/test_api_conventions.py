"""Request parameters, kind: List, OpenAPI v2 and error bodies as kube-apiserver
1.32 answers them to kubectl, the Python client and plain HTTP."""
import http.client
import json
import re

import pytest

GROUP, VERSION = "robot.k8s4r.io", "v1alpha1"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"



def watch_lines(sim, query, count):
    """The first `count` lines of a watch on ConfigMaps (timeoutSeconds ends it)."""
    host, port = sim.url.split("://")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", f"{CONFIGMAPS}?watch=1&{query}")
    response = connection.getresponse()
    assert response.status == 200
    events = []
    while len(events) < count:
        line = response.readline()
        if not line:
            break
        if line.strip():
            events.append(json.loads(line))
    connection.close()
    return events


def test_list_and_watch_parameters(sim):
    status, _, body = sim.request("GET", CONFIGMAPS + "?limit=abc")
    assert status == 400 and body["message"] == 'strconv.ParseInt: parsing "abc": invalid syntax'
    status, _, body = sim.request("GET", CONFIGMAPS + "?limit=-1")
    assert status == 200
    status, _, body = sim.request("GET", CONFIGMAPS + "?resourceVersionMatch=Exact")
    assert status == 422 and body["message"] == ('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                                                 'resourceVersionMatch is forbidden unless resourceVersion is provided')
    assert body["details"] == {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [
        {"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
         "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"}]}
    status, _, body = sim.request("GET", CONFIGMAPS + "?resourceVersion=0&resourceVersionMatch=Exact")
    assert status == 422 and 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"' in body["message"]
    status, _, body = sim.request("GET", CONFIGMAPS + "?sendInitialEvents=true")
    assert status == 422 and "sendInitialEvents is forbidden for list" in body["message"]
    status, _, body = sim.request("GET", CONFIGMAPS + "?watch=1&sendInitialEvents=true")
    assert status == 422 and "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" in body["message"]
    status, _, body = sim.request("GET", CONFIGMAPS + "?watch=1&timeoutSeconds=soon")
    assert status == 400 and body["message"] == 'strconv.ParseInt: parsing "soon": invalid syntax'
    for name in ("a", "b", "c"):
        sim.request("POST", CONFIGMAPS, {"metadata": {"name": name}})
    status, _, page = sim.request("GET", CONFIGMAPS + "?limit=1")
    status, _, body = sim.request("GET", CONFIGMAPS + f"?limit=1&continue={page['metadata']['continue']}&resourceVersion=5")
    assert status == 400 and body["message"] == "specifying resource version is not allowed when using continue"


def test_watch_initial_events(sim):
    sim.request("POST", CONFIGMAPS, {"metadata": {"name": "before"}})
    # 1.32's WatchList: no resourceVersion means the state first, then a bookmark marking its end.
    events = watch_lines(sim, "allowWatchBookmarks=true&timeoutSeconds=2", 2)
    assert [event["type"] for event in events] == ["ADDED", "BOOKMARK"]
    assert events[0]["object"]["metadata"]["name"] == "before"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    # sendInitialEvents=false: only what happens from now on.
    host, port = sim.url.split("://")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", f"{CONFIGMAPS}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan"
                              "&timeoutSeconds=5")
    response = connection.getresponse()
    assert response.status == 200
    sim.request("POST", CONFIGMAPS, {"metadata": {"name": "after"}})
    line = response.readline()
    while not line.strip():
        line = response.readline()
    event = json.loads(line)
    connection.close()
    assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "after"


def test_delete_options(sim):
    sim.request("POST", CONFIGMAPS, {"metadata": {"name": "c"}})
    status, _, body = sim.request("DELETE", CONFIGMAPS + "/c?propagationPolicy=Bogus")
    assert status == 422 and body["message"] == ('DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported '
                                                 'value: "Bogus": supported values: "Foreground", "Background", "Orphan", "nil"')
    status, _, body = sim.request("DELETE", CONFIGMAPS + "/c", {"propagationPolicy": "Orphan", "orphanDependents": True})
    assert status == 422 and "orphanDependents and deletionPropagation cannot be both set" in body["message"]
    status, _, body = sim.request("DELETE", CONFIGMAPS + "/c", {"preconditions": {"uid": "not-it"}})
    assert status == 409 and "the UID in the precondition (not-it) does not match the UID in record" in body["message"]
    assert sim.request("GET", CONFIGMAPS + "/c")[0] == 200


def test_kind_list_with_create_and_apply(sim, tmp_path):
    manifest = tmp_path / "list.yaml"
    manifest.write_text("""apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: one}
  data: {a: "1"}
- apiVersion: robot.k8s4r.io/v1alpha1
  kind: Robot
  metadata: {name: robot-009}
  spec: {robotId: robot-009}
""")
    created = sim.kubectl("create", "-f", str(manifest)).stdout
    assert "configmap/one created" in created and "robot.robot.k8s4r.io/robot-009 created" in created
    manifest.write_text(manifest.read_text().replace('a: "1"', 'a: "2"'))
    sim.kubectl("apply", "-f", str(manifest))
    assert sim.kubectl("get", "cm", "one", "-o", "jsonpath={.data.a}").stdout == "2"


def test_crd_table_and_error_bodies(sim):
    rows = sim.kubectl("get", "crd").stdout.strip().split("\n")
    assert rows[0].split() == ["NAME", "CREATED", "AT"]
    assert all(re.fullmatch(r"\S+\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row) for row in rows[1:])
    sim.request("POST", CONFIGMAPS, {"metadata": {"name": "c"}})
    status, _, body = sim.request("PATCH", CONFIGMAPS + "/c", [{"op": "remove", "path": "/data/missing"}],
                                  content_type="application/json-patch+json")
    assert status == 422 and "json.exception" not in body["message"]
    assert body["message"].endswith("Unable to remove nonexistent key: /data/missing: missing value")
    status, _, body = sim.request("POST", "/_sim/faults", {"latencyMs": "slow"})
    assert status == 400 and "json.exception" not in json.dumps(body)


def test_hostile_requests_are_refused_and_change_nothing(sim):
    sim.request("POST", CONFIGMAPS, {"metadata": {"name": "c"}})
    # The deprecated /watch/ paths serve watches only.
    status, _, _ = sim.request("DELETE", "/api/v1/watch/namespaces/default/configmaps/c")
    assert status == 405 and sim.request("GET", CONFIGMAPS + "/c")[0] == 200
    # Nesting deeper than kube-apiserver's decoder allows.
    deep = '{"metadata":{"name":"d"},"data":' + "[" * 20000 + "]" * 20000 + "}"
    status, _, body = sim.request("POST", CONFIGMAPS, deep)
    assert status == 400 and "exceeded max depth" in body["message"]
    status, _, body = sim.request("PATCH", CONFIGMAPS + "/c", '{"data":' + '{"a":' * 20000 + "1" + "}" * 20001,
                                  content_type="application/merge-patch+json")
    assert status == 400 and "exceeded max depth" in body["message"]
    # A JSON patch may not have more than 10000 operations, nor copy more than 3 MiB.
    many = [{"op": "test", "path": "/metadata/name", "value": "c"}] * 10001
    assert sim.request("PATCH", CONFIGMAPS + "/c", many, content_type="application/json-patch+json")[0] == 413
    sim.request("PATCH", CONFIGMAPS + "/c", {"data": {"k0": "x" * 100000}}, content_type="application/merge-patch+json")
    doubling = [{"op": "copy", "from": "/data", "path": "/metadata/annotations"}] + [
        {"op": "copy", "from": "/data/k0", "path": f"/data/k{index}"} for index in range(1, 40)]
    status, _, body = sim.request("PATCH", CONFIGMAPS + "/c", doubling, content_type="application/json-patch+json")
    assert status == 422 and "exceed the allowed limit" in body["message"]
    # A CRD may not take over a built-in resource.
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "clusterrolebindings.rbac.authorization.k8s.io"},
           "spec": {"group": "rbac.authorization.k8s.io", "scope": "Cluster",
                    "names": {"plural": "clusterrolebindings", "kind": "ClusterRoleBinding"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    status, _, body = sim.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status == 422 and "is a built-in resource of the API server" in body["message"]
    assert "cluster-admin" in sim.kubectl("get", "clusterrolebindings").stdout
