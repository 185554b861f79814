#!/usr/bin/env bash
# Issue 21, the second H200 call of session 7 (from the tree's root; .device carried). Two refused
# starts cost device time, so one call holds what was planned for two:
#  1. the backend differential, first on a quiet machine: a graph-safe cuda campaign judged against
#     sim (small tensors: sim simulates every kernel on the host);
#  2. the 2,000-case fixed-seed campaign on recap's runtime (graph-safe, large tensors), 16 jobs,
#     with the block cache and --profile (call 1 measured alloc_ms at 65% of a case);
#  3. the naive policy on cuda: found and shrunk;
#  4. the differential's planted fault: recap mutants --backend cuda --fault cuda-dropout-offset;
#  5. compute-sanitizer: the planted out-of-bounds write, a small campaign under memcheck.
# Between steps: the processes still on the GPU (call 1's later steps printed nothing).
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue21/run2.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; } > "$o/machine.txt" 2>&1
t() { { echo "$(date +%T) $*"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; echo "processes: $(pgrep -fc 'recap')"; } >> "$o/times.txt" 2>&1; }
t start
timeout -k 10 100 "$B" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 520 --seed 1 --jobs 16 \
  --chunk-cases 5 --shrink-limit 5 --time-budget 80 --corpus-dir "$o/c-diff" --report "$o/differential.json" \
  > "$o/differential.log" 2> "$o/differential.err"; t differential $?
timeout -k 15 240 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 2000 --seed 1 --jobs 16 --chunk-cases 5 \
  --shrink-limit 20 --corpus-dir "$o/c" --report "$o/campaign-2000.json" > "$o/campaign-2000.log" 2> "$o/campaign-2000.err"; t campaign-2000 $?
timeout -k 10 40 "$B" fuzz --backend cuda --policy naive --seed 1 --jobs 4 --corpus-dir "$o/corpus-naive" \
  --report "$o/naive.json" > "$o/naive.log" 2>&1; t naive $?
timeout -k 10 70 "$B" mutants --backend cuda --fault cuda-dropout-offset --cases 20 --shrink-limit 100 --corpus-dir "$o/mutants" \
  --report "$o/mutants-cuda.json" > "$o/mutants-cuda.log" 2>&1; t mutants $?
RECAP_BUILD=.device/slim OUT="$o/sanitizer" SANITIZER_TOOLS=memcheck SANITIZER_TESTS=none SANITIZER_TIMEOUT=55 SANITIZER_DIMS=small \
  timeout -k 5 80 bash scripts/gpu-sanitizer.sh 3 > "$o/sanitizer.log" 2>&1; t sanitizer $?
grep -E "cases/min|by disposition|differential  |no failure" "$o/differential.log" | head -8; tail -n 2 "$o/differential.err"
grep -E "cases/min|by disposition|no failure|interrupted" "$o/campaign-2000.log"; sed -n '/profile (/,$p' "$o/campaign-2000.log" | grep -E "case |alloc|sync|eager_steps|reference|model_build"
grep -E "cases/min|by disposition|shrunk|corpus" "$o/naive.log" | head -5; tail -n 3 "$o/mutants-cuda.log"; cat "$o/sanitizer/summary.txt" 2>/dev/null; cat "$o/times.txt"
