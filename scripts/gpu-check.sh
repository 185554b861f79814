#!/usr/bin/env bash
# Runs recap's whole GPU set on the GPU machine, from a build made here with the `gpu` preset
# (carried there as build-gpu/), and writes every log under $OUT (default: ./gpu-logs).
#   cmake --preset gpu && cmake --build --preset gpu     # here
#   scripts/gpu-check.sh                                 # there
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-out.sh  # $o, packed into one all.tgz on every exit (the device tool brings back 8 files)
out="$o"
build="${RECAP_BUILD:-build-gpu}"
# cuBLAS is linked dynamically (Debian/NVIDIA ship no static one here); the machine image has it.
export RECAP_CORPUS_DIR="$PWD/corpus"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
status=0

{
  echo "# recap GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # The device machine gets a copy of the tree without .git: pass the commit in RECAP_COMMIT.
  echo "# commit: ${RECAP_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
} | tee "$out/context.txt"

# Scenario suite on the GPU, each scenario compared call for call with sim.
"$build/harness/cli/recap" conformance --backend cuda --json "$out/conformance-cuda.json" \
  > "$out/conformance-cuda.log" 2>&1 || status=1
tail -n 3 "$out/conformance-cuda.log"

# Every curated corpus case replayed on the GPU through the oracles, against its expected verdict.
"$build/harness/cli/recap" replay corpus/*.json --backend cuda --report "$out/replay-cuda.json" \
  > "$out/replay-cuda.log" 2>&1 || status=1
tail -n 1 "$out/replay-cuda.log"

# Fuzz campaigns on the GPU (issue 21): the 2,000-case fixed-seed campaign over the graph-safe
# configurations (must hold; its rate is recap's price), the naive policy (must find and shrink
# the capture failure), and the same cases on cuda and on sim (property differential, 520 cases of
# small tensors: must hold). Counterexamples go to a scratch corpus.
jobs="${RECAP_JOBS:-16}"
corpus=$(mktemp -d)
"$build/harness/cli/recap" fuzz --backend cuda --policy graph-safe --cases 2000 --seed 1 --jobs "$jobs" --chunk-cases 5 \
  --profile --corpus-dir "$corpus" --report "$out/fuzz-cuda.json" > "$out/fuzz-cuda.log" 2>&1 || status=1
echo "===== naive" >> "$out/fuzz-cuda.log"
"$build/harness/cli/recap" fuzz --backend cuda --policy naive --cases 200 --seed 1 --jobs "$jobs" --chunk-cases 5 \
  --corpus-dir "$corpus" >> "$out/fuzz-cuda.log" 2>&1
[ $? -eq 1 ] || status=1
echo "===== differential" >> "$out/fuzz-cuda.log"
"$build/harness/cli/recap" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 520 --seed 1 \
  --jobs "$jobs" --chunk-cases 5 --corpus-dir "$corpus" --report "$out/differential.json" >> "$out/fuzz-cuda.log" 2>&1 || status=1
grep -E "cases/min|by disposition|capture_clean" "$out/fuzz-cuda.log"

# Where the time goes (issue 21 point 1; docs/profile.md): --profile campaigns on recap's runtime
# (cuda, graph-safe), torch and megatron@0.19.2 (without checkpoints), each report and log kept in
# one archive, $out/profile.tar.gz (the device tool brings back few files), the phase tables also
# printed. The frameworks run through the drivers' interpreter (RECAP_PYTHON; else python3). Not
# pass/fail: a failing case is a finding of its campaign; the breakdown is the point.
prof=$(mktemp -d)
for sut in recap torch megatron@0.19.2; do
  tag=${sut//[@.]/-}
  if [ "$sut" = recap ]; then extra=(--policy graph-safe --jobs "${RECAP_PROFILE_JOBS:-$jobs}")
  else extra=(--no-checkpoint --jobs "${RECAP_PROFILE_JOBS:-$jobs}"); fi
  "$build/harness/cli/recap" fuzz --backend cuda --sut "$sut" --profile --cases "${RECAP_PROFILE_CASES:-300}" --seed 1 \
    "${extra[@]}" --time-budget 300 --corpus-dir "$corpus" --report "$prof/profile-$tag.json" \
    > "$prof/profile-$tag.log" 2>&1
  echo "===== $sut"
  sed -n '/cases\/min/p; /profile (/,$p' "$prof/profile-$tag.log" | head -60
done | tee "$prof/profile.txt"
tar -czf "$out/profile.tar.gz" -C "$prof" .
rm -rf "$prof"
# Workers that survive the GPU (issue 21, point 4): three planted worker faults in a 240-case torch
# campaign, against the same campaign without them (its own folder, inside this script's all.tgz).
RECAP_BIN="$build/harness/cli/recap" OUT="$out/worker-faults" scripts/gpu-worker-faults.sh 240 5 \
  > "$out/worker-faults.log" 2>&1 || status=1
tail -n 2 "$out/worker-faults.log"

# compute-sanitizer (issue 21, point 2): the planted out-of-bounds write reported, a fixed-seed
# campaign under memcheck, racecheck, synccheck and initcheck and the GPU tests under memcheck clean.
RECAP_BUILD="$build" OUT="$out/sanitizer" scripts/gpu-sanitizer.sh "${RECAP_SANITIZER_CASES:-40}" \
  > "$out/sanitizer.log" 2>&1 || status=1
cat "$out/sanitizer/summary.txt" 2>/dev/null

# Every gtest binary (gpu tests run here instead of skipping), into one log: the device tool
# brings back at most 8 files.
: > "$out/tests.log"
for t in $(find "$build/tests" -type f -executable -not -path '*/CMakeFiles/*' | sort); do
  name=$(basename "$t")
  echo "===== $name" >> "$out/tests.log"
  "$t" > "$out/$name.tmp" 2>&1 || status=1
  cat "$out/$name.tmp" >> "$out/tests.log"
  echo "$name: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$name.tmp" | tr '\n' ' ')"
  rm -f "$out/$name.tmp"
done
exit $status
