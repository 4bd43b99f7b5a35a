# Shared by scripts/test.sh and scripts/demo.sh: install what is missing,
# then build. Source it; it uses REPO_ROOT.
set -euo pipefail

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Debian 12 packages the build, the tests and the demo need.
K8S4R_PACKAGES=(
  g++ clang cmake ninja-build pkg-config git ccache clang-format
  libpaho-mqttpp-dev libpaho-mqtt-dev libmosquitto-dev mosquitto-dev nlohmann-json3-dev libcurl4-openssl-dev libssl-dev
  libboost1.81-dev libspdlog-dev libcli11-dev libyaml-cpp-dev libcpp-httplib-dev libsystemd-dev
  libgtest-dev libgmock-dev libre2-dev
  mosquitto mosquitto-clients openssl curl
  python3-pytest python3-paho-mqtt python3-kubernetes python3-yaml faketime
)

# Installs the packages above that are not installed yet; apt-get update runs
# only when something is missing, so a second run costs nothing.
ensure_packages() {
  local missing=() package
  for package in "${K8S4R_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  # node runs the JSON Schema check; the machine image may bring its own.
  command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    local sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# npm packages for tests/schema-check (ajv), from the lock file.
ensure_node_modules() {
  local dir="$REPO_ROOT/tests/schema-check"
  if [[ ! -d $dir/node_modules || $dir/package-lock.json -nt $dir/node_modules ]]; then
    log "installing npm packages for the JSON Schema check"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$dir/node_modules"
  fi
}

# ccache shares its cache between clones of the repository (CI builds a fresh
# clone each time): paths under the repository are hashed relative to it.
export CCACHE_BASEDIR="$REPO_ROOT" CCACHE_NOHASHDIR=true
# Room for the tests' four builds and the packages' two (ccache's default,
# 5 GB, evicted one to make room for another).
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-12G}

# configure_and_build BUILD_DIR [cmake options...]
configure_and_build() {
  local build_dir=$1
  shift
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  log "building in ${build_dir#"$REPO_ROOT"/}"
  cmake -S "$REPO_ROOT" -B "$build_dir" -G Ninja "${launcher[@]}" "$@" >/dev/null
  cmake --build "$build_dir" -j "$(nproc)"
}
