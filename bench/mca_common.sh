# Sourced by bench/mca_neon.sh, bench/mca_llamacpp_neon.sh and
# bench/mca_kquant.sh; they set $mca (the llvm-mca binary) and $tmp (a
# scratch directory) first.

# llvm-mca cycles per iteration of region $1 on cpu $2 (target $3: aarch64,
# the default, or x86_64); llvm-mca's diagnostics go to stderr, and any
# error stops the script.
mca_cycles() {
  local out err rc triple=${3:-aarch64} attr=()
  [ "$triple" != aarch64 ] || attr=(-mattr=+dotprod,+i8mm)
  out=$("$mca" -mtriple="$triple" -mcpu="$2" "${attr[@]}" -iterations=100 "$1" 2> "$tmp/mca.err") && rc=0 || rc=$?
  err=$(cat "$tmp/mca.err")
  if [ -n "$err" ]; then echo "llvm-mca ($2, $1):" >&2; head -n 40 <<< "$err" >&2; fi
  if [ $rc -ne 0 ] || grep -q 'error' <<< "$err"; then echo "llvm-mca failed on $1" >&2; exit 1; fi
  awk '/^Total Cycles:/ { print $3 / 100 }' <<< "$out"
}

# One iteration of a two-level nest as executed (bench/mca_loops.awk's
# base.nK.pre.s / .post.s): pre, the inner region $2 run $4 times, post.
# Repeated copies drop the inner loop's ".L" labels (they may not be
# defined twice; numeric labels may, and "3b" needs its "3:").
mca_flatten() {
  local pre=$1 inner=$2 post=$3 trips=$4 r
  cat "$pre" "$inner"
  for ((r = 1; r < trips; r++)); do grep -v '^\.L[^ ]*:$' "$inner"; done
  cat "$post"
}

# llama.cpp's source root in $llamacpp_src: $LLAMACPP_SRC, else the unpacked
# pinned llama-cpp-python sdist of scripts/build_llamacpp.sh's cache, else a
# `pip download` of that sdist into $tmp, checked against its sha256.  It is
# compiled in place or in $tmp, never copied into this repository.
llamacpp_version=0.3.36
llamacpp_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
llamacpp_source() {
  local d sdist
  llamacpp_src=${LLAMACPP_SRC:-}
  if [ -z "$llamacpp_src" ]; then
    for d in "$HOME"/.cache/lilims/llamacpp-"$llamacpp_version"-*/_src/llama_cpp_python-"$llamacpp_version"/vendor/llama.cpp; do
      [ -d "$d/ggml/src/ggml-cpu/arch" ] && { llamacpp_src=$d; break; }
    done
  fi
  if [ -z "$llamacpp_src" ]; then
    echo "fetching llama-cpp-python==$llamacpp_version (sdist) with pip download" >&2
    # Only this package from source: its build dependencies come as wheels.
    pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$llamacpp_version" -d "$tmp/dl" >&2
    sdist=$(ls "$tmp"/dl/llama_cpp_python-"$llamacpp_version".tar.gz)
    echo "$llamacpp_sha256  $sdist" | sha256sum -c - >&2
    tar -xzf "$sdist" -C "$tmp"
    llamacpp_src=$tmp/llama_cpp_python-$llamacpp_version/vendor/llama.cpp
  fi
  echo "llama.cpp source: $llamacpp_src" >&2
}
