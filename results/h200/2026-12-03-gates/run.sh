#!/usr/bin/env bash
# One H200 call (from the tree's root; .device and .whl carried):
#  1. gates/: issue 20's upgrade gates again (run-gates.sh, CONTROLS=0, 2 jobs each), now that the
#     megatron driver reads a forward capture's bytes from its graph pool (the M3 witness read
#     512 B or 1024 B by what its worker ran before);
#  2. witness/: the M3 witness memory-incorrect-4d0493369f1d.json replayed on 0.19.2 and main, each
#     after the version's other corpus files in one worker and alone, twice;
#  3. recap's runtime on cuda: the corpus replayed (issue 23: the memory model's predictions), and a
#     --profile campaign (issue 21: where the time goes, before any speed work), 300 cases, 8 jobs.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-gates/run.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc; } > "$o/machine.txt" 2>&1
OUT="$o/gates" CONTROLS=0 GATE_JOBS=2 GATE_LIMIT=280 timeout 300 bash results/h200/2026-12-02-issue20/run-gates.sh > /dev/null 2>&1
mkdir -p "$o/witness"
for v in 0.19.2 main; do
  sut=megatron@$v; pp=/tmp/recap-site-$v:$PWD/drivers
  [ $v = main ] && { sut=megatron; pp=$PWD/.device/megatron-main:$PWD/drivers; }
  for i in 1 2; do
    RECAP_CUDA_MEMORY_FRACTION=0.04 timeout 50 "$B" replay corpus/frameworks/megatron-$v/*.json --sut $sut --backend cuda \
      --worker-env "PYTHONPATH=$pp" --report "$o/witness/all-$v-$i.json" > "$o/witness/all-$v-$i.log" 2>&1
    RECAP_CUDA_MEMORY_FRACTION=0.04 timeout 50 "$B" replay corpus/frameworks/megatron-$v/memory-incorrect-4d0493369f1d.json --sut $sut \
      --backend cuda --worker-env "PYTHONPATH=$pp" --report "$o/witness/one-$v-$i.json" > "$o/witness/one-$v-$i.log" 2>&1
  done &
done
wait
grep -h "4d0493369f1d" "$o"/witness/*.log > "$o/witness/summary.txt"
RECAP_CORPUS_DIR=$PWD/corpus timeout 120 "$B" replay corpus/*.json --backend cuda --report "$o/replay-cuda.json" > "$o/replay-cuda.log" 2>&1
timeout 110 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 300 --seed 1 --jobs 8 --time-budget 90 \
  --corpus-dir "$o/profile-corpus" --report "$o/profile-recap.json" > "$o/profile-recap.log" 2>&1
tail -n 3 "$o/replay-cuda.log"; grep -E "cases/min|by disposition" "$o/profile-recap.log"; cat "$o/witness/summary.txt"
