#!/usr/bin/env bash
# run4.sh's campaign with chunks of 25 cases (--chunk-cases 25: run4.sh's 5 chunks of 100 kept only
# 5 of its 10 workers busy) and the driver's runaway-backward check (M7 cases fail in a second with
# RunawayBackward instead of running out of memory after a minute), and beside it M7's standalone
# reproduction on both megatron-core versions (m7_repro.py).
set -u
. scripts/gpu-out.sh  # $o, packed into one all.tgz on every exit
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_MEMORY_TRACE=1 RECAP_WORKER_RETIRE_MIB=192
here=$(dirname "$0")
for v in 0.15.3 0.19.2; do
  site=/tmp/recap-site-$v
  [ -d $site/megatron ] || pip install --no-deps --target $site .whl/megatron_core-$v-*.whl -q
  (PYTHONPATH=$site timeout 120 python3 "$here/m7_repro.py"; echo "exit $?") >"$o/m7-repro-$v.txt" 2>&1 &
done
OUT="$o/c" CAMPAIGNS=megatron-0.19.2 BUDGET_megatron_0_19_2=330 LIMIT_megatron_0_19_2=400 SHRINK_LIMIT=12 \
  CHUNK_CASES=25 REPLAY_DEADLINE=$(( t0 + 560 )) scripts/gpu-sut-campaigns.sh 500 10
log="$o/c/megatron-0.19.2.log"
grep -ho "held [0-9]* MiB" "$log" | sort -k2 -n | uniq -c > "$o/memory-held.txt"
grep -c "out of memory" "$log" >> "$o/memory-held.txt"
wait
grep -v "Warning\|warn" "$o"/m7-repro-*.txt
cat "$o/c/summary.txt" "$o/memory-held.txt" | tail -n 30
