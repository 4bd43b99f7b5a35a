"""Authentication and RBAC (--authorization-mode=RBAC), judged by kubectl and
the Python client: ServiceAccount tokens from TokenRequest, a static token
file, client certificates, impersonation, kubectl auth can-i / whoami, and
403s worded as kube-apiserver words them. Tokens travel only over TLS (client-go
sends no bearer token over plain HTTP), so every server here serves HTTPS."""
import json
import subprocess

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from conftest import EXAMPLES

GROUP, VERSION = "robot.k8s4r.io", "v1alpha1"


@pytest.fixture
def cluster(kube_sim, tls_files, tmp_path):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('alice-token,alice,1001,"dev,ops"\nbob-token,bob,1002\n')
    sim = kube_sim("--authorization-mode=RBAC", "--token-auth-file", str(tokens), "--client-ca-file", tls_files["ca"],
                   token="admin-token", tls=tls_files)
    sim.apply_crds()
    return sim


def as_token(sim, token, *args, check=True):
    return sim.kubectl(*args, "--token", token, check=check)


def python_client(sim, token):
    configuration = client.Configuration()
    configuration.host = sim.url
    configuration.ssl_ca_cert = sim.ca_file
    configuration.api_key = {"authorization": "Bearer " + token}
    return client.ApiClient(configuration)


def bridge_identity(sim):
    """The least privilege the bridge needs on Tasks: read them, write their status."""
    sim.kubectl("create", "serviceaccount", "bridge")
    sim.kubectl("create", "role", "task-status", "--verb=patch,update", "--resource=tasks.robot.k8s4r.io/status")
    sim.kubectl("create", "role", "task-reader", "--verb=get,list,watch", "--resource=tasks.robot.k8s4r.io")
    sim.kubectl("create", "rolebinding", "bridge-status", "--role=task-status", "--serviceaccount=default:bridge")
    sim.kubectl("create", "rolebinding", "bridge-reader", "--role=task-reader", "--serviceaccount=default:bridge")
    return sim.kubectl("create", "token", "bridge").stdout.strip()


def test_service_account_gets_exactly_what_its_roles_grant(cluster):
    sim = cluster
    sim.kubectl("apply", "-f", str(EXAMPLES / "task.yaml"))
    task = json.loads(sim.kubectl("get", "rtask", "-o", "json").stdout)["items"][0]["metadata"]["name"]
    token = bridge_identity(sim)

    whoami = as_token(sim, token, "auth", "whoami", "-o", "json")
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == "system:serviceaccount:default:bridge"
    assert user["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    assert user["uid"] == json.loads(sim.kubectl("get", "sa", "bridge", "-o", "json").stdout)["metadata"]["uid"]

    assert as_token(sim, token, "auth", "can-i", "patch", "tasks.robot.k8s4r.io", "--subresource=status").stdout.strip() == "yes"
    denied = as_token(sim, token, "auth", "can-i", "patch", "tasks.robot.k8s4r.io", check=False)
    assert denied.returncode == 1 and denied.stdout.strip() == "no"
    assert task in as_token(sim, token, "get", "rtask").stdout

    secrets = as_token(sim, token, "get", "secrets", check=False)
    assert secrets.returncode != 0
    assert ('secrets is forbidden: User "system:serviceaccount:default:bridge" cannot list resource "secrets" '
            'in API group "" in the namespace "default"') in secrets.stderr

    api_client = python_client(sim, token)
    try:
        custom = client.CustomObjectsApi(api_client)
        patched = custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", "tasks", task,
                                                                {"status": {"state": "running"}})
        assert patched["status"]["state"] == "running"
        with pytest.raises(ApiException) as refused:
            custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "tasks", task,
                                                  {"spec": {"targetRobot": "elsewhere"}})
        body = json.loads(refused.value.body)
        assert refused.value.status == 403 and body["reason"] == "Forbidden"
        assert body["message"] == (f'tasks.{GROUP} "{task}" is forbidden: User "system:serviceaccount:default:bridge" '
                                   f'cannot patch resource "tasks" in API group "{GROUP}" in the namespace "default"')
        assert body["details"] == {"name": task, "group": GROUP, "kind": "tasks"}
        # Cluster scope and other namespaces are out of reach.
        with pytest.raises(ApiException) as cluster_wide:
            custom.list_cluster_custom_object(GROUP, VERSION, "tasks")
        assert cluster_wide.value.status == 403 and "at the cluster scope" in cluster_wide.value.body
    finally:
        api_client.close()
    assert sim.kubectl("get", "rtask", task, "-o", "jsonpath={.spec.targetRobot}").stdout != "elsewhere"


def test_resource_names_limit_a_rule_to_named_objects(cluster):
    sim = cluster
    sim.kubectl("create", "configmap", "allowed", "--from-literal=a=1")
    sim.kubectl("create", "configmap", "other", "--from-literal=a=1")
    sim.kubectl("create", "role", "one-map", "--verb=get,list", "--resource=configmaps", "--resource-name=allowed")
    sim.kubectl("create", "rolebinding", "bob-one-map", "--role=one-map", "--user=bob")
    assert "allowed" in as_token(sim, "bob-token", "get", "configmap", "allowed").stdout
    other = as_token(sim, "bob-token", "get", "configmap", "other", check=False)
    assert 'configmaps "other" is forbidden: User "bob" cannot get resource "configmaps"' in other.stderr
    listing = as_token(sim, "bob-token", "get", "configmaps", check=False)
    assert listing.returncode != 0 and "cannot list resource" in listing.stderr
    # A list of exactly one name is a request for that name, as kube-apiserver reads it.
    named = as_token(sim, "bob-token", "get", "configmaps", "--field-selector", "metadata.name=allowed")
    assert "allowed" in named.stdout


def test_static_tokens_groups_client_certificates_and_anonymous(cluster, tls_files):
    sim = cluster
    whoami = json.loads(as_token(sim, "alice-token", "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert whoami == {"username": "alice", "uid": "1001", "groups": ["dev", "ops", "system:authenticated"]}
    assert as_token(sim, "alice-token", "get", "namespaces", check=False).returncode != 0
    sim.kubectl("create", "clusterrolebinding", "dev-view-ns", "--clusterrole=ns-reader", "--group=dev")
    sim.kubectl("create", "clusterrole", "ns-reader", "--verb=get,list", "--resource=namespaces")
    assert "kube-system" in as_token(sim, "alice-token", "get", "namespaces").stdout
    assert as_token(sim, "bob-token", "get", "namespaces", check=False).returncode != 0

    # A client certificate signed by the client CA: CN is the user, O the groups.
    directory = tls_files["directory"]
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "carol.key", "-out", "carol.csr",
                    "-subj", "/CN=carol/O=dev"], cwd=directory, check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", "carol.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                    "-CAcreateserial", "-out", "carol.crt", "-days", "1"], cwd=directory, check=True,
                   capture_output=True)
    sim.kubectl("config", "set-credentials", "carol", f"--client-certificate={directory}/carol.crt",
                f"--client-key={directory}/carol.key")
    carol = json.loads(sim.kubectl("auth", "whoami", "--user", "carol", "-o", "json").stdout)["status"]["userInfo"]
    assert carol["username"] == "carol" and carol["groups"] == ["dev", "system:authenticated"]
    assert "kube-system" in sim.kubectl("get", "namespaces", "--user", "carol").stdout

    # Without credentials: the public paths only. A wrong token is 401 whatever the path.
    status, _, _ = sim.request("GET", "/version", token=False)
    assert status == 200
    status, _, body = sim.request("GET", "/api/v1/namespaces/default/configmaps", token=False)
    assert status == 401 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    status, _, _ = sim.request("GET", "/version", headers={"Authorization": "Bearer nope"}, token=False)
    assert status == 401


def test_deleting_a_service_account_revokes_its_tokens(cluster):
    sim = cluster
    token = bridge_identity(sim)
    assert as_token(sim, token, "get", "rtask").returncode == 0
    sim.kubectl("delete", "serviceaccount", "bridge")
    gone = as_token(sim, token, "get", "rtask", check=False)
    assert gone.returncode != 0 and "Unauthorized" in gone.stderr
    # A new ServiceAccount of the same name is another identity: the old token stays dead.
    sim.kubectl("create", "serviceaccount", "bridge")
    assert as_token(sim, token, "get", "rtask", check=False).returncode != 0


def test_token_requests_are_checked(cluster):
    sim = cluster
    sim.kubectl("create", "serviceaccount", "bridge")
    short = sim.kubectl("create", "token", "bridge", "--duration=5m", check=False)
    assert short.returncode != 0 and "may not specify a duration less than 10 minutes" in short.stderr
    missing = sim.kubectl("create", "token", "nobody", check=False)
    assert missing.returncode != 0 and 'serviceaccounts "nobody" not found' in missing.stderr
    status, _, body = sim.request("POST", "/api/v1/namespaces/default/serviceaccounts/bridge/token",
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                   "spec": {"expirationSeconds": 1200, "audiences": ["k8s4r"]}})
    assert status == 201 and body["spec"]["expirationSeconds"] == 1200 and body["status"]["token"]
    # A token for another audience does not authenticate to the API server.
    status, _, _ = sim.request("GET", "/api/v1/namespaces/default/configmaps",
                               headers={"Authorization": "Bearer " + body["status"]["token"]}, token=False)
    assert status == 401


def test_impersonation_needs_the_impersonate_verb(cluster):
    sim = cluster
    bridge_identity(sim)
    as_bridge = sim.kubectl("get", "secrets", "--as=system:serviceaccount:default:bridge", check=False)
    assert ('secrets is forbidden: User "system:serviceaccount:default:bridge" cannot list resource "secrets"'
            in as_bridge.stderr)
    assert sim.kubectl("auth", "can-i", "patch", "tasks.robot.k8s4r.io", "--subresource=status",
                       "--as=system:serviceaccount:default:bridge").stdout.strip() == "yes"
    refused = as_token(sim, "bob-token", "get", "configmaps", "--as=alice", check=False)
    assert 'users "alice" is forbidden: User "bob" cannot impersonate resource "users" in API group ""' in refused.stderr


def test_rbac_objects_are_validated_and_listed(cluster):
    sim = cluster
    bad = sim.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
                      {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                       "metadata": {"name": "bad"}, "roleRef": {"kind": "Secret", "name": "x"},
                       "subjects": [{"kind": "ServiceAccount", "name": ""}]})
    status, _, body = bad
    assert status == 422
    fields = {cause["field"] for cause in body["details"]["causes"]}
    assert {"roleRef.kind", "subjects[0].name"} <= fields
    assert 'Unsupported value: "Secret": supported values: "Role", "ClusterRole"' in body["message"]
    sim.kubectl("create", "role", "r", "--verb=get", "--resource=configmaps")
    sim.kubectl("create", "rolebinding", "rb", "--role=r", "--user=bob")
    changed = sim.request("PATCH", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/rb",
                          {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}},
                          content_type="application/merge-patch+json")
    assert changed[0] == 422 and "cannot change roleRef" in changed[2]["message"]
    table = sim.kubectl("get", "rolebinding", "rb", "-o", "wide").stdout
    assert "Role/r" in table and "bob" in table
    # Every cluster starts with the bootstrap roles.
    assert "cluster-admin" in sim.kubectl("get", "clusterroles").stdout


def test_rbac_writers_cannot_grant_more_than_they_hold(cluster):
    sim = cluster
    sim.kubectl("create", "role", "rbac-writer", "--verb=get,create,update,patch",
                "--resource=roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io")
    sim.kubectl("create", "role", "map-reader", "--verb=get,list", "--resource=configmaps")
    sim.kubectl("create", "rolebinding", "bob-writes-rbac", "--role=rbac-writer", "--user=bob")
    sim.kubectl("create", "rolebinding", "bob-reads-maps", "--role=map-reader", "--user=bob")

    # What bob holds, bob may grant.
    assert as_token(sim, "bob-token", "create", "role", "maps", "--verb=get", "--resource=configmaps").returncode == 0
    refused = as_token(sim, "bob-token", "create", "role", "secrets", "--verb=get", "--resource=secrets", check=False)
    assert refused.returncode != 0
    assert ('roles.rbac.authorization.k8s.io "secrets" is forbidden: user "bob" (groups=["system:authenticated"]) is '
            'attempting to grant RBAC permissions not currently held:\n{APIGroups:[""], Resources:["secrets"], '
            'Verbs:["get"]}') in refused.stderr
    admin = as_token(sim, "bob-token", "create", "rolebinding", "me-admin", "--clusterrole=cluster-admin", "--user=bob",
                     check=False)
    assert admin.returncode != 0 and "is attempting to grant RBAC permissions not currently held" in admin.stderr
    assert as_token(sim, "bob-token", "create", "rolebinding", "alice-maps", "--role=maps", "--user=alice").returncode == 0
    # Widening a role by patch is checked too; the escalate verb lifts the check.
    widen = as_token(sim, "bob-token", "patch", "role", "maps", "--type=json", "-p",
                     '[{"op":"add","path":"/rules/0/resources/-","value":"secrets"}]', check=False)
    assert widen.returncode != 0 and "not currently held" in widen.stderr
    sim.kubectl("create", "role", "escalator", "--verb=escalate", "--resource=roles.rbac.authorization.k8s.io")
    sim.kubectl("create", "rolebinding", "bob-escalates", "--role=escalator", "--user=bob")
    assert as_token(sim, "bob-token", "patch", "role", "maps", "--type=json", "-p",
                    '[{"op":"add","path":"/rules/0/resources/-","value":"secrets"}]').returncode == 0


def test_a_malformed_binding_does_not_break_authorization(cluster):
    sim = cluster
    status, _, _ = sim.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
                               {"metadata": {"name": "odd"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                                          "kind": "ClusterRole", "name": "view"},
                                "subjects": [{"kind": "ServiceAccount", "name": "x", "namespace": None}]})
    assert status == 201
    sim.kubectl("create", "role", "maps", "--verb=list", "--resource=configmaps")
    sim.kubectl("create", "rolebinding", "bob-maps", "--role=maps", "--user=bob")
    assert as_token(sim, "bob-token", "get", "configmaps").returncode == 0
