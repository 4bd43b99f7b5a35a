#!/usr/bin/env bash
# Builds the packages and images (./scripts/package.sh), then tests them as an
# operator would use them (integration/packaging/): every amd64 package
# installed with apt into a fresh Debian 12 root, where the agent registers
# with a bridge on this machine's loopback and runs a task, then is purged;
# the arm64 agent and shim under qemu-aarch64 user emulation (true exit codes,
# a timeout ended by SIGTERM); an upgrade of the agent package while tasks run
# (the new agent reports their true ends); each image unpacked and its daemon
# run as its user on a read-only root. pytest prints how long each took.
#
#   ./scripts/package-test.sh                     build, then test
#   K8S4R_SKIP_PACKAGE_BUILD=1 ./scripts/package-test.sh   test what dist/ holds
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO_ROOT/scripts/lib/common.sh"
source "$REPO_ROOT/scripts/lib/packaging.sh"
cd "$REPO_ROOT"

ensure_packaging_packages

[[ ${K8S4R_SKIP_PACKAGE_BUILD:-0} == 1 ]] || "$REPO_ROOT/scripts/package.sh"

# The host side of the tests (the stand-in and the bridge) runs the packaged
# amd64 binaries too, extracted here.
version=$(project_version)
host="$REPO_ROOT/build-package/host"
rm -rf "$host"
for daemon in agent bridge kube-sim; do
  dpkg-deb -x "dist/k8s4r-${daemon}_${version}_amd64.deb" "$host"
done
log "package tests (pytest, integration/packaging/)"
K8S4R_BIN_DIR="$host/usr/bin" K8S4R_DIST_DIR="$REPO_ROOT/dist" \
  /usr/bin/python3 -m pytest -q --durations=0 integration/packaging/
