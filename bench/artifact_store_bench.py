#!/usr/bin/env python3
"""What the robot's artifact store saves (issue 30): how long a task with a large artifact (--size-mb, 100 MB of
random bytes, a sha256 checksum) takes from its dispatch to its `running` report, the first time (downloaded) and
the second (another task, the same URL and checksum), with the store and without it (`--artifact-store-bytes 0`),
side by side in one run, over a link of each --rates (MB/s; 0: loopback as fast as it goes). Each repeat serves new
content, so every first start is a miss.

Usage (the figures in docs/performance.md):
  /usr/bin/python3 bench/artifact_store_bench.py --agent build/bin/k8s4r-agent --rates 0,20 --repeats 3
"""
import argparse
import hashlib
import http.server
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import threading
import time

from agent_daemon_bench import wait_until
from agent_start_bench import Run


def serve(root, rate_mb_s):
    """An HTTP server of `root` that sends at most rate_mb_s MB/s per transfer (0: no limit)."""
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def copyfile(self, source, destination):
            if not rate_mb_s:
                return shutil.copyfileobj(source, destination, 1 << 20)
            chunk, began, sent = 256 * 1024, time.monotonic(), 0
            while data := source.read(chunk):
                destination.write(data)
                sent += len(data)
                ahead = sent / (rate_mb_s * 1e6) - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)  # the link's pace, not a wait for a condition

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def dispatch(uid, url, checksum):
    spec = {"name": "bench", "driver": "exec", "config": {"execConfig": {"command": "/bin/sleep", "args": ["1"]}},
            "artifacts": [{"getterSource": url, "relativeDest": "local/", "getterOptions": {"checksum": checksum}}]}
    return json.dumps({"action": "create", "task": {
        "apiVersion": "robot.k8s4r.io/v1alpha1", "kind": "Task",
        "metadata": {"name": uid, "namespace": "default", "uid": uid}, "spec": spec}})


def start_time(run, uid, url, checksum):
    sent = time.monotonic()
    run.publish(dispatch(uid, url, checksum))
    wait_until(lambda: uid in run.running_at or uid in run.final, 600, f"{uid} running")
    if uid not in run.running_at:
        raise RuntimeError(f"{uid} did not run: {run.final[uid][1]}")
    return run.running_at[uid] - sent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", default="build/bin/k8s4r-agent")
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--rates", default="0,20", help="link rates in MB/s, comma-separated; 0: no limit")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    served = pathlib.Path(tempfile.mkdtemp(prefix="artifact-bench-served-"))
    modes = [("store", ""), ("no-store", "--artifact-store-bytes 0")]
    try:
        for rate in [float(r) for r in args.rates.split(",")]:
            server = serve(served, rate)
            base = f"http://127.0.0.1:{server.server_address[1]}"
            rows = {label: [] for label, _ in modes}
            for repeat in range(args.repeats):
                content = os.urandom(args.size_mb * 1_000_000)
                checksum = "sha256:" + hashlib.sha256(content).hexdigest()
                (served / "model.bin").write_bytes(content)
                for label, extra in modes:
                    workdir = tempfile.mkdtemp(prefix="artifact-bench-")
                    os.environ["BENCH_AGENT_EXTRA"] = extra
                    run = Run(args.agent, workdir, "5s")
                    try:
                        first = start_time(run, f"first-{repeat}", f"{base}/model.bin", checksum)
                        second = start_time(run, f"second-{repeat}", f"{base}/model.bin", checksum)
                    finally:
                        run.close()
                        shutil.rmtree(workdir, ignore_errors=True)
                    rows[label].append((first, second))
                    print(f"rate {rate:g} MB/s, run {repeat + 1}, {label}: first {first:.3f} s, second "
                          f"{second:.3f} s", flush=True)
            server.shutdown()
            server.server_close()
            print(f"\nrate {rate:g} MB/s, {args.size_mb} MB, medians over {args.repeats} runs:")
            for label, pairs in rows.items():
                first = statistics.median(p[0] for p in pairs)
                second = statistics.median(p[1] for p in pairs)
                print(f"  {label}: first {first:.3f} s, second {second:.3f} s, second/first {second / first:.3f}")
            store_first = statistics.median(p[0] for p in rows["store"])
            plain_first = statistics.median(p[0] for p in rows["no-store"])
            print(f"  first start with the store / without: {store_first / plain_first:.3f}\n", flush=True)
    finally:
        os.environ.pop("BENCH_AGENT_EXTRA", None)
        shutil.rmtree(served, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
