"""Helpers for the packages' tests: Debian roots made with mmdebstrap from what scripts/package.sh left in dist/, an
agent run inside such a root (chroot) or, for arm64, under qemu-aarch64 user emulation."""
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "agent"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "bridge"))

from agent_support import remove_cgroup_tree, task_cgroup_parent  # noqa: E402
from conftest import REPO, terminate, wait_until  # noqa: E402

# Set by ./scripts/package-test.sh; ./scripts/test.sh builds no packages, so without it these tests are skipped.
DIST = pathlib.Path(os.environ.get("K8S4R_DIST_DIR", REPO / "dist"))
ONLY_WITH_DIST = pytest.mark.skipif("K8S4R_DIST_DIR" not in os.environ,
                                    reason="the packages' tests run from ./scripts/package-test.sh")
DAEMONS = ("agent", "bridge", "manager", "kube-sim")
QEMU_BINFMT = pathlib.Path("/usr/lib/binfmt.d/qemu-aarch64.conf")  # from qemu-user-static
BINFMT = pathlib.Path("/proc/sys/fs/binfmt_misc")


def project_version():
    for line in (REPO / "CMakeLists.txt").read_text().splitlines():
        if line.startswith("project(k8s4r VERSION "):
            return line.split()[2]
    raise AssertionError("no project version in CMakeLists.txt")


VERSION = project_version()


def deb(name, arch):
    path = DIST / f"{name}_{VERSION}_{arch}.deb"
    if not path.exists():
        pytest.skip(f"{path} is not built: run ./scripts/package-test.sh (or ./scripts/package.sh first)")
    return path


def debian_sources():
    for candidate in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        path = pathlib.Path(candidate)
        if path.exists() and path.stat().st_size > 0:
            return str(path)
    pytest.skip("no Debian sources in /etc/apt for mmdebstrap")


def mmdebstrap(target, *options, arch="amd64", hooks=True):
    """A Debian 12 root in `target`: the packages given with --include (a .deb path installs that file and
    resolves its Depends with apt, as `apt install ./file.deb` does)."""
    automount = ["--hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount"] if hooks else []
    command = ["mmdebstrap", "--mode=root", f"--architectures={arch}", *automount, *options, "bookworm", str(target),
               debian_sources()]
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return pathlib.Path(target)


def extract_with_dependencies(root, package, arch):
    """`root` holds the files of `package` (a .deb) and of what its Depends pull from Debian 12, resolved by apt and
    only extracted (no maintainer script runs, so nothing of `arch` runs): what `apt install ./package.deb` would put
    on a machine of that architecture. (mmdebstrap's extract variant runs no customize hook, so the hook that
    bind-mounts a .deb given to --include would leave its mount behind: the Depends are passed by name.)"""
    depends = subprocess.run(["dpkg-deb", "-f", str(package), "Depends"], check=True, capture_output=True,
                             text=True).stdout
    names = [alternative.split("|")[0].split("(")[0].strip() for alternative in depends.split(",")]
    mmdebstrap(root, "--variant=extract", f"--include={','.join(names)}", arch=arch, hooks=False)
    subprocess.run(["dpkg-deb", "-x", str(package), str(root)], check=True)
    return pathlib.Path(root)


def in_root(root, *command, check=True, timeout=120, input=None):
    """Runs a command chrooted in `root`, with /proc, /sys and /dev mounted in a mount namespace of its own (gone
    when it ends)."""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNT_AND_CHROOT,
                           "chroot-in", str(root), *command], check=check, capture_output=True, text=True,
                          timeout=timeout, input=input)


# `sh -c` script: $1 the root, the rest the command. exec keeps one pid from unshare to the command.
MOUNT_AND_CHROOT = ('root=$1; shift; mount --rbind /proc "$root/proc" && mount --rbind /sys "$root/sys" && '
                    'mount --rbind /dev "$root/dev" && exec chroot "$root" "$@"')


def processes_in_root(root):
    """Pids whose root directory is `root`: what an agent in it left running."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "root") == str(root):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


class ChrootAgent:
    """The installed agent run in its root as its unit runs it: `/usr/bin/k8s4r-agent` with the root's
    /etc/k8s4r/agent.yaml and K8S4R_WORK_DIR=/var/lib/k8s4r."""

    def __init__(self, root, log_path):
        self.root = pathlib.Path(root)
        self.log_path = pathlib.Path(log_path)
        self.process = None
        self.cgroup_parents = set()

    def start(self):
        self.log = open(self.log_path, "a")
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "K8S4R_WORK_DIR": "/var/lib/k8s4r"}
        self.process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                         MOUNT_AND_CHROOT, "chroot-in", str(self.root), "/usr/bin/k8s4r-agent"],
                                        stdout=self.log, stderr=subprocess.STDOUT, env=env)
        return self

    def log_text(self):
        return self.log_path.read_text() if self.log_path.exists() else ""

    def signal(self, number):
        self.process.send_signal(number)

    def wait(self, timeout=30):
        code = self.process.wait(timeout)
        self.log.close()
        return code

    def cleanup(self):
        parent = task_cgroup_parent(self.log_text())
        if self.process and self.process.poll() is None:
            terminate(self.process)
            self.log.close()
        for pid in processes_in_root(self.root):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        remove_cgroup_tree(parent)
        wait_until(lambda: not processes_in_root(self.root), 10, "the root's processes to end")


def ensure_qemu_binfmt():
    """arm64 binaries run by the kernel through qemu-aarch64-static, as on a Debian machine with qemu-user-static
    and systemd (systemd-binfmt registers /usr/lib/binfmt.d/qemu-aarch64.conf): the agent starts its shim with
    execve, which the kernel must run. Registers it when missing; skips when the kernel will not."""
    if (BINFMT / "qemu-aarch64").exists():
        return
    if not QEMU_BINFMT.exists() or shutil.which("qemu-aarch64-static") is None:
        pytest.skip("qemu-user-static is not installed")
    if not (BINFMT / "register").exists():
        mounted = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"binfmt_misc cannot be mounted here: {mounted.stderr.decode().strip()}")
    try:
        (BINFMT / "register").write_text(QEMU_BINFMT.read_text().strip())
    except OSError as error:
        pytest.skip(f"the kernel refused qemu-aarch64's binfmt entry: {error}")
