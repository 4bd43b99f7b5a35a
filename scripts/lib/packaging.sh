# Shared by scripts/package.sh and scripts/package-test.sh: the tools, the
# Debian mirror, the arm64 root to build against, and the images. Source it
# after common.sh; it uses REPO_ROOT.

# Debian 12 packages that building and testing the packages need.
K8S4R_PACKAGING_PACKAGES=(
  debhelper dpkg-dev lintian fakeroot crossbuild-essential-arm64 mmdebstrap umoci qemu-user-static file skopeo
)

# The arm64 -dev packages the cross build links against (CMakeLists.txt's
# find_package list).
K8S4R_SYSROOT_PACKAGES=(
  libc6-dev libstdc++-12-dev libpaho-mqttpp-dev libpaho-mqtt-dev mosquitto-dev nlohmann-json3-dev libcurl4-openssl-dev
  libssl-dev libboost1.81-dev libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev libcpp-httplib-dev
  libsystemd-dev libre2-dev
)

# What the build needs (common.sh's list) and what packaging needs.
ensure_packaging_packages() {
  K8S4R_PACKAGES+=("${K8S4R_PACKAGING_PACKAGES[@]}")
  ensure_packages
}

# project(k8s4r VERSION x.y.z) in CMakeLists.txt.
project_version() {
  sed -n 's/^project(k8s4r VERSION \([0-9.]*\).*/\1/p' "$REPO_ROOT/CMakeLists.txt"
}

# The machine's own Debian sources, so mmdebstrap fetches where apt does.
debian_sources() {
  local file
  for file in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [[ -s $file ]] && grep -q '^[^#]*debian' "$file"; then
      echo "$file"
      return
    fi
  done
  echo "no Debian sources found in /etc/apt" >&2
  return 1
}

# mmdebstrap_quiet ARGS...: mmdebstrap with its output kept in a log beside
# the target, shown only when it fails. Standard input is closed: without a
# mirror argument mmdebstrap would read sources from it.
mmdebstrap_quiet() {
  local target=${*: -2:1} log
  log="$target.mmdebstrap.log"
  mmdebstrap "$@" </dev/null >"$log" 2>&1 || { tail -n 40 "$log" >&2; return 1; }
}

# ensure_sysroot ARCH WORK_DIR: prints the path of an ARCH Debian root with
# K8S4R_SYSROOT_PACKAGES, made once (again when the list changes). Packages
# are only extracted, so nothing of ARCH runs. Their shlibs and symbols files
# are gathered into ROOT/DEBIAN, where dpkg-shlibdeps -S finds them
# (debian/rules), so the packages' Depends are computed as for a native
# build.
ensure_sysroot() {
  local arch=$1 work=$2 root stamp wanted
  root="$work/sysroot-$arch"
  stamp="$root/.k8s4r-packages"
  wanted="$(debian_sources) ${K8S4R_SYSROOT_PACKAGES[*]}"
  if [[ ! -f $stamp || $(cat "$stamp") != "$wanted" ]]; then
    log "making the $arch root to build against (mmdebstrap)"
    rm -rf "$root"
    local packages
    packages=$(
      IFS=,
      echo "${K8S4R_SYSROOT_PACKAGES[*]}"
    )
    # Called as $(ensure_sysroot ...), where set -e does not hold: each step
    # says when it fails, and the stamp is written last.
    mmdebstrap_quiet --mode=root --variant=extract --architectures="$arch" --include="$packages" \
      --skip=cleanup/apt/cache bookworm "$root" "$(debian_sources)" || return 1
    mkdir -p "$root/DEBIAN"
    : >"$root/DEBIAN/shlibs"
    : >"$root/DEBIAN/symbols"
    local deb control
    control=$(mktemp -d)
    for deb in "$root"/var/cache/apt/archives/*.deb; do
      rm -rf "${control:?}"/*
      dpkg-deb --control "$deb" "$control" || return 1
      [[ -f $control/shlibs ]] && cat "$control/shlibs" >>"$root/DEBIAN/shlibs"
      [[ -f $control/symbols ]] && cat "$control/symbols" >>"$root/DEBIAN/symbols"
    done
    rm -rf "$control" "$root"/var/cache/apt/archives/*.deb
    echo "$wanted" >"$stamp" || return 1
  fi
  echo "$root"
}

# extract_with_dependencies DEB ARCH ROOT: ROOT holds DEB's files and those
# of the packages its Depends pull from Debian 12 (apt resolves them), only
# extracted: no maintainer script, no package database, nothing else.
extract_with_dependencies() {
  local deb=$1 arch=$2 root=$3 depends
  # "libc6 (>= 2.35), libfoo1 | libfoo2" -> "libc6,libfoo1": the first of
  # each alternative; Debian 12's candidates meet the versions we were built
  # against.
  depends=$(dpkg-deb -f "$deb" Depends | sed -e 's/([^)]*)//g' -e 's/|[^,]*//g' -e 's/[[:space:]]//g')
  mmdebstrap_quiet --mode=root --variant=extract --architectures="$arch" --include="$depends" \
    bookworm "$root" "$(debian_sources)"
  dpkg-deb -x "$deb" "$root"
}

# build_image NAME ARCH VERSION DIST WORK: dist/images/NAME, an OCI image
# layout tagged VERSION-ARCH holding NAME's
# package and the libraries it depends on, extracted from Debian 12 with
# nothing else: no shell, no package manager. It runs as 65532:65532 (the
# uid deploy/ runs it as), needs nothing writable, and is labelled with its
# version and source.
build_image() {
  local name=$1 arch=$2 version=$3 dist=$4 work=$5 root layout tag deb
  root="$work/image-$name-$arch"
  layout="$dist/images/$name"
  tag="$version-$arch"
  deb="$dist/${name}_${version}_${arch}.deb"
  log "image $name:$tag ($arch) from $(basename "$deb")"
  rm -rf "$root"
  extract_with_dependencies "$deb" "$arch" "$root"
  # Each package's copyright stays (the licences travel with the image);
  # other docs, manuals, translations and apt's leftovers go.
  find "$root/usr/share/doc" -type f ! -name copyright -delete
  rm -rf "$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/locale "$root"/usr/share/lintian \
    "$root"/var/cache/apt "$root"/var/lib/apt "$root/etc/k8s4r" "$root/lib/systemd" "$root/usr/lib/systemd/system"
  # Users and groups a runtime shows by name; no shell, nothing to log in.
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nk8s4r:x:65532:65532:k8s4r:/nonexistent:/usr/sbin/nologin\n' \
    >"$root/etc/passwd"
  printf 'root:x:0:\nk8s4r:x:65532:\n' >"$root/etc/group"
  mkdir -p "$root/tmp" && chmod 1777 "$root/tmp"
  [[ -d $layout ]] || umoci init --layout "$layout"
  umoci rm --image "$layout:$tag" 2>/dev/null || true
  umoci new --image "$layout:$tag"
  umoci insert --image "$layout:$tag" "$root" /
  umoci config --image "$layout:$tag" --os linux --architecture "$arch" \
    --config.user 65532:65532 --config.entrypoint "/usr/bin/$name" --config.workingdir / \
    --config.env PATH=/usr/bin:/bin \
    --config.label "org.opencontainers.image.title=$name" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.source=https://github.com/Tinker2018/k8s4r" \
    --config.label "org.opencontainers.image.revision=$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
    --config.label "org.opencontainers.image.base.name=debian:bookworm (packages extracted by mmdebstrap)" \
    --history.created_by "scripts/package.sh: $(basename "$deb") and its dependencies"
  umoci gc --layout "$layout"
  rm -rf "$root"
}

# tag_image_index NAME VERSION DIST ARCH...: tags VERSION in
# dist/images/NAME as an image index of the VERSION-ARCH images, so one
# name (deploy/'s k8s4r-bridge:VERSION) serves amd64 and arm64 nodes alike:
# a runtime takes the manifest of its platform, and
# `skopeo copy --all oci:dist/images/NAME:VERSION docker://...` pushes both.
tag_image_index() {
  local name=$1 version=$2 dist=$3
  shift 3
  python3 - "$dist/images/$name" "$version" "$@" <<'PYTHON'
import hashlib, json, pathlib, sys
layout, version, archs = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
index_path = layout / "index.json"
index = json.loads(index_path.read_text())
ref = "org.opencontainers.image.ref.name"
by_tag = {entry.get("annotations", {}).get(ref): entry for entry in index["manifests"]}
manifests = []
for arch in archs:
    entry = dict(by_tag[f"{version}-{arch}"])
    entry.pop("annotations", None)
    entry["platform"] = {"architecture": arch, "os": "linux"}
    manifests.append(entry)
blob = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                   "manifests": manifests}, indent=2).encode()
digest = hashlib.sha256(blob).hexdigest()
(layout / "blobs" / "sha256" / digest).write_bytes(blob)
index["manifests"] = [e for e in index["manifests"] if e.get("annotations", {}).get(ref) != version]
index["manifests"].append({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{digest}",
                           "size": len(blob), "annotations": {ref: version}})
index_path.write_text(json.dumps(index))
PYTHON
  umoci gc --layout "$dist/images/$name"  # what an earlier VERSION tag named
}
