#!/usr/bin/env python3
"""What the packages and images cost (issue 31), from what ./scripts/package.sh left in dist/:

- each .deb's size and Installed-Size; each image's layer (compressed, as a registry stores it) and its root;
- the disk the agent package takes on a fresh Debian 12 with everything apt pulls for it (`du` of a minimal root
  with the package, less the same root without it);
- the installed agent's memory while idle: run from that root (chroot) as its unit runs it, connected to a real
  Mosquitto and answered like the bridge answers, heartbeating every --heartbeat; VmRSS and PSS sampled every
  second for --seconds after it is online. (On arm64 under qemu-user the figure would be qemu's, not the agent's.)

Usage (the figures in docs/performance.md):
  /usr/bin/python3 bench/package_footprint.py --dist dist --seconds 30
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from agent_start_bench import Run

REPO = pathlib.Path(__file__).resolve().parent.parent


def version():
    for line in (REPO / "CMakeLists.txt").read_text().splitlines():
        if line.startswith("project(k8s4r VERSION "):
            return line.split()[2]
    raise SystemExit("no version in CMakeLists.txt")


def sources():
    for candidate in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        if pathlib.Path(candidate).exists():
            return candidate
    raise SystemExit("no Debian sources")


def mmdebstrap(target, *options):
    subprocess.run(["mmdebstrap", "--mode=root", "--variant=apt",
                    "--hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount", *options, "bookworm", str(target),
                    sources()], check=True, stdin=subprocess.DEVNULL, capture_output=True)


def du_kib(path):
    return int(subprocess.run(["du", "-sk", "--one-file-system", str(path)], check=True, capture_output=True,
                              text=True).stdout.split()[0])


def memory_kib(pid):
    rss = int(next(line for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS:")).split()[1])
    pss = int(next(line for line in open(f"/proc/{pid}/smaps_rollup") if line.startswith("Pss:")).split()[1])
    return rss, pss


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", default=str(REPO / "dist"))
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--heartbeat", default="30s")
    args = parser.parse_args()
    dist, v = pathlib.Path(args.dist).resolve(), version()

    print("| package | .deb | Installed-Size |\n|---|---:|---:|")
    for deb in sorted(dist.glob(f"k8s4r-*_{v}_*.deb")):
        installed = subprocess.run(["dpkg-deb", "-f", str(deb), "Installed-Size"], check=True, capture_output=True,
                                   text=True).stdout.strip()
        print(f"| {deb.name} | {deb.stat().st_size / 1024:.0f} KiB | {installed} KiB |")

    print("\n| image | layer (gzip) | root |\n|---|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        for layout in sorted((dist / "images").glob("k8s4r-*")):
            index = json.loads((layout / "index.json").read_text())
            for manifest_ref in index["manifests"]:
                if manifest_ref["mediaType"] != "application/vnd.oci.image.manifest.v1+json":
                    continue  # VERSION: the index of the per-architecture images
                tag = manifest_ref["annotations"]["org.opencontainers.image.ref.name"]
                algorithm, digest = manifest_ref["digest"].split(":")
                manifest = json.loads((layout / "blobs" / algorithm / digest).read_text())
                layers = sum(layer["size"] for layer in manifest["layers"])
                bundle = pathlib.Path(scratch) / f"{layout.name}-{tag}"
                subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle)], check=True,
                               capture_output=True)
                print(f"| {layout.name}:{tag} | {layers / 1048576:.1f} MiB | {du_kib(bundle / 'rootfs') / 1024:.1f} MiB |")

    agent = dist / f"k8s4r-agent_{v}_amd64.deb"
    with tempfile.TemporaryDirectory(prefix="k8s4r-footprint-") as scratch:
        scratch = pathlib.Path(scratch)
        mmdebstrap(scratch / "bare")
        mmdebstrap(scratch / "root", f"--include={agent}")
        bare, root = du_kib(scratch / "bare"), du_kib(scratch / "root")
        print(f"\nagent on a fresh Debian 12 (mmdebstrap --variant=apt): {root - bare} KiB with what apt pulls "
              f"({bare} KiB without, {root} KiB with)")

        # The installed agent, chrooted, its work dir bind-mounted at the same path so Run's paths hold.
        work = scratch / "run"
        work.mkdir()
        launcher = scratch / "agent-in-root"
        launcher.write_text(
            "#!/bin/sh\n"
            f"exec unshare --mount --propagation private sh -c '"
            f"mkdir -p {scratch}/root{work} && mount --bind {work} {scratch}/root{work} && "
            f"mount --rbind /proc {scratch}/root/proc && mount --rbind /sys {scratch}/root/sys && "
            f"mount --rbind /dev {scratch}/root/dev && exec chroot {scratch}/root /usr/bin/k8s4r-agent \"$@\"' "
            "agent \"$@\"\n")
        launcher.chmod(0o755)
        run = Run(str(launcher), work, args.heartbeat)
        try:
            samples = []
            for _ in range(args.seconds):
                time.sleep(1)
                samples.append(memory_kib(run.agent.pid))
            rss = [s[0] for s in samples]
            pss = [s[1] for s in samples]
            print(f"installed agent, idle ({args.seconds} samples, heartbeat {args.heartbeat}): VmRSS median "
                  f"{statistics.median(rss) / 1024:.1f} MiB (max {max(rss) / 1024:.1f}), PSS median "
                  f"{statistics.median(pss) / 1024:.1f} MiB")
        finally:
            run.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
