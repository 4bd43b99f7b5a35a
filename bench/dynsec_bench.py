#!/usr/bin/env python3
"""Benchmark of the bridge's broker identities (--dynamic-security): every part real — Mosquitto 2.0.11 on TLS with
its dynamic-security plugin (prepared by deploy/mosquitto/dynsec-bootstrap.sh), k8s4r-kube-sim, k8s4r-bridge.

Measured, for --robots Secrets:
- import: from the bridge's start (the Secrets already there) to a login in the broker for every robot, and the
  longest the broker kept a message waiting meanwhile (a probe publishing every 20 ms and timing its echo): the
  plugin runs in the broker's one thread and rewrites its whole JSON file on every command;
- restart: a second bridge, every login already there: its time to ready and the changes it made (0 expected);
- revocation: for --revocations robots connected with their tokens, from `kubectl delete secret` returning to the
  broker disconnecting the robot (median and max).

Usage:
  /usr/bin/python3 bench/dynsec_bench.py                  # the figures in docs/performance.md
  /usr/bin/python3 bench/dynsec_bench.py --robots 100
Exits non-zero when something did not work; times are reported, never asserted.
"""
import argparse
import contextlib
import json
import pathlib
import statistics
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "integration"), str(REPO / "integration" / "bridge"), str(REPO / "integration" / "agent"),
                str(REPO / "integration" / "security")]

import paho.mqtt.client as mqtt  # noqa: E402

from bridge_support import BridgeProcess  # noqa: E402
from conftest import KubeSim, make_tls_files, wait_until  # noqa: E402
from security_support import DynsecBroker  # noqa: E402


def token_of(robot):
    return f"bench-token-{robot}"


def secrets(count):
    return {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": f"k8s4r-robot-r{i}", "labels": {"robot.k8s4r.io/robot-id": f"r{i}"}},
         "stringData": {"token": token_of(f"r{i}")}} for i in range(count)]}


def client(broker, client_id, username, password):
    made = mqtt.Client(client_id=client_id, protocol=mqtt.MQTTv5)
    made.username_pw_set(username, password)
    made.tls_set(ca_certs=broker.ca)
    return made


class Probe:
    """One message at a time, as a robot's heartbeat: published as the bridge's user, timed until it reaches an
    operator's subscription, then the next 20 ms later. How long the broker keeps a message waiting."""

    def __init__(self, broker):
        self.delays, self.stopped, self.echoed = [], threading.Event(), threading.Event()
        self.subscriber = client(broker, "bench-probe-in", "k8s4r-operator", broker.operator_password)
        ready = threading.Event()
        self.subscriber.on_connect = lambda c, *a: c.subscribe("k8s4r/robots/probe/response", qos=0)
        self.subscriber.on_subscribe = lambda *a: ready.set()

        def echoed(client_, userdata, message):
            self.delays.append(time.monotonic() - float(message.payload))
            self.echoed.set()
        self.subscriber.on_message = echoed
        self.subscriber.connect("127.0.0.1", broker.port)
        self.subscriber.loop_start()
        assert ready.wait(10), "the probe's subscriber did not subscribe"
        self.publisher = client(broker, "bench-probe-out", "k8s4r-bridge", broker.bridge_password)
        self.publisher.connect("127.0.0.1", broker.port)
        self.publisher.loop_start()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopped.wait(0.02):
            self.echoed.clear()
            self.publisher.publish("k8s4r/robots/probe/response", repr(time.monotonic()), qos=0)
            self.echoed.wait(60)

    def stop(self):
        self.stopped.set()
        self.thread.join()
        for made in (self.publisher, self.subscriber):
            made.loop_stop()
            made.disconnect()


def revocation_waits(broker, sim, count, after=lambda robot: None):
    """For robots r0 .. r<count-1>, one at a time: logged in with its token, then its Secret deleted; the seconds
    from `kubectl delete secret` returning to the broker disconnecting it. `after(robot)` runs once it is out."""
    waits = []
    for i in range(count):
        robot = f"r{i}"
        gone, connected = threading.Event(), threading.Event()
        made = client(broker, robot, robot, token_of(robot))
        made.on_connect = lambda *a: connected.set()
        made.on_disconnect = lambda *a: gone.set()
        made.connect("127.0.0.1", broker.port)
        made.loop_start()
        assert connected.wait(10), f"{robot} did not log in"
        before = time.monotonic()
        sim.kubectl("delete", "secret", f"k8s4r-robot-{robot}")
        assert gone.wait(10), f"{robot} was not disconnected"
        waits.append(time.monotonic() - before)
        made.loop_stop()
        after(robot)
    return waits


def bench_main(doc, run, robots, revocations, prefix):
    """The command line both login benchmarks share: --robots, --revocations, --json."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robots", type=int, default=robots)
    parser.add_argument("--revocations", type=int, default=revocations)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=prefix) as directory:
        figures = run(args, pathlib.Path(directory))
    print(json.dumps(figures, indent=2))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=2))


@contextlib.contextmanager
def bench_parts(workdir, make_broker):
    """The stand-in and a TLS broker (`make_broker(workdir, tls)`) for a logins benchmark, and a list for the bridges
    the run starts: each is stopped at the end, and its log's tail printed when an assertion failed."""
    sim = KubeSim(workdir / "sim", token="admin-token", tls=make_tls_files(workdir / "api-tls"))
    sim.apply_crds()
    broker = make_broker(workdir / "broker", make_tls_files(workdir / "mqtt-tls"))
    bridges = []
    try:
        yield sim, broker, bridges
    except AssertionError:
        for bridge in bridges:
            print(bridge.log_text()[-3000:], file=sys.stderr)
        raise
    finally:
        for bridge in bridges:
            bridge.stop()
        broker.stop()
        sim.stop()


def import_waits(probe):
    """The broker's longest and median wait while the logins were imported, from the probe, which stops."""
    probe.stop()
    return {"broker_longest_wait_ms_during_import": round(max(probe.delays) * 1000, 1),
            "broker_median_wait_ms_during_import": round(statistics.median(probe.delays) * 1000, 2)}


def dynsec_broker(workdir, tls):
    broker = DynsecBroker(workdir, tls)
    broker.mode = "dynamic-security"
    return broker


def run(args, workdir):
    figures = {"robots": args.robots}
    with bench_parts(workdir, dynsec_broker) as (sim, broker, bridges):
        sim.kubectl("apply", "-f", "-", input=json.dumps(secrets(args.robots)))
        probe = Probe(broker)
        started = time.monotonic()
        bridge = BridgeProcess(workdir / "bridge", broker, sim, ["--dynamic-security", "true"], log_level="info")
        bridges.append(bridge)
        bridge.start()
        wait_until(lambda: bridge.metric("k8s4r_bridge_broker_identities") == args.robots, 1800,
                   "a login for every robot")
        figures["import_seconds"] = round(time.monotonic() - started, 2)
        figures.update(import_waits(probe))
        figures["dynsec_file_bytes"] = broker.dynsec_file.stat().st_size
        bridge.stop()

        started = time.monotonic()
        again = BridgeProcess(workdir / "bridge-again", broker, sim, ["--dynamic-security", "true"],
                              log_level="info").start()
        bridges.append(again)
        figures["restart_ready_seconds"] = round(time.monotonic() - started, 2)
        figures["restart_changes"] = again.metric("k8s4r_bridge_broker_identity_changes_total")

        waits = revocation_waits(broker, sim, args.revocations)
        figures["revocation_median_ms"] = round(statistics.median(waits) * 1000, 1)
        figures["revocation_max_ms"] = round(max(waits) * 1000, 1)
        return figures


def main():
    bench_main(__doc__, run, 1000, 10, "k8s4r-dynsec-bench-")


if __name__ == "__main__":
    main()
