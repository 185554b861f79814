#!/usr/bin/env bash
# Issue 19, second H200 call (from the tree's root; .device and .whl carried):
#  1. unittest.txt, rng-probe.txt: the option's tests on CUDA (make_graphed_callables: eager vs graphed,
#     2 steps x 2 microbatches) and the torch probe;
#  2. gs/: megatron@0.19.2 with RECAP_MEGATRON_RECOMPUTE=graph-safe, a graph-safe campaign of 600 cases
#     judged with corpus/known-findings/megatron-0.19.2+graph-safe-recompute.json, --require-memory-savings;
#  3. tradeoff-torch.*: the torch reference report, both sizes of benchmarks/tradeoff-sweep-h200-dropout0.json,
#     alone on the GPU once the campaign is over.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue19/run2.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_EXT_DIR=/tmp/recap-ext
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc; } > "$o/machine.txt" 2>&1
site=/tmp/recap-site-0.19.2
pip install -q --no-deps --target "$site" .whl/megatron_core-0.19.2-*.whl > "$o/pip.log" 2>&1
py="PYTHONPATH=$site:$PWD/drivers"
timeout 60 python3 results/h200/next-issue19-probe/rng_probe.py > "$o/rng-probe.txt" 2>&1
(cd drivers && timeout 180 python3 -m unittest tests.test_graph_safe_recompute -v) > "$o/unittest.txt" 2>&1
GS=(--worker-env RECAP_MEGATRON_RECOMPUTE=graph-safe --worker-env RECAP_EXT_DIR=$RECAP_EXT_DIR)
RECAP_CUDA_MEMORY_FRACTION=0.06 timeout 330 "$B" fuzz --sut megatron@0.19.2 --backend cuda --policy graph-safe --cases 600 --jobs 10 \
  --seed 1 --time-budget 290 --shrink-limit 8 --case-timeout 120 --require-memory-savings --worker-env "$py" "${GS[@]}" \
  --known-findings corpus/known-findings/megatron-0.19.2+graph-safe-recompute.json \
  --corpus-dir "$o/gs-corpus" --report "$o/gs.json" > "$o/gs.log" 2>&1
echo "gs campaign exit $?" >> "$o/gs.log"
left=$(( 540 - SECONDS ))
[ $left -gt 30 ] && timeout $left "$B" tradeoff --backend cuda --sut torch --sweep benchmarks/tradeoff-sweep-h200-dropout0.json \
  --report "$o/tradeoff-torch.json" > "$o/tradeoff-torch.log" 2>&1
echo "tradeoff exit $? after ${SECONDS}s" >> "$o/tradeoff-torch.log"
cat "$o/rng-probe.txt"; tail -n 12 "$o/unittest.txt"
grep -E "cases/min|by disposition|exit|^    [a-z_]+ +judged|^ +[0-9]+  [a-z_]+/|known|new" "$o/gs.log" | head -40
grep -vE "^tradeoff: \[" "$o/tradeoff-torch.log" | tail -n 45
