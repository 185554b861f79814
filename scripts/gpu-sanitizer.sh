#!/usr/bin/env bash
# compute-sanitizer over recap's cuda runtime (issue 21, point 2), on the GPU machine, from a build
# made here with the `gpu` preset (its binaries carried in $RECAP_BUILD, default build-gpu):
#   1. the planted fault: tests/device/cuda/sanitizer_probe.cu's out-of-bounds write must be reported
#      by memcheck, and the same kernel within bounds must not be (the control that shows the
#      report is read, not only an exit code);
#   2. a fixed-seed graph-safe campaign on the cuda backend (in process, one job) under memcheck,
#      racecheck, synccheck and initcheck: no report, and the campaign passes;
#   3. every GPU test binary under memcheck: no report.
# Writes under $OUT (default gpu-logs): one log per run and summary.txt, packed into one all.tgz.
# Exit 0 when every expectation held, 1 otherwise.
#   RECAP_BUILD=build-gpu scripts/gpu-sanitizer.sh [CASES]          # there, from the tree's root
# Within a device call's time: SANITIZER_TOOLS (default all four), SANITIZER_TESTS (default the six
# GPU test binaries; "none" for none), SANITIZER_TIMEOUT (seconds per run, default 900) and
# SANITIZER_DIMS (the campaign's --dims, default auto: large tensors on cuda). SANITIZER_ARGS: more
# compute-sanitizer options for every run (e.g. "--check-bulk-copy yes": initcheck then follows
# TMA bulk copies, which cuBLAS's Hopper kernels may store with).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu-out.sh
build="${RECAP_BUILD:-build-gpu}"
cases="${1:-40}"
# RECAP_CUDA_BLOCK_CACHE=0: every block really freed (campaign runs cache freed blocks by default),
# so initcheck and use-after-free see each one
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" RECAP_CORPUS_DIR="$PWD/corpus" RECAP_CUDA_BLOCK_CACHE=0
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
status=0
note() { echo "$*" | tee -a "$o/summary.txt"; }
# A run under a tool: its exit code, and whether the sanitizer reported errors (its summary line
# "ERROR SUMMARY: N errors"; racecheck also prints "RACECHECK SUMMARY"). CUDA API calls that return
# an error are not counted (--report-api-errors no): recap provokes them on purpose (the capture
# rules' conformance scenarios, the hygiene oracle's injected capture failure, the cases that
# break a rule), and its own verdicts judge them; the tools judge device memory, races, syncs and
# initialization. On the H200 every error of the first run was such an API error.
sanitize() {  # name tool timeout command...
  local name=$1 tool=$2 t=$3; shift 3
  # shellcheck disable=SC2086  # SANITIZER_ARGS: words, as on a command line
  timeout "$t" "$cs" --tool "$tool" --report-api-errors no --error-exitcode 99 --target-processes all ${SANITIZER_ARGS:-} "$@" \
    > "$o/$name.log" 2>&1
  local rc=$?
  local errors
  errors=$(grep -hoE "(ERROR|RACECHECK) SUMMARY: [0-9]+ (error|hazard)" "$o/$name.log" | awk '{s += $3} END {print s + 0}')
  echo "$rc $errors"
}

[ -x "$cs" ] || { note "no compute-sanitizer at $cs"; exit 1; }
note "# compute-sanitizer: $("$cs" --version | tail -n 1); commit ${RECAP_GIT_COMMIT:-unknown}"

# 1. the planted fault and its control
probe="$build/tests/device/cuda/recap_sanitizer_probe"
read -r rc errors <<<"$(sanitize probe-oob memcheck 120 "$probe" oob)"
if [ "$rc" = 99 ] && [ "$errors" -gt 0 ] && grep -q "Invalid __global__ write" "$o/probe-oob.log"; then
  note "planted out-of-bounds write: reported ($errors error(s), exit $rc)"
else
  note "planted out-of-bounds write: NOT reported (exit $rc, $errors errors)"; status=1
fi
read -r rc errors <<<"$(sanitize probe-clean memcheck 120 "$probe" clean)"
if [ "$rc" = 0 ] && [ "$errors" = 0 ]; then note "the same kernel in bounds: clean"
else note "the same kernel in bounds: exit $rc, $errors errors"; status=1; fi

# 2. a fixed-seed campaign on the cuda runtime under each tool (in process: --jobs 1)
for tool in ${SANITIZER_TOOLS:-memcheck racecheck synccheck initcheck}; do
  corpus=$(mktemp -d)
  read -r rc errors <<<"$(sanitize "fuzz-$tool" "$tool" "${SANITIZER_TIMEOUT:-900}" "$build/harness/cli/recap" fuzz --backend cuda \
    --policy graph-safe --dims "${SANITIZER_DIMS:-auto}" --cases "$cases" --seed 1 --jobs 1 --corpus-dir "$corpus")"
  if [ "$rc" = 0 ] && [ "$errors" = 0 ]; then note "fuzz under $tool: clean, $(grep -m1 -oE '[0-9]+ cases in [0-9.]+ s' "$o/fuzz-$tool.log")"
  else note "fuzz under $tool: exit $rc, $errors errors"; status=1; fi
  rm -rf "$corpus"
done

# 3. the GPU tests under memcheck
tests="${SANITIZER_TESTS:-recap_cuda_tests runtime_gpu_test runtime_core_gpu_test executors_gpu_test models_gpu_test conformance_gpu_test}"
[ "$tests" = none ] && tests=""
for t in $tests; do
  bin=$(find "$build/tests" -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$bin" ] || { note "$t: not built"; status=1; continue; }
  read -r rc errors <<<"$(sanitize "test-$t" memcheck "${SANITIZER_TIMEOUT:-900}" "$bin")"
  if [ "$rc" = 0 ] && [ "$errors" = 0 ]; then note "$t under memcheck: clean, $(grep -m1 -oE '\[  PASSED  \] [0-9]+ tests?' "$o/test-$t.log")"
  else note "$t under memcheck: exit $rc, $errors errors"; status=1; fi
done
exit $status
