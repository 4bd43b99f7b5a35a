"""Fixtures shared by the black-box tests: the real binaries from build/bin
(or $K8S4R_BIN_DIR), started on free loopback ports and always stopped."""
import http.server
import json
import os
import pathlib
import shutil
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
BIN_DIR = pathlib.Path(os.environ.get("K8S4R_BIN_DIR", REPO / "build" / "bin"))
CRDS = REPO / "proto-schemas" / "crds"
EXAMPLES = REPO / "examples"


def binary(name):
    path = BIN_DIR / name
    if not path.exists():
        pytest.fail(f"{path} is not built; run ./scripts/test.sh or cmake --build build")
    return str(path)


def require_kubectl():
    # kubectl comes with the machine image; Debian 12 does not package it.
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")


def terminate(process, timeout=10):
    """SIGTERM, then SIGKILL if it has not exited within `timeout`; the exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


class KubeSim:
    """A running k8s4r-kube-sim with a kubeconfig, and ways to talk to it:
    kubectl, raw HTTP, and the admin endpoints."""

    def __init__(self, workdir, *args, token=None, tls=None):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.token = token
        self.ca_file = None
        command = [binary("k8s4r-kube-sim"), "--listen", "127.0.0.1:0", "--write-kubeconfig", str(self.kubeconfig)]
        if token:
            command += ["--token", token]
        if tls:
            command += ["--tls-cert", tls["cert"], "--tls-key", tls["key"], "--tls-ca", tls["ca"]]
            self.ca_file = tls["ca"]
        command += list(args)
        self.log = open(self.workdir / "kube-sim.log", "w")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not self.kubeconfig.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("k8s4r-kube-sim did not start: " + (self.workdir / "kube-sim.log").read_text())
            time.sleep(0.02)
        self.url = next(line.split("server:")[1].strip() for line in self.kubeconfig.read_text().splitlines()
                        if "server:" in line)

    def stop(self):
        terminate(self.process)
        self.log.close()

    # ---- kubectl ----------------------------------------------------------------
    def kubectl(self, *args, input=None, check=True, timeout=60):
        require_kubectl()
        command = ["kubectl", "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.workdir / "kube-cache"), *args]
        result = subprocess.run(command, input=input, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr}{result.stdout}")
        return result

    def kubectl_popen(self, *args):
        require_kubectl()
        command = ["kubectl", "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.workdir / "kube-cache"), *args]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def apply_crds(self):
        self.kubectl("apply", "-f", str(CRDS))

    # ---- raw HTTP ---------------------------------------------------------------
    def ssl_context(self):
        if not self.url.startswith("https"):
            return None
        return ssl.create_default_context(cafile=self.ca_file)

    def request(self, method, path, body=None, content_type="application/json", headers=None, token=True):
        data = body if isinstance(body, (bytes, type(None))) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", content_type)
        if token and self.token:
            request.add_header("Authorization", "Bearer " + self.token)
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, context=self.ssl_context(), timeout=30) as response:
                return response.status, response.headers, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            payload = error.read()
            return error.code, error.headers, json.loads(payload) if payload.startswith(b"{") else payload

    def admin(self, path, body=None):
        status, _, payload = self.request("POST", "/_sim/" + path, body or {})
        assert status == 200, payload
        return payload


@pytest.fixture
def kube_sim(tmp_path):
    """Starts k8s4r-kube-sim (call it with extra flags); stops every one started."""
    started = []

    def start(*args, **kwargs):
        sim = KubeSim(tmp_path / f"sim{len(started)}", *args, **kwargs)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def sim(kube_sim):
    """A k8s4r-kube-sim with k8s4r's CRDs applied."""
    started = kube_sim()
    started.apply_crds()
    return started


@pytest.fixture
def api_client(sim):
    """The official Python client, configured from `sim`'s kubeconfig."""
    from kubernetes import config
    configured = config.new_client_from_config(config_file=str(sim.kubeconfig))
    yield configured
    configured.close()


def make_tls_files(directory):
    """A CA and a server certificate for 127.0.0.1 and localhost, made with openssl in `directory`."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True)

    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", "/CN=k8s4r-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "server.crt", "-days", "1", "-extfile", "san.ext")
    return {"ca": str(directory / "ca.crt"), "cert": str(directory / "server.crt"), "key": str(directory / "server.key"),
            "directory": str(directory)}


def client_certificate(tls, common_name, days=1):
    """A client certificate for `common_name`, signed by the CA of make_tls_files' `tls`: {"cert", "key"}."""
    directory = pathlib.Path(tls["directory"])

    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{common_name}.key", "-out", f"{common_name}.csr",
        "-subj", f"/CN={common_name}")
    (directory / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    run("x509", "-req", "-in", f"{common_name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        f"{common_name}.crt", "-days", str(days), "-extfile", "client.ext")
    return {"cert": str(directory / f"{common_name}.crt"), "key": str(directory / f"{common_name}.key")}


@pytest.fixture
def tls_files(tmp_path):
    """A CA and a server certificate for 127.0.0.1 and localhost."""
    return make_tls_files(tmp_path / "tls")


# ---- MQTT: a real Mosquitto, an observer client, and the agent --------------------

def free_port():
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Broker:
    """A Mosquitto broker on a free loopback port; stop() and start() again
    keep the port, as a restarted broker on a robot's network would."""

    def __init__(self, workdir, extra_config=""):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config = self.workdir / "mosquitto.conf"
        # set_tcp_nodelay and max_queued_messages as docs/bridge.md recommends: without them Nagle's algorithm
        # holds a dispatch up to 40 ms behind an unacknowledged packet, and a burst of more than 1,000 reports
        # is dropped for the bridge.
        self.config.write_text(f"listener {self.port} 127.0.0.1\n" + self.listener_config() +
                               "set_tcp_nodelay true\nmax_queued_messages 100000\n" + extra_config)
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.process = None
        self.start()

    def listener_config(self):
        return "allow_anonymous true\n"

    def start(self):
        import socket
        self.log = open(self.workdir / "mosquitto.log", "a")
        self.process = subprocess.Popen(["mosquitto", "-c", str(self.config)], stdout=self.log, stderr=subprocess.STDOUT)

        def listening():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                if self.process.poll() is not None:
                    raise AssertionError("mosquitto exited: " + (self.workdir / "mosquitto.log").read_text())
                return False
        wait_until(listening, 10, "mosquitto to listen")

    def stop(self):
        if self.process:
            terminate(self.process)
            self.log.close()
        self.process = None

    def log_text(self):
        return (self.workdir / "mosquitto.log").read_text(errors="replace")


DEPLOY_ACL = pathlib.Path(__file__).resolve().parent.parent / "deploy" / "mosquitto" / "k8s4r.acl"


class SecureBroker(Broker):
    """Mosquitto as docs/security.md sets it up: TLS only, no anonymous clients, one user per robot (its robot id
    and token in a password file), and the per-robot ACL of deploy/mosquitto/k8s4r.acl. It runs as root so it can
    read the test's files (started as root it would otherwise drop to its own user first, and find them unreadable),
    and logs every decision, denials included.

    The bridge (`k8s4r-bridge`) and the operator (`k8s4r-operator`, read-only) have logins of their own: a
    BridgeProcess and an Observer given this broker use them unless told otherwise; an AgentProcess checks the
    broker's certificate against `ca`. Robots are added with add_robot(id, token)."""
    bridge_password = "bridge-password-7f3a"
    operator_password = "operator-password-91c2"

    def __init__(self, workdir, tls, users=None, acl_file=DEPLOY_ACL, extra_config=""):
        self.tls, self.ca = tls, tls["ca"]
        self.passwords = pathlib.Path(workdir) / "passwd"
        self.acl_file = acl_file
        pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
        if users is not None:
            for user, password in {"k8s4r-bridge": self.bridge_password,
                                   "k8s4r-operator": self.operator_password, **users}.items():
                self.set_password(user, password)
        super().__init__(workdir, "user root\nlog_type all\n" + extra_config)
        self.url = f"ssl://127.0.0.1:{self.port}"

    def add_robot(self, robot, token):
        """A robot's login: its id and token in the password file, read again by the running broker."""
        self.set_password(robot, token)
        self.reload()

    def listener_config(self):
        return (f"cafile {self.tls['ca']}\ncertfile {self.tls['cert']}\nkeyfile {self.tls['key']}\n"
                f"allow_anonymous false\npassword_file {self.passwords}\nacl_file {self.acl_file}\n")

    def set_password(self, user, password):
        create = [] if self.passwords.exists() else ["-c"]
        subprocess.run(["mosquitto_passwd", *create, "-b", str(self.passwords), user, password], check=True,
                       capture_output=True)

    def remove_user(self, user):
        subprocess.run(["mosquitto_passwd", "-D", str(self.passwords), user], check=True, capture_output=True)

    def reload(self):
        """SIGHUP: Mosquitto reads the password and ACL files again."""
        self.process.send_signal(signal.SIGHUP)


class FileServer:
    """An HTTP server of the files in `root` that records every path it is asked for (`asked`): artifacts' source,
    judged by what was fetched. Stop it with close()."""

    def __init__(self, root):
        self.root = pathlib.Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.asked = []
        asked, directory = self.asked, str(self.root)

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=directory, **kwargs)

            def do_GET(self):
                asked.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Observer:
    """An MQTT client that records every message on its subscriptions, as an
    operator's `mosquitto_sub -v -t 'k8s4r/#'` would, and can publish."""

    def __init__(self, broker, topics=("k8s4r/#",), client_id="", username=None, password=None, certificate=None):
        import threading
        import paho.mqtt.client as mqtt
        self.messages = []  # (topic, payload bytes, retain)
        self.arrivals = []  # (topic, time.monotonic() on arrival), in step with messages
        self.lock = threading.Lock()
        self.connected = threading.Event()
        self.client = mqtt.Client(client_id=client_id, clean_session=True)
        self.topics = topics

        self.connect_rc = None
        self.granted = {}  # topic -> the QoS the broker granted, or 128 when it refused
        pending = {}

        def on_connect(client, userdata, flags, rc):
            self.connect_rc = rc
            for topic in self.topics:
                result, mid = client.subscribe(topic, qos=1)
                pending[mid] = topic
            if not self.topics or rc != 0:
                self.connected.set()

        def on_subscribe(client, userdata, mid, granted_qos):
            self.granted[pending.pop(mid, "")] = granted_qos[0]
            if not pending:
                self.connected.set()  # connected and subscribed: nothing published from now on is missed

        def on_message(client, userdata, message):
            with self.lock:
                self.messages.append((message.topic, message.payload, bool(message.retain)))
                self.arrivals.append((message.topic, time.monotonic()))

        self.client.on_connect = on_connect
        self.client.on_subscribe = on_subscribe
        self.client.on_message = on_message
        if username is None and getattr(broker, "operator_password", None):
            username, password = "k8s4r-operator", broker.operator_password  # read-only, as an operator tails
        if username:
            self.client.username_pw_set(username, password)
        if getattr(broker, "ca", None):  # a SecureBroker: TLS, its certificate checked against the test CA
            self.client.tls_set(ca_certs=broker.ca, certfile=certificate and certificate["cert"],
                                keyfile=certificate and certificate["key"])
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()
        assert self.connected.wait(10), "observer did not connect and subscribe"

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()

    def publish(self, topic, payload, qos=1, retain=False):
        if not isinstance(payload, (bytes, str)):
            payload = json.dumps(payload)
        self.client.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(10)

    def on(self, topic):
        with self.lock:
            return [payload for t, payload, _ in self.messages if t == topic]

    def arrival_times(self, topic):
        with self.lock:
            return [when for t, when in self.arrivals if t == topic]

    def json_on(self, topic):
        return [json.loads(payload) for payload in self.on(topic)]

    def wait_for(self, topic, predicate=lambda message: True, timeout=10.0):
        """The first JSON message on `topic` for which predicate holds."""
        def found():
            return next((m for m in self.json_on(topic) if predicate(m)), None)
        return wait_until(found, timeout, f"a matching message on {topic}")


@pytest.fixture
def broker(tmp_path):
    running = Broker(tmp_path / "broker")
    yield running
    running.stop()


@pytest.fixture
def observer(broker):
    client = Observer(broker)
    yield client
    client.close()
