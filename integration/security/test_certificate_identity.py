"""One identity per robot by client certificate: Mosquitto with require_certificate and use_identity_as_username
(the certificate's CN is the user name the ACL sees) and deploy/mosquitto/k8s4r.acl; the bridge and the agents log in
with certificates the test's CA signed, no password anywhere. A robot's certificate confines it to its own topics."""
import pytest

from security_support import tls  # noqa: F401
from bridge_support import BridgeProcess, create_task, dispatch, get, sim, wait_state  # noqa: F401,E402
from agent_support import AgentProcess  # noqa: E402
from conftest import DEPLOY_ACL, Observer, SecureBroker, client_certificate, make_tls_files, wait_until  # noqa: E402


class CertificateBroker(SecureBroker):
    bridge_password = None  # nobody logs in with a password here
    operator_password = None

    def listener_config(self):
        return (f"cafile {self.tls['ca']}\ncertfile {self.tls['cert']}\nkeyfile {self.tls['key']}\n"
                "require_certificate true\nuse_identity_as_username true\nallow_anonymous false\n"
                f"acl_file {DEPLOY_ACL}\n")


@pytest.fixture
def broker(tmp_path, tls):
    started = CertificateBroker(tmp_path / "broker", tls)
    yield started
    started.stop()


def with_certificate(certificate):
    return ["--cert-file", certificate["cert"], "--key-file", certificate["key"]]


def test_robots_log_in_by_certificate_and_each_is_confined_to_its_own_topics(tmp_path, tls, broker, sim):
    bridge = BridgeProcess(tmp_path / "bridge", broker, sim, ["--ca-file", broker.ca, "--dispatch-resend-after", "2s",
                                                             *with_certificate(client_certificate(tls, "k8s4r-bridge"))])
    bridge.start()
    robot = AgentProcess(broker, tmp_path / "work-robot-1", "robot-1",
                         with_certificate(client_certificate(tls, "robot-1")))
    thief = Observer(broker, topics=("k8s4r/robots/robot-1/tasks/dispatch",), client_id="thief",
                     certificate=client_certificate(tls, "robot-2"))
    try:
        robot.start()
        wait_until(lambda: (get(sim, "robot", "robot-1") or {}).get("status", {}).get("connected"), 30,
                   "robot-1 registered, logged in by its certificate alone")
        uid = create_task(sim, "by-certificate", "sleep 3; echo done")["metadata"]["uid"]
        dispatch(sim, "by-certificate")
        wait_state(sim, "by-certificate", "running", timeout=20)
        # robot-2's certificate: its publishes for robot-1 are denied, robot-1's dispatches never reach it.
        thief.publish(f"k8s4r/robots/robot-1/tasks/{uid}/status",
                      {"taskUid": uid, "robotId": "robot-1", "state": "failed", "seq": 1000})
        task = wait_state(sim, "by-certificate", "completed", timeout=30)
        assert "done" in task["status"]["logs"]
        denied = [line for line in broker.log_text().splitlines() if "Denied PUBLISH from thief" in line]
        assert any(f"'k8s4r/robots/robot-1/tasks/{uid}/status'" in line for line in denied), denied
        assert thief.messages == []
        assert bridge.metric("k8s4r_bridge_messages_refused_total") == 0
    finally:
        thief.close()
        robot.cleanup()
        bridge.stop()


def test_without_a_certificate_from_the_fleet_ca_there_is_no_way_in(tmp_path, tls, broker):
    stranger = client_certificate(make_tls_files(tmp_path / "other-ca"), "robot-1")
    for name, extra in (("no certificate", []), ("another CA's", with_certificate(stranger))):
        agent = AgentProcess(broker, tmp_path / f"work-{len(extra)}", "robot-1", extra)
        agent.start()
        try:
            wait_until(lambda: agent.log_text().count("cannot connect to ssl://") >= 2, 30, f"{name}: two refusals")
            assert "the broker refused" in agent.log_text(), agent.log_text()[-2000:]
        finally:
            agent.cleanup()
