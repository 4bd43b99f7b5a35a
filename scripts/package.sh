#!/usr/bin/env bash
# Builds k8s4r's Debian packages for amd64 and arm64 and the OCI images of
# the bridge, the manager and the API stand-in, into dist/:
#
#   dist/k8s4r-{agent,bridge,manager,kube-sim}_VERSION_{amd64,arm64}.deb
#   dist/kubectl-k8s4r_VERSION_all.deb            the operator's kubectl plugin
#   dist/images/k8s4r-{bridge,manager,kube-sim}   OCI image layouts, tag VERSION
#
# arm64 is cross-built with Debian's own cross toolchain
# (crossbuild-essential-arm64) against an arm64 Debian root holding the
# libraries' -dev packages, made with mmdebstrap (no emulation: nothing arm64
# runs). Images are made without a container daemon: mmdebstrap extracts the
# package and its dependencies into a root, umoci makes it an image.
# ./scripts/package-test.sh tests what this builds; docs/packaging.md
# explains it.
#
#   ./scripts/package.sh                 packages and images
#   K8S4R_PACKAGE_ARCHS=amd64 ./scripts/package.sh    one architecture
#   K8S4R_SKIP_IMAGES=1 ./scripts/package.sh          no images
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO_ROOT/scripts/lib/common.sh"
source "$REPO_ROOT/scripts/lib/packaging.sh"
cd "$REPO_ROOT"

ensure_packaging_packages

version=$(project_version)
changelog_version=$(dpkg-parsechangelog -S Version)
if [[ $version != "$changelog_version" ]]; then
  echo "CMakeLists.txt says version $version, debian/changelog $changelog_version: make them one" >&2
  exit 1
fi

# debhelper (compat 13) gives the build a HOME of its own, where ccache would
# keep an empty cache each time: name the machine's.
if command -v ccache >/dev/null; then
  CCACHE_DIR=${CCACHE_DIR:-$(ccache --get-config cache_dir)}
  export CCACHE_DIR
fi

dist="$REPO_ROOT/dist"
work="$REPO_ROOT/build-package"
mkdir -p "$dist" "$work"
read -r -a archs <<<"${K8S4R_PACKAGE_ARCHS:-amd64 arm64}"
build_arch=$(dpkg --print-architecture)

for arch in "${archs[@]}"; do
  started=$SECONDS
  env=(K8S4R_BUILD_DIR="$work/obj-$arch" K8S4R_DIST_DIR="$dist" DEB_BUILD_OPTIONS="parallel=$(nproc)")
  if [[ $arch != "$build_arch" ]]; then
    sysroot=$(ensure_sysroot "$arch" "$work")
    triplet=$(dpkg-architecture -a"$arch" -qDEB_HOST_GNU_TYPE 2>/dev/null)
    env+=(K8S4R_SYSROOT="$sysroot" CC="$triplet-gcc" CXX="$triplet-g++")
  fi
  log "building the $arch packages (version $version)"
  rm -f "$dist"/k8s4r-*_"$version"_"$arch".deb "$dist"/kubectl-k8s4r_"$version"_all.deb
  # dpkg-architecture sets DEB_HOST_* for arm64; debian/rules does the rest.
  env "${env[@]}" dpkg-architecture -a"$arch" -c debian/rules clean >/dev/null
  env "${env[@]}" dpkg-architecture -a"$arch" -c debian/rules binary >"$work/build-$arch.log" 2>&1 ||
    { tail -n 60 "$work/build-$arch.log"; exit 1; }
  env "${env[@]}" dpkg-architecture -a"$arch" -c debian/rules clean >/dev/null
  log "checking the $arch packages with lintian"
  lintian --fail-on error "$dist"/k8s4r-*_"$version"_"$arch".deb "$dist"/kubectl-k8s4r_"$version"_all.deb
  log "$arch packages built in $((SECONDS - started)) s"
done

if [[ ${K8S4R_SKIP_IMAGES:-0} != 1 ]]; then
  for arch in "${archs[@]}"; do
    for daemon in bridge manager kube-sim; do
      started=$SECONDS
      build_image "k8s4r-$daemon" "$arch" "$version" "$dist" "$work"
      log "image k8s4r-$daemon ($arch) built in $((SECONDS - started)) s"
    done
  done
  for daemon in bridge manager kube-sim; do
    tag_image_index "k8s4r-$daemon" "$version" "$dist" "${archs[@]}"
  done
fi

log "in dist/:"
ls -l "$dist"/*.deb >&2
[[ -d $dist/images ]] && du -sh "$dist"/images/* >&2
exit 0
