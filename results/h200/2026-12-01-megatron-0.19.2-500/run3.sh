#!/usr/bin/env bash
# run2.sh again, with ten workers, each replaced once it holds 192 MiB across cases (run2.sh: reserved
# memory still grew by the graphs Megatron keeps, README), and the out-of-memory case of run2.sh
# replayed alone at a 0.5 memory cap, its peak in the memory trace.
# RECAP_MEMORY_TRACE=1 prints, after each case, what the worker still holds and how many graphs
# it reset, and once per worker who held the first such graph.
set -u
. scripts/gpu-out.sh  # $o, packed into one all.tgz on every exit
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_MEMORY_TRACE=1 RECAP_WORKER_RETIRE_MIB=192
site=/tmp/recap-site-0.19.2
[ -d $site/megatron ] || pip install --no-deps --target $site .whl/megatron_core-0.19.2-*.whl -q
for f in "$(dirname "$0")"/oom-variants/*.json; do
  RECAP_CUDA_MEMORY_FRACTION=0.5 timeout 120 .device/slim/harness/cli/recap replay "$f" --backend cuda \
    --worker-env "PYTHONPATH=$site:$PWD/drivers" 2>&1 | grep -v "^ " | grep -v "^Traceback" | tail -n 4 >"$o/$(basename "$f" .json).txt" &
done
OUT="$o/c" CAMPAIGNS=megatron-0.19.2 BUDGET_megatron_0_19_2=300 LIMIT_megatron_0_19_2=400 SHRINK_LIMIT=12 \
  scripts/gpu-sut-campaigns.sh 500 10
log="$o/c/megatron-0.19.2.log"
grep -h "is held by" "$log" | sort | uniq -c > "$o/graph-holders.txt"
grep -ho "held [0-9]* MiB" "$log" | sort -k2 -n | uniq -c > "$o/memory-held.txt"
grep -c "out of memory" "$log" >> "$o/memory-held.txt"
wait; cat "$o"/oom-*.txt "$o/c/summary.txt" "$o/graph-holders.txt" "$o/memory-held.txt"
