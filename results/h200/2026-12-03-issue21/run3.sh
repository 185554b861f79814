#!/usr/bin/env bash
# Issue 21, third H200 call of session 7 (from the tree's root; .device carried):
#  1. the 2,000-case fixed-seed GPU campaign on recap's runtime (graph-safe, the default GPU
#     distribution: large tensors), 16 jobs, with the block cache;
#  2. the naive policy on cuda: found and shrunk (exit 1, a capture failure in the corpus).
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue21/run3.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; } > "$o/machine.txt" 2>&1
t() { echo "$(date +%T) $*" >> "$o/times.txt"; }
t start
timeout -k 20 ${CAMPAIGN_LIMIT:-330} "$B" fuzz --backend cuda --policy graph-safe --cases 2000 --seed 1 --jobs 16 --chunk-cases 5 \
  --corpus-dir "$o/corpus-graph-safe" --report "$o/campaign-2000.json" > "$o/campaign-2000.log" 2> "$o/campaign-2000.err"; t campaign $?
timeout -k 15 90 "$B" fuzz --backend cuda --policy naive --seed 1 --jobs 4 --corpus-dir "$o/corpus-naive" \
  --report "$o/naive.json" > "$o/naive.log" 2>&1; t naive $?
grep -E "cases/min|by disposition|no failure|interrupted" "$o/campaign-2000.log"; grep -vE "^\s{4}" "$o/naive.log" | tail -n 12; ls "$o/corpus-naive"; cat "$o/times.txt"
