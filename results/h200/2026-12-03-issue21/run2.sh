#!/usr/bin/env bash
# Issue 21, second H200 call of session 7 (from the tree's root; .device carried):
#  1. the backend differential, first on a quiet machine: a graph-safe cuda campaign judged against
#     sim (small tensors: sim simulates every kernel on the host);
#  2. recap's runtime on cuda, 16 jobs, with the block cache (harness/device/cuda: no cudaFree per
#     tensor; call 1 measured alloc_ms at 65% of a case with 16 jobs);
#  3. the differential's planted fault: recap mutants --backend cuda --fault cuda-dropout-offset;
#  4. compute-sanitizer: the planted out-of-bounds write, a small fixed-seed campaign under each tool.
# Between steps: the processes still on the GPU (call 1's later steps printed nothing; a lingering
# worker is one hypothesis).
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue21/run2.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; } > "$o/machine.txt" 2>&1
t() { { echo "$(date +%T) $*"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; pgrep -fc "recap|recap_drivers"; } >> "$o/times.txt" 2>&1; }
t start
timeout -k 15 150 "$B" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 520 --seed 1 --jobs 16 \
  --chunk-cases 5 --shrink-limit 5 --time-budget 120 --corpus-dir "$o/c-diff" --report "$o/differential.json" \
  > "$o/differential.log" 2> "$o/differential.err"; t differential $?
timeout -k 15 80 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 3000 --seed 1 --jobs 16 --chunk-cases 5 --time-budget 55 \
  --shrink-limit 5 --corpus-dir "$o/c" --report "$o/profile-recap-j16.json" > "$o/profile-recap-j16.log" 2> "$o/profile-recap-j16.err"; t recap-j16 $?
timeout -k 15 90 "$B" mutants --backend cuda --fault cuda-dropout-offset --cases 30 --shrink-limit 100 --corpus-dir "$o/mutants" \
  --report "$o/mutants-cuda.json" > "$o/mutants-cuda.log" 2>&1; t mutants $?
RECAP_BUILD=.device/slim OUT="$o/sanitizer" SANITIZER_TESTS=none SANITIZER_TIMEOUT=60 SANITIZER_DIMS=small \
  timeout -k 10 300 bash scripts/gpu-sanitizer.sh 4 > "$o/sanitizer.log" 2>&1; t sanitizer $?
grep -E "cases/min|by disposition|differential|no failure" "$o/differential.log" | head -8; tail -n 3 "$o/differential.err"
grep -E "cases/min|by disposition" "$o/profile-recap-j16.log"; sed -n '/profile (/,$p' "$o/profile-recap-j16.log" | grep -E "case |run\.|alloc|sync|eager_steps|reference|model_build"
tail -n 4 "$o/mutants-cuda.log"; cat "$o/sanitizer/summary.txt" 2>/dev/null; cat "$o/times.txt"
