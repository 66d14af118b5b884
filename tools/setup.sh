#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a result:
#   tools/setup.sh quickstart   install what is missing, build, run tt-run configs/quickstart.yaml
#   tools/setup.sh test         install what is missing, build everything, run the test suite
#   tools/setup.sh build        install what is missing and build everything
# Re-running when nothing changed takes seconds: packages are checked, not reinstalled;
# CMake configures once; ccache and ninja rebuild only what changed.
# Environment: TT_BUILD_DIR (default build), TT_JOBS (default: all cores).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TT_BUILD_DIR:-$ROOT/build}"
JOBS="${TT_JOBS:-$(nproc)}"
MODE="${1:-quickstart}"

PACKAGES=(
  g++ cmake ninja-build ccache make
  libtorch-dev libopenblas0-openmp     # LibTorch 1.13 (CPU); OpenBLAS or fp32 matmul is ~50x slower
  libgloo-dev                          # c10d Gloo headers
  libboost-dev libboost-filesystem-dev # Boost.DLL loads plugins
  libyaml-cpp-dev libspdlog-dev libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev
  libgtest-dev libgmock-dev
  gnuplot-nox
)
# What only the tests need: files Python's torch and numpy write and read (Debian's, with its LibTorch).
TEST_PACKAGES=(python3-torch)

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

install_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${#missing[@]} Debian packages: ${missing[*]}"
  local SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to apt-get install: ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

configure() {
  if [ ! -f "$BUILD/build.ninja" ]; then
    say "configuring $BUILD"
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTT_BUILD_TESTS=ON
  fi
}

build() {
  say "building ($JOBS jobs): ${*:-everything}"
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$BUILD" -j "$JOBS" "${targets[@]}"
}

case "$MODE" in
  quickstart)
    install_packages "${PACKAGES[@]}"
    configure
    build tt-run tt_model_topic
    say "tt-run configs/quickstart.yaml"
    cd "$ROOT"
    "$BUILD/bin/tt-run" configs/quickstart.yaml
    ;;
  test)
    install_packages "${PACKAGES[@]}" "${TEST_PACKAGES[@]}"
    configure
    build
    say "running the test suite"
    ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 900
    ;;
  build)
    install_packages "${PACKAGES[@]}"
    configure
    build
    ;;
  *)
    echo "usage: tools/setup.sh [quickstart|test|build]" >&2
    exit 2
    ;;
esac
