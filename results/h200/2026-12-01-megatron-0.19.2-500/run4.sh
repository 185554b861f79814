#!/usr/bin/env bash
# run3.sh's campaign (ten workers, each replaced once it holds 192 MiB across cases), timed so that
# the whole call ends inside the device tool's 10 minutes (run3.sh's first call did not: its report
# was lost), and beside it the out-of-memory case of run2.sh and three variants of it, each replayed
# alone at the campaign's memory cap with RECAP_LEAK_REPORT: at the out-of-memory error the worker
# prints the blocks then allocated, by the Python frames that allocated them.
set -u
. scripts/gpu-out.sh  # $o, packed into one all.tgz on every exit
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_MEMORY_TRACE=1 RECAP_WORKER_RETIRE_MIB=192
bin=.device/slim/harness/cli/recap
site=/tmp/recap-site-0.19.2
[ -d $site/megatron ] || pip install --no-deps --target $site .whl/megatron_core-0.19.2-*.whl -q
mkdir -p "$o/oom"
for f in "$(dirname "$0")"/oom-variants/*.json; do
  RECAP_CUDA_MEMORY_FRACTION=0.04 RECAP_LEAK_REPORT=100000 RECAP_WORKER_STDERR=1 timeout 150 "$bin" replay "$f" \
    --backend cuda --worker-env "PYTHONPATH=$site:$PWD/drivers" >"$o/oom/$(basename "$f" .json).log" 2>&1 &
done
# the campaign: no case starts after 360 s, stopped at 430 s; its replays get what is left of 570 s
OUT="$o/c" CAMPAIGNS=megatron-0.19.2 BUDGET_megatron_0_19_2=360 LIMIT_megatron_0_19_2=430 SHRINK_LIMIT=12 \
  REPLAY_DEADLINE=$(( t0 + 570 )) scripts/gpu-sut-campaigns.sh 500 10
log="$o/c/megatron-0.19.2.log"
grep -h "is held by" "$log" | sort | uniq -c > "$o/graph-holders.txt"
grep -ho "held [0-9]* MiB" "$log" | sort -k2 -n | uniq -c > "$o/memory-held.txt"
grep -c "out of memory" "$log" >> "$o/memory-held.txt"
wait
for f in "$o"/oom/*.log; do echo "== $f"; grep -v "^Traceback" "$f" | grep -A 8 "by allocation site\|^replay\|expected" | head -n 30; done
cat "$o/c/summary.txt" "$o/memory-held.txt"
