#!/usr/bin/env bash
# Issue 21, session 8, second H200 call (from the tree's root; .device and .whl carried), run1.sh
# cut to the device time left (run1.sh never ran: the device was not lent then): 16 jobs each,
# --profile, 30 s of cases: recap's runtime on cuda (graph-safe) with the block cache off, then on
# (RECAP_CUDA_BLOCK_CACHE=1); torch (one determinism check per case family, the check's run
# answering the eager twin: fe2ab68); megatron@0.19.2 without checkpoints; the naive policy on cuda.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue21-s8/run2.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; } > "$o/machine.txt" 2>&1
t() { { echo "$(date +%T) $*"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; echo "processes: $(pgrep -fc 'recap')"; } >> "$o/times.txt" 2>&1; }
t start
fz() {  # name, env, args...
  local n=$1 e=$2; shift 2
  env $e timeout -k 10 55 "$B" fuzz --backend cuda --profile --cases 3000 --seed 1 --jobs 16 --time-budget 30 --shrink-limit 4 \
    --corpus-dir "$o/c-$n" --report "$o/$n.json" "$@" > "$o/$n.log" 2> "$o/$n.err"
  t "$n $?"
}
fz recap-nocache RECAP_CUDA_BLOCK_CACHE=0 --policy graph-safe --chunk-cases 5
fz recap-cache RECAP_CUDA_BLOCK_CACHE=1 --policy graph-safe --chunk-cases 5
fz torch RECAP_CUDA_BLOCK_CACHE=0 --sut torch --chunk-cases 10 --known-findings corpus/known-findings/torch-2.11.json \
  --worker-env "PYTHONPATH=$PWD/drivers"
pip install -q --no-deps --target /tmp/recap-site-0.19.2 .whl/megatron_core-0.19.2-*.whl > /dev/null 2>&1
fz mcore RECAP_CUDA_BLOCK_CACHE=0 --sut megatron@0.19.2 --no-checkpoint --chunk-cases 10 \
  --known-findings corpus/known-findings/megatron-0.19.2.json --worker-env "PYTHONPATH=/tmp/recap-site-0.19.2:$PWD/drivers"
timeout -k 10 40 "$B" fuzz --backend cuda --policy naive --cases 400 --seed 1 --jobs 16 --chunk-cases 5 --time-budget 15 \
  --corpus-dir "$o/c-naive" --report "$o/naive.json" > "$o/naive.log" 2> "$o/naive.err"; t naive $?
for f in recap-nocache recap-cache torch mcore naive; do
  echo "== $f"; grep -E "cases/min|by disposition|no failure|shrunk" "$o/$f.log" | head -4; tail -n 2 "$o/$f.err"
  sed -n '/profile (/,$p' "$o/$f.log" | grep -E "^    case |alloc|sync \(|determinism|run\.(case|eager|no_)"
done
cat "$o/times.txt" | grep -v "^[0-9]*, "
