#!/usr/bin/env bash
# Proves the README's two commands on a machine with nothing installed: a minimal Debian
# chroot (debootstrap --variant=minbase) of Debian 12 (bookworm, LibTorch 1.13) or Debian 13
# (trixie, LibTorch 2.6), a git clone of this repository inside it, then
#   tools/setup.sh quickstart   and   tools/setup.sh test
# Run as root on a Debian host:
#   tools/fresh-machine-check.sh [--release bookworm|trixie] [--portable | --cuda] [CHROOT_DIR]
# (default CHROOT_DIR: /tmp/tt-fresh-RELEASE[-portable|-cuda]). Logs and timings go to
# CHROOT_DIR/root/fresh-*.log.
# --portable: the machine gets only a compiler, CMake, ninja and Debian's LibTorch; the other
# dependencies come from a bundle made here (tools/portable-deps.sh fetch), and the check is
#   tools/setup.sh --deps BUNDLE test
# --cuda (trixie only): the same two commands with TT_TORCH=cuda, Debian 13's CUDA build of
# LibTorch (contrib) with NCCL and the CUDA toolkit (non-free); without a GPU the CUDA tests skip.
# Debian's nvidia-cudnn downloads cuDNN from NVIDIA when installed; where CUDNN_LIB (default
# /usr/local/cuda/lib64/libcudnn.so.9) exists on the host, it is packaged locally in its place.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RELEASE=bookworm
PORTABLE=0
CUDA=0
while [ $# -gt 0 ]; do
  case "$1" in
    --release) RELEASE="${2:?--release takes bookworm or trixie}"; shift 2 ;;
    --portable) PORTABLE=1; shift ;;
    --cuda) CUDA=1; shift ;;
    -*) echo "fresh-machine-check: unknown option '$1' (--release bookworm|trixie, --portable, --cuda)" >&2; exit 2 ;;
    *) break ;;
  esac
done
case "$RELEASE" in
  bookworm|trixie) ;;
  *) echo "fresh-machine-check: --release must be bookworm (Debian 12) or trixie (Debian 13), got '$RELEASE'" >&2; exit 2 ;;
esac
if [ $CUDA -eq 1 ] && { [ "$RELEASE" != trixie ] || [ $PORTABLE -eq 1 ]; }; then
  echo "fresh-machine-check: --cuda needs --release trixie (Debian 12 has no CUDA LibTorch) and not --portable" >&2
  exit 2
fi
SUFFIX=""
[ $PORTABLE -eq 1 ] && SUFFIX=-portable
[ $CUDA -eq 1 ] && SUFFIX=-cuda
ROOTFS="${1:-/tmp/tt-fresh-$RELEASE$SUFFIX}"
COMPONENTS=main
[ $CUDA -eq 1 ] && COMPONENTS=main,contrib,non-free

command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
if [ ! -x "$ROOTFS/usr/bin/apt-get" ]; then
  debootstrap --variant=minbase --components="$COMPONENTS" "$RELEASE" "$ROOTFS" http://deb.debian.org/debian
fi
CUDNN_LIB="${CUDNN_LIB:-/usr/local/cuda/lib64/libcudnn.so.9}"
if [ $CUDA -eq 1 ] && [ -f "$CUDNN_LIB" ]; then
  # a package named as Debian's downloader, holding the library it would fetch
  pkg="$(mktemp -d)"
  mkdir -p "$pkg/DEBIAN" "$pkg/usr/lib/x86_64-linux-gnu"
  cp -L "$CUDNN_LIB" "$pkg/usr/lib/x86_64-linux-gnu/libcudnn.so.9"
  printf '%s\n' "Package: nvidia-cudnn" "Version: 9.0.0.312~cuda12" "Architecture: amd64" \
    "Maintainer: tt fresh-machine-check <root@localhost>" "Provides: libcudnn.so.9" \
    "Description: cuDNN from $CUDNN_LIB, packaged locally in place of Debian's downloader" > "$pkg/DEBIAN/control"
  dpkg-deb -b -Zgzip "$pkg" "$ROOTFS/root/nvidia-cudnn-local.deb" >/dev/null
  rm -rf "$pkg"
fi
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
mountpoint -q "$ROOTFS/proc" || mount -t proc proc "$ROOTFS/proc"
mountpoint -q "$ROOTFS/dev" || mount --bind /dev "$ROOTFS/dev"
# /sys with its cgroup file systems (the meter's test of a cgroup memory limit makes one there);
# a slave, so that unmounting it later cannot unmount the host's own /sys mounts
if ! mountpoint -q "$ROOTFS/sys"; then
  mount --rbind /sys "$ROOTFS/sys"
  mount --make-rslave "$ROOTFS/sys"
fi
mkdir -p "$ROOTFS/src/tt"
mountpoint -q "$ROOTFS/src/tt" || mount --bind -o ro "$REPO" "$ROOTFS/src/tt"
if [ -d "$REPO/../shared" ]; then
  mkdir -p "$ROOTFS/root/shared"
  mountpoint -q "$ROOTFS/root/shared" || mount --bind -o ro "$REPO/../shared" "$ROOTFS/root/shared"
fi
cleanup() {
  umount -R "$ROOTFS/sys" 2>/dev/null || true
  umount "$ROOTFS/src/tt" "$ROOTFS/root/shared" "$ROOTFS/dev" "$ROOTFS/proc" 2>/dev/null || true
}
trap cleanup EXIT

if [ $PORTABLE -eq 1 ]; then
  rm -rf "$ROOTFS/root/deps"
  "$REPO/tools/portable-deps.sh" fetch "$ROOTFS/root/deps"
  chroot "$ROOTFS" /bin/bash -euo pipefail -c '
    export HOME=/root DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
    cd /root
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends git ca-certificates g++ cmake ninja-build libtorch-dev libopenblas0-openmp
    for p in libyaml-cpp-dev libspdlog-dev libfmt-dev libboost-dev libcli11-dev nlohmann-json3-dev libgtest-dev libsentencepiece-dev libgloo-dev; do
      if dpkg-query -W -f="\${Status}" "$p" 2>/dev/null | grep -q "install ok installed"; then echo "FAIL: $p is installed"; exit 1; fi
    done
    rm -rf tt && git clone -q /src/tt tt && cd tt
    start=$(date +%s)
    tools/setup.sh --deps /root/deps test 2>&1 | tee /root/fresh-portable-test.log
    end=$(date +%s)
    echo "bundle: $(du -sh /root/deps/debs | cut -f1); setup.sh --deps test: $((end-start)) s" | tee /root/fresh-times.log
  '
  exit 0
fi

chroot "$ROOTFS" env TT_TORCH="$([ $CUDA -eq 1 ] && echo cuda || echo cpu)" /bin/bash -euo pipefail -c '
  export HOME=/root DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
  cd /root
  [ ! -f nvidia-cudnn-local.deb ] || dpkg -i nvidia-cudnn-local.deb >/dev/null
  # what a user needs to get the code: git
  command -v git >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends git ca-certificates; }
  rm -rf tt && git clone -q /src/tt tt && cd tt
  start=$(date +%s)
  tools/setup.sh quickstart 2>&1 | tee /root/fresh-quickstart.log
  mid=$(date +%s)
  tools/setup.sh test 2>&1 | tee /root/fresh-test.log
  end=$(date +%s)
  again_start=$(date +%s)
  tools/setup.sh quickstart > /root/fresh-quickstart-again.log 2>&1
  again_end=$(date +%s)
  echo "quickstart (fresh): $((mid-start)) s; test: $((end-mid)) s; quickstart again: $((again_end-again_start)) s" | tee /root/fresh-times.log
'
