#!/usr/bin/env bash
# tt's dependencies other than LibTorch, as Debian packages that travel: for a machine with a
# compiler, CMake, ninja and a LibTorch but no package manager access (a GPU machine with a
# Python PyTorch, say).
#   tools/portable-deps.sh fetch DIR     on a Debian 12 (or 13) machine with network: apt-get
#                                        download the packages into DIR/debs (about 13 MiB)
#   tools/portable-deps.sh unpack DIR    dpkg -x them into DIR/prefix (done by setup.sh --deps)
#   tools/portable-deps.sh prefix DIR    print the prefix, unpacking first when needed
# Then on the target:  tools/setup.sh --deps DIR test
# The libraries are the host release's builds: the target needs a glibc and libstdc++ at least
# as new (Debian 12: glibc 2.36, GCC 12; Ubuntu 24.04 and Debian 13 qualify).
set -euo pipefail

# yaml-cpp, spdlog + fmt, nlohmann-json, CLI11, Boost (headers; Boost.DLL; filesystem),
# GoogleTest/GoogleMock, SentencePiece (headers; the library is opened at run time),
# Gloo's headers (for a LibTorch that does not ship them).
PACKAGES=(
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev zlib1g-dev
  libboost-dev libboost-filesystem-dev libboost-system-dev
  libgtest-dev libgmock-dev googletest
  libsentencepiece-dev libsentencepiece0
  libgloo-dev
)

say() { printf '\033[1m[portable-deps]\033[0m %s\n' "$*" >&2; }
usage() { echo "usage: tools/portable-deps.sh fetch|unpack|prefix DIR" >&2; exit 2; }

[ $# -eq 2 ] || usage
MODE="$1"
DIR="$(mkdir -p "$2" && cd "$2" && pwd)"

# The packages above, the versioned runtime libraries they depend on (libyaml-cpp0.7,
# libspdlog1.10, libboost-filesystem1.74.0, ...) and nothing of the base system.
resolve() {
  local wanted=("${PACKAGES[@]}") seen=() p d
  local queue=("${PACKAGES[@]}")
  while [ ${#queue[@]} -gt 0 ]; do
    p="${queue[0]}"; queue=("${queue[@]:1}")
    [[ " ${seen[*]} " == *" $p "* ]] && continue
    seen+=("$p")
    # A virtual or metapackage name (libboost-dev) resolves to its versioned package.
    while read -r d; do
      case "$d" in
        libyaml-cpp*|libspdlog*|libfmt*|libboost*|libsentencepiece*|libgloo*|googletest|libgtest*|libgmock*)
          queue+=("$d") ;;
      esac
    done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
               --no-enhances "$p" 2>/dev/null | awk '/Depends:/ {print $2}' | tr -d '<>')
  done
  printf '%s\n' "${seen[@]}" | sort -u
}

fetch() {
  command -v apt-get >/dev/null || { echo "portable-deps: fetch needs apt-get (a Debian machine)" >&2; exit 1; }
  mkdir -p "$DIR/debs"
  local list
  mapfile -t list < <(resolve)
  say "downloading ${#list[@]} packages into $DIR/debs"
  # as root, apt's download user (_apt) may not be able to write into DIR: download as root then
  local sandbox=()
  [ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root)
  (cd "$DIR/debs" && apt-get download -qq "${sandbox[@]}" "${list[@]}")
  . /etc/os-release
  echo "$PRETTY_NAME" > "$DIR/debs/RELEASE"
  say "bundle: $(du -sh "$DIR/debs" | cut -f1) in $(ls "$DIR/debs"/*.deb | wc -l) packages ($PRETTY_NAME)"
}

unpack() {
  ls "$DIR"/debs/*.deb >/dev/null 2>&1 ||
    { echo "portable-deps: no packages in $DIR/debs: run tools/portable-deps.sh fetch $DIR on a Debian machine" >&2; exit 1; }
  command -v dpkg-deb >/dev/null || command -v ar >/dev/null ||
    { echo "portable-deps: unpacking needs dpkg-deb (dpkg) or ar (binutils) and tar" >&2; exit 1; }
  # Unpacked once; a changed bundle (other .deb files) is unpacked again.
  local stamp="$DIR/prefix/.unpacked" want
  want="layout 3 $(cd "$DIR/debs" && ls *.deb | sort | md5sum | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  rm -rf "$DIR/prefix"
  mkdir -p "$DIR/prefix"
  for f in "$DIR"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$DIR/prefix"
    else  # a .deb is an ar archive holding data.tar.{xz,zst,gz}; tar tells the compression apart
      local member
      member="$(ar t "$f" | grep '^data\.tar')"
      ar p "$f" "$member" > "$DIR/$member"
      tar -xf "$DIR/$member" -C "$DIR/prefix"
      rm -f "$DIR/$member"
    fi
  done
  # Debian's development symlinks are absolute only where a package says so: make every
  # absolute symlink inside the prefix point into the prefix.
  find "$DIR/prefix" -type l | while read -r l; do
    t="$(readlink "$l")"
    case "$t" in /*) ln -sfn "$DIR/prefix$t" "$l" ;; esac
  done
  # A development symlink into a base-system package the bundle leaves out (zlib1g-dev's
  # libz.so -> zlib1g's libz.so.1.2.13) dangles: point it at this machine's library of the
  # same name (libz.so.1 from ldconfig), whatever its version. Left dangling, the linker would
  # take the static archive beside it (libz.a), which cannot go into a shared library.
  find "$DIR/prefix" -xtype l -name 'lib*.so' | while read -r l; do
    local name host
    name="$(basename "$l")"
    host="$("$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null | awk -v n="$name" '$1 ~ "^" n "\\.[0-9]+$" && /x86-64|x32|64bit/ && !f {f = 1; print $NF}')"
    if [ -n "$host" ]; then
      ln -sfn "$host" "$l"
    else
      say "$name: its library is not installed here (needed to link tt); install the package that has it"
      rm -f "$l"
    fi
  done
  # Gloo's headers only for a LibTorch without its own (CMake adds this folder then): they
  # must never shadow the newer ones a Python PyTorch ships.
  if [ -d "$DIR/prefix/usr/include/gloo" ]; then
    mkdir -p "$DIR/prefix/usr/include/tt-gloo"
    mv "$DIR/prefix/usr/include/gloo" "$DIR/prefix/usr/include/tt-gloo/gloo"
  fi
  echo "$want" > "$stamp"
  say "unpacked $(ls "$DIR"/debs/*.deb | wc -l) packages into $DIR/prefix"
}

case "$MODE" in
  fetch) fetch ;;
  unpack) unpack ;;
  prefix) unpack; echo "$DIR/prefix" ;;
  *) usage ;;
esac
