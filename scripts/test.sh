#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the unit tests and
# the JSON Schema check under ctest (also in a Debug build with
# AddressSanitizer and UndefinedBehaviorSanitizer), then the black-box tests
# in integration/ with pytest against the binaries in build/bin.
#
#   ./scripts/test.sh            everything
#   K8S4R_SKIP_SANITIZE=1 ./scripts/test.sh   without the ASan/UBSan build
#   K8S4R_SKIP_TSAN=1 ./scripts/test.sh       without the ThreadSanitizer build
#   K8S4R_SKIP_FUZZ=1 ./scripts/test.sh       without the fuzzers (K8S4R_FUZZ_SECONDS: time per fuzzer, default 15)
#   K8S4R_SKIP_BENCH=1 ./scripts/test.sh      without the benchmarks' short runs
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
  # Paho C++ 1.2 leaks inside its C library on every connect_options copy;
  # tests/lsan.supp names that library and nothing of ours.
  LSAN_OPTIONS="suppressions=$REPO_ROOT/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
    ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)" -E schema_check_ajv
fi

# The multi-threaded parts under ThreadSanitizer: the stand-in (its store,
# controllers and HTTP layer, also as the server the client tests start), the
# Kubernetes client and informer, the agent's monitor and event loop, and the
# MQTT link against a real Mosquitto.
if [[ ${K8S4R_SKIP_TSAN:-0} != 1 ]]; then
  tsan_targets=(k8s4r_daemon_tests k8s4r_kube_sim_tests k8s4r_kube_client_tests k8s4r_agent_tests k8s4r-kube-sim)
  log "building in build-tsan (ThreadSanitizer): ${tsan_targets[*]}"
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$REPO_ROOT" -B "$REPO_ROOT/build-tsan" -G Ninja "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DK8S4R_WERROR=ON -DK8S4R_TSAN=ON >/dev/null
  cmake --build "$REPO_ROOT/build-tsan" -j "$(nproc)" --target "${tsan_targets[@]}"
  log "multi-threaded tests (ThreadSanitizer)"
  for binary in k8s4r_daemon_tests k8s4r_kube_sim_tests k8s4r_kube_client_tests k8s4r_agent_tests; do
    # tests/tsan.supp names Paho's C++ library (not instrumented) and nothing of ours.
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$REPO_ROOT/tests/tsan.supp" \
      "$REPO_ROOT/build-tsan/tests/$binary" --gtest_brief=1
  done
fi

# Every parser of outside input under libFuzzer (clang, with ASan and UBSan),
# for a bounded time each, from the examples the schemas ship.
if [[ ${K8S4R_SKIP_FUZZ:-0} != 1 ]]; then
  fuzzers=(fuzz_messages fuzz_kube_sim_protobuf fuzz_kube_sim_admission fuzz_kube_sim_requests fuzz_kube_sim_apply
    fuzz_bridge_translations fuzz_state_store fuzz_shim_protocol fuzz_manager_placement fuzz_dynsec_responses
    fuzz_login_records fuzz_task_log_files)
  log "building in build-fuzz (clang, libFuzzer): ${fuzzers[*]}"
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$REPO_ROOT" -B "$REPO_ROOT/build-fuzz" -G Ninja "${launcher[@]}" -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DK8S4R_FUZZ=ON -DK8S4R_BUILD_TESTS=OFF >/dev/null
  cmake --build "$REPO_ROOT/build-fuzz" -j "$(nproc)" --target "${fuzzers[@]}"
  corpus=$(mktemp -d)
  trap 'rm -rf "$corpus"' EXIT
  while IFS= read -r example; do cp "$example" "$corpus/${example//\//_}"; done < <(find proto-schemas/examples -name '*.json')
  for fuzzer in "${fuzzers[@]}"; do
    log "fuzzing: $fuzzer (${K8S4R_FUZZ_SECONDS:-15} s)"
    mkdir -p "$corpus/$fuzzer"
    # Seeds a fuzzer needs beyond the schema examples live in fuzz/corpus/NAME.
    [[ -d fuzz/corpus/${fuzzer#fuzz_} ]] && cp fuzz/corpus/"${fuzzer#fuzz_}"/* "$corpus/$fuzzer/"
    extra=()
    [[ -f fuzz/${fuzzer#fuzz_}.dict ]] && extra=(-dict="fuzz/${fuzzer#fuzz_}.dict")
    "$REPO_ROOT/build-fuzz/fuzz/$fuzzer" -max_total_time="${K8S4R_FUZZ_SECONDS:-15}" -max_len=65536 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=0 "${extra[@]}" "$corpus/$fuzzer" "$corpus" 2>"$corpus/$fuzzer.log" ||
      { tail -n 60 "$corpus/$fuzzer.log"; exit 1; }
  done
fi

# The black-box tests import pytest, paho-mqtt and kubernetes from Debian's
# python3, which is /usr/bin/python3 even when another python3 is first on PATH.
command -v kubectl >/dev/null ||
  log "WARNING: kubectl is not installed (it is not a Debian 12 package); the tests that drive kubectl will be skipped"
if find integration -name 'test_*.py' | grep -q .; then
  log "black-box tests (pytest, integration/)"
  K8S4R_BIN_DIR="$REPO_ROOT/build/bin" /usr/bin/python3 -m pytest -q --durations=15 integration/
else
  log "no black-box tests in integration/ yet"
fi
# The bridge's benchmark in its short mode (500 simulated robots, 50 dispatches
# through a real agent), and the manager's (100 tasks on 20 simulated robots):
# each fails when something does not work (a robot not
# registered, a Task never completed, a GET or LIST per message); its timings
# are printed, never asserted. The figures in docs/performance.md come from the
# full run.
if [[ ${K8S4R_SKIP_BENCH:-0} != 1 ]]; then
  log "bridge benchmark, short mode, robots on two bridged brokers (bench/bridge_bench.py --short --brokers 2)"
  K8S4R_BIN_DIR="$REPO_ROOT/build/bin" /usr/bin/python3 bench/bridge_bench.py --short --brokers 2 --bin "$REPO_ROOT/build/bench"
  log "manager benchmark, short mode (bench/manager_bench.py --short)"
  K8S4R_BIN_DIR="$REPO_ROOT/build/bin" /usr/bin/python3 bench/manager_bench.py --short --bin "$REPO_ROOT/build/bench"
fi
log "all tests passed"
