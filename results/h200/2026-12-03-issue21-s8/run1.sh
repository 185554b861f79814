#!/usr/bin/env bash
# Issue 21, session 8, first H200 call (from the tree's root; .device and .whl carried):
#  1. recap's runtime on cuda, graph-safe, 16 jobs, --profile: the block cache off, then on
#     (RECAP_CUDA_BLOCK_CACHE=1); the rest of the call keeps the cache on only if its run exited 0;
#  2. the backend differential (cuda judged against sim, small tensors), a resumable report;
#  3. the naive policy on cuda: found and shrunk;
#  4. the differential's planted fault: recap mutants --backend cuda --fault cuda-dropout-offset;
#  5. megatron@0.19.2 without checkpoints, and torch, 16 jobs each: the rates (one determinism
#     check per case family, the check's run answering the eager twin: commit fe2ab68).
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue21-s8/run1.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; } > "$o/machine.txt" 2>&1
t() { { echo "$(date +%T) $*"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; echo "processes: $(pgrep -fc 'recap')"; } >> "$o/times.txt" 2>&1; }
t start
prof() {  # name, cache (0|1)
  RECAP_CUDA_BLOCK_CACHE=$2 timeout -k 10 80 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 3000 --seed 1 --jobs 16 \
    --chunk-cases 5 --time-budget 40 --shrink-limit 5 --corpus-dir "$o/c-$1" --report "$o/$1.json" > "$o/$1.log" 2> "$o/$1.err"
  local rc=$?; t "$1 $rc"; return $rc
}
prof recap-j16-nocache 0
if prof recap-j16-cache 1; then export RECAP_CUDA_BLOCK_CACHE=1; else export RECAP_CUDA_BLOCK_CACHE=0; fi
echo "cache for the rest: $RECAP_CUDA_BLOCK_CACHE" >> "$o/times.txt"
timeout -k 10 110 "$B" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 520 --seed 1 --jobs 16 \
  --chunk-cases 5 --shrink-limit 5 --time-budget 60 --corpus-dir "$o/c-diff" --report "$o/differential.json" \
  > "$o/differential.log" 2> "$o/differential.err"; t differential $?
timeout -k 10 60 "$B" fuzz --backend cuda --policy naive --cases 400 --seed 1 --jobs 16 --chunk-cases 5 --time-budget 30 \
  --corpus-dir "$o/c-naive" --report "$o/naive.json" > "$o/naive.log" 2> "$o/naive.err"; t naive $?
timeout -k 10 80 "$B" mutants --backend cuda --fault cuda-dropout-offset --cases 20 --shrink-limit 100 --corpus-dir "$o/mutants" \
  --report "$o/mutants-cuda.json" > "$o/mutants-cuda.log" 2>&1; t mutants $?
pip install -q --no-deps --target /tmp/recap-site-0.19.2 .whl/megatron_core-0.19.2-*.whl > /dev/null 2>&1
timeout -k 10 70 "$B" fuzz --backend cuda --sut megatron@0.19.2 --no-checkpoint --profile --cases 3000 --seed 1 --jobs 16 --chunk-cases 10 \
  --time-budget 35 --shrink-limit 4 --known-findings corpus/known-findings/megatron-0.19.2.json \
  --worker-env "PYTHONPATH=/tmp/recap-site-0.19.2:$PWD/drivers" --corpus-dir "$o/c-mcore" --report "$o/mcore-j16.json" \
  > "$o/mcore-j16.log" 2> "$o/mcore-j16.err"; t mcore $?
timeout -k 10 70 "$B" fuzz --backend cuda --sut torch --profile --cases 3000 --seed 1 --jobs 16 --chunk-cases 10 --time-budget 35 \
  --shrink-limit 4 --known-findings corpus/known-findings/torch-2.11.json --worker-env "PYTHONPATH=$PWD/drivers" \
  --corpus-dir "$o/c-torch" --report "$o/torch-j16.json" > "$o/torch-j16.log" 2> "$o/torch-j16.err"; t torch $?
for f in recap-j16-nocache recap-j16-cache differential naive mcore-j16 torch-j16; do
  echo "== $f"; grep -E "cases/min|by disposition|no failure|shrunk" "$o/$f.log" | head -4; tail -n 2 "$o/$f.err"
done
for f in recap-j16-nocache recap-j16-cache torch-j16; do echo "== $f"; sed -n '/profile (/,$p' "$o/$f.log" | grep -E "case |alloc|sync|eager_steps|reference"; done
tail -n 3 "$o/mutants-cuda.log"; cat "$o/times.txt"
