#!/usr/bin/env bash
# Issue 19, session 8, first H200 call (from the tree's root; .device and .whl carried): the
# compute-bound trade-off reports (4 blocks, hidden 4096, 8,192 tokens, bf16, dropout 0) for
# megatron@0.19.2 with the graph-safe recompute option, without it, then torch as time allows;
# configurations judged first in 6 workers (--judge-jobs, commit eebf8df), then measured alone.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue19-s8/run1.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_EXT_DIR=/tmp/recap-ext
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; } > "$o/machine.txt" 2>&1
site=/tmp/recap-site-0.19.2
pip install -q --no-deps --target "$site" .whl/megatron_core-0.19.2-*.whl > "$o/pip.log" 2>&1
py="PYTHONPATH=$site:$PWD/drivers"
S=benchmarks/tradeoff-sweep-h200-compute-bound-dropout0.json
GS=(--worker-env RECAP_MEGATRON_RECOMPUTE=graph-safe --worker-env RECAP_EXT_DIR=$RECAP_EXT_DIR)
run() {  # name, seconds, args...: each within the call's 560 s
  local n=$1 t=$2; shift 2
  local left=$(( 560 - SECONDS )); [ $left -lt $t ] && t=$left
  [ $t -gt 60 ] || { echo "no time left (${SECONDS}s)" > "$o/tradeoff-$n.log"; return; }
  timeout -k 10 $t "$B" tradeoff --backend cuda --sweep $S --judge-jobs 6 --report "$o/tradeoff-$n.json" "$@" > "$o/tradeoff-$n.log" 2>&1
  echo "tradeoff exit $? after ${SECONDS}s (limit ${t}s)" >> "$o/tradeoff-$n.log"
}
run mcore-gs 280 --sut megatron@0.19.2 --worker-env "$py" "${GS[@]}" \
  --known-findings corpus/known-findings/megatron-0.19.2+graph-safe-recompute.json
run mcore 280 --sut megatron@0.19.2 --worker-env "$py" --known-findings corpus/known-findings/megatron-0.19.2.json
run torch 280 --sut torch --worker-env "PYTHONPATH=$PWD/drivers" --known-findings corpus/known-findings/torch-2.11.json
for n in mcore-gs mcore torch; do echo "== $n"; grep -E "^tradeoff: (\[|judging)|exit" "$o/tradeoff-$n.log" | tail -n 30; done
