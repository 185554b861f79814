#!/usr/bin/env bash
# Issue 21, first H200 call of session 7 (from the tree's root; .device and .whl carried):
#  1. where the time goes before any speed work, with the new within-counters (launch, alloc,
#     host_data): recap's runtime on cuda (graph-safe) with 1 job, then 16 jobs; torch (known
#     findings, shrinking capped) and megatron@0.19.2 without checkpoints, 16 jobs each;
#  2. the backend differential: a graph-safe cuda campaign judged against sim (small tensors: sim
#     simulates every kernel on the host, about 13 s a case at the large sizes);
#  3. the differential's planted fault: recap mutants --backend cuda --fault cuda-dropout-offset;
#  4. issue 19: torch's compute-bound trade-off, a first run at that size.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-03-issue21/run1.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; free -g | head -2; } > "$o/machine.txt" 2>&1
t() { echo "$(date +%T) $*" >> "$o/times.txt"; }
t start
timeout -k 15 55 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 2000 --seed 1 --jobs 1 --chunk-cases 5 --time-budget 40 \
  --corpus-dir "$o/c" --report "$o/profile-recap-j1.json" > "$o/profile-recap-j1.log" 2>&1; t recap-j1 $?
timeout -k 15 80 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 3000 --seed 1 --jobs 16 --chunk-cases 10 --time-budget 60 \
  --corpus-dir "$o/c" --report "$o/profile-recap-j16.json" > "$o/profile-recap-j16.log" 2>&1; t recap-j16 $?
PP=$PWD/drivers
timeout -k 15 70 "$B" fuzz --backend cuda --sut torch --profile --cases 3000 --seed 1 --jobs 16 --chunk-cases 10 --time-budget 45 \
  --shrink-limit 4 --known-findings corpus/known-findings/torch-2.11.json --worker-env "PYTHONPATH=$PP" \
  --corpus-dir "$o/c" --report "$o/profile-torch-j16.json" > "$o/profile-torch-j16.log" 2>&1; t torch-j16 $?
pip install -q --no-deps --target /tmp/recap-site-0.19.2 .whl/megatron_core-0.19.2-*.whl > /dev/null 2>&1
timeout -k 15 70 "$B" fuzz --backend cuda --sut megatron@0.19.2 --no-checkpoint --profile --cases 3000 --seed 1 --jobs 16 --chunk-cases 10 \
  --time-budget 45 --shrink-limit 4 --known-findings corpus/known-findings/megatron-0.19.2.json --worker-env "PYTHONPATH=/tmp/recap-site-0.19.2:$PP" \
  --corpus-dir "$o/c" --report "$o/profile-mcore-j16.json" > "$o/profile-mcore-j16.log" 2>&1; t mcore-j16 $?
timeout -k 15 85 "$B" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 600 --seed 1 --jobs 16 --chunk-cases 10 \
  --time-budget 70 --corpus-dir "$o/c-diff" --report "$o/differential.json" > "$o/differential.log" 2>&1; t differential $?
timeout -k 15 60 "$B" mutants --backend cuda --fault cuda-dropout-offset --cases 100 --shrink-limit 200 --corpus-dir "$o/mutants" \
  --report "$o/mutants-cuda.json" > "$o/mutants-cuda.log" 2>&1; t mutants $?
# 4. issue 19: a first compute-bound trade-off (torch; the judged case at --judge-budget's reduced size)
timeout -k 15 110 "$B" tradeoff --backend cuda --sut torch --sweep benchmarks/tradeoff-sweep-h200-compute-bound-dropout0.json \
  --worker-env "PYTHONPATH=$PP" --report "$o/tradeoff-torch-compute.json" > "$o/tradeoff-torch-compute.log" 2>&1; t tradeoff-torch-compute $?
for f in recap-j1 recap-j16 torch-j16 mcore-j16; do echo "== $f"; grep -E "cases/min|by disposition" "$o/profile-$f.log"; done
grep -E "cases/min|by disposition|differential" "$o/differential.log" | head -8; tail -n 4 "$o/mutants-cuda.log"; tail -n 12 "$o/tradeoff-torch-compute.log"; cat "$o/times.txt"
