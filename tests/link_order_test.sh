#!/usr/bin/env bash
# Every program tt builds names libstdc++.so.6 before LibTorch's libraries (DT_NEEDED order is
# the loader's search order): a pip wheel of PyTorch exports copies of libstdc++'s
# std::filesystem that must not stand in for the real one (see CMakeLists.txt).
#   tests/link_order_test.sh BUILD_DIR
set -uo pipefail
BUILD="${1:?usage: link_order_test.sh BUILD_DIR}"
command -v readelf >/dev/null || { echo "link_order: readelf (binutils) is needed" >&2; exit 1; }
checked=0 bad=0
for f in "$BUILD"/bin/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  head -c 4 "$f" | grep -q 'ELF' || continue
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  grep -qE '^lib(torch|c10)' <<< "$needed" || continue  # not linked to LibTorch
  checked=$((checked + 1))
  first_cxx=$(grep -nE '^libstdc\+\+\.so' <<< "$needed" | head -1 | cut -d: -f1)
  first_torch=$(grep -nE '^lib(torch|c10)' <<< "$needed" | head -1 | cut -d: -f1)
  if [ -z "$first_cxx" ] || [ "$first_cxx" -gt "$first_torch" ]; then
    echo "link_order: $(basename "$f") loads $(sed -n "${first_torch}p" <<< "$needed") before libstdc++:" >&2
    tr '\n' ' ' <<< "$needed" >&2; echo >&2
    bad=$((bad + 1))
  fi
done
[ "$checked" -gt 0 ] || { echo "link_order: no program linked to LibTorch in $BUILD/bin" >&2; exit 1; }
echo "link_order: $checked programs checked, $bad with LibTorch ahead of libstdc++"
[ "$bad" -eq 0 ]
