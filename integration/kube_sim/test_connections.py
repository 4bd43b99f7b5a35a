"""Open watches and idle keep-alive connections hold no thread: with far more
of each than the server has threads, /readyz still answers, every watch still
gets its events, and the server's thread count does not grow. (Timing is
measured in bench/kube_sim_connections_bench.py, not asserted here.)"""
import http.client
import json
import socket
import time

from conftest import wait_until

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def open_raw(sim, request):
    host, port = sim.url.split("://")[1].split(":")
    connection = socket.create_connection((host, int(port)), timeout=30)
    connection.sendall(request.encode())
    return connection


def read_headers(connection):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(4096)
        assert chunk, "the server closed the connection"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode(), rest


def threads_of(process):
    with open(f"/proc/{process.pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def test_many_watches_and_idle_connections_hold_no_thread(kube_sim):
    sim = kube_sim("--threads", "2")
    threads_before = threads_of(sim.process)
    watches, idle = [], []
    try:
        for _ in range(600):  # more than the old thread-per-connection default of 512
            connection = open_raw(sim, f"GET {CONFIGMAPS}?watch=1&resourceVersion=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            watches.append(connection)
        for _ in range(600):
            connection = open_raw(sim, "GET /version HTTP/1.1\r\nHost: x\r\n\r\n")  # then stays open, idle
            idle.append(connection)
        for connection in watches:
            head, _ = read_headers(connection)
            assert head.startswith("HTTP/1.1 200")
        for connection in idle:
            head, _ = read_headers(connection)
            assert head.startswith("HTTP/1.1 200")
        wait_until(lambda: sim.request("GET", "/_sim/stats")[2]["watchers"] >= 600, what="600 open watches")

        host, port = sim.url.split("://")[1].split(":")
        probe = http.client.HTTPConnection(host, int(port), timeout=30)
        probe.request("GET", "/readyz")
        ready = probe.getresponse()
        assert ready.status == 200 and ready.read() == b"ok"
        probe.close()
        assert threads_of(sim.process) == threads_before

        # Every watch still gets what happens.
        assert sim.request("POST", CONFIGMAPS, {"metadata": {"name": "seen-by-all"}})[0] == 201
        for connection in watches:
            connection.settimeout(30)
            data = b""
            while b"seen-by-all" not in data:
                chunk = connection.recv(65536)
                assert chunk, "a watch ended early"
                data += chunk
    finally:
        for connection in watches + idle:
            connection.close()
    # Closed watches are noticed and released at once.
    wait_until(lambda: sim.request("GET", "/_sim/stats")[2]["watchers"] == 0, what="every watch to be released")


def test_a_slow_or_vanished_watcher_does_not_stop_others(kube_sim):
    sim = kube_sim()
    quiet = open_raw(sim, f"GET {CONFIGMAPS}?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    read_headers(quiet)
    quiet.close()  # goes away without reading anything
    host, port = sim.url.split("://")[1].split(":")
    reader = http.client.HTTPConnection(host, int(port), timeout=30)
    reader.request("GET", f"{CONFIGMAPS}?watch=1&timeoutSeconds=10")
    response = reader.getresponse()
    for index in range(50):
        sim.request("POST", CONFIGMAPS, {"metadata": {"name": f"c{index}"}})
    names = []
    while len(names) < 50:
        line = response.readline()
        assert line, "the watch ended early"
        if line.strip():
            names.append(json.loads(line)["object"]["metadata"]["name"])
    reader.close()
    assert names == [f"c{index}" for index in range(50)]
