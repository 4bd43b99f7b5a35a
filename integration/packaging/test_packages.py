"""The Debian packages and images that scripts/package.sh leaves in dist/, used as an operator would: installed with
apt into a fresh Debian 12 root, the arm64 agent run under qemu-aarch64, the agent upgraded while its tasks run, each
image unpacked and run. Judged by what the tasks did (files they wrote) and by kubectl. ./scripts/package-test.sh
builds dist/ and runs these; without dist/ they are skipped."""
import json
import os
import pathlib
import shutil
import signal
import subprocess

import pytest

from package_support import (DAEMONS, DIST, ONLY_WITH_DIST, VERSION, ChrootAgent, deb, ensure_qemu_binfmt,
                             extract_with_dependencies, in_root, mmdebstrap, processes_in_root)
from bridge_support import (TOKEN, AgentProcess, bridge, create_task, dispatch, get, sim,  # noqa: F401
                            wait_state)
from conftest import REPO, wait_until

pytestmark = ONLY_WITH_DIST

ARCHS = ("amd64", "arm64")
ELF_MACHINE = {"amd64": "x86-64", "arm64": "ARM aarch64"}


def dpkg_deb(*args):
    return subprocess.run(["dpkg-deb", *args], check=True, capture_output=True, text=True).stdout


def agent_config(root, broker, robot="robot-1"):
    """What an operator writes into the installed /etc/k8s4r/agent.yaml."""
    (root / "etc/k8s4r/agent.yaml").write_text(
        f"broker-url: {broker.url}\nrobot-id: {robot}\ntoken: {TOKEN}\nheartbeat-interval: 1s\nlog-level: debug\n")


def task_file(name):
    """A task's record of its own runs: one line per start."""
    return f"/tmp/{name}.runs"


def test_the_packages_hold_the_daemons_their_units_and_config_for_amd64_and_arm64(tmp_path):
    for arch in ARCHS:
        for daemon in DAEMONS:
            path = deb(f"k8s4r-{daemon}", arch)
            package, version, architecture = dpkg_deb("-f", str(path), "Package", "Version",
                                                      "Architecture").splitlines()
            assert (package, version, architecture) == (f"Package: k8s4r-{daemon}", f"Version: {VERSION}",
                                                        f"Architecture: {arch}")
            contents = dpkg_deb("-c", str(path))
            assert f"./usr/bin/k8s4r-{daemon}\n" in contents, contents
            unpacked = tmp_path / f"{daemon}-{arch}"
            dpkg_deb("-x", str(path), str(unpacked))
            binaries = [unpacked / "usr/bin" / f"k8s4r-{daemon}"]
            if daemon == "agent":
                binaries.append(unpacked / "usr/bin/k8s4r-task-shim")
            for binary in binaries:
                described = subprocess.run(["file", "-b", str(binary)], check=True, capture_output=True,
                                           text=True).stdout
                assert described.startswith("ELF 64-bit") and ELF_MACHINE[arch] in described, (binary, described)
            if daemon in ("agent", "bridge", "manager"):
                unit = (unpacked / f"lib/systemd/system/k8s4r-{daemon}.service").read_text()
                assert f"ExecStart=/usr/bin/k8s4r-{daemon} --config /etc/k8s4r/{daemon}.yaml" in unit
                if daemon == "agent":  # what the upgrade's hand-over relies on
                    for line in ("KillMode=process", "SuccessExitStatus=75", "RestartForceExitStatus=75"):
                        assert f"\n{line}\n" in unit, line
                assert dpkg_deb("-I", str(path), "conffiles").split() == [f"/etc/k8s4r/{daemon}.yaml"]
                # Shipped commented out: a daemon refuses to start until it is configured.
                config = (unpacked / f"etc/k8s4r/{daemon}.yaml").read_text()
                assert all(line.startswith("#") for line in config.splitlines() if line.strip())
        depends = dpkg_deb("-f", str(deb("k8s4r-agent", arch)), "Depends")
        for library in ("libpaho-mqttpp3-1", "libcurl4", "libsystemd0", "libyaml-cpp0.7", "libspdlog1.10"):
            assert library in depends, depends


def test_the_kubectl_plugin_package_holds_the_plugin_for_every_architecture(tmp_path):
    path = deb("kubectl-k8s4r", "all")
    package, version, architecture = dpkg_deb("-f", str(path), "Package", "Version", "Architecture").splitlines()
    assert (package, version, architecture) == ("Package: kubectl-k8s4r", f"Version: {VERSION}", "Architecture: all")
    dpkg_deb("-x", str(path), str(tmp_path))
    plugin = tmp_path / "usr/bin/kubectl-k8s4r"
    assert plugin.stat().st_mode & 0o111, oct(plugin.stat().st_mode)  # kubectl runs only executable plugins
    shown = subprocess.run(["sh", str(plugin), "help"], capture_output=True, text=True)
    assert shown.returncode == 0 and "kubectl k8s4r drain ROBOT" in shown.stderr, shown
    logs = tmp_path / "usr/bin/kubectl-k8s4r-logs"  # kubectl's pick for `kubectl k8s4r logs`
    assert logs.stat().st_mode & 0o111, oct(logs.stat().st_mode)
    shown = subprocess.run([str(logs), "--help"], capture_output=True, text=True)
    assert shown.returncode == 0 and "--follow" in shown.stdout, shown


def test_the_amd64_packages_install_into_a_fresh_debian_12_and_the_agent_there_runs_a_task(tmp_path, sim, broker,
                                                                                            bridge):
    packages = [str(deb(f"k8s4r-{daemon}", "amd64")) for daemon in DAEMONS]
    root = mmdebstrap(tmp_path / "root", "--variant=apt", *[f"--include={package}" for package in packages])
    for name in ("agent", "task-shim", "bridge", "manager", "kube-sim"):
        said = in_root(root, f"/usr/bin/k8s4r-{name}", "--version").stdout
        assert said.strip() == f"k8s4r-{name} {VERSION}"
    # Installed, not enabled nor started; the work directory made as the unit wants it.
    assert not list((root / "etc/systemd/system").glob("*/k8s4r-*.service"))
    assert oct((root / "var/lib/k8s4r").stat().st_mode & 0o777) == "0o711"
    # Unconfigured, the agent says what is missing and does not run.
    refused = in_root(root, "/usr/bin/k8s4r-agent", check=False)
    assert refused.returncode != 0 and "broker-url is required" in refused.stderr, refused

    agent_config(root, broker)
    agent = ChrootAgent(root, tmp_path / "agent.log").start()
    try:
        wait_until(lambda: get(sim, "robot", "robot-1"), 30, "the installed agent's Robot")
        create_task(sim, "hello", f'echo started >> {task_file("hello")}; echo "hello from the package"')
        dispatch(sim, "hello")
        task = wait_state(sim, "hello", "completed", timeout=30)
        assert task["status"]["exitCode"] == 0
        assert "hello from the package" in task["status"]["logs"]
        assert (root / task_file("hello").lstrip("/")).read_text() == "started\n"
        agent.signal(signal.SIGTERM)
        assert agent.wait() == 0
    finally:
        agent.cleanup()

    # A purge removes what the package made; the other packages keep /etc/k8s4r.
    in_root(root, "dpkg", "--purge", "k8s4r-agent")
    for gone in ("var/lib/k8s4r", "etc/k8s4r/agent.yaml", "usr/bin/k8s4r-agent", "usr/bin/k8s4r-task-shim",
                 "lib/systemd/system/k8s4r-agent.service"):
        assert not (root / gone).exists(), gone
    assert (root / "etc/k8s4r/bridge.yaml").exists()
    in_root(root, "dpkg", "--purge", "k8s4r-bridge", "k8s4r-manager", "k8s4r-kube-sim")
    assert not (root / "etc/k8s4r").exists()


# systemd's part, played in the root: the maintainer scripts call systemctl (their PATH puts /usr/local/bin first),
# which records each call and acts on the agent whose pid the test wrote, as systemd would on its main pid.
FAKE_SYSTEMCTL = r"""#!/bin/sh
echo "$*" >> /run/fake-systemd/calls
pid=$(cat /run/fake-systemd/k8s4r-agent.pid 2>/dev/null || echo 0)
case "$*" in
  *"show --property=MainPID --value k8s4r-agent.service"*) echo "$pid" ;;
  *"kill --kill-whom=main --signal=SIGUSR2 k8s4r-agent.service"*) kill -USR2 "$pid" ;;
  *"stop k8s4r-agent.service"*)
    kill -TERM "$pid"
    i=0
    while [ $i -lt 600 ] && [ -d /proc/$pid ] && [ "$(cut -d' ' -f3 /proc/$pid/stat)" != Z ]; do sleep 0.1; i=$((i+1)); done ;;
  *is-enabled*) exit 1 ;;
esac
exit 0
"""


def test_an_upgrade_of_the_agent_hands_its_running_tasks_to_the_new_one_and_a_removal_stops_it(
        tmp_path, sim, broker, bridge):
    installed = deb("k8s4r-agent", "amd64")
    # The next version: the same files under a later version number, as an upgrade brings.
    unpacked = tmp_path / "next"
    subprocess.run(["dpkg-deb", "-R", str(installed), str(unpacked)], check=True)
    control = unpacked / "DEBIAN/control"
    control.write_text(control.read_text().replace(f"Version: {VERSION}\n", f"Version: {VERSION}+next1\n"))
    root = mmdebstrap(tmp_path / "root", "--variant=apt", f"--include={installed}")
    upgrade = root / "tmp/k8s4r-agent_next_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(unpacked), str(upgrade)], check=True,
                   capture_output=True)
    (root / "run/systemd/system").mkdir(parents=True)
    (root / "run/fake-systemd").mkdir(parents=True)
    (root / "usr/local/bin/systemctl").write_text(FAKE_SYSTEMCTL)
    (root / "usr/local/bin/systemctl").chmod(0o755)
    calls = root / "run/fake-systemd/calls"

    def started(agent):
        (root / "run/fake-systemd/k8s4r-agent.pid").write_text(f"{agent.process.pid}\n")
        return agent

    agent_config(root, broker)
    old = started(ChrootAgent(root, tmp_path / "agent-old.log").start())
    new = ChrootAgent(root, tmp_path / "agent-new.log")
    try:
        wait_until(lambda: get(sim, "robot", "robot-1"), 30, "the Robot")
        create_task(sim, "fails-late", f"echo started >> {task_file('fails-late')}; sleep 6; exit 3")
        create_task(sim, "ends-well", f"echo started >> {task_file('ends-well')}; sleep 7; echo done > /tmp/done")
        for name in ("fails-late", "ends-well"):
            dispatch(sim, name)
        for name in ("fails-late", "ends-well"):
            wait_state(sim, name, "running", timeout=30)

        # dpkg -i of the next version; its postinst signals the running agent (SIGUSR2), which leaves its tasks
        # to their shims and exits with 75, on which systemd starts the new one (RestartForceExitStatus=75).
        upgraded = in_root(root, "dpkg", "-i", "/tmp/k8s4r-agent_next_amd64.deb")
        assert "handing the running tasks over to the new agent" in upgraded.stderr, upgraded.stderr
        assert f"{VERSION}+next1" in in_root(root, "dpkg-query", "-W", "k8s4r-agent").stdout
        assert "kill --kill-whom=main --signal=SIGUSR2 k8s4r-agent.service" in calls.read_text()
        assert "restart" not in calls.read_text() and "stop" not in calls.read_text()
        assert old.wait() == 75
        assert "handing over: leaving 2 running task(s)" in old.log_text(), old.log_text()[-2000:]
        assert processes_in_root(root), "the tasks did not outlive the old agent"
        assert not (root / "tmp/done").exists()

        started(new.start())
        assert not os.readlink(f"/proc/{new.process.pid}/exe").endswith("(deleted)")  # the new binary
        failed = wait_state(sim, "fails-late", "failed", timeout=40)
        assert failed["status"]["exitCode"] == 3, failed["status"]
        completed = wait_state(sim, "ends-well", "completed", timeout=40)
        assert completed["status"]["exitCode"] == 0, completed["status"]
        # Each ran once, to its own end.
        for name in ("fails-late", "ends-well"):
            assert (root / task_file(name).lstrip("/")).read_text() == "started\n", name
        assert (root / "tmp/done").read_text() == "done\n"
        assert "handing over" not in new.log_text()

        # A removal stops the agent (its prerm, through systemd) before the purge takes its work directory.
        in_root(root, "dpkg", "--purge", "k8s4r-agent")
        assert "stop k8s4r-agent.service" in calls.read_text()
        assert new.wait() == 0 and "shutting down" in new.log_text()
        assert not (root / "var/lib/k8s4r").exists()
    finally:
        new.cleanup()
        old.cleanup()


def test_the_arm64_agent_under_qemu_registers_reports_true_exit_codes_and_a_timeout_ends_with_sigterm(
        tmp_path, sim, broker, bridge):
    ensure_qemu_binfmt()
    package = deb("k8s4r-agent", "arm64")
    # The arm64 package and the arm64 libraries its Depends pull, resolved by apt: nothing else.
    root = extract_with_dependencies(tmp_path / "arm64", package, "arm64")
    emulated = [shutil.which("qemu-aarch64-static"), "-L", str(root), str(root / "usr/bin/k8s4r-agent")]
    said = subprocess.run([*emulated, "--version"], check=True, capture_output=True, text=True).stdout
    assert said.strip() == f"k8s4r-agent {VERSION}"
    # The agent runs emulated with the root's libraries; it finds its shim beside it, an arm64 binary the kernel
    # runs through qemu too (binfmt_misc); the tasks are this machine's /bin/sh.
    launcher = tmp_path / "k8s4r-agent-arm64"
    launcher.write_text("#!/bin/sh\nexec " + " ".join(emulated) + ' "$@"\n')
    launcher.chmod(0o755)
    agent = AgentProcess(broker, tmp_path / "work", "robot-1", ["--token", TOKEN], binary_path=str(launcher))
    agent.start()
    try:
        robot = wait_until(lambda: (r := get(sim, "robot", "robot-1")) and r.get("status", {}).get("deviceInfo")
                           and r, 60, "the arm64 agent's Robot")
        assert robot["status"]["deviceInfo"]["platform"]["arch"] == "arm64", robot["status"]["deviceInfo"]
        runs = tmp_path / "runs"
        create_task(sim, "arm64-ok", f"echo started >> {runs}.ok; uname -m")
        create_task(sim, "arm64-exit-7", f"echo started >> {runs}.seven; exit 7")
        create_task(sim, "arm64-timeout",
                    f"trap 'echo TERM >> {runs}.timeout; exit 143' TERM; echo started >> {runs}.timeout; "
                    "sleep 60 & wait", timeout="2s", killTimeout="20s")
        for name in ("arm64-ok", "arm64-exit-7", "arm64-timeout"):
            dispatch(sim, name)
        ok = wait_state(sim, "arm64-ok", "completed", timeout=60)
        assert ok["status"]["exitCode"] == 0
        seven = wait_state(sim, "arm64-exit-7", "failed", timeout=60)
        assert seven["status"]["exitCode"] == 7
        timed_out = wait_state(sim, "arm64-timeout", "failed", timeout=60)
        assert timed_out["status"]["reason"] == "Timeout", timed_out["status"]
        # SIGTERM reached the task, which said so and exited; no SIGKILL was needed within its 20 s.
        assert pathlib.Path(f"{runs}.timeout").read_text() == "started\nTERM\n"
        assert timed_out["status"].get("exitCode") == 143, timed_out["status"]
        for suffix in ("ok", "seven"):
            assert pathlib.Path(f"{runs}.{suffix}").read_text() == "started\n"
        assert agent.stop() == 0
    finally:
        agent.cleanup()


def blob(layout, digest):
    algorithm, value = digest.split(":", 1)
    return json.loads((layout / "blobs" / algorithm / value).read_text())


def tagged(layout, tag):
    index = json.loads((layout / "index.json").read_text())
    [entry] = [m for m in index["manifests"]
               if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    return entry


def image_config(layout, tag):
    """The OCI image configuration of `tag` in an image layout: index → manifest → config."""
    return blob(layout, blob(layout, tagged(layout, tag)["digest"])["config"]["digest"])


def test_each_image_runs_its_daemon_as_its_own_user_on_a_read_only_root_and_says_its_version_and_source(tmp_path):
    for daemon in ("bridge", "manager", "kube-sim"):
        name = f"k8s4r-{daemon}"
        layout = DIST / "images" / name
        if not layout.exists():
            pytest.skip(f"{layout} is not built: run ./scripts/package-test.sh")
        # VERSION names both architectures: an image index a runtime picks its platform from.
        index = blob(layout, tagged(layout, VERSION)["digest"])
        assert {(m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"]} == {
            ("linux", "amd64"), ("linux", "arm64")}
        for arch in ARCHS:
            [manifest] = [m for m in index["manifests"] if m["platform"]["architecture"] == arch]
            assert manifest["digest"] == tagged(layout, f"{VERSION}-{arch}")["digest"]
            assert image_config(layout, f"{VERSION}-{arch}")["architecture"] == arch
            # As a registry client sees it: skopeo resolves the name to each platform's image.
            seen = subprocess.run(["skopeo", "inspect", "--override-os", "linux", "--override-arch", arch,
                                   f"oci:{layout}:{VERSION}"], check=True, capture_output=True, text=True).stdout
            assert json.loads(seen)["Architecture"] == arch
        # What README's push does, to a layout here instead of a registry: both platforms travel.
        copied = tmp_path / f"{name}-copy"
        subprocess.run(["skopeo", "copy", "--all", f"oci:{layout}:{VERSION}", f"oci:{copied}:{VERSION}"], check=True,
                       capture_output=True)
        assert len(blob(copied, tagged(copied, VERSION)["digest"])["manifests"]) == 2
        config = image_config(layout, f"{VERSION}-amd64")
        assert config["os"] == "linux"
        assert config["config"]["User"] == "65532:65532"
        assert config["config"]["Entrypoint"] == [f"/usr/bin/{name}"]
        labels = config["config"]["Labels"]
        assert labels["org.opencontainers.image.version"] == VERSION
        assert labels["org.opencontainers.image.source"].startswith("https://")
        assert labels["org.opencontainers.image.revision"] not in ("", "unknown")
        bundle = tmp_path / name
        subprocess.run(["umoci", "unpack", "--image", f"{layout}:{VERSION}-amd64", str(bundle)], check=True,
                       capture_output=True)
        runtime = json.loads((bundle / "config.json").read_text())
        assert runtime["process"]["user"]["uid"] == 65532 and runtime["process"]["args"] == [f"/usr/bin/{name}"]
        rootfs = bundle / "rootfs"
        assert not (rootfs / "bin/sh").exists() and not (rootfs / "usr/bin/apt").exists()  # nothing but the daemon
        # As a runtime would start it: its user, its root read-only.
        said = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
             'exec chroot --userspec=65532:65532 "$1" "/usr/bin/$2" --version', "run", str(rootfs), name],
            capture_output=True, text=True, timeout=60)
        assert said.returncode == 0 and said.stdout.strip() == f"{name} {VERSION}", said
        if daemon != "kube-sim":  # deploy/ runs the image by the tag built here
            deployment = (REPO / "deploy" / daemon / "deployment.yaml").read_text()
            assert f"image: {name}:{VERSION}\n" in deployment
