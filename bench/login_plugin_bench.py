#!/usr/bin/env python3
"""Benchmark of robot logins at fleet scale (--login-plugin): every part real — Mosquitto 2.0.11 on TLS loading the
k8s4r-auth plugin (build/lib/k8s4r_auth.so), k8s4r-kube-sim holding one Secret per robot, k8s4r-bridge.

Measured, for --robots Secrets (beside bench/dynsec_bench.py, which measures the dynamic-security path):
- import: from the bridge's start (the Secrets already there) to the plugin holding a login for every robot (the
  bridge's k8s4r_bridge_broker_logins), its informer's list included, confirmed by 100 robots logging in; and the
  longest the broker kept a message waiting meanwhile (dynsec_bench's probe: a message every 20 ms, timed to its
  echo; the plugin runs in the broker's one thread);
- broker restart: from starting Mosquitto to its listening, the plugin reading its file of --robots logins;
- bridge restart: its time to ready, and the login records it made the plugin write (0 expected);
- revocation: for --revocations robots connected with their tokens, from `kubectl delete secret` returning to the
  broker disconnecting the robot (median and max).

Usage:
  /usr/bin/python3 bench/login_plugin_bench.py --robots 100000 --revocations 20   # docs/performance.md's figures
  /usr/bin/python3 bench/login_plugin_bench.py --robots 1000
Exits non-zero when something did not work; times are reported, never asserted.
"""
import json
import pathlib
import random
import statistics
import sys
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "integration"), str(REPO / "integration" / "bridge"),
                str(REPO / "integration" / "agent"), str(REPO / "integration" / "security")]

from bridge_support import BridgeProcess  # noqa: E402
from conftest import wait_until  # noqa: E402
from dynsec_bench import (Probe, bench_main, bench_parts, client, import_waits, revocation_waits, secrets,  # noqa: E402
                          token_of)
from security_support import LoginPluginBroker  # noqa: E402


def logs_in(broker, robot):
    """Whether a robot gets in with its token (CONNACK 0)."""
    made = client(broker, robot, robot, token_of(robot))
    answered, codes = threading.Event(), []
    made.on_connect = lambda c, u, f, rc, *a: (codes.append(int(getattr(rc, "value", rc))), answered.set())
    made.connect("127.0.0.1", broker.port)
    made.loop_start()
    try:
        assert answered.wait(10), f"{robot}: no CONNACK"
        return codes[0] == 0
    finally:
        made.disconnect()
        made.loop_stop()


def login_records(broker):
    return sum(1 for line in broker.state_file.read_text().splitlines()[1:] if not line.startswith("epoch "))


def run(args, workdir):
    figures = {"robots": args.robots}
    with bench_parts(workdir, LoginPluginBroker) as (sim, broker, bridges):
        started = time.monotonic()
        for first in range(0, args.robots, 10_000):
            batch = secrets(min(args.robots, first + 10_000))
            batch["items"] = batch["items"][first:]
            sim.kubectl("create", "-f", "-", input=json.dumps(batch))
        figures["secrets_created_seconds"] = round(time.monotonic() - started, 1)

        probe = Probe(broker)
        started = time.monotonic()
        bridge = BridgeProcess(workdir / "bridge", broker, sim, ["--login-plugin", "true"], log_level="info")
        bridges.append(bridge)
        bridge.start(ready_within=1800)
        wait_until(lambda: bridge.metric("k8s4r_bridge_broker_logins") == args.robots, 60,
                   "a login for every robot")
        figures["import_seconds"] = round(time.monotonic() - started, 2)
        figures.update(import_waits(probe))
        sample = random.Random(7).sample(range(args.robots), min(100, args.robots))
        assert all(logs_in(broker, f"r{i}") for i in sample), "a robot with a Secret could not log in"
        figures["state_file_bytes"] = broker.state_file.stat().st_size
        bridge.stop()

        broker.stop()
        started = time.monotonic()
        broker.start()
        figures["broker_restart_listening_seconds"] = round(time.monotonic() - started, 2)
        assert logs_in(broker, f"r{sample[0]}"), "a robot could not log in after the broker's restart"

        records = login_records(broker)
        started = time.monotonic()
        again = BridgeProcess(workdir / "bridge-again", broker, sim, ["--login-plugin", "true"], log_level="info")
        bridges.append(again)
        again.start(ready_within=1800)
        figures["bridge_restart_ready_seconds"] = round(time.monotonic() - started, 2)
        figures["bridge_restart_login_records_written"] = login_records(broker) - records

        def stays_out(robot):
            assert not logs_in(broker, robot), f"{robot} still gets in after its Secret went"
        waits = revocation_waits(broker, sim, args.revocations, stays_out)
        figures["revocation_median_ms"] = round(statistics.median(waits) * 1000, 1)
        figures["revocation_max_ms"] = round(max(waits) * 1000, 1)
        figures["bridge_rss_mib"] = round(again.metric("process_resident_memory_bytes") / 2**20, 1)
        return figures


def main():
    bench_main(__doc__, run, 100_000, 20, "k8s4r-login-plugin-bench-")


if __name__ == "__main__":
    main()
