#!/usr/bin/env bash
# One command from a fresh Debian 12 or 13 machine to a result:
#   tools/setup.sh quickstart   install what is missing, build, run tt-run configs/quickstart.yaml
#   tools/setup.sh test         install what is missing, build everything, run the test suite
#   tools/setup.sh build        install what is missing and build everything
#   tools/setup.sh fuzz [SECONDS]  also clang and libFuzzer; run tools/fuzz.sh (SECONDS per harness)
# Re-running when nothing changed takes seconds: packages are checked, not reinstalled;
# CMake configures once; ccache and ninja rebuild only what changed.
#
# Without a package manager (a GPU machine with a Python PyTorch, say):
#   tools/setup.sh --deps DIR quickstart|test|build
# takes the dependencies from a bundle made by tools/portable-deps.sh fetch DIR and installs
# nothing; the machine needs a C++ compiler, CMake and ninja.
#
# LibTorch: Torch_DIR (a folder holding TorchConfig.cmake) when set; else Debian's (libtorch-dev,
# installed when missing); with --deps, Debian's when installed, else the one inside python3's
# PyTorch (torch.utils.cmake_prefix_path).
# TT_TORCH=cuda takes Debian 13's CUDA build of LibTorch instead (libtorch-cuda-dev, in contrib,
# with NCCL and the CUDA toolkit from non-free): the CUDA paths compile and link, and their tests
# run where a GPU is present; the default is cuda where libtorch-cuda-dev is installed, else cpu.
# Environment: TT_BUILD_DIR (default build), TT_JOBS (default: all cores), Torch_DIR, TT_TORCH,
# TT_UNITY (default 1; 0 compiles file by file, see configure()).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TT_BUILD_DIR:-$ROOT/build}"
JOBS="${TT_JOBS:-$(nproc)}"
DEPS=""
if [ "${1:-}" = "--deps" ]; then
  [ -n "${2:-}" ] || { echo "usage: tools/setup.sh [--deps DIR] [quickstart|test|build]" >&2; exit 2; }
  DEPS="$2"
  shift 2
fi
MODE="${1:-quickstart}"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

TT_TORCH="${TT_TORCH:-$(installed libtorch-cuda-dev && echo cuda || echo cpu)}"
case "$TT_TORCH" in
  cpu)
    TORCH_PACKAGES=(
      libtorch-dev libopenblas0-openmp     # LibTorch (CPU); OpenBLAS or fp32 matmul is ~50x slower
      libgloo-dev                          # c10d Gloo headers
    )
    TEST_PACKAGES=(python3-torch) ;;       # the tests' Python torch and numpy, with this LibTorch
  cuda)
    TORCH_PACKAGES=(
      libtorch-cuda-dev libopenblas0-openmp  # Debian 13 contrib: LibTorch 2.6 built with CUDA 12.4
      libgloo-cuda-dev libnccl-dev           # c10d Gloo and NCCL headers (non-free)
      nvidia-cuda-toolkit                    # nvcc for adam8bit's kernels (non-free)
    )
    TEST_PACKAGES=(python3-torch-cuda) ;;
  *) echo "setup: TT_TORCH=$TT_TORCH: use cpu (Debian's libtorch-dev) or cuda (Debian 13's libtorch-cuda-dev)" >&2
     exit 2 ;;
esac
PACKAGES=(
  g++ cmake ninja-build ccache make
  libboost-dev libboost-filesystem-dev # Boost.DLL loads plugins
  libyaml-cpp-dev libspdlog-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libsentencepiece-dev
  libgtest-dev libgmock-dev
  gnuplot-nox
)
[ -n "${Torch_DIR:-}" ] || PACKAGES+=("${TORCH_PACKAGES[@]}")
# The fuzzing harnesses (tools/fuzz.sh): clang and its libFuzzer runtime (only recommended by clang).
FUZZ_PACKAGES=(clang libclang-rt-dev)
CMAKE_ARGS=()
[ -z "${Torch_DIR:-}" ] || CMAKE_ARGS+=("-DTorch_DIR=$Torch_DIR")

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

install_packages() {
  local missing=()
  for p in "$@"; do installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${#missing[@]} Debian packages: ${missing[*]}"
  local SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to apt-get install: ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" || {
    [ "$TT_TORCH" = cpu ] || echo "setup: TT_TORCH=cuda needs Debian 13 with the contrib and non-free components in" \
      "/etc/apt/sources.list(.d) (libtorch-cuda-dev is in contrib; nvidia-cuda-toolkit and libnccl-dev in non-free)" >&2
    exit 1
  }
}

# --deps: nothing is installed; the bundle's prefix and a LibTorch found here go to CMake.
portable() {
  local missing=() t
  for t in c++ cmake ninja; do command -v "$t" >/dev/null || missing+=("$t"); done
  [ ${#missing[@]} -eq 0 ] ||
    { echo "setup: --deps needs a C++ compiler, CMake and ninja on PATH; missing: ${missing[*]}" >&2; exit 1; }
  local prefix torch_prefix=""
  prefix="$("$ROOT/tools/portable-deps.sh" prefix "$DEPS")"
  if [ -z "${Torch_DIR:-}" ] && ! ls /usr/lib/*/cmake/Torch/TorchConfig.cmake >/dev/null 2>&1; then
    torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)" ||
      { echo "setup: no LibTorch: set Torch_DIR to a folder holding TorchConfig.cmake, or install PyTorch for python3" >&2; exit 1; }
    say "LibTorch of python3's PyTorch: $torch_prefix"
  fi
  # Debian's CMake files of 2022 declare old policy levels that CMake 4 refuses without this.
  CMAKE_ARGS+=("-DTT_DEPS_PREFIX=$prefix/usr" "-DCMAKE_PREFIX_PATH=$prefix/usr${torch_prefix:+;$torch_prefix}"
               -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
}

configure() {
  # A unity build: each target's sources compiled 8 to a translation unit, so that LibTorch's
  # headers (precompiled, yet seconds to load) are read once a batch instead of once a file.
  # It shortens a cold build (docs/benchmarks.md); TT_UNITY=0 compiles file by file, the
  # quicker way to rebuild one edited file.
  [ "${TT_UNITY:-1}" = 0 ] || CMAKE_ARGS+=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)
  if [ ! -f "$BUILD/build.ninja" ]; then
    say "configuring $BUILD"
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTT_BUILD_TESTS=ON "${CMAKE_ARGS[@]}"
  fi
}

build() {
  say "building ($JOBS jobs): ${*:-everything}"
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$BUILD" -j "$JOBS" "${targets[@]}"
}

install_or_check() {
  if [ -n "$DEPS" ]; then portable; else install_packages "$@"; fi
}

case "$MODE" in
  quickstart)
    install_or_check "${PACKAGES[@]}"
    configure
    build tt-run tt_model_topic
    say "tt-run configs/quickstart.yaml"
    cd "$ROOT"
    "$BUILD/bin/tt-run" configs/quickstart.yaml
    ;;
  test)
    install_or_check "${PACKAGES[@]}" "${TEST_PACKAGES[@]}"
    configure
    build
    say "running the test suite"
    ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 900
    ;;
  build)
    install_or_check "${PACKAGES[@]}"
    configure
    build
    ;;
  fuzz)
    [ -z "$DEPS" ] || { echo "setup: fuzz installs clang: not with --deps" >&2; exit 2; }
    install_packages "${PACKAGES[@]}" "${FUZZ_PACKAGES[@]}"
    configure
    cd "$ROOT"
    TT_BUILD_DIR="$BUILD" TT_JOBS="$JOBS" tools/fuzz.sh "${2:-60}"
    ;;
  *)
    echo "usage: tools/setup.sh [--deps DIR] [quickstart|test|build|fuzz [SECONDS]]" >&2
    exit 2
    ;;
esac
