#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the unit tests and
# the JSON Schema check under ctest (also in a Debug build with
# AddressSanitizer and UndefinedBehaviorSanitizer), then the black-box tests
# in integration/ with pytest against the binaries in build/bin.
#
#   ./scripts/test.sh            everything
#   K8S4R_SKIP_SANITIZE=1 ./scripts/test.sh   without the sanitizer build
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO_ROOT/scripts/lib/common.sh"
cd "$REPO_ROOT"

ensure_packages
ensure_node_modules

log "checking formatting (clang-format)"
mapfile -t sources < <(git ls-files -co --exclude-standard '*.cpp' '*.h')
clang-format --dry-run --Werror "${sources[@]}"

configure_and_build "$REPO_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DK8S4R_WERROR=ON
log "unit tests and schema check (RelWithDebInfo)"
ctest --test-dir build --output-on-failure -j "$(nproc)"

if [[ ${K8S4R_SKIP_SANITIZE:-0} != 1 ]]; then
  configure_and_build "$REPO_ROOT/build-sanitize" -DCMAKE_BUILD_TYPE=Debug -DK8S4R_WERROR=ON -DK8S4R_SANITIZE=ON
  log "unit tests (Debug, AddressSanitizer + UndefinedBehaviorSanitizer)"
  ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)" -E schema_check_ajv
fi

# The black-box tests import pytest, paho-mqtt and kubernetes from Debian's
# python3, which is /usr/bin/python3 even when another python3 is first on PATH.
command -v kubectl >/dev/null ||
  log "WARNING: kubectl is not installed (it is not a Debian 12 package); the tests that drive kubectl will be skipped"
if find integration -name 'test_*.py' | grep -q .; then
  log "black-box tests (pytest, integration/)"
  K8S4R_BIN_DIR="$REPO_ROOT/build/bin" /usr/bin/python3 -m pytest -q integration/
else
  log "no black-box tests in integration/ yet"
fi
log "all tests passed"
