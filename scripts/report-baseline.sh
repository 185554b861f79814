#!/usr/bin/env bash
# Fixed-seed reports in canonical form (scripts/report-canon.py), for checking that a refactoring
# changes no verdict, figure or corpus file: run it before and after, then `diff -r BEFORE AFTER`.
# Usage: scripts/report-baseline.sh RECAP_BIN OUT_DIR [PYTHON_WITH_TORCH]
# Systems: recap in process (with and without a fault point, so that shrinking and corpus files
# are covered), recap-worker, and torch on the CPU when PYTHON_WITH_TORCH is given.
set -euo pipefail
bin=$(realpath "$1"); out=$(realpath -m "$2"); py=${3:-}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
run() {  # NAME ARGS...: a fuzz report and its corpus files, canonical
  local name=$1; shift
  "$bin" fuzz --seed 7 --backend sim --report "$tmp/$name.json" --corpus-dir "$tmp/corpus-$name" "$@" \
    > "$tmp/$name.log" 2>&1 || true
  python3 "$src/scripts/report-canon.py" "$tmp/$name.json" > "$out/$name.canon.json"
  if [ -d "$tmp/corpus-$name" ]; then
    mkdir -p "$out/corpus-$name"; cp "$tmp/corpus-$name"/*.json "$out/corpus-$name/" 2>/dev/null || true
  fi
}
run inprocess --cases 300
run inprocess-fault --cases 200 --fault static-input-stale --policy graph-safe
run worker --cases 120 --sut recap-worker --jobs 2
if [ -n "$py" ]; then
  run torch --cases 40 --sut torch --worker-python "$py" --case-timeout 120
fi
ls "$out"
