#!/usr/bin/env bash
# Issue 21, the third H200 call of session 7, in the last 258 s of device time (from the tree's
# root; .device carried): recap's runtime on cuda, graph-safe, 16 jobs, --profile, 25 s of cases,
# with the block cache after its teardown deadlock was fixed (call 2's recap runs all hung there).
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue21/run3.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
echo "commit ${RECAP_GIT_COMMIT:-?}" > "$o/machine.txt"
timeout -k 5 40 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 3000 --seed 1 --jobs 16 --chunk-cases 5 --time-budget 25 \
  --shrink-limit 5 --corpus-dir "$o/c" --report "$o/profile-recap-j16.json" > "$o/profile-recap-j16.log" 2>&1
echo "exit $?" >> "$o/profile-recap-j16.log"
grep -E "cases/min|by disposition|exit" "$o/profile-recap-j16.log"; sed -n '/profile (/,$p' "$o/profile-recap-j16.log" | grep -E "case |alloc|sync|eager_steps|reference|model_build|replay|warmup"
