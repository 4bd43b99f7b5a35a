"""The agent and a broker over TLS: it connects to a broker whose certificate its CA signed for the host it dials,
and to no other — a certificate for another host, or one another CA signed, is refused however valid."""
import pathlib
import subprocess
import types

import pytest

from agent_support import AgentProcess, ROBOT
from conftest import Broker, Observer, binary, free_port, make_tls_files, wait_until


def certificate_for(tls, name, san, days=1):
    """A server certificate signed by the test CA in `tls`, for `san` ("DNS:other.example"), valid `days` from now
    (-1: it expired a day ago)."""
    directory = tls["directory"]

    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    (pathlib.Path(directory) / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        f"{name}.crt", "-days", str(days), "-extfile", f"{name}.ext")
    return {"cert": f"{directory}/{name}.crt", "key": f"{directory}/{name}.key"}


def tls_broker(tmp_path, tls, cert, key):
    """A Mosquitto with its plain listener (for the test's observer) and a TLS one. It reads the certificates as
    root: started as root it would otherwise drop to its own user first and find the test's files unreadable."""
    port = free_port()
    broker = Broker(tmp_path / "broker", f"user root\nlistener {port} 127.0.0.1\ncafile {tls['ca']}\n"
                                         f"certfile {cert}\nkeyfile {key}\n")
    broker.tls_url = f"ssl://127.0.0.1:{port}"
    return broker


@pytest.fixture
def tls(tmp_path):
    return make_tls_files(tmp_path / "tls")


def test_an_agent_connects_over_tls_to_a_broker_its_ca_signed_for_this_host(tmp_path, tls):
    broker = tls_broker(tmp_path, tls, tls["cert"], tls["key"])
    observer = Observer(broker)
    agent = AgentProcess(types.SimpleNamespace(url=broker.tls_url), tmp_path / "work", extra=["--ca-file", tls["ca"]])
    try:
        agent.start()
        observer.wait_for(f"k8s4r/robots/{ROBOT}/presence", lambda m: m["online"], 20)
    finally:
        agent.cleanup()
        observer.close()
        broker.stop()


@pytest.mark.parametrize("trouble", ["another host", "another CA", "expired"])
def test_an_agent_refuses_a_broker_certificate_for_another_host_or_from_another_ca(tmp_path, tls, trouble):
    if trouble == "another host":
        # Signed by the agent's own CA, valid, but for another name than the 127.0.0.1 it dials: a certificate
        # anyone with a certificate from that CA (or, with the system's store, from any public CA) could show.
        served = certificate_for(tls, "elsewhere", "DNS:other.example")
        ca = tls["ca"]
    elif trouble == "expired":
        served = certificate_for(tls, "expired", "IP:127.0.0.1", days=-1)
        ca = tls["ca"]
    else:
        served = {"cert": tls["cert"], "key": tls["key"]}
        ca = make_tls_files(tmp_path / "other-ca")["ca"]
    broker = tls_broker(tmp_path, tls, served["cert"], served["key"])
    observer = Observer(broker)
    agent = AgentProcess(types.SimpleNamespace(url=broker.tls_url), tmp_path / "work", extra=["--ca-file", ca])
    try:
        agent.start()
        # It tries, is refused, and tries again: judged after two refusals, not after a fixed wait.
        wait_until(lambda: agent.log_text().count("cannot connect to ssl://") >= 2, 30, "two refused connections")
        assert not observer.on(f"k8s4r/robots/{ROBOT}/presence"), agent.log_text()[-2000:]
        assert agent.running()  # refused, retrying, not dead
        # And it says why, not only Paho's "return code -1".
        if trouble == "another host":
            why = ("the broker's certificate (CN=elsewhere, issued by CN=k8s4r-test-ca) is for DNS:other.example, "
                   "not 127.0.0.1")
        elif trouble == "expired":
            why = "the broker's certificate (CN=expired, issued by CN=k8s4r-test-ca) expired at "
        else:
            # Both test CAs are named k8s4r-test-ca: OpenSSL finds ours by name, and it did not sign this one.
            why = f"the broker's certificate (CN=127.0.0.1, issued by CN=k8s4r-test-ca) cannot be verified with {ca}: "
        assert why in agent.log_text(), agent.log_text()[-2000:]
    finally:
        agent.cleanup()
        observer.close()
        broker.stop()


def test_a_broker_that_asks_for_a_client_certificate_takes_the_agent_with_one_and_refuses_it_without(tmp_path, tls):
    """Mutual TLS: the broker requires a certificate its CA signed; the agent shows one with --cert-file and
    --key-file, and without them is refused (and keeps retrying)."""
    client = certificate_for(tls, "robot-1", "DNS:robot-1")
    port = free_port()
    broker = Broker(tmp_path / "broker", f"user root\nlistener {port} 127.0.0.1\ncafile {tls['ca']}\n"
                                         f"certfile {tls['cert']}\nkeyfile {tls['key']}\nrequire_certificate true\n")
    url = types.SimpleNamespace(url=f"ssl://127.0.0.1:{port}")
    observer = Observer(broker)
    agents = []
    try:
        without = AgentProcess(url, tmp_path / "work-without", "robot-2", ["--ca-file", tls["ca"]])
        agents.append(without)
        without.start()
        wait_until(lambda: without.log_text().count("cannot connect to ssl://") >= 2, 30, "two refused connections")
        assert "the broker refused us without a client certificate" in without.log_text(), without.log_text()[-2000:]
        with_cert = AgentProcess(url, tmp_path / "work-with", ROBOT,
                                 ["--ca-file", tls["ca"], "--cert-file", client["cert"], "--key-file", client["key"]])
        agents.append(with_cert)
        with_cert.start()
        observer.wait_for(f"k8s4r/robots/{ROBOT}/presence", lambda m: m["online"], 20)
        assert not observer.on("k8s4r/robots/robot-2/presence")
    finally:
        for agent in agents:
            agent.cleanup()
        observer.close()
        broker.stop()


def test_a_client_certificate_for_a_plain_tcp_broker_is_a_configuration_error(tmp_path, tls):
    """Never a silent downgrade: the agent refuses to start rather than drop the certificate it was given."""
    client = certificate_for(tls, "robot-1", "DNS:robot-1")
    result = subprocess.run([binary("k8s4r-agent"), "--broker-url", "tcp://127.0.0.1:1883", "--robot-id", ROBOT,
                             "--work-dir", str(tmp_path / "work"), "--cert-file", client["cert"]],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "cert-file and key-file go together" in result.stderr, result.stderr
    assert "never sent over plain TCP" in result.stderr, result.stderr


def test_a_wrong_ca_file_or_a_key_that_is_not_the_certificates_is_a_configuration_error(tmp_path, tls):
    client = certificate_for(tls, "robot-1", "DNS:robot-1")
    (tmp_path / "not-a-ca.pem").write_text("just text\n")
    result = subprocess.run([binary("k8s4r-agent"), "--broker-url", "ssl://127.0.0.1:8883", "--robot-id", ROBOT,
                             "--work-dir", str(tmp_path / "work"), "--ca-file", str(tmp_path / "not-a-ca.pem"),
                             "--cert-file", client["cert"], "--key-file", tls["key"]],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"ca-file '{tmp_path / 'not-a-ca.pem'}' holds no PEM certificate" in result.stderr, result.stderr
    assert f"key-file '{tls['key']}' is not the private key of cert-file" in result.stderr, result.stderr


def test_an_agent_says_when_the_broker_does_not_speak_tls(tmp_path, tls):
    broker = Broker(tmp_path / "broker")  # plain TCP only
    agent = AgentProcess(types.SimpleNamespace(url=f"ssl://127.0.0.1:{broker.port}"), tmp_path / "work",
                         extra=["--ca-file", tls["ca"]])
    try:
        agent.start()
        wait_until(lambda: "closed the connection without answering the TLS handshake (a plain tcp:// listener?)"
                   in agent.log_text(), 30,
                   "the agent to say the broker does not speak TLS")
        assert agent.running()
    finally:
        agent.cleanup()
        broker.stop()
