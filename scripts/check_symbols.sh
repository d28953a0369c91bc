#!/usr/bin/env bash
# Fails when liblilims.a defines a global symbol an app could collide with:
# everything it exports must be the C API (lilims_*), in namespace lilims
# (C++ symbols _ZN6lilims..., their vtables, typeinfo, guards and local
# statics), or the standard library's templates instantiated for it
# (std::, __gnu_cxx::, exception-handling DW.ref.*).  A dependency's symbols
# (xxhash's XXH*, nlohmann::json's, anything else) would clash with an app
# that links its own copy of that dependency, at another version.
#   scripts/check_symbols.sh [ARCHIVE [NM]]   (default build/liblilims.a, nm)
set -euo pipefail
archive=${1:-build/liblilims.a}
nm_tool=${2:-${NM:-nm}}
[ -f "$archive" ] || { echo "check_symbols: no $archive" >&2; exit 1; }

# Mangled prefixes: optional special-name (vtable, typeinfo, guard variable,
# local entity), then a nested name (with cv/ref qualifiers) or a std one.
own='^_Z(T[VISTHW]|GV|GR)?Z?N[KVRO]*6lilims'
std='^_Z(T[VISTHW]|GV|GR)?Z?(N[KVRO]*)?(St|Sa|Sb|Ss|Si|So|Sd|9__gnu_cxx)'
# AddressSanitizer adds an ODR indicator __odr_asan.SYMBOL beside each
# global it instruments: judged as SYMBOL.
defined=$("$nm_tool" -g --defined-only "$archive" 2>/dev/null | awk 'NF == 3 {print $3}' |
  sed 's/^__odr_asan\.//' | sort -u)
[ -n "$defined" ] || { echo "check_symbols: $nm_tool lists no symbols in $archive" >&2; exit 1; }
bad=$(printf '%s\n' "$defined" | grep -Ev "^lilims_|$own|^DW\.ref\." |
  grep -Ev "$std" || true)
# A std template over a dependency's type is that dependency's code too.
bad+=$(printf '\n%s' "$(printf '%s\n' "$defined" | grep -E '8nlohmann|XXH' || true)")
bad=$(printf '%s\n' "$bad" | sed '/^$/d' | sort -u)
if [ -n "$bad" ]; then
  count=$(printf '%s\n' "$bad" | wc -l)
  echo "FAIL $archive exports $count symbols outside lilims_* / lilims:: / std::" >&2
  if command -v c++filt >/dev/null; then
    printf '%s\n' "$bad" | head -20 | c++filt | cut -c1-200 >&2
  else
    printf '%s\n' "$bad" | head -20 >&2
  fi
  exit 1
fi
echo "ok   $archive: $(printf '%s\n' "$defined" | wc -l) global symbols, all lilims_*, lilims:: or std::"
