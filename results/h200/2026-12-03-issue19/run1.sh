#!/usr/bin/env bash
# Issue 19, first H200 call (from the tree's root; .device and .whl carried): a debugging call,
# its timings shared the GPU with a campaign and are not the reference reports.
#  1. rng-probe.txt: results/h200/next-issue19-probe/rng_probe.py (what torch 2.11 lets a recompute do
#     across separately captured graphs);
#  2. ext-build.txt: the graph-safe recompute option's C++ extension built once (RECAP_EXT_DIR);
#  3. gs/: megatron@0.19.2 with RECAP_MEGATRON_RECOMPUTE=graph-safe, a graph-safe campaign;
#  4. tradeoff-*: launch-bound trade-offs (recap on cuda, torch, megatron@0.19.2 with and without the
#     option, the last two without dropout), the first run of the trade-off CUDA paths.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue19/run1.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_EXT_DIR=/tmp/recap-ext
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc; } > "$o/machine.txt" 2>&1
site=/tmp/recap-site-0.19.2
pip install -q --no-deps --target "$site" .whl/megatron_core-0.19.2-*.whl > "$o/pip.log" 2>&1
py="PYTHONPATH=$site:$PWD/drivers"
timeout 60 python3 results/h200/next-issue19-probe/rng_probe.py > "$o/rng-probe.txt" 2>&1
{ time timeout 240 env PYTHONPATH="$PWD/drivers" python3 -c \
  "from recap_drivers.frameworks.megatron import graph_safe_recompute as g; print(g.extension().philox_state)"; } > "$o/ext-build.txt" 2>&1
(cd drivers && timeout 120 python3 -m unittest tests.test_graph_safe_recompute -v) > "$o/unittest.txt" 2>&1
GS=(--worker-env RECAP_MEGATRON_RECOMPUTE=graph-safe --worker-env RECAP_EXT_DIR=$RECAP_EXT_DIR)
RECAP_CUDA_MEMORY_FRACTION=0.08 timeout 230 "$B" fuzz --sut megatron@0.19.2 --backend cuda --policy graph-safe --cases 200 --jobs 6 \
  --seed 1 --time-budget 150 --shrink-limit 8 --case-timeout 120 --worker-env "$py" "${GS[@]}" \
  --corpus-dir "$o/gs-corpus" --report "$o/gs.json" > "$o/gs.log" 2>&1 &
LB=(--layers 8 --hidden 256 --heads 4 --seq 256 --dtype bf16 --name launch-bound)
timeout 240 "$B" tradeoff --backend cuda --sut recap "${LB[@]}" --dropout 0.1 --report "$o/tradeoff-recap.json" > "$o/tradeoff-recap.log" 2>&1
timeout 240 "$B" tradeoff --backend cuda --sut torch "${LB[@]}" --dropout 0.1 --report "$o/tradeoff-torch.json" > "$o/tradeoff-torch.log" 2>&1 &
timeout 240 "$B" tradeoff --backend cuda --sut megatron@0.19.2 "${LB[@]}" --dropout 0 --worker-env "$py" \
  --report "$o/tradeoff-mcore.json" > "$o/tradeoff-mcore.log" 2>&1 &
timeout 240 "$B" tradeoff --backend cuda --sut megatron@0.19.2 "${LB[@]}" --dropout 0 --worker-env "$py" "${GS[@]}" \
  --report "$o/tradeoff-mcore-gs.json" > "$o/tradeoff-mcore-gs.log" 2>&1 &
wait
cat "$o/rng-probe.txt"; tail -n 3 "$o/ext-build.txt"; tail -n 4 "$o/unittest.txt"
grep -E "cases/min|by disposition|failed|^  [a-z_]+/" "$o/gs.log" | head -30
for t in recap torch mcore mcore-gs; do echo "== tradeoff $t"; tail -n 25 "$o/tradeoff-$t.log"; done
