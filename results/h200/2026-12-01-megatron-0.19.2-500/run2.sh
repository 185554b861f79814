#!/usr/bin/env bash
# The campaign again after the fix that run.sh's out-of-memory errors led to (README): the driver
# resets CUDA graphs that outlive their case and judges reserved as well as allocated memory.
# RECAP_MEMORY_TRACE=1 prints, after each case, what the worker still holds and how many graphs
# it reset, and once per worker who held the first such graph.
set -u
o=$(realpath -m "${OUT:-gpu-logs}")
mkdir -p "$o"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_MEMORY_TRACE=1
OUT="$o/c" CAMPAIGNS=megatron-0.19.2 BUDGET_megatron_0_19_2=400 LIMIT_megatron_0_19_2=470 SHRINK_LIMIT=12 \
  scripts/gpu-sut-campaigns.sh 500 5
log="$o/c/megatron-0.19.2.log"
grep -h "is held by" "$log" | sort | uniq -c > "$o/graph-holders.txt"
grep -ho "held [0-9]* MiB" "$log" | sort -k2 -n | uniq -c > "$o/memory-held.txt"
grep -c "out of memory" "$log" >> "$o/memory-held.txt"
cat "$o/c/summary.txt" "$o/graph-holders.txt" "$o/memory-held.txt"
tar czf /tmp/all.tgz -C "$o" . && rm -rf "${o:?}"/* && mv /tmp/all.tgz "$o/"
