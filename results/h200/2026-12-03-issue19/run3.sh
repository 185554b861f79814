#!/usr/bin/env bash
# Issue 19 and 23, third H200 call (from the tree's root; .device and .whl carried):
#  1. unittest.txt: the graph-safe recompute option's tests on CUDA, deterministic kernels;
#  2. replay-cuda.*: recap's corpus replayed on its cuda backend (issue 23: the memory model's exact
#     capture predictions on the GPU);
#  3. tradeoff-mcore-gs.*, tradeoff-mcore.*, tradeoff-torch.*: launch-bound reference reports
#     (sweep-launch-dropout0.json), one SUT at a time, nothing else on the GPU.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue19/run3.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_EXT_DIR=/tmp/recap-ext
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc; } > "$o/machine.txt" 2>&1
site=/tmp/recap-site-0.19.2
pip install -q --no-deps --target "$site" .whl/megatron_core-0.19.2-*.whl > "$o/pip.log" 2>&1
py="PYTHONPATH=$site:$PWD/drivers"
(cd drivers && timeout 120 python3 -m unittest tests.test_graph_safe_recompute -v) > "$o/unittest.txt" 2>&1
RECAP_CORPUS_DIR=$PWD/corpus timeout 90 "$B" replay corpus/*.json --backend cuda --report "$o/replay-cuda.json" > "$o/replay-cuda.log" 2>&1
echo "replay exit $?" >> "$o/replay-cuda.log"
S=results/h200/2026-12-03-issue19/sweep-launch-dropout0.json
GS=(--worker-env RECAP_MEGATRON_RECOMPUTE=graph-safe --worker-env RECAP_EXT_DIR=$RECAP_EXT_DIR)
run() {  # name, seconds, args...
  local n=$1 t=$2; shift 2
  local left=$(( 500 - SECONDS )); [ $left -lt $t ] && t=$left
  [ $t -gt 20 ] || { echo "no time left" > "$o/tradeoff-$n.log"; return; }
  timeout $t "$B" tradeoff --backend cuda --sweep $S --report "$o/tradeoff-$n.json" "$@" > "$o/tradeoff-$n.log" 2>&1
  echo "tradeoff exit $? after ${SECONDS}s" >> "$o/tradeoff-$n.log"
}
run mcore-gs 170 --sut megatron@0.19.2 --worker-env "$py" "${GS[@]}" \
  --known-findings corpus/known-findings/megatron-0.19.2+graph-safe-recompute.json
run mcore 170 --sut megatron@0.19.2 --worker-env "$py" --known-findings corpus/known-findings/megatron-0.19.2.json
run torch 170 --sut torch
tail -n 5 "$o/unittest.txt"; grep -E "as expected|exit|differ" "$o/replay-cuda.log" | tail -n 5
for n in mcore-gs mcore torch; do echo "== $n"; grep -vE "^tradeoff: \[" "$o/tradeoff-$n.log" | grep -vE "^\s+(selective|full|none)\S*: " | tail -n 34; done
