#!/usr/bin/env bash
# No tt binary has a libstdc++ symbol bound to a copy outside libstdc++.so.6. A pip wheel of
# PyTorch exports copies of some of libstdc++'s symbols (std::filesystem, pytorch/pytorch#133437)
# that crash when tt's calls land on them, and a binary with its own static copy of libstdc++
# (a compiler with only libstdc++.a) exports it to the shared libraries, which crash too (two
# copies in one process). tt links the shared libstdc++ right after each binary's objects (see
# CMakeLists.txt and cmake/TTModule.cmake) so that neither the linker nor the loader picks a copy.
#   tests/link_order_test.sh BUILD_DIR CXX STDCXX_FIRST_FLAG
# First the mechanism, on a library that exports its own std::filesystem::remove_all (as the
# wheel does): linked plainly, the program is flagged here and calls the copy; with tt's flag it
# passes and calls the real one, also where the compiler's own folders hold only libstdc++.a
# (emulated by a folder with libstdc++.a searched after tt's); the flag without tt's folder
# there links the static copy and is flagged.
# Then every ELF file in BUILD_DIR/bin and BUILD_DIR/lib:
#  - an undefined symbol that libstdc++.so.6 defines must carry libstdc++'s version (GLIBCXX_*,
#    CXXABI_*): an unversioned one was bound at link time to another library's copy;
#  - with a flag: libstdc++.so.6 is a needed library (else the binary carries a static copy);
#  - where libstdc++.so.6 is a needed library, it comes before LibTorch's (the loader's order).
set -uo pipefail
BUILD="${1:?usage: link_order_test.sh BUILD_DIR CXX STDCXX_FIRST_FLAG}"
CXX="${2:?usage: link_order_test.sh BUILD_DIR CXX STDCXX_FIRST_FLAG}"
FLAG="${3-}"
for t in readelf nm objdump; do
  command -v "$t" >/dev/null || { echo "link_order: $t (binutils) is needed" >&2; exit 1; }
done
LIBSTDCXX=$("$CXX" -print-file-name=libstdc++.so.6)
[ -f "$LIBSTDCXX" ] || LIBSTDCXX=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p) | awk '/libstdc\+\+\.so\.6 .*x86-64|libstdc\+\+\.so\.6 \(libc6,/ {print $NF; exit}')
[ -f "$LIBSTDCXX" ] || { echo "link_order: libstdc++.so.6 not found (by $CXX or ldconfig)" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tt-link-order-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# libstdc++'s defined symbols, unversioned names
nm -D --defined-only "$LIBSTDCXX" | awk '{sub(/@.*/, "", $3); print $3}' | sort -u > "$WORK/stdcxx.syms"

# check FILE: prints what is wrong with FILE, returns 1 if anything is
check() {
  local f="$1" bad=0 needed first_cxx first_torch unbound
  # objdump -T: undefined symbols with their version ("Base" or none when unversioned)
  unbound=$(objdump -T "$f" 2>/dev/null | awk '$0 ~ /\*UND\*/ && $(NF-1) !~ /GLIBCXX|CXXABI/ {print $NF}' |
    sort -u | comm -12 - "$WORK/stdcxx.syms")
  if [ -n "$unbound" ]; then
    echo "link_order: $f has libstdc++ symbols bound to another library's copy: $(head -3 <<< "$unbound" | tr '\n' ' ')($(wc -l <<< "$unbound") in all)"
    bad=1
  fi
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  first_cxx=$(grep -nE '^libstdc\+\+\.so' <<< "$needed" | head -1 | cut -d: -f1)
  if [ -n "$FLAG" ] && [ -z "$first_cxx" ]; then
    echo "link_order: $f does not need libstdc++.so.6: it carries a static copy of libstdc++ (needs: $(tr '\n' ' ' <<< "$needed"))"
    bad=1
  fi
  first_torch=$(grep -nE '^lib(torch|c10|fakefs)' <<< "$needed" | head -1 | cut -d: -f1)
  if [ -n "$first_cxx" ] && [ -n "$first_torch" ] && [ "$first_cxx" -gt "$first_torch" ]; then
    echo "link_order: $f loads $(sed -n "${first_torch}p" <<< "$needed") before libstdc++: $(tr '\n' ' ' <<< "$needed")"
    bad=1
  fi
  return $bad
}

# --- the mechanism ----------------------------------------------------------------------------
cat > "$WORK/fakefs.cpp" <<'EOF'
#include <cstdlib>
#include <filesystem>
namespace std::filesystem {
std::uintmax_t remove_all(const path&) { std::_Exit(42); }  // the foreign copy: exits 42
}
EOF
cat > "$WORK/prog.cpp" <<'EOF'
#include <filesystem>
int main(int, char** argv) { return std::filesystem::remove_all(argv[1]) == 2 ? 0 : 1; }
EOF
mkdir -p "$WORK/static"
ln -s "$("$CXX" -print-file-name=libstdc++.a)" "$WORK/static/libstdc++.a"
"$CXX" -std=c++17 -shared -fPIC "$WORK/fakefs.cpp" -o "$WORK/libfakefs.so" &&
  "$CXX" -std=c++17 -c "$WORK/prog.cpp" -o "$WORK/prog.o" || { echo "link_order: cannot build the mechanism's check" >&2; exit 1; }
# run NAME EXPECT_FLAGGED EXPECT_EXIT LINK_ARGS...: links, checks, runs (exit 42: the library's
# remove_all was called, 0: libstdc++'s)
mech_bad=0
run_case() {
  local name="$1" expect="$2" expect_rc="$3" rc flagged=0
  shift 3
  "$CXX" "$WORK/prog.o" -o "$WORK/$name" "$@" -L"$WORK" -lfakefs -Wl,-rpath,"$WORK" ||
    { echo "link_order: cannot link $name" >&2; mech_bad=1; return; }
  check "$WORK/$name" > /dev/null || flagged=1
  mkdir -p "$WORK/d" && : > "$WORK/d/f"
  "$WORK/$name" "$WORK/d"
  rc=$?
  echo "link_order: mechanism, $name: flagged $flagged (expected $expect), exit $rc, expected $expect_rc ($([ $rc -eq 42 ] && echo "called the library's copy" || echo "called libstdc++'s"))"
  if [ "$flagged" -ne "$expect" ] || [ "$rc" -ne "$expect_rc" ]; then
    mech_bad=1
  fi
}
run_case plain 1 42
run_case plain-static 1 42 -L"$WORK/static"
if [ -n "$FLAG" ]; then
  run_case stdcxx-first 0 0 $FLAG
  # the flag's folder first, then a compiler's folder with only libstdc++.a
  run_case stdcxx-first-static-compiler 0 0 $FLAG -L"$WORK/static"
  # libstdc++ named first but the static one found: right function, a static copy (flagged)
  run_case stdcxx-first-without-its-folder 1 0 -L"$WORK/static" $FLAG
else
  echo "link_order: no flag given (a sanitizer build): tt's binaries are checked, the flag is not"
fi
[ $mech_bad -eq 0 ] || { echo "link_order: the mechanism's check failed" >&2; exit 1; }

# --- tt's binaries ----------------------------------------------------------------------------
checked=0 bad=0
while IFS= read -r f; do
  head -c 4 "$f" | grep -q 'ELF' || continue
  checked=$((checked + 1))
  check "$f" >&2 || bad=$((bad + 1))
done < <(find "$BUILD/bin" "$BUILD/lib" -type f \( -perm -u+x -o -name '*.so*' \) 2>/dev/null | sort)
[ "$checked" -gt 0 ] || { echo "link_order: no binaries in $BUILD/bin or $BUILD/lib" >&2; exit 1; }
echo "link_order: $checked binaries checked, $bad with libstdc++ symbols bound elsewhere or LibTorch loaded first"
[ "$bad" -eq 0 ]
